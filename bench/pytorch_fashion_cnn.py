#!/usr/bin/env python3
# The recipe of `mixtrain compare --model cnn --epochs 5` in PyTorch, fp32, one thread: AdamW 1e-3,
# weight decay 0.01, batch 128, normalisation 0.2860/0.3530, and either cosine decay per step to
# MIN_FACTOR x the lr (the CLI's default: --lr-decay cosine --lr-min-factor 0.1) or a constant lr.
# Prints test accuracy per epoch, to compare with mixtrain's.
# Recipe variants for comparison: a third argument "flip" mirrors each training image left-right
# with probability 1/2 (like the CLI's --augment flip); a fourth sets cross-entropy label smoothing.
# Usage: /usr/bin/python3 bench/pytorch_fashion_cnn.py [SEED] [cosine|constant] [none|flip] [SMOOTHING] [MIN_FACTOR]
# (Debian python3-torch)
import math, sys, time
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import numpy as np, torch
import pytorch_models as pm
from verify_pytorch_checkpoint import read_idx
seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
decay = sys.argv[2] if len(sys.argv) > 2 else "cosine"
augment = sys.argv[3] if len(sys.argv) > 3 else "none"
smoothing = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
min_factor = float(sys.argv[5]) if len(sys.argv) > 5 else 0.1
torch.manual_seed(seed); torch.set_num_threads(1)
d = "/usr/share/datasets/fashion-mnist/"
def load(prefix):
    x = read_idx(d + prefix + "-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = read_idx(d + prefix + "-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy((x - 0.2860) / 0.3530).unsqueeze(1), torch.from_numpy(y)
xtr, ytr = load("train"); xte, yte = load("t10k")
model = pm.build_model("cnn")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
steps_per_epoch = math.ceil(60000 / 128); total = 5 * steps_per_epoch; step = 0
for epoch in range(5):
    perm = torch.randperm(60000)
    model.train()
    for i in range(0, 60000, 128):
        idx = perm[i:i + 128]
        if decay == "cosine":
            cos = 0.5 * (1 + math.cos(math.pi * step / total))
            for g in opt.param_groups: g["lr"] = 1e-3 * (min_factor + (1 - min_factor) * cos)
        xb = xtr[idx]
        if augment == "flip":
            mirror = torch.rand(xb.shape[0]) < 0.5
            xb = torch.where(mirror[:, None, None, None], xb.flip(3), xb)
        loss = torch.nn.functional.cross_entropy(model(xb), ytr[idx], label_smoothing=smoothing)
        opt.zero_grad(); loss.backward(); opt.step(); step += 1
    model.eval()
    with torch.no_grad():
        acc = sum((model(xte[j:j + 1000]).argmax(1) == yte[j:j + 1000]).sum().item() for j in range(0, 10000, 1000)) / 10000
    print(f"seed {seed} {decay} {augment} smoothing {smoothing} epoch {epoch + 1} loss {loss.item():.4f} test acc {acc * 100:.2f}%", flush=True)

#!/usr/bin/env python3
"""Gradient clipping with the GradScaler against PyTorch: the same GPT-2, data and fp16 recipe, and
the total gradient norm before clipping at every step (mixtrain's metrics.jsonl "grad_norm" against
the return value of torch.nn.utils.clip_grad_norm_ after scaler.unscale_).

    /tmp/venv/bin/python bench/gpt2/clip_norms.py [--build build] [--work /tmp/gpt2-clip] [--steps 20] [--clip 1.0]

The model: a GPT2LMHeadModel of bench/gpt2/interop.py's "tiny" shape with vocabulary 512 (random,
seed 7, dropout 0), saved with save_pretrained; one batch of 4 x 64 tokens every step (so the data
order cannot differ); AdamW lr 1e-3, weight decay 0.01, constant lr. mixtrain: `train --init-from DIR
--precision fp16 --grad-clip CLIP` (autocast fp16, GradScaler, fp32 weights). PyTorch: autocast(cpu,
float16), GradScaler("cpu"), scaler.scale(loss).backward(), scaler.unscale_(opt),
clip_grad_norm_(params, CLIP), scaler.step(opt), scaler.update(). Both runs also report the loss scale
and whether each step was skipped; the script prints every step and the largest relative difference
of the norms (fp16 products of two libraries: rounding differences, not equal bits).
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop import write_tokens  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default="/tmp/gpt2-clip")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--clip", type=float, default=1.0)
    a = ap.parse_args()
    cli = os.path.join(a.build, "tools", "mixtrain", "mixtrain")
    os.makedirs(a.work, exist_ok=True)
    vocab, batch, context = 512, 4, 64
    config = GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=vocab, n_positions=64, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.2, bos_token_id=vocab - 1,
                        eos_token_id=vocab - 1)
    torch.manual_seed(7)
    model_dir = os.path.join(a.work, "model")
    GPT2LMHeadModel(config).save_pretrained(model_dir)
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, vocab, (batch * context + 1,), generator=gen).tolist()
    data = os.path.join(a.work, "tokens.bin")
    write_tokens(data, tokens)

    # PyTorch
    model = GPT2LMHeadModel.from_pretrained(model_dir).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    scaler = torch.amp.GradScaler("cpu")
    t = torch.tensor(tokens)
    x = torch.stack([t[i * context:(i + 1) * context] for i in range(batch)])
    y = torch.stack([t[i * context + 1:(i + 1) * context + 1] for i in range(batch)])
    theirs = []
    for _ in range(a.steps):
        with torch.autocast("cpu", dtype=torch.float16):
            logits = model(x).logits
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip))
        scaler.step(opt)
        scaler.update()
        theirs.append({"loss": loss.item(), "grad_norm": norm, "scale": scale})

    # mixtrain
    out = os.path.join(a.work, "mixtrain")
    subprocess.run([cli, "train", "--model", "gpt2", "--init-from", model_dir, "--data", "tokens:" + data,
                    "--context", str(context), "--batch-size", str(batch), "--steps", str(a.steps), "--lr", "1e-3",
                    "--weight-decay", "0.01", "--lr-decay", "constant", "--precision", "fp16", "--grad-clip",
                    str(a.clip), "--out", out, "--overwrite", "--threads", "2"], check=True, stdout=subprocess.DEVNULL)
    ours = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]

    worst = 0.0
    print("step  mixtrain norm   torch norm     rel diff   scale (mixtrain/torch)  loss (mixtrain/torch)")
    for s, (m, p) in enumerate(zip(ours, theirs), 1):
        rel = abs(m["grad_norm"] - p["grad_norm"]) / p["grad_norm"]
        worst = max(worst, rel)
        print("%4d  %12.6f  %12.6f  %10.2e   %8g / %-8g  %.5f / %.5f" % (
            s, m["grad_norm"], p["grad_norm"], rel, m["scale"], p["scale"], m["loss"], p["loss"]))
    clipped = sum(1 for p in theirs if p["grad_norm"] > a.clip)
    print("%d steps, %d of them clipped (norm > %g); largest relative difference of the norms: %.2e"
          % (len(theirs), clipped, a.clip, worst))


if __name__ == "__main__":
    main()

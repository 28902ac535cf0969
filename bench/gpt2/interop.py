#!/usr/bin/env python3
"""mixtrain's GPT-2 against Hugging Face transformers, on a randomly initialised GPT2LMHeadModel
(no weights are downloaded). An interop check run by hand from a venv that has torch and
transformers; never a build or test dependency.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers safetensors
    /tmp/venv/bin/python bench/gpt2/interop.py [--build build] [--work /tmp/gpt2-interop] [--size small]
    /tmp/venv/bin/python bench/gpt2/interop.py --make-fixture tests/data/fixtures/tiny-gpt2

Checks, each printed with its numbers, exit status 1 if any fails:
  1. logits: mixtrain's fp32 logits of a 64-token sequence (whole-sequence forward, and the same
     positions through the key/value cache) equal transformers' within 1e-5, relative to the largest
     logit magnitude.
  2. greedy: `mixtrain generate --temperature 0` gives the same 32 tokens as transformers'
     generate(do_sample=False).
  3. fine-tuning: 20 AdamW steps (lr 1e-4, weight decay 0.01, one batch of 4 x 64 tokens, dropout 0)
     with `mixtrain train` in fp32 and bf16 autocast against PyTorch's own fp32 and bf16 runs:
     mixtrain fp32 within 1e-4 relative of PyTorch fp32 at every step; mixtrain bf16 within the
     spread of PyTorch's own bf16 run: at every step |mixtrain bf16 - torch fp32| <= the largest
     |torch bf16 - torch fp32| of the 20 steps (bf16 rounding moves each run by about that much, in a
     direction that changes from step to step).
  4. save: the fp32 run's output directory (config.json + model.safetensors) loads with
     GPT2LMHeadModel.from_pretrained and gives mixtrain's logits within 1e-5.

--make-fixture DIR writes a tiny GPT-2 (vocabulary 64, 32 positions, C 32, 2 layers, 4 heads) as
transformers saves it, plus DIR/expected.safetensors: "tokens" int64 [1, 12], transformers' "logits"
float32 [1, 12, 64] and its greedy continuation "greedy" int64 [16] -- what the C++ tests compare.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SIZES = {
    "small": dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024),
    "tiny": dict(n_embd=32, n_layer=2, n_head=4, vocab_size=64, n_positions=32),
}


def make_model(size, seed, initializer_range):
    last = SIZES[size]["vocab_size"] - 1  # GPT-2's end-of-text id is its last token
    config = GPT2Config(**SIZES[size], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        initializer_range=initializer_range, bos_token_id=last, eos_token_id=last)
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config).eval()


def greedy(model, prompt, n):
    with torch.no_grad():
        # An explicit attention mask: without one, transformers takes prompt tokens equal to the pad id
        # for padding.
        ids = torch.tensor([prompt])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, eos_token_id=None, pad_token_id=model.config.vocab_size - 1)
    return out[0, len(prompt):].tolist()


def rel_err(a, b):
    return float((a - b).abs().max() / b.abs().max())


def write_tokens(path, tokens):
    header = torch.zeros(256, dtype=torch.int32)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.numpy().tobytes())
        f.write(numpy.array(tokens, dtype="<u2").tobytes())


def mixtrain_logits(tool, model_dir, tokens, work):
    out = os.path.join(work, "logits.safetensors")
    subprocess.run([tool, model_dir, ",".join(map(str, tokens)), out], check=True)
    t = load_file(out)
    return t["logits"], t["cached"]


def torch_finetune(model_dir, tokens, batch, context, steps, bf16):
    model = GPT2LMHeadModel.from_pretrained(model_dir).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    t = torch.tensor(tokens)
    x = torch.stack([t[i * context:(i + 1) * context] for i in range(batch)])
    y = torch.stack([t[i * context + 1:(i + 1) * context + 1] for i in range(batch)])
    losses = []
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def mixtrain_finetune(cli, model_dir, data, out, batch, context, steps, precision):
    subprocess.run([cli, "train", "--model", "gpt2", "--init-from", model_dir, "--data", "tokens:" + data,
                    "--context", str(context), "--batch-size", str(batch), "--steps", str(steps), "--lr", "1e-4",
                    "--weight-decay", "0.01", "--lr-decay", "constant", "--precision", precision, "--out", out,
                    "--overwrite"], check=True, stdout=subprocess.DEVNULL)
    losses = {}
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "loss" in r and "step" in r:
                losses[r["step"]] = r["loss"]
    return [losses[s] for s in sorted(losses)]


def make_fixture(d):
    os.makedirs(d, exist_ok=True)
    model = make_model("tiny", seed=7, initializer_range=0.2)
    model.save_pretrained(d)
    os.remove(os.path.join(d, "generation_config.json"))  # generation defaults: not read by mixtrain
    tokens = [5, 17, 33, 2, 60, 41, 8, 8, 19, 0, 63, 27]
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits.float().contiguous()
    g = greedy(model, tokens, 16)
    save_file({"tokens": torch.tensor([tokens]), "logits": logits, "greedy": torch.tensor(g)},
              os.path.join(d, "expected.safetensors"))
    for name in sorted(os.listdir(d)):
        print(f"{name}: {os.path.getsize(os.path.join(d, name))} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default="/tmp/gpt2-interop")
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--initializer-range", type=float, default=0.02,
                    help="std of the random weights (GPT-2's 0.02; much larger values make a 12-layer model chaotic, "
                         "so that fp32 rounding differences grow into visible ones)")
    ap.add_argument("--make-fixture", metavar="DIR")
    a = ap.parse_args()
    if a.make_fixture:
        make_fixture(a.make_fixture)
        return 0
    torch.set_num_threads(os.cpu_count())
    cli = os.path.join(a.build, "tools/mixtrain/mixtrain")
    tool = os.path.join(a.build, "bench/mixtrain_gpt2_logits")
    os.makedirs(a.work, exist_ok=True)
    model_dir = os.path.join(a.work, "model")
    model = make_model(a.size, seed=0, initializer_range=a.initializer_range)
    model.save_pretrained(model_dir)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    ok = True

    def report(name, passed, detail):
        nonlocal ok
        ok = ok and passed
        print(f"[{'PASS' if passed else 'FAIL'}] {name}: {detail}", flush=True)

    # 1. logits
    positions = model.config.n_positions
    seq = torch.randint(0, vocab, (min(64, positions),), generator=gen).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([seq])).logits.float()
    mine, cached = mixtrain_logits(tool, model_dir, seq, a.work)
    e1, e2 = rel_err(mine, ref), rel_err(cached, ref)
    report("logits", e1 <= 1e-5 and e2 <= 1e-5,
           f"max |mixtrain - transformers| / max |transformers| = {e1:.2e} (forward), {e2:.2e} (cached), "
           f"shape {list(ref.shape)}")

    # 2. greedy generation
    prompt = seq[:8]
    n_new = min(32, positions - len(prompt))
    want = greedy(model, prompt, n_new)
    r = subprocess.run([cli, "generate", "--model", "gpt2", "--weights", model_dir, "--tokens", ",".join(map(str, prompt)),
                        "--max-new-tokens", str(n_new), "--temperature", "0", "--json"], check=True, capture_output=True,
                       text=True)
    got = json.loads(r.stdout)["tokens"]
    report("greedy", got == want, f"{n_new} tokens {'identical' if got == want else 'differ'}: {got[:8]}...")

    # 3. fine-tuning
    batch, context, steps = 4, min(64, positions), 20
    data = os.path.join(a.work, "train.bin")
    tokens = torch.randint(0, vocab, (batch * context + 1,), generator=gen).tolist()
    write_tokens(data, tokens)
    t32 = torch_finetune(model_dir, tokens, batch, context, steps, bf16=False)
    t16 = torch_finetune(model_dir, tokens, batch, context, steps, bf16=True)
    m32 = mixtrain_finetune(cli, model_dir, data, os.path.join(a.work, "fp32"), batch, context, steps, "fp32")
    m16 = mixtrain_finetune(cli, model_dir, data, os.path.join(a.work, "bf16"), batch, context, steps, "bf16")
    print(" step  torch fp32  mixtrain fp32  torch bf16  mixtrain bf16")
    for s in range(steps):
        print(f"{s + 1:5d}  {t32[s]:10.5f}  {m32[s]:13.5f}  {t16[s]:10.5f}  {m16[s]:13.5f}")
    fp32_err = max(abs(m - t) / abs(t) for m, t in zip(m32, t32))
    report("fine-tune fp32", len(m32) == steps and fp32_err <= 1e-4,
           f"max relative difference to PyTorch fp32 over {steps} steps: {fp32_err:.2e}")
    spread = max(abs(b - t) for t, b in zip(t32, t16))
    far = max(abs(m - t) for m, t in zip(m16, t32))
    report("fine-tune bf16", len(m16) == steps and far <= spread,
           f"max |mixtrain bf16 - torch fp32| = {far:.2e}, within PyTorch's own bf16 spread of {spread:.2e}")

    # 4. the saved directory in transformers
    out = os.path.join(a.work, "fp32")
    loaded = GPT2LMHeadModel.from_pretrained(out).eval()
    with torch.no_grad():
        ref = loaded(torch.tensor([seq])).logits.float()
    mine, _ = mixtrain_logits(tool, out, seq, a.work)
    e = rel_err(mine, ref)
    report("save", e <= 1e-5, f"from_pretrained(mixtrain's output) logits vs mixtrain's: {e:.2e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch counterpart of `mixtrain bench`: times AdamW training steps of one named model on
synthetic data and prints one JSON object with the keys `mixtrain bench --json` prints.

  python3 bench/pytorch_bench.py --model gpt --precision bf16 --batch-size 16 --threads 2
  python3 bench/pytorch_bench.py --model gpt2 --context 256 --batch-size 4 --precision bf16   # needs transformers

Precisions: fp32; bf16 = torch.autocast("cpu", dtype=torch.bfloat16) around forward and loss
(PyTorch's CPU autocast); fp16 = torch.autocast("cpu", dtype=torch.float16) with
torch.amp.GradScaler("cpu") (PyTorch 2.4 and later; refused on older versions, which have no fp16
CPU autocast). The step is the same as mixtrain's: zero_grad(set_to_none), forward, cross-entropy,
backward, (unscale and inf check,) AdamW(lr 1e-3, weight decay 0.01). --compile runs the model
through torch.compile (inductor; its compilation happens in the warm-up steps). --detect-anomaly
runs every step under torch.autograd.detect_anomaly(check_nan=True), PyTorch's NaN finder (the
counterpart of `mixtrain bench --find-nonfinite-origin`).

Data path: like `mixtrain bench`, every step trains on a new batch: a synthetic dataset of
(warmup + steps) x batch examples is made up front and each step gathers its batch from it by a
seeded random permutation (mixtrain's DataLoader gathers shuffled examples the same way).
Models come from pytorch_models.py (the same architectures and parameter names as mixtrain's);
gpt2 is transformers' GPT2LMHeadModel of GPT-2 small's config with mixtrain's gpt2 dropout
(embedding and residual 0.1; attention-probability dropout 0, as mixtrain applies none), trained on
sequences of --context tokens.
peak_bytes is the process's peak resident set growth over the timed steps (ru_maxrss), which
includes PyTorch's allocator caching; it is not comparable byte for byte with mixtrain's tracked
tensor bytes and the driver labels it so.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_models  # noqa: E402


def dataset_for(model_name, size, gen, context=None):
    """Synthetic inputs and labels shaped like the model's real data, `size` examples."""
    if model_name == "gpt2":
        tokens = torch.randint(0, 50257, (size, context + 1), generator=gen)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    if model_name == "gpt":
        tokens = torch.randint(0, pytorch_models.GPT_VOCAB, (size, pytorch_models.GPT_CONTEXT + 1), generator=gen)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    x = torch.randn(size, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (size,), generator=gen)
    return x, y


# The ATen ops that are matrix products on the CPU (linear layers reach addmm or mm; attention's
# batched products bmm). Their self time is the time of the BLAS / oneDNN call, taken on the calling
# thread, so with intra-op threads it is wall time.
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def gemm_ms_per_step(step, first, steps):
    """Runs steps first .. first + steps - 1 (the data of the timed steps again) under the profiler
    and returns the matrix products' time per step, in ms."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(first, first + steps):
            float(step(i))
    total_us = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in GEMM_OPS)
    return total_us / 1e3 / steps


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=pytorch_models.MODEL_NAMES + ("gpt2",), default="mlp")
    p.add_argument("--context", type=int, default=1024, help="gpt2 only: tokens per sequence")
    p.add_argument("--checkpoint-activations", action="store_true",
                   help="gpt2 only: transformers' gradient checkpointing (each block recomputed in backward)")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--embed", type=int, default=None, help="gpt only: embedding width C")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true", help="torch.compile the model (inductor)")
    p.add_argument("--gemm-profile", action="store_true",
                   help="after the timed steps, run as many again under torch.profiler and add gemm_ms_per_step: "
                        "the wall time per step spent in matrix products (aten::mm, addmm, bmm, baddbmm)")
    p.add_argument("--detect-anomaly", action="store_true",
                   help="run each step under torch.autograd.detect_anomaly(check_nan=True)")
    args = p.parse_args()
    if args.precision == "fp16" and not hasattr(torch.amp, "GradScaler"):
        sys.exit(f"pytorch_bench: torch {torch.__version__} has no CPU fp16 autocast with GradScaler (needs 2.4+)")

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    kwargs = {}
    if args.model == "gpt" and args.embed:
        kwargs["embed_dim"] = args.embed
    if args.model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        model = GPT2LMHeadModel(GPT2Config(attn_pdrop=0.0, resid_pdrop=0.1, embd_pdrop=0.1))
        if args.checkpoint_activations:
            model.gradient_checkpointing_enable()
    else:
        model = pytorch_models.build_model(args.model, **kwargs)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    forward = torch.compile(model) if args.compile else model
    gen = torch.Generator().manual_seed(args.seed)
    total = args.batch_size * (args.warmup + args.steps)
    data_x, data_y = dataset_for(args.model, total, gen, args.context)
    order = torch.randperm(total, generator=gen)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler("cpu") if args.precision == "fp16" else None

    def step(i):
        if args.detect_anomaly:
            with torch.autograd.detect_anomaly(check_nan=True):
                return plain_step(i)
        return plain_step(i)

    def plain_step(i):
        idx = order[i * args.batch_size:(i + 1) * args.batch_size]
        x, y = data_x[idx], data_y[idx]  # a new batch every step, gathered as a DataLoader would
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            out = forward(x)
            if args.model == "gpt2":
                out = out.logits
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss.detach()

    for i in range(args.warmup):
        step(i)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times = []
    for i in range(args.warmup, args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = step(i)
        float(loss)  # the step is done when its loss is known
        times.append((time.perf_counter() - t0) * 1e3)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    med = statistics.median(times)
    extra = {}
    if args.gemm_profile:
        extra["gemm_ms_per_step"] = gemm_ms_per_step(step, args.warmup, args.steps)
    print(json.dumps({
        "framework": "pytorch",
        "torch_version": torch.__version__,
        "model": args.model,
        "precision": args.precision,
        "compiled": args.compile,
        "detect_anomaly": args.detect_anomaly,
        "cpu_capability": torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "n/a",
        "batch_size": args.batch_size,
        "context": args.context if args.model == "gpt2" else None,
        "checkpoint_activations": args.checkpoint_activations,
        "threads": torch.get_num_threads(),
        "steps": args.steps,
        "step_ms_median": med,
        "samples_per_sec": args.batch_size / (med / 1e3),
        "peak_rss_bytes": rss_after,
        "rss_growth_bytes": rss_after - rss_before,
        **extra,
    }))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch counterpart of `mixtrain bench`: times AdamW training steps of one named model on
synthetic data and prints one JSON object with the keys `mixtrain bench --json` prints.

  python3 bench/pytorch_bench.py --model gpt --precision bf16 --batch-size 16 --threads 2

Precisions: fp32; bf16 = torch.autocast("cpu", dtype=torch.bfloat16) around forward and loss
(PyTorch's CPU autocast); fp16 = autocast fp16 with torch.cuda.amp-style loss scaling is not
available on the CPU in torch 1.13, so fp16 is refused. The step is the same as mixtrain's:
zero_grad(set_to_none), forward, cross-entropy, backward, AdamW(lr 1e-3, weight decay 0.01).
Models come from pytorch_models.py (the same architectures and parameter names as mixtrain's).
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


def batch_for(model_name, batch_size, gen):
    """Synthetic inputs and labels shaped like the model's real data."""
    if model_name == "gpt":
        tokens = torch.randint(0, pytorch_models.GPT_VOCAB, (batch_size, pytorch_models.GPT_CONTEXT + 1),
                               generator=gen)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    x = torch.randn(batch_size, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (batch_size,), generator=gen)
    return x, y


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=pytorch_models.MODEL_NAMES, default="mlp")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--embed", type=int, default=None, help="gpt only: embedding width C")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    kwargs = {}
    if args.model == "gpt" and args.embed:
        kwargs["embed_dim"] = args.embed
    model = pytorch_models.build_model(args.model, **kwargs)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(args.seed)
    x, y = batch_for(args.model, args.batch_size, gen)
    use_autocast = args.precision == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_autocast):
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        float(loss)  # the step is done when its loss is known
        times.append((time.perf_counter() - t0) * 1e3)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    med = statistics.median(times)
    print(json.dumps({
        "framework": "pytorch",
        "torch_version": torch.__version__,
        "model": args.model,
        "precision": args.precision,
        "batch_size": args.batch_size,
        "threads": torch.get_num_threads(),
        "steps": args.steps,
        "step_ms_median": med,
        "samples_per_sec": args.batch_size / (med / 1e3),
        "peak_rss_bytes": rss_after,
        "rss_growth_bytes": rss_after - rss_before,
    }))


if __name__ == "__main__":
    main()

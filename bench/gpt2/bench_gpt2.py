#!/usr/bin/env python3
"""GPT-2 small (124M) training steps: `mixtrain bench --model gpt2` against transformers'
GPT2LMHeadModel in PyTorch eager and torch.compile (bench/pytorch_bench.py --model gpt2), per
precision, alternating the frameworks in each repetition; then the memory at GPT-2's context (batch
4 x 1024 tokens, one timed step): mixtrain's peak tensor bytes per precision, with and without the
fused head and activation checkpointing, against the unfused fp32 step, and the processes' maximum
resident set against PyTorch's. Prints markdown tables; --json FILE keeps the raw runs.

    /tmp/venv/bin/python bench/gpt2/bench_gpt2.py [--build build] [--batch-size 2] [--context 256]
        [--steps 4] [--warmup 2] [--reps 1] [--no-compile] [--json runs/gpt2-bench.json]

Both sides: AdamW (lr 1e-3, weight decay 0.01), embedding and residual dropout 0.1, no attention
dropout, a new synthetic batch of random tokens every step, bf16/fp16 under autocast (fp16 with a
GradScaler). A cell is the median over repetitions of each run's median step. Memory: mixtrain's
peak tracked tensor bytes (weights, gradients, optimizer state, activations) and, for every run, the
process's maximum resident set size.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd):
    """Runs cmd, returns its last stdout line as JSON with max_rss_bytes (this process's, from wait4)."""
    with tempfile.TemporaryFile(mode="w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise SystemExit(f"bench_gpt2: {' '.join(cmd)} failed ({p.returncode})")
        out.seek(0)
        result = json.loads(out.read().strip().splitlines()[-1])
    result["max_rss_bytes"] = usage.ru_maxrss * 1024
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--memory-batch", type=int, default=4, help="the memory runs' batch (GPT-2's context: 1024)")
    ap.add_argument("--memory-context", type=int, default=1024)
    ap.add_argument("--skip-steps", action="store_true", help="only the memory table")
    ap.add_argument("--no-pytorch-memory", action="store_true", help="no PyTorch runs in the memory table")
    ap.add_argument("--json")
    a = ap.parse_args()
    cli = os.path.join(a.build, "tools/mixtrain/mixtrain")
    common = ["--batch-size", str(a.batch_size), "--steps", str(a.steps), "--warmup", str(a.warmup),
              "--threads", str(a.threads)]
    mt = lambda p, *extra: [cli, "bench", "--model", "gpt2", "--context", str(a.context), "--precision", p, "--json",
                            *common, *extra]
    pt = lambda p, *extra: [sys.executable, os.path.join(ROOT, "bench/pytorch_bench.py"), "--model", "gpt2",
                            "--context", str(a.context), "--precision", p, *common, *extra]
    sides = [("mixtrain", mt), ("PyTorch eager", pt)]
    if not a.no_compile:
        sides.append(("torch.compile", lambda p: pt(p, "--compile")))
    runs = []
    for rep in range(0 if a.skip_steps else a.reps):
        for p in ("fp32", "bf16", "fp16"):
            for name, cmd in sides:
                r = run(cmd(p))
                r.update(side=name, precision=p, rep=rep)
                runs.append(r)
                print(f"{name:14s} {p}: {r['step_ms_median']:.0f} ms", file=sys.stderr, flush=True)
    print_steps(a, sides, runs) if runs else None
    print_memory(a, cli)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"steps": runs, "memory": MEMORY}, f, indent=1)


MEMORY = []


def print_steps(a, sides, runs):
    cpu = next((r["cpu"] for r in runs if "cpu" in r), "?")
    print(f"GPT-2 small (124M), batch {a.batch_size} x {a.context} tokens, {a.threads} threads, CPU: {cpu}\n")
    print("| precision | " + " | ".join(n for n, _ in sides) + " | mixtrain vs " +
          " | mixtrain vs ".join(n for n, _ in sides[1:]) + " |")
    print("|---" * (2 * len(sides)) + "|")
    med = {}
    for p in ("fp32", "bf16", "fp16"):
        for n, _ in sides:
            med[p, n] = statistics.median(r["step_ms_median"] for r in runs if r["precision"] == p and r["side"] == n)
        cells = [f"{med[p, n] / 1e3:.2f} s" for n, _ in sides]
        ratios = [f"{med[p, n] / med[p, 'mixtrain']:.2f}x" for n, _ in sides[1:]]
        print(f"| {p} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    print("\n(ratio: the other side's step time over mixtrain's; above 1 means mixtrain is faster)\n")
    print("| run | max RSS |")
    print("|---|---:|")
    for r in runs:
        print(f"| {r['side']} {r['precision']} | {r['max_rss_bytes'] / 2**30:.2f} GiB |")
    print()


# The memory runs: (label, precision, extra flags). The first is the reference of the ratios: the
# unfused head in fp32, the step as it was before the fused head and loss.
MEMORY_RUNS = (
    ("fp32, unfused head (reference)", "fp32", ["--unfused-head"]),
    ("fp32", "fp32", []),
    ("fp32, checkpointed", "fp32", ["--checkpoint-activations"]),
    ("bf16, unfused head", "bf16", ["--unfused-head"]),
    ("bf16", "bf16", []),
    ("bf16, checkpointed", "bf16", ["--checkpoint-activations"]),
    ("bf16 parameters, stochastic rounding", "bf16", ["--master-weights", "bf16", "--weight-update", "stochastic"]),
    ("bf16 parameters, stochastic rounding, checkpointed", "bf16",
     ["--master-weights", "bf16", "--weight-update", "stochastic", "--checkpoint-activations"]),
)


def print_memory(a, cli):
    print(f"Memory, batch {a.memory_batch} x {a.memory_context} tokens, one timed step after one warm-up step:\n")
    mt = lambda p, *extra: [cli, "bench", "--model", "gpt2", "--context", str(a.memory_context), "--precision", p,
                            "--json", "--batch-size", str(a.memory_batch), "--steps", "1", "--warmup", "1",
                            "--threads", str(a.threads), *extra]
    pt = lambda p: [sys.executable, os.path.join(ROOT, "bench/pytorch_bench.py"), "--model", "gpt2", "--context",
                    str(a.memory_context), "--precision", p, "--batch-size", str(a.memory_batch), "--steps", "1",
                    "--warmup", "1", "--threads", str(a.threads)]
    mem = MEMORY
    for label, p, extra in MEMORY_RUNS:
        r = run(mt(p, *extra))
        r.update(label=label, side="mixtrain")
        mem.append(r)
    print("| mixtrain run | peak tensor bytes | vs reference | activations and temporaries | max RSS | step |")
    print("|---|---:|---:|---:|---:|---:|")
    base = mem[0]["peak_bytes"]
    base_act = base - mem[0]["model_state_bytes"]
    for r in mem:
        act = r["peak_bytes"] - r["model_state_bytes"]
        print(f"| {r['label']} | {r['peak_bytes'] / 2**30:.2f} GiB | {r['peak_bytes'] / base:.3f}x | "
              f"{act / 2**30:.2f} GiB ({act / base_act:.3f}x) | {r['max_rss_bytes'] / 2**30:.2f} GiB | "
              f"{r['step_ms_median'] / 1e3:.2f} s |")
    if a.no_pytorch_memory:
        return
    print("\n| precision | mixtrain max RSS | PyTorch max RSS | mixtrain / PyTorch |")
    print("|---|---:|---:|---:|")
    for p in ("fp32", "bf16"):
        r = run(pt(p))
        r.update(label=f"PyTorch {p}", side="PyTorch eager", precision=p)
        mem.append(r)
        ours = next(m for m in mem if m["side"] == "mixtrain" and m["label"] == p)
        print(f"| {p} | {ours['max_rss_bytes'] / 2**30:.2f} GiB | {r['max_rss_bytes'] / 2**30:.2f} GiB | "
              f"{ours['max_rss_bytes'] / r['max_rss_bytes']:.2f}x |")


if __name__ == "__main__":
    main()

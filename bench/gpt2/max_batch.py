#!/usr/bin/env python3
"""The largest batch of GPT-2 small (sequences of --context tokens, AdamW) that trains within a memory
budget, mixtrain against PyTorch + transformers, per precision. Prints a markdown table.

    /tmp/venv/bin/python bench/gpt2/max_batch.py [--budget-gib 16] [--precisions fp32,bf16]
        [--sides mixtrain,pytorch] [--threads 2] [--build build] [--json runs/max-batch.json]

Both sides by the same criterion, the process's maximum resident set (PyTorch exposes no tensor-byte
peak on the CPU): ru_maxrss of a fresh process per candidate, `mixtrain bench --model gpt2` or
bench/pytorch_bench.py --model gpt2, one warm-up step (which creates AdamW's state) and one timed
step. Batch 1 and 2 first, then the batch the line through the two largest measured batches
predicts (for 3/4 of the budget until a batch above that is measured, and at most 8 times the
largest batch measured until one over the budget is: a guess far over the budget could take the
machine's memory), then inside the bracket until a batch within the budget and the next one over it
have both been measured. A budget counts as 2^30 bytes per GiB. `--sides mixtrain-tensors` adds mixtrain's own
answer by tracked tensor bytes (`mixtrain bench --max-batch GIB`), which leaves out code, oneDNN's
caches, the allocator's cache and the data.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd):
    """Runs cmd; returns (its last stdout line as JSON, or None when it failed, max RSS bytes)."""
    with tempfile.TemporaryFile(mode="w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(p.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        lines = out.read().strip().splitlines()
    result = json.loads(lines[-1]) if code == 0 and lines else None
    return result, usage.ru_maxrss * 1024


def pytorch_cmd(a, precision, batch):
    return [sys.executable, os.path.join(ROOT, "bench/pytorch_bench.py"), "--model", "gpt2", "--context",
            str(a.context), "--precision", precision, "--batch-size", str(batch), "--steps", "1", "--warmup", "1",
            "--threads", str(a.threads)]


def mixtrain_cmd(a, precision, batch):
    return [os.path.join(a.build, "tools/mixtrain/mixtrain"), "bench", "--model", "gpt2", "--context", str(a.context),
            "--precision", precision, "--batch-size", str(batch), "--steps", "1", "--warmup", "1", "--threads",
            str(a.threads), "--json"]


def rss_max_batch(a, side, command, precision, budget):
    """The largest batch whose process (`command(a, precision, batch)`) stays within `budget` bytes of
    maximum resident set, and every candidate's."""
    rss = {}  # batch -> max RSS bytes (None: the run failed, e.g. killed out of memory)

    def probe(batch):
        result, peak = run(command(a, precision, batch))
        rss[batch] = peak if result is not None else None
        print(f"  {side} {precision} batch {batch}: max RSS {peak / 2**30:.2f} GiB"
              f"{'' if result is not None else ' (failed)'}", file=sys.stderr, flush=True)
        return rss[batch] is not None and rss[batch] <= budget

    fits = lambda b: rss.get(b) is not None and rss[b] <= budget
    if not probe(1):
        return 0, rss
    probe(2)
    for _ in range(12):
        good = max((b for b in rss if fits(b)), default=0)
        bad = min((b for b in rss if not fits(b)), default=None)
        if bad is not None and bad == good + 1:
            return good, rss
        # The line through the two largest completed runs; every batch measured so far is at most
        # `good` or at least `bad`, so the clamped guess is a new one. Until a batch over the budget
        # or one above 3/4 of it is known the line aims at 3/4 of it: a line through small batches underestimates the cost
        # of a sequence (mixtrain bf16: 0.19 GiB between batches 1 and 2, 0.27 GiB near 16 GiB), and
        # a guess far over the budget can take the whole machine's memory.
        measured = sorted(b for b in rss if rss[b] is not None)
        b1, b2 = measured[-2], measured[-1]
        slope = (rss[b2] - rss[b1]) / (b2 - b1)
        cautious = bad is None and (good == 0 or rss[good] < 0.75 * budget)
        target = 0.75 * budget if cautious else budget
        guess = good + 1 if slope <= 0 else int(b1 + (target - rss[b1]) / slope)
        if bad is None:  # and at most 8 times the largest batch measured: a near-flat start misleads
            guess = min(guess, 8 * b2)
        guess = max(good + 1, guess if bad is None else min(guess, bad - 1))
        probe(guess)
    raise SystemExit(f"max_batch: no answer for {side} {precision} after 14 candidates: {rss}")


def mixtrain_max_batch(a, precision, budget_gib):
    """`mixtrain bench --max-batch`: the largest batch by tracked tensor bytes."""
    cli = os.path.join(a.build, "tools/mixtrain/mixtrain")
    found, _ = run([cli, "bench", "--model", "gpt2", "--context", str(a.context), "--precision", precision,
                    "--max-batch", str(budget_gib), "--threads", str(a.threads), "--json"])
    if found is None:
        raise SystemExit(f"max_batch: mixtrain bench --max-batch failed for {precision}")
    print(f"  mixtrain {precision}: batch {found['max_batch_size']} by tensor bytes, peak "
          f"{found['peak_bytes'] / 2**30:.2f} GiB", file=sys.stderr, flush=True)
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-gib", type=float, default=16)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--sides", default="mixtrain,pytorch",
                    help="from mixtrain and pytorch (by resident set) and mixtrain-tensors (bench --max-batch)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json")
    a = ap.parse_args()
    budget = int(a.budget_gib * 2**30)
    sides = a.sides.split(",")
    results = {}
    for p in a.precisions.split(","):
        r = results.setdefault(p, {})
        if "mixtrain-tensors" in sides:
            r["mixtrain_tensor_bytes"] = mixtrain_max_batch(a, p, a.budget_gib)
        for side, command in (("mixtrain", mixtrain_cmd), ("pytorch", pytorch_cmd)):
            if side in sides:
                batch, rss = rss_max_batch(a, side, command, p, budget)
                r[side] = {"max_batch_size": batch, "max_rss_bytes": {str(k): v for k, v in sorted(rss.items())}}
    print(f"Largest batch of {a.context} tokens within {a.budget_gib:g} GiB, GPT-2 small, AdamW, {a.threads} threads:\n")
    print("| precision | mixtrain (max RSS <= budget) | PyTorch (max RSS <= budget) | mixtrain (tensor peak <= budget) |")
    print("|---|---:|---:|---:|")
    for p, r in results.items():
        cell = lambda key: str(r[key]["max_batch_size"]) if key in r else "-"
        print(f"| {p} | {cell('mixtrain')} | {cell('pytorch')} | {cell('mixtrain_tensor_bytes')} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"budget_gib": a.budget_gib, "context": a.context, "threads": a.threads, "results": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()

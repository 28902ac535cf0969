#!/usr/bin/env python3
"""The largest batch of GPT-2 small (sequences of --context tokens, AdamW) that trains within a memory
budget, mixtrain against PyTorch + transformers, per precision. Prints a markdown table.

    /tmp/venv/bin/python bench/gpt2/max_batch.py [--budget-gib 16] [--precisions fp32,bf16]
        [--sides mixtrain,pytorch] [--threads 2] [--build build] [--json runs/max-batch.json]

mixtrain: `mixtrain bench --max-batch GIB` (the peak of tracked tensor bytes of two real steps, a
fitting batch and the next one measured over the budget), then one run at the batch it found, whose
process's maximum resident set is reported too (code, oneDNN, the allocator's cache and the data
on top of the tensors).
PyTorch: PyTorch exposes no tensor-byte peak on the CPU, so its criterion is the process's maximum
resident set (ru_maxrss of a fresh process per candidate running bench/pytorch_bench.py: one warm-up
step, which creates AdamW's state, and one timed step). Batch 1 and 2 first, then the batch the line
through the two largest measured batches predicts, then one up or down until a batch within the
budget and the next one over it have both been measured. A budget counts as 2^30 bytes per GiB.
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


def pytorch_max_batch(a, precision, budget):
    rss = {}  # batch -> max RSS bytes (None: the run failed, e.g. killed out of memory)

    def probe(batch):
        result, peak = run(pytorch_cmd(a, precision, batch))
        rss[batch] = peak if result is not None else None
        print(f"  PyTorch {precision} batch {batch}: max RSS {peak / 2**30:.2f} GiB"
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
        # `good` or at least `bad`, so the clamped guess is a new one.
        measured = sorted(b for b in rss if rss[b] is not None)
        b1, b2 = measured[-2], measured[-1]
        slope = (rss[b2] - rss[b1]) / (b2 - b1)
        guess = good + 1 if slope <= 0 else int(b1 + (budget - rss[b1]) / slope)
        guess = max(good + 1, guess if bad is None else min(guess, bad - 1))
        probe(guess)
    raise SystemExit(f"max_batch: no answer for PyTorch {precision} after 14 candidates: {rss}")


def mixtrain_max_batch(a, precision, budget_gib):
    cli = os.path.join(a.build, "tools/mixtrain/mixtrain")
    found, _ = run([cli, "bench", "--model", "gpt2", "--context", str(a.context), "--precision", precision,
                    "--max-batch", str(budget_gib), "--threads", str(a.threads), "--json"])
    if found is None:
        raise SystemExit(f"max_batch: mixtrain bench --max-batch failed for {precision}")
    batch = found["max_batch_size"]
    at, rss = run([cli, "bench", "--model", "gpt2", "--context", str(a.context), "--precision", precision,
                   "--batch-size", str(batch), "--steps", "1", "--warmup", "1", "--threads", str(a.threads), "--json"])
    print(f"  mixtrain {precision}: batch {batch}, peak {found['peak_bytes'] / 2**30:.2f} GiB, "
          f"max RSS {rss / 2**30:.2f} GiB", file=sys.stderr, flush=True)
    return {"max_batch_size": batch, "peak_bytes": found["peak_bytes"], "next_peak_bytes": found["next_peak_bytes"],
            "max_rss_bytes": rss, "probes": found["probes"], "cpu": at["cpu"] if at else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-gib", type=float, default=16)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--sides", default="mixtrain,pytorch")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json")
    a = ap.parse_args()
    budget = int(a.budget_gib * 2**30)
    sides = a.sides.split(",")
    results = {}
    for p in a.precisions.split(","):
        r = results.setdefault(p, {})
        if "mixtrain" in sides:
            r["mixtrain"] = mixtrain_max_batch(a, p, a.budget_gib)
        if "pytorch" in sides:
            batch, rss = pytorch_max_batch(a, p, budget)
            r["pytorch"] = {"max_batch_size": batch, "max_rss_bytes": {str(k): v for k, v in sorted(rss.items())}}
    print(f"Largest batch of {a.context} tokens within {a.budget_gib:g} GiB, GPT-2 small, AdamW, {a.threads} threads:\n")
    print("| precision | mixtrain (tensor peak <= budget) | its max RSS | PyTorch (max RSS <= budget) |")
    print("|---|---:|---:|---:|")
    for p, r in results.items():
        m, t = r.get("mixtrain"), r.get("pytorch")
        cells = [p, str(m["max_batch_size"]) if m else "-", f"{m['max_rss_bytes'] / 2**30:.2f} GiB" if m else "-",
                 str(t["max_batch_size"]) if t else "-"]
        print("| " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"budget_gib": a.budget_gib, "context": a.context, "threads": a.threads, "results": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Training-step time and peak memory of mixtrain per precision, at this CPU's own instruction-set
level and under lower MIXTRAIN_MAX_ISA caps: what 16-bit costs or saves on each class of x86-64.

  python3 bench/isa_steps.py                                  # native and generic, 3 repetitions
  python3 bench/isa_steps.py --caps native,avx2,generic --reps 5 --out runs/isa.jsonl

Each repetition runs every (cap, model, precision) once with `mixtrain bench --json`, alternating,
so that a burst of load from elsewhere spreads over all cells; a cell is the median over the
repetitions of each run's median step. Workloads as bench/run_benchmarks.py: mlp, mlp-wide and cnn
at batch 256, gpt (GPT-mini) at batch 16, AdamW. Prints a markdown table with the CPU named;
--out also keeps every raw JSON line. Run it on an otherwise idle machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

STEPS = {"mlp": 300, "mlp-wide": 100, "cnn": 20, "gpt": 10}
BATCH = {"mlp": 256, "mlp-wide": 256, "cnn": 256, "gpt": 16}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mixtrain", default="build/tools/mixtrain/mixtrain")
    p.add_argument("--caps", default="native,generic", help="MIXTRAIN_MAX_ISA values, comma-separated")
    p.add_argument("--models", default="mlp,mlp-wide,cnn,gpt")
    p.add_argument("--precisions", default="fp32,bf16,fp16")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--out", help="JSONL file for the raw results")
    args = p.parse_args()
    if not os.access(args.mixtrain, os.X_OK):
        sys.exit(f"isa_steps: no mixtrain binary at {args.mixtrain} (build with -DMIXTRAIN_BUILD_CLI=ON)")
    caps, models, precisions = args.caps.split(","), args.models.split(","), args.precisions.split(",")

    raw = []
    for rep in range(args.reps):
        for cap in caps:
            for model in models:
                steps = STEPS[model] if not (cap == "generic" and model == "gpt") else STEPS[model] // 2
                for prec in precisions:
                    cmd = [args.mixtrain, "bench", "--model", model, "--precision", prec, "--batch-size",
                           str(BATCH[model]), "--steps", str(steps), "--warmup", "3", "--threads", str(args.threads),
                           "--json"]
                    out = subprocess.run(cmd, env=dict(os.environ, MIXTRAIN_MAX_ISA=cap), capture_output=True,
                                         text=True, check=True).stdout
                    r = json.loads(out.strip().splitlines()[-1])
                    raw.append({"cap": cap, "rep": rep, "result": r})
                    print(f"rep {rep + 1}/{args.reps} {cap} {model} {prec}: {r['step_ms_median']:.2f} ms",
                          file=sys.stderr)
    if args.out:
        with open(args.out, "w") as f:
            for r in raw:
                f.write(json.dumps(r) + "\n")

    def cell(cap, model, prec, key):
        v = [r["result"][key] for r in raw
             if r["cap"] == cap and r["result"]["model"] == model and r["result"]["precision"] == prec]
        return statistics.median(v) if v else None

    first = raw[0]["result"]
    print(f"CPU: {first['cpu']}; {args.threads} threads; medians of {args.reps} repetitions "
          f"(`python3 bench/isa_steps.py --caps {args.caps} --reps {args.reps}`)\n")
    print("| cap | level run | model | " + " | ".join(f"{p} step" for p in precisions) + " | "
          + " | ".join(f"{p} vs fp32" for p in precisions if p != "fp32") + " | "
          + " | ".join(f"{p} memory vs fp32" for p in precisions if p != "fp32") + " |")
    print("|---|---|---|" + "---:|" * (len(precisions) + 2 * (len(precisions) - 1)))
    for cap in caps:
        level = next(r["result"]["isa"] for r in raw if r["cap"] == cap)
        for model in models:
            t = {p: cell(cap, model, p, "step_ms_median") for p in precisions}
            m = {p: cell(cap, model, p, "peak_bytes") for p in precisions}
            speed = [f"{t['fp32'] / t[p]:.2f}x" if t.get("fp32") and t[p] else "-" for p in precisions if p != "fp32"]
            mem = [f"{m[p] / m['fp32']:.2f}x" if m.get("fp32") and m[p] else "-" for p in precisions if p != "fp32"]
            print(f"| {cap} | {level} | {model} | " + " | ".join(f"{t[p]:.2f} ms" for p in precisions) + " | "
                  + " | ".join(speed) + " | " + " | ".join(mem) + " |")


if __name__ == "__main__":
    main()

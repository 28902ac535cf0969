#!/usr/bin/env python3
"""Per-rank memory and step time of ZeRO-1 (--zero 1) against plain DDP (--zero 0), 2 processes.

    python3 bench/dist/zero_memory.py --mixtrain build/tools/mixtrain/mixtrain [--reps 3] [--steps 12]
        [--out docs/results/zero-memory.md]

For each model (gpt, mlp) and parameter mode (fp32 weights through bf16 autocast; bf16 weights with
fp32 masters), both settings run `mpirun -np 2 mixtrain train ... --zero Z` on synthetic data,
alternating Z over --reps repetitions. From rank 0's summary.json it reports the optimizer state
per rank (masters + moments: deterministic bytes), the model state (+ weights and gradients), the
peak tensor memory of training, and the median over repetitions of the median step time; and
whether the final weights of the two settings are identical (they should be, bit for bit).
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

MIB = 1024.0 * 1024.0


def run(args, model, precision, params, zero, out):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", args.mixtrain, "train",
           "--model", model, "--data", "synthetic:4096", "--precision", precision, "--master-weights", params,
           "--batch-size", str(args.batch), "--steps", str(args.steps), "--threads", "1", "--seed", "1",
           "--zero", str(zero), "--out", out, "--overwrite"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(out, "model.safetensors"), "rb") as f:
        summary["weights_sha256"] = hashlib.sha256(f.read()).hexdigest()
    return summary


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mixtrain", required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--out", default="")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in ["gpt", "mlp"]:
            for precision, params in [("bf16", "fp32"), ("bf16", "bf16")]:
                results = {0: [], 1: []}
                for rep in range(args.reps):
                    for zero in (0, 1) if rep % 2 == 0 else (1, 0):
                        results[zero].append(run(args, model, precision, params, zero,
                                                 os.path.join(tmp, f"{model}-{params}-z{zero}")))
                d, z = results[0][-1], results[1][-1]
                step = {k: statistics.median(s["step_ms_median"] for s in results[k]) for k in (0, 1)}
                rows.append({
                    "model": f"{model} ({d['num_parameters'] / 1e6:.2f}M)",
                    "weights": "fp32" if params == "fp32" else "bf16 + fp32 masters",
                    "state": (d["optimizer_state_bytes"], z["optimizer_state_bytes"]),
                    "model_state": (d["model_state_bytes"], z["model_state_bytes"]),
                    "peak": (d["peak_bytes"], z["peak_bytes"]),
                    "step": (step[0], step[1]),
                    "same": d["weights_sha256"] == z["weights_sha256"],
                    "cpu": d.get("cpu", ""),
                })
    lines = [f"2 processes (mpirun -np 2, 1 thread each), batch {args.batch} per process, {args.steps} steps, "
             f"AdamW, bf16 autocast; {args.reps} alternating repetitions; CPU: {rows[0]['cpu']}.", "",
             "| model | weights | optimizer state per rank, DDP -> ZeRO-1 | ratio | model state per rank | "
             "peak tensor memory per rank | step time (median) | same final weights |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, m, k, t = r["state"], r["model_state"], r["peak"], r["step"]
        lines.append(f"| {r['model']} | {r['weights']} | {s[0] / MIB:.2f} -> {s[1] / MIB:.2f} MiB | "
                     f"{s[1] / s[0]:.3f}x | {m[0] / MIB:.2f} -> {m[1] / MIB:.2f} MiB ({m[1] / m[0]:.2f}x) | "
                     f"{k[0] / MIB:.2f} -> {k[1] / MIB:.2f} MiB ({k[1] / k[0]:.2f}x) | "
                     f"{t[0]:.1f} -> {t[1]:.1f} ms ({t[1] / t[0]:.2f}x) | {'yes, bit for bit' if r['same'] else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if not all(r["same"] for r in rows):
        sys.exit("ZeRO-1 and DDP ended with different weights")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Learning-rate schedules against transformers: the lr that `mixtrain train` used at every step
(metrics.jsonl "lr") against the lr that transformers' scheduler gives a PyTorch optimizer.

    /tmp/venv/bin/python bench/gpt2/lr_schedule.py [--mixtrain build/tools/mixtrain/mixtrain]
        [--work DIR] [--tol 1e-7] [--json docs/results/lr-schedule.json]

Three settings (W warmup steps, T steps, F = --lr-min-factor):
    a  cosine    W=10  T=100  F=0.1  lr 1e-3   get_cosine_with_min_lr_schedule_with_warmup(min_lr_rate=F)
    b  cosine    W=25  T=100  F=0    lr 6e-4   get_cosine_schedule_with_warmup
    c  constant  W=20  T=60          lr 3e-4   get_constant_schedule_with_warmup
mixtrain: `train --model mlp --data synthetic:4096 --batch-size 8 --steps T --warmup-steps W
--lr-decay D --lr-min-factor F --lr LR --threads 1 --no-tensorboard`; its metrics.jsonl has one line
per step, step s (1-based) holding the lr of schedule step t = s - 1. PyTorch: torch.optim.AdamW on
one parameter with lr LR and the transformers scheduler; for each of T steps the script records
optimizer.param_groups[0]["lr"], then calls optimizer.step() and scheduler.step().

Criterion: a setting passes when both sides have all T steps and, at every step,
|mixtrain - transformers| <= TOL x LR (TOL = 1e-7 by default: the largest difference relative to
the peak learning rate, "max rel diff" in the table, must be at most 1e-7; about float32's rounding
of the peak lr). The script prints a table (setting, steps, max abs diff, max rel diff, verdict),
every step over the tolerance (step, both values), and exits with 1 when a setting fails, 2 when a
mixtrain run fails. --json FILE keeps the settings, commands and both values at every step.

Needs torch and transformers.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import (
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
    get_cosine_with_min_lr_schedule_with_warmup,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SETTINGS = [
    {"name": "a", "decay": "cosine", "warmup": 10, "steps": 100, "min_factor": 0.1, "lr": 1e-3,
     "reference": "get_cosine_with_min_lr_schedule_with_warmup"},
    {"name": "b", "decay": "cosine", "warmup": 25, "steps": 100, "min_factor": 0.0, "lr": 6e-4,
     "reference": "get_cosine_schedule_with_warmup"},
    {"name": "c", "decay": "constant", "warmup": 20, "steps": 60, "min_factor": None, "lr": 3e-4,
     "reference": "get_constant_schedule_with_warmup"},
]
MAX_SHOWN = 10  # steps over the tolerance printed per setting


def mixtrain_lrs(binary, s, out_dir):
    """Runs mixtrain train for setting s; returns {step (1-based): lr} and the command."""
    cmd = [binary, "train", "--model", "mlp", "--data", "synthetic:4096", "--batch-size", "8",
           "--steps", str(s["steps"]), "--warmup-steps", str(s["warmup"]), "--lr-decay", s["decay"]]
    if s["min_factor"] is not None:
        cmd += ["--lr-min-factor", repr(s["min_factor"])]
    cmd += ["--lr", repr(s["lr"]), "--threads", "1", "--no-tensorboard", "--out", out_dir, "--overwrite"]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        print(f"lr_schedule: {' '.join(cmd)} failed ({p.returncode})", file=sys.stderr)
        sys.exit(2)
    lrs = {}
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if "lr" in rec and "step" in rec:
                if rec["step"] in lrs:
                    print(f"lr_schedule: setting {s['name']}: step {rec['step']} logged twice", file=sys.stderr)
                    sys.exit(2)
                lrs[rec["step"]] = rec["lr"]
    return lrs, cmd


def transformers_lrs(s):
    """The lr of each of the T steps (index t = 0-based step) under transformers' scheduler."""
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([param], lr=s["lr"])
    if s["reference"] == "get_cosine_with_min_lr_schedule_with_warmup":
        sched = get_cosine_with_min_lr_schedule_with_warmup(
            opt, num_warmup_steps=s["warmup"], num_training_steps=s["steps"], min_lr_rate=s["min_factor"])
    elif s["reference"] == "get_cosine_schedule_with_warmup":
        sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=s["warmup"], num_training_steps=s["steps"])
    else:
        sched = get_constant_schedule_with_warmup(opt, num_warmup_steps=s["warmup"])
    lrs = []
    for _ in range(s["steps"]):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mixtrain", default=os.path.join(ROOT, "build", "tools", "mixtrain", "mixtrain"),
                    help="the mixtrain binary (default: build/tools/mixtrain/mixtrain)")
    ap.add_argument("--work", help="directory for the run directories (default: a temporary one)")
    ap.add_argument("--tol", type=float, default=1e-7,
                    help="largest allowed |mixtrain - transformers| / LR at any step (default 1e-7)")
    ap.add_argument("--json", metavar="FILE", help="write the settings, commands and per-step values here")
    args = ap.parse_args()

    if not os.access(args.mixtrain, os.X_OK):
        print(f"lr_schedule: no executable mixtrain at {args.mixtrain} (--mixtrain PATH)", file=sys.stderr)
        return 2

    tmp = None
    work = args.work
    if work is None:
        tmp = tempfile.TemporaryDirectory(prefix="lr-schedule-")
        work = tmp.name
    os.makedirs(work, exist_ok=True)

    results = []
    failed = False
    for s in SETTINGS:
        ours, cmd = mixtrain_lrs(args.mixtrain, s, os.path.join(work, s["name"]))
        ref = transformers_lrs(s)
        T = s["steps"]
        missing = [step for step in range(1, T + 1) if step not in ours]
        extra = sorted(step for step in ours if not 1 <= step <= T)
        rows = []
        max_abs = 0.0
        worst_step = None
        for t in range(T):
            m = ours.get(t + 1)
            d = None if m is None else abs(m - ref[t])
            rows.append({"step": t + 1, "t": t, "mixtrain": m, "transformers": ref[t], "abs_diff": d})
            if d is not None and (worst_step is None or d > max_abs):
                max_abs, worst_step = d, t + 1
        max_rel = max_abs / s["lr"]
        over = [r for r in rows if r["abs_diff"] is not None and r["abs_diff"] > args.tol * s["lr"]]
        ok = not missing and not extra and not over
        failed |= not ok
        results.append({
            "setting": s["name"], "lr_decay": s["decay"], "warmup_steps": s["warmup"], "steps": T,
            "lr_min_factor": s["min_factor"], "lr": s["lr"], "reference": s["reference"],
            "mixtrain_command": " ".join(["mixtrain"] + cmd[1:-3]),
            "max_abs_diff": max_abs, "max_rel_diff": max_rel, "worst_step": worst_step,
            "missing_steps": missing, "extra_steps": extra, "steps_over_tolerance": [r["step"] for r in over],
            "pass": ok, "per_step": rows,
        })

    print(f"{'setting':<34} {'steps':>5} {'max abs diff':>13} {'max rel diff':>13}  verdict")
    for r in results:
        label = f"{r['setting']} {r['lr_decay']} W={r['warmup_steps']} T={r['steps']}"
        if r["lr_min_factor"] is not None:
            label += f" F={r['lr_min_factor']:g}"
        label += f" lr={r['lr']:g}"
        print(f"{label:<34} {r['steps']:>5} {r['max_abs_diff']:>13.3e} {r['max_rel_diff']:>13.3e}  "
              f"{'pass' if r['pass'] else 'FAIL'}")
    print(f"criterion: at every step |mixtrain - transformers| <= {args.tol:g} x LR "
          f"(max rel diff = max abs diff / LR); transformers {transformers.__version__}, torch {torch.__version__}")

    for r in results:
        if r["missing_steps"] or r["extra_steps"]:
            print(f"setting {r['setting']}: mixtrain metrics.jsonl lacks steps {r['missing_steps'][:MAX_SHOWN]}"
                  f"{' ...' if len(r['missing_steps']) > MAX_SHOWN else ''}, has unexpected steps "
                  f"{r['extra_steps'][:MAX_SHOWN]}")
        bad = [p for p in r["per_step"] if p["step"] in set(r["steps_over_tolerance"])]
        for p in bad[:MAX_SHOWN]:
            print(f"setting {r['setting']}: step {p['step']} (t={p['t']}): mixtrain {p['mixtrain']!r} "
                  f"transformers {p['transformers']!r} diff {p['abs_diff']:.3e}")
        if len(bad) > MAX_SHOWN:
            print(f"setting {r['setting']}: ... {len(bad) - MAX_SHOWN} more steps over the tolerance")

    if args.json:
        out = {"tolerance_rel_to_lr": args.tol, "transformers": transformers.__version__,
               "torch": torch.__version__, "pass": not failed, "settings": results}
        d = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(d, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    if tmp is not None:
        tmp.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks a run's TensorBoard event files against its metrics.jsonl, read by TensorBoard itself.

    check_events.py RUN_DIR [RUN_DIR...]

Each RUN_DIR is a run directory (it holds metrics.jsonl and the events.out.tfevents.* files that
mixtrain's EventFileWriter wrote) or a `mixtrain compare` output directory, whose subdirectories
holding a metrics.jsonl are each checked as a run. The event files are loaded with TensorBoard's own
EventAccumulator (every scalar kept, session starts applied as TensorBoard applies them), so what is
checked is what TensorBoard would chart.

Every metrics.jsonl line is one logged step; its keys map to tags as follows (a key absent from a
line is absent at that step; other keys are not charted):
    loss -> train/loss             lr -> train/lr                 grad_norm -> train/grad_norm
    scale -> train/loss_scale      skipped_total -> train/skipped_steps
    step_ms -> train/step_ms       samples_per_s -> train/samples_per_s
    tokens_per_s -> train/tokens_per_s                            peak_mib -> train/peak_mib
    eval_loss -> eval/loss         eval_perplexity -> eval/perplexity
    eval_accuracy -> eval/accuracy
A null value (JSON's spelling of NaN or infinity) is expected as NaN.

The check passes when the (tag, step) pairs of both sides are the same set, each at most once in the
events, and every value equals the metrics.jsonl value rounded to float32 (NaN equals NaN). It
prints a table per run (tag, count, largest absolute difference) and the mismatches, and exits with
1 on any mismatch, 2 on a usage error (no run found, an unreadable file).

Needs numpy and tensorboard (pip install tensorboard).
"""

import argparse
import json
import math
import os
import sys

import numpy as np

TAGS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "scale": "train/loss_scale",
    "skipped_total": "train/skipped_steps",
    "step_ms": "train/step_ms",
    "samples_per_s": "train/samples_per_s",
    "tokens_per_s": "train/tokens_per_s",
    "peak_mib": "train/peak_mib",
    "eval_loss": "eval/loss",
    "eval_perplexity": "eval/perplexity",
    "eval_accuracy": "eval/accuracy",
}
MAX_SHOWN = 10  # mismatches printed per kind and run


class UsageError(Exception):
    pass


def run_dirs(path):
    """The run directories under a command-line argument."""
    if not os.path.isdir(path):
        raise UsageError(f"{path}: not a directory")
    if os.path.isfile(os.path.join(path, "metrics.jsonl")):
        return [path]
    runs = sorted(os.path.join(path, d) for d in os.listdir(path)
                  if os.path.isfile(os.path.join(path, d, "metrics.jsonl")))
    if not runs:
        raise UsageError(f"{path}: no metrics.jsonl in it or in a subdirectory")
    return runs


def expected_scalars(run):
    """{(tag, step): float32} from metrics.jsonl; a later line of the same step wins."""
    path = os.path.join(run, "metrics.jsonl")
    out = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                step = obj["step"]
            except (ValueError, KeyError, TypeError) as e:
                raise UsageError(f"{path}:{n}: not a metrics line with a step ({e})")
            if not isinstance(step, int):
                raise UsageError(f"{path}:{n}: step {step!r} is not an integer")
            for key, tag in TAGS.items():
                if key in obj:
                    v = obj[key]
                    if v is None:
                        v = math.nan
                    elif isinstance(v, bool) or not isinstance(v, (int, float)):
                        raise UsageError(f"{path}:{n}: {key} = {v!r} is not a number")
                    with np.errstate(over="ignore"):  # beyond float32: inf, as the writer stores it
                        out[(tag, step)] = np.float32(v)
    return out


def event_scalars(run):
    """{(tag, step): [values]} as TensorBoard's EventAccumulator reads the run's event files."""
    from tensorboard.backend.event_processing import event_accumulator

    # TensorBoard's reader opens whatever has the name: a FIFO or device would block it forever.
    for name in os.listdir(run):
        path = os.path.join(run, name)
        if "tfevents" in name and not os.path.isfile(path):
            raise UsageError(f"{path}: not a regular file")
    acc = event_accumulator.EventAccumulator(run, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["scalars"]:
        for e in acc.Scalars(tag):
            out.setdefault((tag, e.step), []).append(np.float32(e.value))
    return out


def fmt(v):
    return f"{float(v):.9g}"


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def abs_diff(a, b):
    if same(a, b):
        return 0.0
    d = abs(float(a) - float(b))
    return math.inf if math.isnan(d) else d


def check_run(run):
    """Prints the run's table and mismatches; returns True when it passes."""
    expected = expected_scalars(run)
    events = event_scalars(run)
    have_files = any("tfevents" in name for name in os.listdir(run))
    problems = []
    if not have_files:
        problems.append("no events.out.tfevents.* file")
    only_metrics = sorted(k for k in expected if k not in events)
    only_events = sorted(k for k in events if k not in expected)
    repeated = sorted(k for k, vs in events.items() if len(vs) > 1)
    wrong = []
    stats = {}  # tag -> [pairs in both, largest |difference|]
    for key in sorted(set(expected) & set(events)):
        tag, step = key
        got = events[key][-1]
        want = expected[key]
        s = stats.setdefault(tag, [0, 0.0])
        s[0] += 1
        s[1] = max(s[1], abs_diff(got, want))
        if not same(got, want):
            wrong.append((tag, step, got, want))
    for tag in {t for t, _ in expected} | {t for t, _ in events}:
        stats.setdefault(tag, [0, 0.0])

    print(f"run {run}: {len(expected)} scalars in metrics.jsonl, "
          f"{sum(len(v) for v in events.values())} in the event files")
    width = max([len("tag")] + [len(t) for t in stats])
    print(f"  {'tag':<{width}}  {'count':>6}  {'only jsonl':>10}  {'only events':>11}  max |diff|")
    for tag in sorted(stats):
        count, diff = stats[tag]
        n_metrics = sum(1 for t, _ in only_metrics if t == tag)
        n_events = sum(1 for t, _ in only_events if t == tag)
        print(f"  {tag:<{width}}  {count:>6}  {n_metrics:>10}  {n_events:>11}  {diff:.9g}")

    def show(title, items, fmt):
        if items:
            problems.append(f"{len(items)} {title}")
            for item in items[:MAX_SHOWN]:
                print(f"    {title}: {fmt(item)}")
            if len(items) > MAX_SHOWN:
                print(f"    ... and {len(items) - MAX_SHOWN} more")

    show("in metrics.jsonl only", only_metrics, lambda k: f"{k[0]} step {k[1]} = {fmt(expected[k])}")
    show("in the event files only", only_events,
         lambda k: f"{k[0]} step {k[1]} = {', '.join(fmt(v) for v in events[k])}")
    show("more than once in the event files", repeated,
         lambda k: f"{k[0]} step {k[1]}: {', '.join(fmt(v) for v in events[k])}")
    show("different values", wrong, lambda w: f"{w[0]} step {w[1]}: events {fmt(w[2])}, metrics.jsonl {fmt(w[3])}")
    if problems:
        print(f"  FAIL: {'; '.join(problems)}")
        return False
    print("  OK")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", metavar="RUN_DIR", nargs="+",
                        help="a run directory, or a compare output directory of run directories")
    args = parser.parse_args()
    try:
        runs = [r for d in args.dirs for r in run_dirs(d)]
        ok = True
        for run in runs:
            ok = check_run(run) and ok
    except (UsageError, OSError) as e:
        print(f"check_events.py: {e}", file=sys.stderr)
        return 2
    print(f"{len(runs)} run(s): {'all match' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

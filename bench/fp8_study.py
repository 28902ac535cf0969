#!/usr/bin/env python3
"""GPT-mini trained with its Linear layers in FP8 (emulated) next to bf16 and fp32: loss curves.

Trains the same GPT-mini (same seed, data order and schedule) in each precision and reports final
training loss, validation loss and median step time, plus the loss curves as a PNG (gnuplot):

  fp32          fp32 training, no autocast
  bf16          bf16 autocast (PyTorch's AMP)
  fp8           bf16 autocast + FP8 Linear layers, Transformer Engine's defaults: E4M3 forward, E5M2
                gradients, amax history 1024, max, margin 0 (--precision fp8)
  fp8-h16       the same with an amax history of 16 steps (scales follow the tensors faster)
  fp8-e4m3      E4M3 for the gradients too (--fp8-format e4m3)

  python3 bench/fp8_study.py --threads 2 --out docs/results/fp8-gpt.json --plot docs/img/fp8-loss.png

GPT-mini trains on a text corpus (--corpus; by default the Debian license texts of
/usr/share/common-licenses concatenated) for --steps steps. FP8 is emulated on the CPU (quantise,
then fp32 GEMMs of the exact FP8 values), so its step time says what the emulation costs, not what
FP8 hardware gains.
"""
import argparse
import json
import os
import subprocess
import tempfile

import weight_update_study
from weight_update_study import build_corpus, smooth

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODES = [
    ("fp32", ["--precision", "fp32"]),
    ("bf16", ["--precision", "bf16"]),
    ("fp8", ["--precision", "fp8"]),
    ("fp8-h16", ["--precision", "fp8", "--fp8-history", "16"]),
    ("fp8-e4m3", ["--precision", "fp8", "--fp8-format", "e4m3"]),
]
COLORS = {"fp32": "black", "bf16": "gray", "fp8": "red", "fp8-h16": "orange", "fp8-e4m3": "blue"}


def plot(results, png, work, window=20):
    ref = next((r for r in results if r["mode"] == "bf16"), None)
    curves, deltas = [], []
    for r in results:
        color = COLORS.get(r["mode"], "black")
        path = os.path.join(work, f"curve-{r['mode']}.dat")
        with open(path, "w") as f:
            for i, v in enumerate(smooth(r["losses"], window)):
                f.write(f"{i + 1} {v}\n")
        curves.append(f"'{path}' using 1:2 with lines lw 1.5 lc rgb '{color}' title '{r['mode']}'")
        if ref is not None and r is not ref:
            path = os.path.join(work, f"delta-{r['mode']}.dat")
            diff = [a - b for a, b in zip(r["losses"], ref["losses"])]
            with open(path, "w") as f:
                for i, v in enumerate(smooth(diff, window)):
                    f.write(f"{i + 1} {v}\n")
            deltas.append(f"'{path}' using 1:2 with lines lw 1.5 lc rgb '{color}' title '{r['mode']}'")
    script = ("set terminal pngcairo size 1200,480 noenhanced font ',10'\n"
              f"set output '{png}'\nset multiplot layout 1,{2 if deltas else 1}\nset grid\nset xlabel 'step'\n"
              f"set title 'GPT-mini on text: training loss (mean of the last {window} steps)'\n"
              "set ylabel 'loss'\nset logscale y\nset yrange [2:6]\nset ytics (2, 2.5, 3, 4, 5, 6)\n"
              f"plot {', '.join(curves)}\n")
    if deltas:
        script += ("unset logscale y\nset yrange [*:*]\nset ytics auto\nset ylabel 'loss minus the bf16 run'\n"
                   f"set title 'difference from bf16, same batches (mean of the last {window} steps)'\n"
                   f"plot 0 notitle lc rgb 'gray', {', '.join(deltas)}\n")
    script += "unset multiplot\n"
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def table(results):
    ref = next((r for r in results if r["mode"] == "bf16"), None)
    lines = ["| precision | final train loss | validation loss | vs bf16 | step (median) |", "|---|---:|---:|---:|---:|"]
    for r in results:
        s = r["summary"]
        delta = f"{s['test_loss'] - ref['summary']['test_loss']:+.4f}" if ref else "-"
        lines.append(f"| {r['mode']} | {s['final_loss']:.4f} | {s['test_loss']:.4f} | {delta} | "
                     f"{s['step_ms_median']:.1f} ms |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--mixtrain", default=os.path.join(ROOT, "build", "tools", "mixtrain", "mixtrain"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--corpus", help="text file (default: the Debian license texts)")
    p.add_argument("--modes", default=",".join(m for m, _ in MODES))
    p.add_argument("--out", help="JSON results")
    p.add_argument("--plot", help="PNG of the loss curves")
    p.add_argument("--from-json", help="redraw the table and plot from an earlier --out file instead of training")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="mixtrain-fp8-")
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)["results"]
        print(table(results))
        if args.plot:
            plot(results, args.plot, work)
        return
    if args.corpus is None:
        args.corpus = build_corpus(os.path.join(work, "corpus.txt"))
    wanted = set(args.modes.split(","))
    args.gpt_steps = args.steps  # the GPT-mini run of the weight-update study, with these flags
    results = [weight_update_study.run(args.mixtrain, "gpt", mode, extra, args, work)
               for mode, extra in MODES if mode in wanted]
    print(table(results))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"threads": args.threads, "seed": args.seed, "steps": args.steps,
                       "corpus_bytes": os.path.getsize(args.corpus), "results": results}, f, indent=1)
    if args.plot:
        plot(results, args.plot, work)


if __name__ == "__main__":
    main()

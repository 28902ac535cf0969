#!/usr/bin/env python3
"""How bf16 weights receive their updates: fp32 masters vs packed masters vs Kahan vs stochastic rounding.

Trains the same model with each way of keeping the weights (same seed, data order and schedule) and
reports final training loss, test accuracy / validation loss, model-state bytes per parameter and the
median step time, plus the loss curves as a PNG (gnuplot):

  fp32         fp32 training, no autocast                                   16 bytes/param
  amp-bf16     fp32 weights through bf16 autocast (PyTorch's AMP)           16
  master       bf16 weights + fp32 masters (--master-weights bf16)          16
  compact      bf16 weights + packed masters + bf16 m (--compact-state)     12
  kahan        bf16 weights + bf16 Kahan compensation, bf16 m and v         10
  stochastic   bf16 weights with stochastic rounding, bf16 m and v           8
  nearest      bf16 weights rounded to nearest, bf16 m and v                 8  (the failure mode)

  python3 bench/weight_update_study.py --threads 2 \\
      --out docs/results/weight-update-study.json --plot docs/img/weight-update-loss.png

The CNN trains on Fashion-MNIST (--cnn-epochs), GPT-mini on a text corpus (--corpus; by default the
Debian license texts of /usr/share/common-licenses concatenated) for --gpt-steps steps. Runs go one
at a time; step times are comparable only within one invocation on an otherwise idle machine.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODES = [
    ("fp32", ["--precision", "fp32"]),
    ("amp-bf16", ["--precision", "bf16"]),
    ("master", ["--precision", "bf16", "--master-weights", "bf16"]),
    ("compact", ["--precision", "bf16", "--master-weights", "bf16", "--compact-state"]),
    ("kahan", ["--precision", "bf16", "--master-weights", "bf16", "--weight-update", "kahan"]),
    ("stochastic", ["--precision", "bf16", "--master-weights", "bf16", "--weight-update", "stochastic"]),
    ("nearest", ["--precision", "bf16", "--master-weights", "bf16", "--weight-update", "nearest"]),
]


# One color per mode in both panels; nearest (the failure mode) in red.
COLORS = {"fp32": "black", "amp-bf16": "gray", "master": "dark-green", "compact": "orange", "kahan": "blue",
          "stochastic": "dark-violet", "nearest": "red"}


def build_corpus(path):
    texts = sorted(glob.glob("/usr/share/common-licenses/*"))
    with open(path, "wb") as out:
        for t in texts:
            if os.path.isfile(t):
                with open(t, "rb") as f:
                    out.write(f.read())
    return path


def run(mixtrain, workload, mode, extra, args, work):
    out = os.path.join(work, f"{workload}-{mode}")
    if workload == "cnn":
        cmd = [mixtrain, "train", "--model", "cnn", "--data", "fashion-mnist", "--epochs", str(args.cnn_epochs),
               "--batch-size", "128"]
    else:
        cmd = [mixtrain, "train", "--model", "gpt", "--data", f"text:{args.corpus}", "--steps", str(args.gpt_steps),
               "--batch-size", "16"]
    cmd += extra + ["--seed", str(args.seed), "--threads", str(args.threads), "--out", out, "--overwrite"]
    print("$", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    losses = []
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec and "step" in rec:
                losses.append(rec["loss"])
    return {"workload": workload, "mode": mode, "command": " ".join(cmd[1:]), "summary": summary, "losses": losses}


def smooth(values, window):
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > window:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def plot(results, png, work):
    panels = []
    for workload, title, window in (("cnn", "CNN, Fashion-MNIST", 50), ("gpt", "GPT-mini, text", 20)):
        series = []
        for r in results:
            if r["workload"] != workload:
                continue
            path = os.path.join(work, f"curve-{workload}-{r['mode']}.dat")
            with open(path, "w") as f:
                for i, v in enumerate(smooth(r["losses"], window)):
                    f.write(f"{i + 1} {v}\n")
            color = COLORS.get(r["mode"], "black")
            series.append(f"'{path}' using 1:2 with lines lw 1.5 lc rgb '{color}' title '{r['mode']}'")
        if series:
            panels.append((f"{title}: training loss (mean of the last {window} steps)", ", ".join(series)))
    script = "set terminal pngcairo size 1200,480 noenhanced font ',10'\n"
    script += f"set output '{png}'\nset multiplot layout 1,{len(panels)}\nset grid\nset xlabel 'step'\n"
    script += "set ylabel 'loss'\nset logscale y\n"
    for title, series in panels:
        script += f"set title '{title}'\nplot {series}\n"
    script += "unset multiplot\n"
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def table(results):
    lines = ["| workload | weights | bytes/param | final train loss | test accuracy | validation loss | step (median) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        s = r["summary"]
        acc = s.get("test_accuracy")
        acc_text = f"{100 * acc:.2f}%" if acc is not None and r["workload"] == "cnn" else "-"
        lines.append(f"| {r['workload']} | {r['mode']} | {s['model_state_bytes_per_param']:.0f} | {s['final_loss']:.4f} | "
                     f"{acc_text} | {s['test_loss']:.4f} | {s['step_ms_median']:.1f} ms |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--mixtrain", default=os.path.join(ROOT, "build", "tools", "mixtrain", "mixtrain"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cnn-epochs", type=int, default=5)
    p.add_argument("--gpt-steps", type=int, default=300)
    p.add_argument("--corpus", help="text file for GPT-mini (default: the Debian license texts)")
    p.add_argument("--workloads", default="cnn,gpt")
    p.add_argument("--modes", default=",".join(m for m, _ in MODES))
    p.add_argument("--out", help="JSON results")
    p.add_argument("--plot", help="PNG of the loss curves")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="mixtrain-weight-update-")
    if args.corpus is None:
        args.corpus = build_corpus(os.path.join(work, "corpus.txt"))
    wanted = set(args.modes.split(","))
    results = []
    for workload in args.workloads.split(","):
        for mode, extra in MODES:
            if mode in wanted:
                results.append(run(args.mixtrain, workload, mode, extra, args, work))
    print(table(results))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"threads": args.threads, "seed": args.seed, "cnn_epochs": args.cnn_epochs,
                       "gpt_steps": args.gpt_steps, "corpus_bytes": os.path.getsize(args.corpus),
                       "results": results}, f, indent=1)
    if args.plot:
        plot(results, args.plot, work)


if __name__ == "__main__":
    main()

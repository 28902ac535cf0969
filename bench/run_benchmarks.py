#!/usr/bin/env python3
"""mixtrain vs PyTorch on this machine: training-step time, GFLOP/s, share of the GEMM peak and
memory for every benchmark workload, and (with --scaling) how GPT-mini's cost grows with width and
batch. Prints markdown tables; --out DIR also writes results.json, tables.md and, with --scaling,
gpt-scaling.png (gnuplot).

  python3 bench/run_benchmarks.py                       # all workloads, 3 alternating repetitions
  python3 bench/run_benchmarks.py --models cnn,gpt --reps 5 --out runs/bench
  python3 bench/run_benchmarks.py --scaling --skip-workloads --out runs/scaling

Method (the machine is shared and noisy, so only medians and same-run ratios are reported):
- The GEMM peak is mixtrain_bench_gemm's median GFLOP/s at n = 1024 for fp32, bf16 (default path)
  and fp16, measured in this run.
- Workloads (the performance issue's): mlp, mlp-wide, cnn at batch 256, gpt at batch 16; AdamW;
  fp32, bf16 autocast, fp16 autocast with GradScaler (in PyTorch from 2.4 on: torch.amp.GradScaler
  ("cpu")), and fp16-params: fp16 autocast with fp16 parameters and fp32 masters in the optimizer
  (`--master-weights fp16`, mixtrain only). Each repetition runs every workload once in mixtrain
  and once in PyTorch (and with --pytorch-compile once more through torch.compile), alternating,
  so a burst of load from elsewhere hits both. A cell's step time is the median over repetitions
  of each run's median step. Both sides stream a new batch every step from a synthetic dataset.
- --isa avx2 caps both sides to AVX2: MIXTRAIN_MAX_ISA=avx2 for mixtrain, ATEN_CPU_CAPABILITY=avx2,
  ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA=AVX2 and MKL_ENABLE_INSTRUCTIONS=AVX2 (its fp32 GEMMs) for
  PyTorch. --isa native caps neither.
- Timed steps per run depend on the workload (mlp 300, mlp-wide 100, cnn and gpt 20) so that every
  run times about a second or more of mixtrain steps; a median over 20 steps of a 3 ms step moves
  by 10-40% with the load of the moment. --steps N times N steps everywhere.
- PyTorch gets its best thread count: a probe runs each PyTorch workload with 1 and with all cores
  and keeps the faster. Current PyTorch (pip wheels) brings its own GEMMs (oneDNN, MKL); install it
  in a virtual environment outside the repository and pass its interpreter with --python. Debian's
  PyTorch 1.13 uses whatever libblas.so.3 points at; with Debian's reference BLAS its fp32 is 5-10x
  slower than with OpenBLAS, so for PyTorch 1.x this script refuses to run without OpenBLAS
  (`apt-get install libopenblas0-openmp`) unless --allow-reference-blas.
- GFLOP/s of both sides count the same model FLOPs (mixtrain's ModelInfo, causal attention as
  computed); "% of GEMM peak" divides them by the GEMM peak of this run.
- Memory: mixtrain's peak tracked tensor bytes (`peak_bytes`: weights, gradients, optimizer state,
  activations, temporaries) and, for both frameworks, the process's maximum resident set size
  (from wait4), which also counts code, allocator caches and the interpreter.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = [("mlp", 256), ("mlp-wide", 256), ("cnn", 256), ("gpt", 16)]
PRECISIONS = ("fp32", "bf16", "fp16", "fp16-params")
# What each precision label passes to `mixtrain bench`.
PRECISION_FLAGS = {"fp32": ("--precision", "fp32"), "bf16": ("--precision", "bf16"),
                   "fp16": ("--precision", "fp16"),
                   "fp16-params": ("--precision", "fp16", "--master-weights", "fp16")}
# Timed steps per run when --steps is not given: about a second or more of mixtrain steps each.
WORKLOAD_STEPS = {"mlp": 300, "mlp-wide": 100, "cnn": 20, "gpt": 20}
PYTORCH_PRECISIONS = ("fp32", "bf16", "fp16")
# Environment that caps each side to an ISA class (--isa).
ISA_ENV = {"native": ({}, {}),
           "avx2": ({"MIXTRAIN_MAX_ISA": "avx2"},
                    {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2",
                     # current PyTorch's fp32 matrix products go through MKL, which has a cap of its own
                     "MKL_ENABLE_INSTRUCTIONS": "AVX2"})}


def run(cmd, env=None):
    """Runs cmd and returns its stdout; raises with the end of its stderr on failure."""
    proc = subprocess.run(cmd, capture_output=True, env=env, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc.stdout


def run_measured(cmd, env=None):
    """Runs cmd and returns (stdout, max resident set size of that child in bytes)."""
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        pid = os.posix_spawn(cmd[0], cmd, env if env is not None else os.environ,
                             file_actions=[(os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                                           (os.POSIX_SPAWN_DUP2, err.fileno(), 2)])
        _, status, usage = os.wait4(pid, 0)
        out.seek(0)
        err.seek(0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({code}):\n{err.read()[-2000:]}")
        return out.read(), usage.ru_maxrss * 1024


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON object in output:\n{text[-2000:]}")


def cpu_model():
    with open("/proc/cpuinfo") as f:
        info = f.read()
    name = re.search(r"model name\s*:\s*(.*)", info)
    flags = set(re.search(r"flags\s*:\s*(.*)", info).group(1).split())
    wanted = ["avx2", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"]
    return {"model": name.group(1).strip() if name else "unknown", "cores": os.cpu_count(),
            "flags": {w: (w in flags) for w in wanted}}


def blas_target():
    try:
        return os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    except OSError:
        return "unknown"


def gemm_peak(bench_gemm, threads, reps, base_env):
    """Median GFLOP/s of mixtrain_bench_gemm at n = 1024 per dtype (default paths)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        env = dict(base_env, OMP_NUM_THREADS=str(threads))
        run([bench_gemm, "--benchmark_filter=BM_Gemm/(fp32|bf16|fp16)/1024/", f"--benchmark_repetitions={reps}",
             "--benchmark_report_aggregates_only=true", "--benchmark_enable_random_interleaving=true",
             f"--benchmark_out={tmp.name}", "--benchmark_out_format=json"], env=env)
        data = json.load(open(tmp.name))
    peak = {}
    for r in data["benchmarks"]:
        # With one repetition Google Benchmark reports the run itself, with more only aggregates.
        if r.get("aggregate_name") == "median" or (reps == 1 and r.get("run_type") == "iteration"):
            peak[r["run_name"].split("/")[1]] = r["GFLOP/s"]
    return peak


TORCH_GEMM = """
import statistics, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
for _ in range(3): a @ b
t = []
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter(); a @ b; t.append(time.perf_counter() - t0)
print(2 * 1024**3 / statistics.median(t) / 1e9)
"""


def torch_gemm_peak(args):
    """PyTorch's fp32 torch.mm GFLOP/s at n = 1024 (median of 20), under the same ISA cap."""
    out = run([args.python, "-c", TORCH_GEMM, str(args.threads), "20"], env=pytorch_env(args, args.threads))
    return float(out.strip().splitlines()[-1])


def mixtrain_cmd(args, model, batch, precision, steps, extra=()):
    return [args.mixtrain, "bench", "--model", model, "--batch-size", str(batch), *PRECISION_FLAGS[precision],
            "--threads", str(args.threads), "--steps", str(steps), "--warmup", str(args.warmup), "--json", *extra]


def steps_for(args, model):
    return args.steps if args.steps is not None else WORKLOAD_STEPS[model]


def pytorch_steps_for(args, model, precision):
    n = steps_for(args, model)
    return min(n, args.pytorch_16bit_steps) if precision != "fp32" and args.pytorch_16bit_steps else n


def pytorch_cmd(args, model, batch, precision, threads, steps, compiled=False):
    return [args.python, os.path.join(HERE, "pytorch_bench.py"), "--model", model, "--batch-size", str(batch),
            "--precision", precision, "--threads", str(threads), "--steps", str(steps), "--warmup",
            str(args.warmup + (5 if compiled else 0))] + (["--compile"] if compiled else [])


def mixtrain_env(args):
    return dict(os.environ, **ISA_ENV[args.isa][0])


def pytorch_env(args, threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), **ISA_ENV[args.isa][1])


def run_workloads(args, peak):
    models = args.models.split(",")
    cells = [(m, b, p) for (m, b) in WORKLOADS if m in models for p in args.precisions.split(",")]
    results = {c: {"mixtrain": [], "pytorch": [], "mixtrain_rss": [], "pytorch_rss": [], "compiled": []}
               for c in cells}
    best_threads = {}
    if args.pytorch:
        for (m, b, p) in cells:
            if p not in PYTORCH_PRECISIONS:
                continue
            probe = {}
            for t in sorted({1, args.threads}):
                out, _ = run_measured(pytorch_cmd(args, m, b, p, t, max(2, pytorch_steps_for(args, m, p) // 2)),
                                      pytorch_env(args, t))
                probe[t] = last_json(out)["step_ms_median"]
            best_threads[(m, b, p)] = min(probe, key=probe.get)
            print(f"# PyTorch thread probe {m} {p}: " + ", ".join(f"{t} threads {ms:.1f} ms" for t, ms in probe.items()),
                  file=sys.stderr)
    for rep in range(args.reps):
        for c in cells:
            m, b, p = c
            out, rss = run_measured(mixtrain_cmd(args, m, b, p, steps_for(args, m)), mixtrain_env(args))
            j = last_json(out)
            results[c]["mixtrain"].append(j)
            results[c]["mixtrain_rss"].append(rss)
            if args.pytorch and p in PYTORCH_PRECISIONS:
                t = best_threads[c]
                out, rss = run_measured(pytorch_cmd(args, m, b, p, t, pytorch_steps_for(args, m, p)),
                                        pytorch_env(args, t))
                results[c]["pytorch"].append(last_json(out))
                results[c]["pytorch_rss"].append(rss)
                if args.pytorch_compile:
                    try:
                        out, _ = run_measured(pytorch_cmd(args, m, b, p, t, pytorch_steps_for(args, m, p),
                                                          compiled=True),
                                              pytorch_env(args, t))
                        results[c]["compiled"].append(last_json(out))
                    except RuntimeError as e:  # a model inductor cannot compile: say so, keep going
                        print(f"# torch.compile failed for {m} {p}: {str(e)[-300:]}", file=sys.stderr)
            print(f"# rep {rep + 1}/{args.reps} {m} {p}: mixtrain {j['step_ms_median']:.2f} ms"
                  + (f", PyTorch {results[c]['pytorch'][-1]['step_ms_median']:.2f} ms"
                     if results[c]["pytorch"] else ""), file=sys.stderr)

    rows = []
    for c in cells:
        m, b, p = c
        r = results[c]
        mt_ms = statistics.median(x["step_ms_median"] for x in r["mixtrain"])
        row = {"model": m, "batch": b, "precision": p, "mixtrain_ms": mt_ms,
               "gflops": statistics.median(x["gflops"] for x in r["mixtrain"]),
               "peak_bytes": statistics.median(x["peak_bytes"] for x in r["mixtrain"]),
               "mixtrain_rss": statistics.median(r["mixtrain_rss"]),
               "mixtrain_runs_ms": [x["step_ms_median"] for x in r["mixtrain"]]}
        for key in ("allocations_per_step", "system_allocations_per_step", "state_bytes_per_param"):
            if key in r["mixtrain"][0]:
                row[key] = statistics.median(x[key] for x in r["mixtrain"])
        gemm = peak.get(PRECISION_FLAGS[p][1])  # the GEMM dtype of the label
        row["gemm_peak_gflops"] = gemm
        row["pct_gemm_peak"] = 100.0 * row["gflops"] / gemm if gemm else None
        if r["pytorch"]:
            row["pytorch_ms"] = statistics.median(x["step_ms_median"] for x in r["pytorch"])
            row["pytorch_threads"] = best_threads[c]
            row["pytorch_rss"] = statistics.median(r["pytorch_rss"])
            row["pytorch_runs_ms"] = [x["step_ms_median"] for x in r["pytorch"]]
            row["speedup_vs_pytorch"] = row["pytorch_ms"] / mt_ms
            # Each repetition runs mixtrain and PyTorch back to back, so their ratio shares the
            # machine's speed of that moment; on a VM whose speed moves between runs the spread of
            # these ratios says more than the ratio of the two medians alone.
            row["speedup_vs_pytorch_reps"] = [pt["step_ms_median"] / mt["step_ms_median"]
                                              for mt, pt in zip(r["mixtrain"], r["pytorch"])]
            flops = r["mixtrain"][0]["gflops"] * r["mixtrain"][0]["step_ms_median"]  # GFLOP per step x 1e3
            row["pytorch_gflops"] = flops / row["pytorch_ms"]
            row["pytorch_pct_gemm_peak"] = 100.0 * row["pytorch_gflops"] / gemm if gemm else None
        if r["compiled"]:
            row["compiled_ms"] = statistics.median(x["step_ms_median"] for x in r["compiled"])
            row["compiled_runs_ms"] = [x["step_ms_median"] for x in r["compiled"]]
            row["speedup_vs_compiled"] = row["compiled_ms"] / mt_ms
        rows.append(row)
    # Ratios to mixtrain's own fp32 of the same workload.
    fp32 = {(r["model"], r["batch"]): r for r in rows if r["precision"] == "fp32"}
    for r in rows:
        ref = fp32.get((r["model"], r["batch"]))
        if ref:
            r["speed_vs_fp32"] = ref["mixtrain_ms"] / r["mixtrain_ms"]
            r["step_vs_fp32_reps"] = [mine / ours for mine, ours in zip(r["mixtrain_runs_ms"], ref["mixtrain_runs_ms"])]
            r["memory_vs_fp32"] = r["peak_bytes"] / ref["peak_bytes"]
    return rows


def mib(x):
    return f"{x / 2**20:.1f}"


def spread(ratios):
    """' (lo-hi)': the range of the per-repetition ratios, when there are several."""
    if not ratios or len(ratios) < 2:
        return ""
    return f" ({min(ratios):.2f}-{max(ratios):.2f})"


def workload_table(rows):
    head = ("| model | batch | precision | mixtrain step | step vs fp32 | PyTorch eager (threads) | mixtrain speedup "
            "vs eager | torch.compile | speedup vs compile | GFLOP/s mixtrain / eager | % of GEMM peak mixtrain / "
            "eager | peak tracked MiB | memory vs fp32 | max RSS MiB mixtrain / PyTorch |")
    lines = [head, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def pct(x):
        return f"{x:.0f}%" if x else "n/a"

    for r in rows:
        pt = f"{r['pytorch_ms']:.1f} ms ({r['pytorch_threads']})" if "pytorch_ms" in r else "n/a"
        sp = (f"{r['speedup_vs_pytorch']:.2f}x{spread(r.get('speedup_vs_pytorch_reps'))}"
              if "speedup_vs_pytorch" in r else "n/a")
        cm = f"{r['compiled_ms']:.1f} ms" if "compiled_ms" in r else "n/a"
        sc = f"{r['speedup_vs_compiled']:.2f}x" if "speedup_vs_compiled" in r else "n/a"
        gf = f"{r['gflops']:.0f}" + (f" / {r['pytorch_gflops']:.0f}" if "pytorch_gflops" in r else "")
        pc = pct(r.get("pct_gemm_peak")) + (f" / {pct(r.get('pytorch_pct_gemm_peak'))}" if "pytorch_gflops" in r else "")
        rss = mib(r["mixtrain_rss"]) + (" / " + mib(r["pytorch_rss"]) if "pytorch_rss" in r else "")
        step_ratio = 1.0 / r.get("speed_vs_fp32", 1.0)
        vs32 = spread(r.get("step_vs_fp32_reps")) if r["precision"] != "fp32" else ""
        lines.append(f"| {r['model']} | {r['batch']} | {r['precision']} | {r['mixtrain_ms']:.2f} ms | "
                     f"{step_ratio:.2f}x{vs32} | {pt} | {sp} | {cm} | {sc} | {gf} | {pc} | "
                     f"{mib(r['peak_bytes'])} | {r.get('memory_vs_fp32', 1.0):.2f}x | {rss} |")
    return "\n".join(lines)


def run_scaling(args):
    rows = []
    for embed in (128, 256, 512):
        for batch in (8, 16, 32):
            for p in ("fp32", "bf16"):
                runs = []
                for _ in range(args.scaling_reps):
                    out, _ = run_measured(mixtrain_cmd(args, "gpt", batch, p, args.scaling_steps,
                                                       ("--embed", str(embed))))
                    runs.append(last_json(out))
                row = {"embed": embed, "batch": batch, "precision": p,
                       "step_ms": statistics.median(x["step_ms_median"] for x in runs),
                       "gflops": statistics.median(x["gflops"] for x in runs),
                       "peak_bytes": statistics.median(x["peak_bytes"] for x in runs),
                       "parameters": runs[0]["parameters"],
                       "gflop_per_step": runs[0]["gflops"] * runs[0]["step_ms_median"] / 1e3}
                rows.append(row)
                print(f"# scaling C={embed} B={batch} {p}: {row['step_ms']:.1f} ms, {mib(row['peak_bytes'])} MiB",
                      file=sys.stderr)
    return rows


def scaling_table(rows):
    lines = ["| C | parameters | batch | GFLOP per step | fp32 step | bf16 step | bf16 speed vs fp32 | fp32 GFLOP/s | "
             "bf16 GFLOP/s | fp32 peak MiB | bf16 peak MiB | bf16 memory vs fp32 |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by = {(r["embed"], r["batch"], r["precision"]): r for r in rows}
    for (embed, batch, p), r in sorted(by.items()):
        if p != "fp32":
            continue
        b = by[(embed, batch, "bf16")]
        lines.append(f"| {embed} | {r['parameters']:,} | {batch} | {r['gflop_per_step']:.1f} | {r['step_ms']:.1f} ms | "
                     f"{b['step_ms']:.1f} ms | {r['step_ms'] / b['step_ms']:.2f}x | {r['gflops']:.0f} | "
                     f"{b['gflops']:.0f} | {mib(r['peak_bytes'])} | {mib(b['peak_bytes'])} | "
                     f"{b['peak_bytes'] / r['peak_bytes']:.2f}x |")
    return "\n".join(lines)


def scaling_plot(rows, png):
    """Two panels: step time and peak memory against GFLOP per step, one line per (C, precision)."""
    with tempfile.TemporaryDirectory() as d:
        series = []
        for embed in (128, 256, 512):
            for p in ("fp32", "bf16"):
                path = os.path.join(d, f"{embed}-{p}.dat")
                with open(path, "w") as f:
                    for r in sorted((r for r in rows if r["embed"] == embed and r["precision"] == p),
                                    key=lambda r: r["batch"]):
                        f.write(f"{r['gflop_per_step']} {r['step_ms']} {r['peak_bytes'] / 2**20} {r['batch']}\n")
                series.append((path, f"C={embed} {p}", "1" if p == "fp32" else "2"))

        def plot(col):
            return ", ".join(f"'{path}' using 1:{col} with linespoints dashtype {dt} title '{title}'"
                             for path, title, dt in series)

        script = f"""
set terminal pngcairo size 1200,480 noenhanced font ',10'
set output '{png}'
set multiplot layout 1,2 title 'GPT-mini (4 layers, 4 heads, T=128) scaling: batch 8, 16, 32 along each line'
set logscale xy
set grid
set key top left
set xlabel 'model GFLOP per training step'
set ylabel 'step time (ms, median)'
plot {plot(2)}
set ylabel 'peak tracked memory (MiB)'
plot {plot(3)}
unset multiplot
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--mixtrain", default=os.path.join(ROOT, "build", "tools", "mixtrain", "mixtrain"))
    p.add_argument("--bench-gemm", default=os.path.join(ROOT, "build", "bench", "mixtrain_bench_gemm"))
    p.add_argument("--python", default="/usr/bin/python3", help="the interpreter with Debian's python3-torch")
    p.add_argument("--models", default=",".join(m for m, _ in WORKLOADS))
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--reps", type=int, default=3, help="alternating repetitions of every workload")
    p.add_argument("--steps", type=int, default=None,
                   help="timed steps per run (default: " + ", ".join(f"{m} {n}" for m, n in WORKLOAD_STEPS.items()) + ")")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--gemm-reps", type=int, default=5)
    p.add_argument("--no-pytorch", dest="pytorch", action="store_false")
    p.add_argument("--pytorch-16bit-steps", type=int, default=None,
                   help="at most this many timed PyTorch steps in bf16/fp16 (on CPUs without 16-bit units they "
                        "take seconds each)")
    p.add_argument("--pytorch-compile", action="store_true", help="also time PyTorch with torch.compile (inductor)")
    p.add_argument("--isa", choices=sorted(ISA_ENV), default="native",
                   help="cap both sides to an ISA class (avx2: MIXTRAIN_MAX_ISA and PyTorch's ATen/oneDNN caps)")
    p.add_argument("--allow-reference-blas", action="store_true")
    p.add_argument("--skip-workloads", action="store_true")
    p.add_argument("--scaling", action="store_true", help="also run the GPT-mini width x batch sweep")
    p.add_argument("--scaling-steps", type=int, default=8)
    p.add_argument("--scaling-reps", type=int, default=2)
    p.add_argument("--out", help="directory for results.json, tables.md and gpt-scaling.png")
    args = p.parse_args()

    for path in (args.mixtrain, args.bench_gemm):
        if not os.access(path, os.X_OK):
            sys.exit(f"run_benchmarks: no executable at {path} (build with scripts/test.sh or cmake first)")
    blas = blas_target()
    if args.pytorch and not args.skip_workloads:
        if subprocess.run([args.python, "-c", "import torch"], capture_output=True).returncode != 0:
            sys.exit(f"run_benchmarks: {args.python} cannot import torch (apt-get install python3-torch), "
                     "or pass --no-pytorch")
        major = subprocess.run([args.python, "-c", "import torch; print(torch.__version__.split('.')[0])"],
                               capture_output=True, text=True).stdout.strip()
        if major == "1" and "openblas" not in blas and not args.allow_reference_blas:
            sys.exit(f"run_benchmarks: libblas.so.3 is {blas}, not OpenBLAS; PyTorch's fp32 would be 5-10x "
                     "slower than it can be. apt-get install libopenblas0-openmp, or pass --allow-reference-blas")

    # mixtrain's instruction-set cap (mixtrain/cpu.h) is inherited by every run; PyTorch's is its own.
    env = {"cpu": cpu_model(), "threads": args.threads, "blas": blas, "isa_cap": args.isa,
           "mixtrain_max_isa": ISA_ENV[args.isa][0].get("MIXTRAIN_MAX_ISA", os.environ.get("MIXTRAIN_MAX_ISA", "native"))}
    if args.pytorch and not args.skip_workloads:
        env["torch"] = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                                      capture_output=True, text=True).stdout.strip()
    print(f"# CPU: {env['cpu']['model']}, {env['cpu']['cores']} cores, flags {env['cpu']['flags']}", file=sys.stderr)
    report = {"environment": env}
    md = [f"CPU: {env['cpu']['model']} ({env['cpu']['cores']} cores; "
          + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in env["cpu"]["flags"].items())
          + f"). MIXTRAIN_MAX_ISA: {env['mixtrain_max_isa']}. Threads: {args.threads}. "
          + f"BLAS behind PyTorch: {blas}. PyTorch {env.get('torch', 'n/a')}."]

    if not args.skip_workloads:
        peak = gemm_peak(args.bench_gemm, args.threads, args.gemm_reps, mixtrain_env(args))
        report["gemm_peak_gflops_n1024"] = peak
        md.append("GEMM peak (mixtrain_bench_gemm, n = 1024, median GFLOP/s): "
                  + ", ".join(f"{k} {v:.0f}" for k, v in sorted(peak.items())))
        if args.pytorch:
            report["torch_gemm_fp32_gflops_n1024"] = torch_gemm_peak(args)
            md.append(f"PyTorch fp32 torch.mm at n = 1024: {report['torch_gemm_fp32_gflops_n1024']:.0f} GFLOP/s")
        rows = run_workloads(args, peak)
        report["workloads"] = rows
        steps = (str(args.steps) if args.steps is not None
                 else ", ".join(f"{n} ({m})" for m, n in WORKLOAD_STEPS.items()))
        md.append(f"Workloads ({args.reps} alternating repetitions, {steps} timed steps after {args.warmup} "
                  "warm-up each; medians; in parentheses the range of the ratios of runs made in the same "
                  "repetition, a few seconds apart):\n\n" + workload_table(rows))
        extra = [r for r in rows if "allocations_per_step" in r or "state_bytes_per_param" in r]
        if extra:
            lines = ["| model | precision | allocator calls per step | system allocations per step |",
                     "|---|---|---:|---:|"]
            for r in extra:
                calls, system = r.get("allocations_per_step"), r.get("system_allocations_per_step")
                lines.append(f"| {r['model']} | {r['precision']} | {'n/a' if calls is None else f'{calls:.1f}'} | "
                             f"{'n/a' if system is None else f'{system:.1f}'} |")
            md.append("Allocations in steady state (timed steps):\n\n" + "\n".join(lines))
    if args.scaling:
        srows = run_scaling(args)
        report["scaling"] = srows
        md.append("GPT-mini scaling (mixtrain; medians of " f"{args.scaling_reps} runs of {args.scaling_steps} "
                  "steps):\n\n" + scaling_table(srows))
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            scaling_plot(srows, os.path.join(args.out, "gpt-scaling.png"))
    text = "\n\n".join(md)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(report, f, indent=1)
        with open(os.path.join(args.out, "tables.md"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Runs mixtrain_bench_gemm with repetitions and prints a markdown table of the median GFLOP/s per
# dtype and size, with the bf16/fp32 and fp16/fp32 ratios (medians, because a shared machine is noisy).
#
#   bench/gemm_table.sh [path/to/mixtrain_bench_gemm] [extra benchmark flags...]
#   REPS=7 OMP_NUM_THREADS=2 bench/gemm_table.sh build/bench/mixtrain_bench_gemm
set -euo pipefail

bin=${1:-build/bench/mixtrain_bench_gemm}
shift || true
reps=${REPS:-5}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
[[ -x "$bin" ]] || { echo "gemm_table.sh: no benchmark binary at '$bin' (build with -DMIXTRAIN_BUILD_BENCH=ON)" >&2; exit 1; }

out=$(mktemp)
log=$(mktemp)
trap 'rm -f "$out" "$log"' EXIT
# Random interleaving spreads the repetitions of every variant over the whole run, so a burst of
# load from another process does not land on one column only.
if ! "$bin" --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
    --benchmark_enable_random_interleaving=true \
    --benchmark_out="$out" --benchmark_out_format=json "$@" > "$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi

# Variants the CPU cannot run (the benchmark says so instead of running them).
grep 'skipped:' "$log" || true
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
python3 - "$out" "$cpu" "$OMP_NUM_THREADS" "$reps" <<'PY'
import json, sys

path, cpu, threads, reps = sys.argv[1:5]
runs = json.load(open(path))["benchmarks"]
median, label = {}, {}
for r in runs:
    if r.get("aggregate_name") != "median":
        continue
    # run_name: BM_Gemm/<variant>/<n>/real_time
    _, variant, n = r["run_name"].split("/")[:3]
    median[(variant, int(n))] = r["GFLOP/s"]
    if r.get("label"):
        label[variant] = r["label"]

variants = ["fp32", "bf16", "bf16_native", "bf16_via_fp32", "fp16"]
sizes = sorted({n for (_, n) in median})
print(f"CPU: {cpu}; OMP_NUM_THREADS={threads}; median of {reps} repetitions; GFLOP/s of C = A @ B (n x n)")
print()
print("| n | " + " | ".join(variants) + " | bf16/fp32 | fp16/fp32 |")
print("|---:|" + "---:|" * (len(variants) + 2))
for n in sizes:
    g = {v: median.get((v, n)) for v in variants}
    cells = [f"{g[v]:.1f}" if g[v] else "-" for v in variants]
    ratio = lambda v: f"{g[v] / g['fp32']:.2f}x" if g[v] and g["fp32"] else "-"
    print(f"| {n} | " + " | ".join(cells) + f" | {ratio('bf16')} | {ratio('fp16')} |")
print()
print("oneDNN implementations: " + ", ".join(f"{v}: {label.get(v, '?')}" for v in variants))
PY

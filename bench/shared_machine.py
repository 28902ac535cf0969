#!/usr/bin/env python3
"""How a mixtrain training step degrades when another busy process shares the CPU.

For each workload and each OpenMP setting, times `mixtrain bench` idle and then next to a
neighbour, alternating, and prints the median step times and the ratio busy / idle.

  python3 bench/shared_machine.py --models mlp,mlp-wide,cnn,gpt --reps 3

Neighbours:
  spin1   one single-threaded busy loop (a compiler, a Python script)
  omp2    another mixtrain training run with as many OpenMP threads as cores, with libgomp's default
          wait policy (GOMP_SPINCOUNT=300000: its threads spin at barriers, as most OpenMP programs'
          do)
Settings (environment of the timed run only):
  spin      libgomp's default policy (GOMP_SPINCOUNT=300000: spin about 300k iterations at a
            barrier, then sleep), what the tool ran with before it chose passive
  spin10k   GOMP_SPINCOUNT=10000 (a short spin, then sleep)
  passive   the tool's default (OMP_WAIT_POLICY=passive: sleep at once; tools/mixtrain/wait_policy.h)
  threads1  --threads 1 (no barriers), with the tool's default policy
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BATCH = {"mlp": 256, "mlp-wide": 256, "cnn": 256, "gpt": 16}
STEPS = {"mlp": 200, "mlp-wide": 60, "cnn": 15, "gpt": 8}
SETTINGS = {"spin": ({"GOMP_SPINCOUNT": "300000"}, None), "spin10k": ({"GOMP_SPINCOUNT": "10000"}, None),
            "passive": ({"OMP_WAIT_POLICY": "passive"}, None), "threads1": ({}, 1)}


def bench(args, model, setting):
    env_extra, threads = SETTINGS[setting]
    env = dict(os.environ, **env_extra)
    cmd = [args.mixtrain, "bench", "--model", model, "--batch-size", str(BATCH[model]), "--precision", "fp32",
           "--threads", str(threads or os.cpu_count()), "--steps", str(STEPS[model]), "--warmup", "3", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["step_ms_median"]


def start_neighbour(args, kind):
    if kind == "spin1":
        return subprocess.Popen([sys.executable, "-c", "while True: pass"])
    loop = (f"while true; do GOMP_SPINCOUNT=300000 {args.mixtrain} bench --model mlp-wide --batch-size 256 --threads {os.cpu_count()} "
            "--steps 100000 --warmup 1 >/dev/null 2>&1; done")
    return subprocess.Popen(["bash", "-c", loop], start_new_session=True)


def stop(proc):
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--mixtrain", default=os.path.join(ROOT, "build", "tools", "mixtrain", "mixtrain"))
    p.add_argument("--models", default="mlp,mlp-wide,cnn,gpt")
    p.add_argument("--settings", default="spin,passive,threads1")
    p.add_argument("--neighbours", default="spin1,omp2")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    results = {}
    for model in args.models.split(","):
        for setting in args.settings.split(","):
            idle = {n: [] for n in args.neighbours.split(",")}
            busy = {n: [] for n in args.neighbours.split(",")}
            for _ in range(args.reps):
                for n in idle:
                    idle[n].append(bench(args, model, setting))
                    proc = start_neighbour(args, n)
                    time.sleep(1.5)  # the neighbour is up and busy
                    try:
                        busy[n].append(bench(args, model, setting))
                    finally:
                        stop(proc)
            for n in idle:
                i, b = statistics.median(idle[n]), statistics.median(busy[n])
                results[(model, setting, n)] = {"idle_ms": i, "busy_ms": b, "ratio": b / i,
                                                "idle_runs": idle[n], "busy_runs": busy[n]}
                print(f"# {model} {setting} {n}: idle {i:.2f} ms, busy {b:.2f} ms, {b / i:.2f}x", file=sys.stderr)
    print("| model | setting | neighbour | idle step | step with neighbour | ratio |")
    print("|---|---|---|---:|---:|---:|")
    for (model, setting, n), r in results.items():
        print(f"| {model} | {setting} | {n} | {r['idle_ms']:.2f} ms | {r['busy_ms']:.2f} ms | {r['ratio']:.2f}x |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": "),
                       "cores": os.cpu_count(),
                       "results": [dict(model=m, setting=s, neighbour=n, **r) for (m, s, n), r in results.items()]},
                      f, indent=1)


if __name__ == "__main__":
    main()

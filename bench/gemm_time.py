#!/usr/bin/env python3
"""How much of a training step is matrix products, in mixtrain and in PyTorch, same model and batch.

  python3 bench/gemm_time.py --model gpt --precision fp32 --batch-size 16 --threads 2 \
      --python /path/to/venv/bin/python [--reps 3]

mixtrain: `mixtrain bench` runs with ONEDNN_VERBOSE=1, which prints the wall time of every oneDNN
primitive it executes; the matmul and convolution times of the timed steps are summed per step
(the attention's own products are mixtrain's kernels, not oneDNN's, and count as other work).
PyTorch: bench/pytorch_bench.py --gemm-profile (aten::mm, addmm, bmm, baddbmm under
torch.profiler; PyTorch's attention is its fused scaled_dot_product_attention and also counts as
other work). Step times come from separate runs without the instrumentation, alternating between
the two sides, medians over --reps.

The point of the table: the products are most of a step, so how far mixtrain can get ahead of
PyTorch is bounded by the ratio of PyTorch's step to mixtrain's products alone.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEMM_PRIMITIVES = ("matmul", "convolution", "inner_product")


def run(cmd, env=None):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"gemm_time: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}")
    return p.stdout


def last_json(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    sys.exit("gemm_time: no JSON line in the output")


def mixtrain_cmd(args, extra=()):
    return [args.mixtrain, "bench", "--model", args.model, "--precision", args.precision, "--batch-size",
            str(args.batch_size), "--threads", str(args.threads), "--steps", str(args.steps), "--warmup",
            str(args.warmup), *extra]


def mixtrain_gemm_ms(args):
    """oneDNN's product time per timed step: every step executes the same primitives, so the last
    `steps` of the (warmup + steps) equal shares are the timed steps'."""
    env = dict(os.environ, ONEDNN_VERBOSE="1", OMP_NUM_THREADS=str(args.threads))
    times = []  # (is a product, ms) per executed primitive, in order
    for line in run(mixtrain_cmd(args), env).splitlines():
        fields = line.split(",")
        if len(fields) > 4 and fields[0] == "onednn_verbose" and fields[1] == "exec":
            times.append((fields[3] in GEMM_PRIMITIVES, float(fields[-1])))
    total_steps = args.warmup + args.steps
    if not times or len(times) % total_steps:
        sys.exit(f"gemm_time: {len(times)} oneDNN primitives over {total_steps} steps; expected the same number per step")
    timed = times[len(times) // total_steps * args.warmup:]
    return sum(ms for is_product, ms in timed if is_product) / args.steps


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mixtrain", default=os.path.join(ROOT, "build", "tools", "mixtrain", "mixtrain"))
    p.add_argument("--python", required=True, help="the interpreter with the PyTorch to compare with")
    p.add_argument("--model", default="gpt")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if args.reps < 1 or args.steps < 1 or args.warmup < 0:
        sys.exit("gemm_time: --reps and --steps must be >= 1, --warmup >= 0")

    torch_cmd = [args.python, os.path.join(ROOT, "bench", "pytorch_bench.py"), "--model", args.model, "--precision",
                 args.precision, "--batch-size", str(args.batch_size), "--threads", str(args.threads), "--steps",
                 str(args.steps), "--warmup", str(args.warmup)]
    mt_step, mt_gemm, pt_step, pt_gemm = [], [], [], []
    for rep in range(args.reps):
        mt_step.append(last_json(run(mixtrain_cmd(args, ["--json"])))["step_ms_median"])
        mt_gemm.append(mixtrain_gemm_ms(args))
        pt_step.append(last_json(run(torch_cmd))["step_ms_median"])
        pt_gemm.append(last_json(run(torch_cmd + ["--gemm-profile"]))["gemm_ms_per_step"])
        print(f"rep {rep + 1}: mixtrain step {mt_step[-1]:.1f} ms, products {mt_gemm[-1]:.1f} ms; "
              f"PyTorch step {pt_step[-1]:.1f} ms, products {pt_gemm[-1]:.1f} ms", file=sys.stderr)
    ms, mg, ps, pg = (statistics.median(v) for v in (mt_step, mt_gemm, pt_step, pt_gemm))
    print(f"| side | step | matrix products | other work | products share |")
    print(f"|---|---:|---:|---:|---:|")
    print(f"| mixtrain | {ms:.1f} ms | {mg:.1f} ms | {ms - mg:.1f} ms | {mg / ms:.0%} |")
    print(f"| PyTorch | {ps:.1f} ms | {pg:.1f} ms | {ps - pg:.1f} ms | {pg / ps:.0%} |")
    print(f"\nmixtrain vs PyTorch: step {ps / ms:.2f}x, products {pg / mg:.2f}x, other work {(ps - pg) / (ms - mg):.2f}x; "
          f"PyTorch's step over mixtrain's products alone (the ceiling with no other work): {ps / mg:.2f}x")


if __name__ == "__main__":
    main()

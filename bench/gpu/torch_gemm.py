#!/usr/bin/env python3
"""GEMM throughput of torch.matmul (cuBLAS/cuBLASLt underneath) on the shapes mixtrain's GPU check
cares about; prints one JSON object. The reference line for mixtrain's own cuda_gemm_bench.

  python3 bench/gpu/torch_gemm.py                       # H200: 8192^3 + GPT-small shapes, bf16/fp16/fp32
  python3 bench/gpu/torch_gemm.py --device cpu --square 256 --tokens 128 --width 64 --vocab 32 --reps 3

Shapes (row-major, as PyTorch stores them; m x n output, k the reduction):
  square      A[S,S] @ B[S,S]                       (S = --square, 8192)
  per Linear of a GPT block (K in -> N out: qkv C->3C, proj C->C, fc1 C->4C, fc2 4C->C, head C->V)
  with M = --tokens rows (B*T; 8192 by default):
    fwd         Y[M,N]  = X[M,K] @ W[N,K]^T          ("NT": the Linear forward)
    bwd_input   dX[M,K] = dY[M,N] @ W[N,K]           ("NN": the input gradient)
    bwd_weight  dW[N,K] = dY[M,N]^T @ X[M,K]         ("TN": the weight gradient, reduction over M)
With C = 768 the GPT shapes use K, N in {768, 2304, 3072} (and the head's V = 256).

dtypes: bf16, fp16 (fp32 accumulation inside cuBLAS; PyTorch's default reduced-precision-reduction
settings, reported), fp32 with TF32 off (torch.backends.cuda.matmul.allow_tf32 = False).
Data: torch.randn (never zeros: zeros run faster on this hardware), outputs preallocated (out=).
When one operand set is smaller than twice the L2 cache, several sets are rotated so that the inputs
are not all L2-resident. Timing: 3 warm-up calls, then --reps repetitions (>= 10 by default), each
timing `inner` back-to-back calls between two CUDA events (inner chosen so a repetition lasts about
--target-ms; this hides launch overhead for the small shapes); the median per-call time is reported.
TFLOP/s = 2*m*n*k / time; pct_of_790 = TFLOP/s over 790, the bf16 dense rate measured on random data on
the lent H200 (cuda-backend.md section 7) - for fp32 this percentage is only a scale, its own ceiling
is far lower. `aggregate` gives, per dtype, the GPT shapes' total FLOPs over their total time.
"""

import argparse
import json
import math
import statistics
import sys
import time
import warnings

import torch

PEAK_TFLOPS_REF = 790.0
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def set_tf32_off():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        except Exception:  # noqa: BLE001
            pass
        state = {"matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32)}
        for name in ("allow_bf16_reduced_precision_reduction", "allow_fp16_reduced_precision_reduction"):
            try:  # torch 1.13 raises AssertionError (not AttributeError) for unknown names here
                state[name] = bool(getattr(torch.backends.cuda.matmul, name))
            except Exception:  # noqa: BLE001
                pass
    return state


def gemm_cases(a):
    C, V = a.width, a.vocab
    cases = [("square", "NN", a.square, a.square, a.square)]
    linears = (("qkv", C, 3 * C), ("proj", C, C), ("fc1", C, 4 * C), ("fc2", 4 * C, C), ("head", C, V))
    M = a.tokens
    for name, K, N in linears:
        cases.append((name + ".fwd", "NT", M, N, K))
        cases.append((name + ".bwd_input", "NN", M, K, N))
        cases.append((name + ".bwd_weight", "TN", N, K, M))
    return cases


def make_operands(layout, m, n, k, dtype, device):
    """(a, b, out) with a @ b = out[m, n]: the transposed operand is a view of a row-major tensor."""
    if layout == "NN":
        a, b = torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)
    elif layout == "NT":
        a, b = torch.randn(m, k, dtype=dtype, device=device), torch.randn(n, k, dtype=dtype, device=device).t()
    else:  # "TN"
        a, b = torch.randn(k, m, dtype=dtype, device=device).t(), torch.randn(k, n, dtype=dtype, device=device)
    return a, b, torch.empty(m, n, dtype=dtype, device=device)


def l2_bytes(device):
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return int(getattr(props, "L2_cache_size", 0) or 60 * 2**20)
    return 32 * 2**20


def time_case(layout, m, n, k, dtype, device, a):
    elem = torch.tensor([], dtype=dtype).element_size()
    set_bytes = (m * k + k * n + m * n) * elem
    nbuf = max(1, min(8, math.ceil(2 * l2_bytes(device) / set_bytes)))
    sets = [make_operands(layout, m, n, k, dtype, device) for _ in range(nbuf)]

    def call(i):
        x, y, out = sets[i % nbuf]
        torch.matmul(x, y, out=out)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for i in range(3):
        call(i)
    sync()
    # Calibrate: one call's time, then enough back-to-back calls per repetition to last --target-ms.
    t0 = time.perf_counter()
    for i in range(nbuf):
        call(i)
    sync()
    est_ms = max((time.perf_counter() - t0) * 1e3 / nbuf, 1e-3)
    inner = max(1, min(1000, int(a.target_ms / est_ms)))
    per_call = []
    for _ in range(a.reps):
        if device.type == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for i in range(inner):
                call(i)
            e1.record()
            e1.synchronize()
            per_call.append(e0.elapsed_time(e1) / inner)
        else:
            t = time.perf_counter()
            for i in range(inner):
                call(i)
            per_call.append((time.perf_counter() - t) * 1e3 / inner)
    med = statistics.median(per_call)
    flops = 2.0 * m * n * k
    return {"ms": med, "ms_min": min(per_call), "inner": inner, "buffers": nbuf, "flops": flops,
            "tflops": flops / (med / 1e3) / 1e12}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtypes", default="bf16,fp16,fp32")
    p.add_argument("--square", type=int, default=8192)
    p.add_argument("--tokens", type=int, default=8192, help="M = B*T rows of the GPT shapes")
    p.add_argument("--width", type=int, default=768, help="C of the GPT shapes")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--target-ms", type=float, default=2.0, help="time per repetition")
    a = p.parse_args()
    device = torch.device(a.device)
    result = {"framework": "pytorch", "torch_version": torch.__version__, "device": device.type,
              "peak_tflops_ref": PEAK_TFLOPS_REF, "tokens": a.tokens, "width": a.width, "reps": a.reps,
              "method": "median of reps, each `inner` back-to-back torch.matmul(out=) calls between CUDA events; "
                        "randn data; operand sets rotated past the L2",
              "results": [], "aggregate": {}}
    if device.type == "cuda" and not torch.cuda.is_available():
        result.update(status="no-gpu", reason="torch.cuda.is_available() is False")
        print(json.dumps(result))
        return 0
    if device.type == "cuda":
        result["device_name"] = torch.cuda.get_device_name(device)
        result["cuda"] = torch.version.cuda
    result["settings"] = set_tf32_off()
    torch.manual_seed(0)
    errors = 0
    for dname in [d.strip() for d in a.dtypes.split(",") if d.strip()]:
        dtype = DTYPES[dname]
        tot_flops = tot_ms = 0.0
        for name, layout, m, n, k in gemm_cases(a):
            row = {"name": name, "layout": layout, "dtype": dname, "m": m, "n": n, "k": k}
            try:
                row.update(time_case(layout, m, n, k, dtype, device, a))
                row["pct_of_790"] = 100.0 * row["tflops"] / PEAK_TFLOPS_REF
                if name != "square":
                    tot_flops += row["flops"]
                    tot_ms += row["ms"]
            except Exception as e:  # noqa: BLE001 - e.g. a dtype the CPU build cannot multiply
                errors += 1
                row["error"] = "%s: %s" % (type(e).__name__, str(e)[:500])
            result["results"].append(row)
            print("%-16s %-4s %s m=%-6d n=%-6d k=%-6d %s" % (
                name, dname, layout, m, n, k,
                "%.3f ms %.1f TFLOP/s" % (row["ms"], row["tflops"]) if "ms" in row else row["error"]),
                file=sys.stderr, flush=True)
        if tot_ms > 0:
            tf = tot_flops / (tot_ms / 1e3) / 1e12
            result["aggregate"][dname] = {"gpt_shapes_tflops": tf, "gpt_shapes_pct_of_790": 100.0 * tf / PEAK_TFLOPS_REF}
        if device.type == "cuda":
            torch.cuda.empty_cache()
    result["status"] = "ok" if errors == 0 else "partial"
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

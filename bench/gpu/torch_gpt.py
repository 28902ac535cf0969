#!/usr/bin/env python3
"""PyTorch baseline of `mixtrain bench --model gpt-small`: times AdamW training steps of a GPT-small
on synthetic byte data and prints one JSON object per run (one line each; the GPU check collects them).

  python3 bench/gpu/torch_gpt.py --device cuda --precision fp32,bf16,fp16 --batch-size 16
  python3 bench/gpu/torch_gpt.py --device cuda --precision bf16 --compile --compile-timeout 150
  python3 bench/gpu/torch_gpt.py --device cpu --layers 2 --width 64 --heads 2 --context 32 \
      --batch-size 2 --steps 2 --warmup 1           # smoke test (torch >= 1.13, no GPU)

The model (defaults = GPT-small): byte vocabulary 256, learned position embedding [context, C], L
pre-LayerNorm blocks (x + proj(attn(ln1(x))), then h + fc2(gelu(fc1(ln2(h))))), qkv = Linear(C, 3C)
split as view(B, T, 3, H, D), causal attention through F.scaled_dot_product_attention(is_causal=True)
(torch >= 2.0; a masked softmax by hand on 1.13), MLP 4C with GELU (tanh form by default,
--gelu exact for the erf form that mixtrain's nn::GELU uses by default), final LayerNorm, an
untied Linear head with bias (as mixtrain's nn::GPT: no weight tying), every Linear with bias,
LayerNorm eps 1e-5. Weight init is PyTorch's default (irrelevant for speed).

One step, as mixtrain's Trainer does it: a new batch of random tokens [B, T+1] drawn on the device
(inputs = first T, targets = last T), zero_grad(set_to_none=True), forward + cross-entropy under
autocast (bf16/fp16) or none (fp32), backward, AdamW(lr 1e-3, weight decay 0.01; fused=True where
this torch has it, else foreach, else the loop), fp16 through a GradScaler.

Precisions: fp32 with torch.backends.cuda.matmul.allow_tf32 = False and
torch.backends.cudnn.allow_tf32 = False (kept off in every run, so autocast's fp32 ops are true fp32
too); bf16 = torch.autocast(bfloat16); fp16 = torch.autocast(float16) + GradScaler. On the CPU fp16 is
skipped where this torch has no CPU GradScaler (1.13).

Timing: --warmup untimed steps, then --steps timed steps, each between two CUDA events (on the CPU:
perf_counter around the step and the loss read back); median, min and max step time in ms.
tokens/s = B*T / median. FLOPs per step (stated in each JSON as flops_formula):
  N_mm   = L*(3C^2 + C^2 + 2*4C*C) + C*V   (weights of the matrix products; no embeddings, no biases)
  flops  = 6 * B*T * (N_mm + 2*L*T*C)      (mixtrain's gpt_model_info formula: attention scores and
                                            att@v over all T keys, forward 2 + backward 4 per MAC)
  flops_causal = 6 * B*T * (N_mm + L*T*C)  (what a causal flash kernel computes: half of the T^2 terms)
tflops uses `flops` (comparable with mixtrain's gflops); tflops_causal uses the second; pct_of_790 is
tflops over the 790 TFLOP/s bf16 ceiling measured on the lent H200 (docs: cuda-backend.md section 7).
Peak memory: torch.cuda.max_memory_allocated (and _reserved) over model, optimizer state and the
steps, reset before each run; on the CPU the process's peak RSS (ru_maxrss; not resettable).

--compile runs each precision in a child process (this script again) under --compile-timeout
seconds, its process group killed on timeout, the inductor cache in /tmp (TORCHINDUCTOR_CACHE_DIR);
the first warm-up step's time is reported as compile_s. torch 1.13 has no torch.compile: the runs are
reported with status "unavailable".
"""

import argparse
import gc
import json
import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

PEAK_TFLOPS_REF = 790.0  # bf16 dense GEMM on random data, measured on the lent H200
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
HAS_COMPILE = hasattr(torch, "compile")


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        assert width % heads == 0, "width must be a multiple of heads"
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        B, T, C = x.shape
        H = self.heads
        D = C // H
        q, k, v = self.qkv(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, T, D]
        if HAS_SDPA:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.13: query i attends to keys j <= i
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            o = s.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
        return self.proj(o.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, width, heads, mlp_ratio, gelu):
        super().__init__()
        self.ln1 = nn.LayerNorm(width, eps=1e-5)
        self.attn = CausalSelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width, eps=1e-5)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width),
                                 nn.GELU(approximate="tanh" if gelu == "tanh" else "none"),
                                 nn.Linear(mlp_ratio * width, width))

    def forward(self, x):
        h = x + self.attn(self.ln1(x))
        return h + self.mlp(self.ln2(h))


class GPT(nn.Module):
    def __init__(self, vocab, context, width, layers, heads, mlp_ratio, gelu):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, width)
        self.pos_emb = nn.Embedding(context, width)
        self.blocks = nn.Sequential(*[Block(width, heads, mlp_ratio, gelu) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width, eps=1e-5)
        self.head = nn.Linear(width, vocab)  # untied, with bias

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(T, device=tokens.device))
        return self.head(self.ln_f(self.blocks(x)))


def set_tf32_off():
    """Both TF32 switches off (the honest fp32 baseline); returns what torch reports afterwards."""
    state = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # newer torch deprecates the allow_tf32 spellings
        for name, obj in (("matmul_allow_tf32", torch.backends.cuda.matmul), ("cudnn_allow_tf32", torch.backends.cudnn)):
            try:
                obj.allow_tf32 = False
                state[name] = bool(obj.allow_tf32)
            except Exception as e:  # noqa: BLE001 - record, never fail the benchmark over a flag
                state[name] = "error: %s" % e
        if hasattr(torch, "get_float32_matmul_precision"):
            state["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    return state


def make_adamw(params, device):
    params = list(params)
    kw = dict(lr=1e-3, weight_decay=0.01)
    if device.type == "cuda":
        for extra, name in (({"fused": True}, "fused"), ({"foreach": True}, "foreach")):
            try:
                return torch.optim.AdamW(params, **kw, **extra), name
            except (TypeError, RuntimeError, ValueError):
                pass
    return torch.optim.AdamW(params, **kw), "default"


def make_grad_scaler(device):
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler(device.type), "torch.amp.GradScaler"
    if device.type != "cuda":
        raise RuntimeError("this torch (%s) has no GradScaler for %s" % (torch.__version__, device.type))
    return torch.cuda.amp.GradScaler(), "torch.cuda.amp.GradScaler"


def model_numbers(a):
    C, L, R, V, T = a.width, a.layers, a.mlp_ratio, a.vocab, a.context
    n_mm = L * (3 * C * C + C * C + 2 * R * C * C) + C * V
    tokens = a.batch_size * T
    return {
        "matmul_params": n_mm,
        "tokens_per_step": tokens,
        "flops_per_step": 6 * tokens * (n_mm + 2 * L * T * C),
        "flops_per_step_causal": 6 * tokens * (n_mm + L * T * C),
        "flops_formula": "6*B*T*(N_mm + 2*L*T*C), N_mm = L*(3C^2 + C^2 + 2*R*C^2) + C*V (mixtrain gpt_model_info)",
        "flops_formula_causal": "6*B*T*(N_mm + L*T*C) (half of the T^2 attention terms, as a causal kernel computes)",
    }


def base_record(a, device, precision, mode):
    rec = {
        "framework": "pytorch",
        "torch_version": torch.__version__,
        "device": device.type,
        "mode": mode,
        "precision": precision,
        "model": {
            "name": "gpt-small" if (a.layers, a.width, a.heads, a.context) == (12, 768, 12, 1024) else "gpt",
            "layers": a.layers, "width": a.width, "heads": a.heads, "context": a.context, "vocab": a.vocab,
            "mlp_ratio": a.mlp_ratio, "gelu": a.gelu, "head": "untied Linear with bias",
            "positions": "learned", "norm": "pre-LayerNorm, eps 1e-5",
            "attention": "F.scaled_dot_product_attention(is_causal=True)" if HAS_SDPA else "manual masked softmax",
        },
        "batch_size": a.batch_size,
        "context": a.context,
        "steps": a.steps,
        "warmup": a.warmup,
    }
    if device.type == "cuda":
        rec["device_name"] = torch.cuda.get_device_name(device)
    return rec


def run_one(a, device, precision, compiled):
    rec = base_record(a, device, precision, "compile" if compiled else "eager")
    rec.update(model_numbers(a))
    if compiled and not HAS_COMPILE:
        rec.update(status="unavailable", reason="torch %s has no torch.compile" % torch.__version__)
        return rec
    rec["tf32"] = set_tf32_off()
    amp_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    if device.type == "cpu" and precision == "fp16":
        amp = getattr(torch, "amp", None)
        if amp is None or not hasattr(amp, "GradScaler"):
            rec.update(status="skipped", reason="fp16 autocast + GradScaler on the CPU needs torch >= 2.3 (this is %s)"
                       % torch.__version__)
            return rec

    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(a.seed)
    model = GPT(a.vocab, a.context, a.width, a.layers, a.heads, a.mlp_ratio, a.gelu).to(device)
    model.train()
    rec["parameters"] = sum(p.numel() for p in model.parameters())
    opt, impl = make_adamw(model.parameters(), device)
    rec["optimizer"] = "AdamW(%s, lr 1e-3, weight decay 0.01)" % impl
    scaler = None
    if precision == "fp16":
        scaler, rec["grad_scaler"] = make_grad_scaler(device)
    fwd = torch.compile(model) if compiled else model
    gen = torch.Generator(device=device)
    gen.manual_seed(a.seed)
    B, T, V = a.batch_size, a.context, a.vocab

    def step():
        tokens = torch.randint(0, V, (B, T + 1), device=device, generator=gen)
        x, y = tokens[:, :-1], tokens[:, 1:]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            logits = fwd(x)
            loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        loss = step()
        loss_first = float(loss)
        first_s = time.perf_counter() - t0
        for _ in range(max(0, a.warmup - 1)):
            step()
        sync()
        times = []
        wall0 = time.perf_counter()
        if device.type == "cuda":
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.steps)]
            for start, end in events:
                start.record()
                loss = step()
                end.record()
            sync()
            times = [s.elapsed_time(e) for s, e in events]
        else:
            for _ in range(a.steps):
                t = time.perf_counter()
                loss = step()
                float(loss)
                times.append((time.perf_counter() - t) * 1e3)
        wall_ms = (time.perf_counter() - wall0) * 1e3 / a.steps
        loss_last = float(loss)
    if device.type == "cpu" and amp_dtype is not None and any("not supported" in str(w.message) for w in caught):
        rec.update(status="skipped", reason="autocast refused %s on the CPU: %s" % (precision, caught[0].message))
        return rec

    med = statistics.median(times)
    rec.update(
        status="ok" if math.isfinite(loss_last) else "nonfinite",
        step_ms_median=med, step_ms_min=min(times), step_ms_max=max(times), step_ms_all=times,
        wall_ms_per_step=wall_ms,
        tokens_per_s=B * T / (med / 1e3),
        tflops=rec["flops_per_step"] / (med / 1e3) / 1e12,
        tflops_causal=rec["flops_per_step_causal"] / (med / 1e3) / 1e12,
        loss_first=loss_first, loss_last=loss_last,
        first_step_s=first_s,
    )
    rec["pct_of_790"] = 100.0 * rec["tflops"] / PEAK_TFLOPS_REF
    if compiled:
        rec["compile_s"] = first_s
    if scaler is not None:
        rec["final_loss_scale"] = float(scaler.get_scale())
    if device.type == "cuda":
        rec["peak_bytes"] = torch.cuda.max_memory_allocated(device)
        rec["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
        rec["peak_kind"] = "torch.cuda.max_memory_allocated"
    else:
        rec["peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        rec["peak_kind"] = "process peak RSS (ru_maxrss), cumulative over the process"
    rec["peak_gib"] = rec["peak_bytes"] / 2**30
    return rec


def run_compiled_children(a, precisions):
    """torch.compile runs, each in a child process under a hard timeout; relays their JSON lines."""
    env = dict(os.environ)
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/mt-inductor-cache")
    env["PYTHONUNBUFFERED"] = "1"
    for p in precisions:
        device = torch.device(a.device)
        if not HAS_COMPILE:
            rec = base_record(a, device, p, "compile")
            rec.update(status="unavailable", reason="torch %s has no torch.compile" % torch.__version__)
            print(json.dumps(rec), flush=True)
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "--_child", "--precision", p] + child_args(a)
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, start_new_session=True, text=True)
        try:
            out, _ = proc.communicate(timeout=a.compile_timeout)
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            if lines:
                for ln in lines:
                    print(ln, flush=True)
            else:
                rec = base_record(a, device, p, "compile")
                rec.update(status="error", reason="child exited %d without a result" % proc.returncode)
                print(json.dumps(rec), flush=True)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            rec = base_record(a, device, p, "compile")
            rec.update(status="timeout", reason="torch.compile run killed after %.0f s" % (time.time() - t0))
            print(json.dumps(rec), flush=True)


def child_args(a):
    out = []
    for name in ("device", "batch_size", "steps", "warmup", "layers", "width", "heads", "context", "vocab",
                 "mlp_ratio", "gelu", "seed"):
        out += ["--" + name.replace("_", "-"), str(getattr(a, name))]
    return out + ["--compile"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", default="fp32,bf16,fp16", help="comma-separated: fp32, bf16, fp16")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--mlp-ratio", type=int, default=4)
    p.add_argument("--gelu", choices=("tanh", "exact"), default="tanh")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true", help="torch.compile, each precision in a child process")
    p.add_argument("--compile-timeout", type=float, default=150.0, help="seconds per compiled run (hard)")
    p.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    precisions = [s.strip() for s in a.precision.split(",") if s.strip()]
    for s in precisions:
        if s not in ("fp32", "bf16", "fp16"):
            p.error("unknown precision %r" % s)
    if a.steps < 1 or a.warmup < 1:
        p.error("--steps and --warmup must be >= 1")

    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        for prec in precisions:
            rec = base_record(a, torch.device("cpu"), prec, "compile" if a.compile else "eager")
            rec.update(device="cuda", status="no-gpu", reason="torch.cuda.is_available() is False")
            print(json.dumps(rec), flush=True)
        return 0
    if a.compile and not a._child:
        run_compiled_children(a, precisions)
        return 0
    for prec in precisions:
        try:
            rec = run_one(a, device, prec, compiled=a.compile)
        except Exception as e:  # noqa: BLE001 - one failed run (OOM, missing kernel) must not stop the others
            rec = base_record(a, device, prec, "compile" if a.compile else "eager")
            rec.update(status="error", reason="%s: %s" % (type(e).__name__, str(e)[:2000]))
        print(json.dumps(rec), flush=True)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Exact memory of one PyTorch training step by category, fp32 against CPU autocast bf16.

  /usr/bin/python3 bench/pytorch_autocast_memory.py            # markdown table
  /usr/bin/python3 bench/pytorch_autocast_memory.py --json     # one JSON object

For gpt (batch 16, synthetic tokens) and cnn (batch 256) from pytorch_models.py, in fp32 and in
bf16 = torch.autocast("cpu", dtype=torch.bfloat16) around forward + cross-entropy (the step of
pytorch_bench.py: AdamW lr 1e-3, weight decay 0.01), it counts bytes, not RSS:

  model state   parameters + gradients + AdamW exp_avg + exp_avg_sq, after an opt.step;
  saved         the distinct storages autograd saves for backward, recorded by a
                torch.autograd.graph.saved_tensors_hooks pack hook, each storage's nbytes once;
                split into parameters (already in the model state, not added again), autocast
                casts of parameters ("cast copies": bf16 storages equal to a parameter's values)
                and activations (by dtype);
  bound         model state + cast copies + saved activations; "bound (no grads)" leaves out the
                gradients, which zero_grad(set_to_none=True) frees before the forward, so that one is
                a strict lower bound of the live bytes at the end of the forward.

Views of gpt: "excl. TxT" leaves out the storages of B*H*T*T elements whose last two dims are
[T, T] (attention scores / probabilities, which torch 1.13's manual attention materialises and
mixtrain's fused attention does not); "excl. TxT, GELU out" also leaves out the GELU output saved by
the second MLP linear (mixtrain's gelu_linear recomputes it from the saved GELU input). The rows
"gpt (mixtrain, analytic)" are the same categories computed from what mixtrain's ops save
(mixtrain_gpt below; not a measurement). For gpt it also lists the largest savers, by the autograd
node that saves them (found by walking the graph from the loss), and it prints the output dtype of
layer_norm, softmax etc. under CPU autocast. Seeded and deterministic; runs in seconds.
"""

import argparse
import json
import os
import sys
from collections import defaultdict

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_models  # noqa: E402
from pytorch_bench import batch_for  # noqa: E402

BATCH = {"gpt": 16, "cnn": 256}
MiB = 1024.0 * 1024.0


def storage_key(t):
    s = t.storage()
    return s.data_ptr(), s.size() * t.element_size()


def whole_storage(t):
    """The tensor's whole storage as a flat tensor of its dtype."""
    return torch.empty(0, dtype=t.dtype).set_(t.storage(), 0, (t.storage().size(),))


def saver_names(loss):
    """storage data_ptr -> set of "Node.attr" names of the autograd nodes that save it."""
    names, seen, stack = defaultdict(set), set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if attr.startswith("_saved_"):
                val = getattr(node, attr)
                for t in (val if isinstance(val, (tuple, list)) else (val,)):
                    if isinstance(t, torch.Tensor):
                        names[storage_key(t)[0]].add(f"{node.name()}.{attr[7:]}")
        stack.extend(n for n, _ in node.next_functions)
    return names


def measure(model_name, precision, seed=0):
    torch.manual_seed(seed)
    model = pytorch_models.build_model(model_name)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    x, y = batch_for(model_name, BATCH[model_name], torch.Generator().manual_seed(seed))
    autocast = precision == "bf16"
    saved = []

    def pack(t):
        saved.append(t)
        return t

    params = list(model.parameters())
    param_ptrs = {p.storage().data_ptr() for p in params}
    B = BATCH[model_name]
    T, H = pytorch_models.GPT_CONTEXT, pytorch_models.GPT_HEADS

    def classify(names):
        """Distinct saved storages, classified while the parameters still hold the forward's values."""
        storages = {}
        for t in saved:
            ptr, nbytes = storage_key(t)
            if ptr in storages:
                continue
            if ptr in param_ptrs:
                kind = "param"
            elif t.dtype != torch.float32 and t.is_floating_point() and any(
                    p.numel() == t.storage().size()
                    and torch.equal(whole_storage(t), p.detach().to(t.dtype).reshape(-1)) for p in params):
                kind = "cast"
            else:
                kind = "act"
            txt = model_name == "gpt" and t.dim() >= 2 and tuple(t.shape[-2:]) == (T, T) and t.numel() == B * H * T * T
            storages[ptr] = dict(kind=kind, dtype=str(t.dtype).replace("torch.", ""), bytes=nbytes,
                                 shape=list(t.shape), txt=txt, by=sorted(names.get(ptr, ())))
        return storages

    def step(record):
        opt.zero_grad(set_to_none=True)
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack if record else (lambda t: t), lambda t: t):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                out = model(x)
                loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            storages = classify(saver_names(loss)) if record else None
        loss.backward()
        opt.step()
        return storages

    step(False)  # creates the AdamW state
    storages = step(True)
    saved.clear()
    state = {
        "params": sum(p.numel() * p.element_size() for p in params),
        "grads": sum(p.grad.numel() * p.grad.element_size() for p in params),
        "adamw_moments": sum(opt.state[p][k].numel() * opt.state[p][k].element_size()
                             for p in params for k in ("exp_avg", "exp_avg_sq")),
    }
    state["total"] = sum(state.values())

    def totals(rows):
        acts = [r for r in rows if r["kind"] == "act"]
        by_dtype = defaultdict(int)
        for r in acts:
            by_dtype[r["dtype"]] += r["bytes"]
        cast = sum(r["bytes"] for r in rows if r["kind"] == "cast")
        act = sum(by_dtype.values())
        return {"cast_copies": cast, "saved_activations": act, "saved_by_dtype": dict(by_dtype),
                "saved_params_not_added": sum(r["bytes"] for r in rows if r["kind"] == "param"),
                "bound": state["total"] + cast + act,
                "bound_no_grads": state["total"] - state["grads"] + cast + act}

    rows = list(storages.values())
    res = {"model": model_name, "precision": precision, "batch_size": B, "model_state": state,
           "views": {"all": totals(rows)}}
    if model_name == "gpt":
        hidden = pytorch_models.GPT_MLP_RATIO * pytorch_models.GPT_EMBED
        gelu_out = [r for r in rows if r["by"] == ["AddmmBackward0.mat1"] and r["shape"][-1] == hidden]
        res["views"]["excl. TxT"] = totals([r for r in rows if not r["txt"]])
        res["views"]["excl. TxT, GELU out"] = totals([r for r in rows if not r["txt"] and r not in gelu_out])
        groups = defaultdict(lambda: [0, 0])
        for r in rows:
            if r["kind"] == "act":
                g = groups[(" + ".join(r["by"]) or "?", r["dtype"], "x".join(map(str, r["shape"])))]
                g[0] += r["bytes"]
                g[1] += 1
        res["top_savers"] = [{"saved_by": k[0], "dtype": k[1], "shape": k[2], "bytes": v[0], "count": v[1]}
                             for k, v in sorted(groups.items(), key=lambda kv: -kv[1][0])[:8]]
    res["storages_without_saver_name"] = sum(1 for r in rows if not r["by"])
    return res


def mixtrain_gpt(precision, state, B=BATCH["gpt"]):
    """The same categories for mixtrain's GPT-mini, from what each of its ops saves (src/nn/transformer.cpp,
    src/ops/{nn_norm,linalg,attention,nn_gelu_linear,loss,nn_embedding}.cpp), not measured. LayerNorm saves its
    (fp32) input + fp32 mean and rstd per row; linear its input after autocast and the (cast) weight; qkv_attention
    the packed qkv and an fp32 log-sum-exp per query and head; gelu_linear the GELU input and the (cast) weight;
    cross-entropy its fp32 logits (a cast copy under bf16), an fp32 [rows, 2] statistic and the int64 targets."""
    T, C, H, V, L = (pytorch_models.GPT_CONTEXT, pytorch_models.GPT_EMBED, pytorch_models.GPT_HEADS,
                     pytorch_models.GPT_VOCAB, pytorch_models.GPT_LAYERS)
    N, hid, bf16 = B * T, pytorch_models.GPT_MLP_RATIO * C, precision == "bf16"
    lo, e = ("bfloat16", 2) if bf16 else ("float32", 4)
    acts = defaultdict(int)
    ln = 4 * N * C + 2 * 4 * N  # fp32 input + mean + rstd
    acts["float32"] += L * (2 * ln + 4 * N * H)  # ln1, ln2; attention log-sum-exp
    acts[lo] += L * e * N * (C + 3 * C + C + C + hid)  # qkv input, packed qkv, proj input, fc1 input, GELU input
    acts["float32"] += ln + 4 * N * V + 4 * N * 2  # ln_f; cross-entropy logits and statistic
    acts[lo] += e * N * C  # head input
    acts["int64"] += 8 * (N + T + N)  # token and position indices, targets
    cast = 2 * (L * (3 * C * C + C * C + 2 * hid * C) + V * C) if bf16 else 0
    act = sum(acts.values())
    return {"model": "gpt (mixtrain, analytic)", "precision": precision, "batch_size": B, "model_state": state,
            "views": {"mixtrain": {"cast_copies": cast, "saved_activations": act, "saved_by_dtype": dict(acts),
                                   "bound": state["total"] + cast + act,
                                   "bound_no_grads": state["total"] - state["grads"] + cast + act}}}


def autocast_dtypes():
    """Output dtypes of the ops that decide the fp32 share, under CPU autocast bf16 on a bf16 input (fp32:
    the op is on autocast's fp32 list; bfloat16: it runs in its input dtype) and for the residual add."""
    x = torch.randn(4, 8).to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = {"layer_norm": F.layer_norm(x, (8,)), "softmax": x.softmax(-1), "log_softmax": F.log_softmax(x, -1),
               "gelu": F.gelu(x), "cross_entropy": F.cross_entropy(x, torch.zeros(4, dtype=torch.long)),
               "fp32 + bf16 add": x.float() + x}
    return {k: str(v.dtype).replace("torch.", "") for k, v in out.items()}


def mib(n):
    return f"{n / MiB:.2f}"


def markdown(results):
    lines = ["| model | precision | view | model state | cast copies | saved fp32 | saved bf16 | saved other "
             "| bound | bf16/fp32 | bound (no grads) | bf16/fp32 |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    fp32 = {}
    for r in results:
        for view, t in r["views"].items():
            d = t["saved_by_dtype"]
            other = sum(v for k, v in d.items() if k not in ("float32", "bfloat16"))
            key = (r["model"], view)
            if r["precision"] == "fp32":
                fp32[key] = t
                ratios = ("", "")
            else:
                ratios = (f"{t['bound'] / fp32[key]['bound']:.3f}x",
                          f"{t['bound_no_grads'] / fp32[key]['bound_no_grads']:.3f}x")
            lines.append(f"| {r['model']} | {r['precision']} | {view} "
                         f"| {mib(r['model_state']['total'])} | {mib(t['cast_copies'])} "
                         f"| {mib(d.get('float32', 0))} | {mib(d.get('bfloat16', 0))} | {mib(other)} "
                         f"| {mib(t['bound'])} | {ratios[0]} | {mib(t['bound_no_grads'])} | {ratios[1]} |")
    lines.append("")
    lines.append("MiB (2^20 bytes). bound = model state + cast copies + saved activations.")
    lines += ["", "Output dtype under CPU autocast bf16 for a bf16 input: "
              + ", ".join(f"{k} {v}" for k, v in autocast_dtypes().items()) + "."]
    for r in results:
        if "top_savers" in r:
            lines += ["", f"Largest saved activations, gpt {r['precision']} (summed over the 4 blocks where repeated):", "",
                      "| saved by (autograd node.attribute) | dtype | shape | storages | MiB |", "|---|---|---|---:|---:|"]
            lines += [f"| {s['saved_by']} | {s['dtype']} | {s['shape']} | {s['count']} | {mib(s['bytes'])} |"
                      for s in r["top_savers"]]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of markdown")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    results = [measure(m, prec) for m in ("gpt", "cnn") for prec in ("fp32", "bf16")]
    results[2:2] = [mixtrain_gpt(r["precision"], r["model_state"]) for r in results[:2]]
    if args.json:
        print(json.dumps({"torch_version": torch.__version__, "autocast_output_dtypes": autocast_dtypes(),
                          "results": results}, indent=1))
    else:
        print(markdown(results))


if __name__ == "__main__":
    main()

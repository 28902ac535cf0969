#!/usr/bin/python3
"""Loads a mixtrain run's weights into the equivalent PyTorch model and checks that it gives the
same test accuracy as mixtrain reported.

    /usr/bin/python3 bench/verify_pytorch_checkpoint.py RUN_DIR [--data SPEC] [--weights FILE]

RUN_DIR is a `mixtrain train` output directory: RUN_DIR/model.safetensors (read by the small
safetensors reader below, not by the safetensors package) and RUN_DIR/summary.json (model,
precision, test_accuracy, test_loss). The PyTorch model comes from bench/pytorch_models.py and
takes the tensors with load_state_dict(strict=True), so every name and shape must match exactly.

--data is the dataset of the run, in the CLI's syntax; by default the one summary.json records:
  fashion-mnist[:DIR]  (default; DIR defaults to /usr/share/datasets/fashion-mnist; a bare DIR
                       means fashion-mnist:DIR), mnist:DIR, text:FILE (gpt).

Image models: the 10,000 test images, normalised as mixtrain does, evaluated in fp32 and, for a
bf16 run, also under torch.autocast("cpu", dtype=torch.bfloat16) (mixtrain evaluates a 16-bit run
under its own autocast). torch 1.13 has no fp16 autocast on the CPU, so an fp16 run is evaluated in
fp32 only. Pass: |accuracy(PyTorch, fp32) - accuracy(mixtrain)| <= 0.002, i.e. at most 20 of the
10,000 images. The tolerance is not zero because mixtrain's number for a bf16/fp16 run comes from
16-bit matmuls: rounding the activations to 8 (bf16) or 11 (fp16) significant bits moves a few
logits that are nearly tied across the argmax. For an fp32 run the two evaluations agree to float
rounding (a different GEMM summation order), which flips an image only when its top two logits tie
to ~1e-6.

gpt: with --data text:FILE, the validation loss and next-token accuracy over the last 10% of the
file in windows of 128 bytes (exactly mixtrain's validation set) are compared with summary.json:
|loss difference| <= 0.01 and |accuracy difference| <= 0.002. Without the text (e.g. a synthetic
run) it checks that load_state_dict(strict=True) succeeds and a forward pass gives finite logits.
For gpt it also loads the weights into the torch.nn.MultiheadAttention variant (renamed keys, see
docs/pytorch-interop.md) and checks that both variants give the same logits.

Exit status 0 when the checks pass, 1 when they do not, 2 on a usage or input error.
"""

import argparse
import gzip
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_models  # noqa: E402

ACC_TOLERANCE = 0.002  # 20 of the 10,000 test images (or 0.2% of the validation tokens for gpt)
GPT_LOSS_TOLERANCE = 0.01  # nats per token
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


# ---- a small safetensors reader ---------------------------------------------------------------
# Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets},
# "__metadata__": {...}}, then the data; offsets are relative to the end of the header.

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64,
              "I64": np.int64, "I32": np.int32, "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path):
    """Returns ({name: torch.Tensor in the file's dtype}, {metadata})."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes, too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"{path}: header length {n} runs past the end of the file ({len(data)} bytes)")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n:]
    tensors, end_max = {}, 0
    for name, info in header.items():
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in _ST_DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has unsupported dtype {dtype}")
        np_dtype = np.dtype(_ST_DTYPES[dtype])
        count = math.prod(shape)
        if not (0 <= begin <= end <= len(body)) or end - begin != count * np_dtype.itemsize:
            raise ValueError(f"{path}: tensor '{name}' ({dtype} {shape}) has bad data_offsets [{begin}, {end}]")
        end_max = max(end_max, end)
        a = np.frombuffer(body[begin:end], dtype=np_dtype.newbyteorder("<"), count=count).reshape(shape)
        if dtype == "BF16":  # bf16 = the high 16 bits of a float32: widen exactly, then narrow exactly
            t = torch.from_numpy((a.astype(np.uint32) << 16).view(np.float32)).to(torch.bfloat16)
        else:
            t = torch.from_numpy(a.astype(np_dtype.newbyteorder("="), copy=True))
        tensors[name] = t
    if end_max != len(body):
        raise ValueError(f"{path}: {len(body) - end_max} bytes after the last tensor")
    return tensors, metadata


# ---- data -----------------------------------------------------------------------------------------

def read_idx(path):
    """An IDX file (plain or gzip) as a numpy array (uint8 data only: MNIST / Fashion-MNIST)."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not a uint8 IDX file (magic {raw[:4].hex()})")
    dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    payload = raw[4 + 4 * ndim:]
    if len(payload) != math.prod(dims):
        raise ValueError(f"{path}: {len(payload)} data bytes, expected {math.prod(dims)} for shape {dims}")
    return np.frombuffer(payload, dtype=np.uint8).reshape(dims)


def image_test_set(kind, directory):
    images = read_idx(os.path.join(directory, "t10k-images-idx3-ubyte"))
    labels = read_idx(os.path.join(directory, "t10k-labels-idx1-ubyte"))
    # mixtrain's FashionMNIST / MNIST defaults (float constants), applied through a 256-entry table
    # computed in double and rounded once to float, as src/data/dataset.cpp does.
    mean, std = {"fashion-mnist": (0.2860, 0.3530), "mnist": (0.1307, 0.3081)}[kind]
    mean, std = float(np.float32(mean)), float(np.float32(std))
    lut = ((np.arange(256, dtype=np.float64) / 255.0 - mean) / std).astype(np.float32)
    x = torch.from_numpy(lut[images]).unsqueeze(1)  # [N, 1, 28, 28]
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def parse_data(spec):
    if spec is None or spec == "fashion-mnist":
        return "fashion-mnist", FASHION_MNIST_DIR
    kind, sep, arg = spec.partition(":")
    if sep and kind in ("fashion-mnist", "mnist", "text"):
        return kind, arg
    if os.path.isdir(spec):
        return "fashion-mnist", spec
    raise SystemExit(f"error: --data '{spec}': expected fashion-mnist[:DIR], mnist:DIR, text:FILE or a directory")


# ---- evaluation ------------------------------------------------------------------------------------

def autocast_ctx(dtype):
    if dtype is None:
        return torch.autocast("cpu", enabled=False)
    return torch.autocast("cpu", dtype=dtype)


@torch.no_grad()
def classify_accuracy(model, x, y, autocast_dtype=None, batch=500):
    correct, loss_sum = 0, 0.0
    for i in range(0, len(x), batch):
        with autocast_ctx(autocast_dtype):
            logits = model(x[i:i + batch])
        logits = logits.float()
        loss_sum += torch.nn.functional.cross_entropy(logits, y[i:i + batch], reduction="sum").item()
        correct += (logits.argmax(1) == y[i:i + batch]).sum().item()
    return correct / len(x), loss_sum / len(x)


@torch.no_grad()
def lm_eval(model, tokens, autocast_dtype=None, batch=64):
    """Mean next-token loss and accuracy over [N, T+1] windows."""
    loss_sum, correct, count = 0.0, 0, 0
    for i in range(0, len(tokens), batch):
        w = tokens[i:i + batch]
        with autocast_ctx(autocast_dtype):
            logits = model(w[:, :-1])
        logits = logits.float().reshape(-1, logits.shape[-1])
        target = w[:, 1:].reshape(-1)
        loss_sum += torch.nn.functional.cross_entropy(logits, target, reduction="sum").item()
        correct += (logits.argmax(1) == target).sum().item()
        count += target.numel()
    return correct / count, loss_sum / count


def text_val_windows(path, context=pytorch_models.GPT_CONTEXT, val_fraction=0.1):
    """mixtrain's validation windows for --data text:FILE: TextDataset(kVal, stride = context)."""
    with open(path, "rb") as f:
        data = np.frombuffer(f.read(), dtype=np.uint8)
    n = len(data)
    split_at = int(math.floor(n * (1.0 - val_fraction) + 0.5))  # std::llround (n * 0.9 >= 0)
    part = data[split_at:]
    if len(part) < context + 1:
        raise SystemExit(f"error: the validation part of '{path}' has {len(part)} bytes, fewer than {context + 1}")
    count = (len(part) - context - 1) // context + 1
    idx = np.arange(count)[:, None] * context + np.arange(context + 1)[None, :]
    return torch.from_numpy(part[idx].astype(np.int64))  # [count, context + 1]


def fmt_acc(a):
    return "      -" if a is None else f"{100 * a:6.2f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", help="a `mixtrain train` output directory")
    ap.add_argument("--data", default=None, help="fashion-mnist[:DIR] (default), mnist:DIR, text:FILE, or a DIR")
    ap.add_argument("--weights", default=None, help="safetensors file (default RUN_DIR/model.safetensors); a "
                    "training checkpoint works too (its model.* tensors are used)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    weights = args.weights or os.path.join(args.run_dir, "model.safetensors")
    try:
        with open(os.path.join(args.run_dir, "summary.json")) as f:
            summary = json.load(f)
        tensors, meta = read_safetensors(weights)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if any(k.startswith("optim.") for k in tensors):  # a training checkpoint: model.<name>, optim.*
        tensors = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}

    name, precision = summary["model"], summary["precision"]
    dtypes = sorted({str(t.dtype).replace("torch.", "") for t in tensors.values()})
    print(f"run          {args.run_dir}")
    shown = {k: (v if len(v) <= 40 else f"<{len(v)} chars>") for k, v in meta.items()}
    print(f"weights      {weights}: {len(tensors)} tensors, {', '.join(dtypes)}; metadata {json.dumps(shown)}")
    print(f"model        {name}, trained in {precision} (master weights {summary.get('master_weights')}), "
          f"{summary.get('steps')} steps")

    model = pytorch_models.build_model(name)
    try:
        model.load_state_dict(tensors, strict=True)  # copy_ converts a bf16/fp16 tensor to the fp32 parameter
    except RuntimeError as e:
        print(f"FAIL: load_state_dict(strict=True) into the PyTorch '{name}' model:\n{e}")
        return 1
    model.eval()
    nparams = sum(p.numel() for p in model.parameters())
    print(f"load         load_state_dict(strict=True) OK: {len(tensors)} tensors, {nparams:,} parameters")

    # The precision mixtrain evaluated in, where PyTorch can run it on the CPU.
    same_dtype = {"bf16": torch.bfloat16}.get(precision)
    same_note = {"fp32": "(fp32 run: the fp32 evaluation is the same precision)",
                 "bf16": "(torch.autocast('cpu', dtype=torch.bfloat16))",
                 "fp16": "(not run: torch has no fp16 autocast on the CPU; the fp32 column is the check)"}[precision]

    if name == "gpt":
        return verify_gpt(model, tensors, summary, args, same_dtype, same_note)

    # The run's own --data spec (summary.json records it) unless given here; synthetic data has no
    # fixed test set, so such a run is checked on the default dataset (loading and shapes only).
    spec = args.data if args.data is not None else summary.get("data") or None
    if spec is not None and spec.startswith("synthetic"):
        spec = None
    kind, directory = parse_data(spec)
    if kind == "text":
        print(f"error: --data text:... is for gpt; '{name}' is an image model", file=sys.stderr)
        return 2
    x, y = image_test_set(kind, directory)
    acc32, loss32 = classify_accuracy(model, x, y)
    acc16, loss16 = classify_accuracy(model, x, y, same_dtype) if same_dtype is not None else (None, None)
    acc_mt, loss_mt = summary["test_accuracy"], summary["test_loss"]
    diff = acc32 - acc_mt
    print(f"data         {kind} test set, {len(x)} images from {directory}")
    print()
    print(f"{'':26}{'test accuracy':>14}{'test loss':>11}{'vs mixtrain':>13}")
    print(f"{'mixtrain (' + precision + ')':26}{fmt_acc(acc_mt):>14}{loss_mt:>11.4f}")
    print(f"{'PyTorch fp32':26}{fmt_acc(acc32):>14}{loss32:>11.4f}{100 * diff:>+12.2f}%")
    if acc16 is not None:
        print(f"{'PyTorch ' + precision + ' autocast':26}{fmt_acc(acc16):>14}{loss16:>11.4f}"
              f"{100 * (acc16 - acc_mt):>+12.2f}%")
    elif precision != "fp32":
        print(f"PyTorch {precision} autocast   {same_note}")
    print()
    images = round(abs(diff) * len(x))
    if abs(diff) <= ACC_TOLERANCE:
        print(f"PASS: PyTorch fp32 accuracy is within {ACC_TOLERANCE} of mixtrain's "
              f"(a net {images} of {len(x)} images)")
        return 0
    print(f"FAIL: PyTorch fp32 accuracy {acc32:.4f} differs from mixtrain's {acc_mt:.4f} by {abs(diff):.4f} "
          f"({images} images), more than the tolerance {ACC_TOLERANCE}: the weights did not load into an "
          f"equivalent model (layout, preprocessing or architecture mismatch)")
    return 1


def verify_gpt(model, tensors, summary, args, same_dtype, same_note):
    # The torch.nn.MultiheadAttention variant must take the renamed keys and give the same logits.
    mha = pytorch_models.build_model("gpt", attention="mha")
    try:
        mha.load_state_dict(pytorch_models.mixtrain_to_mha_keys(tensors), strict=True)
    except RuntimeError as e:
        print(f"FAIL: load_state_dict(strict=True) into the nn.MultiheadAttention GPT:\n{e}")
        return 1
    mha.eval()
    probe = torch.arange(2 * pytorch_models.GPT_CONTEXT).reshape(2, -1) * 37 % 256
    with torch.no_grad():
        logits, logits_mha = model(probe), mha(probe)
    mha_diff = (logits - logits_mha).abs().max().item()
    finite = bool(torch.isfinite(logits).all())
    print(f"forward      logits {list(logits.shape)}, finite: {finite}; nn.MultiheadAttention variant "
          f"(renamed keys): max |difference| {mha_diff:.2e}")
    if not finite or mha_diff > 1e-3:
        print("FAIL: " + ("non-finite logits" if not finite else "the nn.MultiheadAttention variant disagrees"))
        return 1

    kind, path = parse_data(args.data) if args.data else (None, None)
    if kind != "text":
        print("PASS: load_state_dict(strict=True) and a forward pass (no --data text:FILE given, so the "
              "validation loss is not compared)")
        return 0
    windows = text_val_windows(path)
    acc32, loss32 = lm_eval(model, windows)
    acc16, loss16 = lm_eval(model, windows, same_dtype) if same_dtype is not None else (None, None)
    acc_mt, loss_mt = summary["test_accuracy"], summary["test_loss"]
    print(f"data         validation part of {path}: {len(windows)} windows of {pytorch_models.GPT_CONTEXT} tokens")
    print()
    print(f"{'':26}{'token accuracy':>15}{'val loss':>10}{'loss vs mixtrain':>18}")
    print(f"{'mixtrain (' + summary['precision'] + ')':26}{fmt_acc(acc_mt):>15}{loss_mt:>10.4f}")
    print(f"{'PyTorch fp32':26}{fmt_acc(acc32):>15}{loss32:>10.4f}{loss32 - loss_mt:>+18.4f}")
    if acc16 is not None:
        print(f"{'PyTorch bf16 autocast':26}{fmt_acc(acc16):>15}{loss16:>10.4f}{loss16 - loss_mt:>+18.4f}")
    elif summary["precision"] != "fp32":
        print(f"PyTorch {summary['precision']} autocast   {same_note}")
    print()
    ok = abs(loss32 - loss_mt) <= GPT_LOSS_TOLERANCE and abs(acc32 - acc_mt) <= ACC_TOLERANCE
    if ok:
        print(f"PASS: PyTorch fp32 validation loss within {GPT_LOSS_TOLERANCE} and token accuracy within "
              f"{ACC_TOLERANCE} of mixtrain's")
        return 0
    print(f"FAIL: PyTorch fp32 loss {loss32:.4f} / accuracy {acc32:.4f} vs mixtrain's {loss_mt:.4f} / {acc_mt:.4f} "
          f"(tolerances {GPT_LOSS_TOLERANCE} / {ACC_TOLERANCE})")
    return 1


if __name__ == "__main__":
    sys.exit(main())

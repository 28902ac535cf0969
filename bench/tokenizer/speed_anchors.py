#!/usr/bin/env python3
"""Single-thread GPT-2 BPE encode speed anchors: tiktoken and HF tokenizers on one text file.

    speed_anchors.py TEXT [--tiktoken FILE] [--tokenizer-json FILE ...] [--reps N] [--no-batch]

Prints one JSON line per (library, mode) with the median over --reps runs (after one
untimed warm-up) of: seconds, tokens/s, MB/s (MB = 1e6 bytes of UTF-8 input), plus the
library version, the token count and every individual timing; and a first line describing
the machine (lscpu model name, /proc/cpuinfo family/model, Python version).

Modes:
  tiktoken/encode_ordinary        Encoding.encode_ordinary(whole text), one call.
  tiktoken/encode_ordinary_batch  Encoding.encode_ordinary_batch(docs, num_threads=1): the text
                                  split into documents (see below), a thread pool of 1;
                                  measures per-document overhead, token count differs slightly
                                  from the whole-text count (merges can't cross doc edges).
  tokenizers/encode               Tokenizer.from_file(tokenizer.json).encode(whole text,
                                  add_special_tokens=False); one per --tokenizer-json.
  tokenizers/encode_batch_fast    Tokenizer.encode_batch_fast(docs) (no offsets), same docs,
                                  RAYON_NUM_THREADS=1 so it stays single-threaded.
Docs for the batch modes: the text split after every "\\n%\\n" (fortune-file separator) or
after every "\\n\\n", whichever occurs more often; concatenating them gives the text back.

RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false are set before tokenizers is imported
(tiktoken's single encode call is single-threaded anyway). Input is read as strict UTF-8 in
binary mode (no newline translation).
"""

import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"


def machine_info():
    info = {"machine": platform.machine(), "python": platform.python_version(), "nproc": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        info["lscpu_model_name"] = m.group(1).strip() if m else None
    except (OSError, subprocess.SubprocessError):
        info["lscpu_model_name"] = None
    try:
        with open("/proc/cpuinfo") as f:
            ci = f.read()
        for key in ("cpu family", "model", "cpu MHz"):
            m = re.search(r"^%s\s*:\s*(.+)$" % re.escape(key), ci, re.M)
            if m:
                info["cpuinfo_" + key.replace(" ", "_")] = m.group(1).strip()
    except OSError:
        pass
    try:
        info["loadavg"] = os.getloadavg()
    except OSError:
        pass
    return info


def split_docs(text):
    sep = "\n%\n" if text.count("\n%\n") >= text.count("\n\n") else "\n\n"
    parts = text.split(sep)
    docs = [p + sep for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    assert "".join(docs) == text
    return docs


def bench(fn, reps):
    result = fn()  # warm-up
    times = []
    for _ in range(reps):
        result = None  # free the previous result OUTSIDE the timed region (a big
        t0 = time.perf_counter()  # tokenizers.Encoding takes ~0.1-0.5 s to free)
        r = fn()
        times.append(time.perf_counter() - t0)
        result = r
    return times, result


def report(lib, mode, version, times, n_tokens, n_bytes, **extra):
    med = statistics.median(times)
    rec = {"library": lib, "mode": mode, "version": version, **extra, "tokens": n_tokens, "bytes": n_bytes,
           "reps": len(times), "median_s": round(med, 6), "tokens_per_s": round(n_tokens / med),
           "MB_per_s": round(n_bytes / med / 1e6, 3), "times_s": [round(t, 6) for t in times]}
    print(json.dumps(rec), flush=True)


def load_ranks(path):
    import base64
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            line = line.strip()
            if line:
                tok, rank = line.split()
                ranks[base64.b64decode(tok, validate=True)] = int(rank)
    return ranks


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("text")
    ap.add_argument("--tiktoken", default="/tmp/gpt2-tokenizer/gpt2.tiktoken")
    ap.add_argument("--tokenizer-json", action="append", default=None,
                    help="tokenizer.json to time (repeatable); default: hf-json and hf-bytelevel under /tmp/gpt2-tokenizer")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-batch", action="store_true", help="skip the batch modes")
    a = ap.parse_args(argv)
    tjs = a.tokenizer_json or [p for p in ("/tmp/gpt2-tokenizer/hf-json/tokenizer.json",
                                           "/tmp/gpt2-tokenizer/hf-bytelevel/tokenizer.json") if os.path.exists(p)]

    with open(a.text, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8", errors="strict")
    n_bytes = len(raw)
    docs = split_docs(text)
    print(json.dumps({"machine": machine_info(), "text": a.text, "bytes": n_bytes, "chars": len(text),
                      "docs_for_batch": len(docs), "contains_endoftext": EOT in text}), flush=True)

    import tiktoken
    enc = tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT, mergeable_ranks=load_ranks(a.tiktoken),
                            special_tokens={EOT: 50256})
    times, ids = bench(lambda: enc.encode_ordinary(text), a.reps)
    whole_ids = ids
    report("tiktoken", "encode_ordinary", tiktoken.__version__, times, len(ids), n_bytes)
    if not a.no_batch:
        times, out = bench(lambda: enc.encode_ordinary_batch(docs, num_threads=1), a.reps)
        report("tiktoken", "encode_ordinary_batch(num_threads=1)", tiktoken.__version__, times,
               sum(map(len, out)), n_bytes, docs=len(docs))

    import tokenizers
    for tj in tjs:
        tk = tokenizers.Tokenizer.from_file(tj)
        shape = json.loads(tk.to_str())["pre_tokenizer"]["type"]
        times, e = bench(lambda: tk.encode(text, add_special_tokens=False), a.reps)
        report("tokenizers", "encode", tokenizers.__version__, times, len(e.ids), n_bytes,
               tokenizer_json=tj, pre_tokenizer=shape, ids_equal_tiktoken=(e.ids == whole_ids))
        if not a.no_batch:
            times, out = bench(lambda: tk.encode_batch_fast(docs, add_special_tokens=False), a.reps)
            report("tokenizers", "encode_batch_fast(RAYON_NUM_THREADS=1)", tokenizers.__version__, times,
                   sum(len(x.ids) for x in out), n_bytes, tokenizer_json=tj, pre_tokenizer=shape, docs=len(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

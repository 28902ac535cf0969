#!/usr/bin/env python3
"""mixtrain's GPT-2 tokenizer against tiktoken and transformers: token-for-token parity on real
text, and single-core encode speed against tiktoken and Hugging Face `tokenizers`.

    /tmp/venv/bin/python bench/tokenizer/parity.py [--build build] [--corpus FILE ...]
        [--tokenizers /tmp/gpt2-tokenizer] [--reps 5] [--json runs/tokenizer-parity.json]

Setup (the venv, the rank file, the three Hugging Face layouts, the corpora): bench/tokenizer/README.md.

1. Parity. For each corpus and each layout of the same GPT-2 tokenizer (gpt2.tiktoken, hf-json:
   tokenizer.json with a Split + ByteLevel pre-tokenizer, hf-bytelevel: tokenizer.json with a plain
   ByteLevel pre-tokenizer, hf-vocab: vocab.json + merges.txt) `mixtrain tokenize` writes a token
   file; it must equal, byte for byte, the file of reference_tokens.py from tiktoken
   (encode_ordinary) and from transformers (GPT2TokenizerFast.encode), both with <|endoftext|>
   first. Then a tokenizer mixtrain wrote (Tokenizer::save_pretrained, via the run directory of a
   short gpt2 run) is loaded by transformers' AutoTokenizer and must give the same ids too.
   Reports tokens compared and mismatches (the first one with its context).
2. Speed: `mixtrain tokenize --threads 1` (encode time, the tokenizer's loading excluded) and with
   every core, against bench/tokenizer/speed_anchors.py's single-thread numbers, median of --reps.
Exit status 1 if any parity check fails.
"""
import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
LAYOUTS = ["gpt2.tiktoken", "hf-json", "hf-bytelevel", "hf-vocab"]


def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, count = struct.unpack_from("<3i", data, 0)
    assert magic == 20240520 and version == 1, path
    return list(struct.unpack_from("<%dH" % count, data, 1024))


def compare(ours, ref, text_of):
    """(tokens compared, mismatches, first mismatch description)."""
    n = min(len(ours), len(ref))
    mismatches = sum(1 for a, b in zip(ours, ref) if a != b) + abs(len(ours) - len(ref))
    first = ""
    for i in range(n):
        if ours[i] != ref[i]:
            first = "at %d: ours %s, reference %s (around %r)" % (
                i, ours[i:i + 4], ref[i:i + 4], text_of(ref[max(0, i - 4):i + 4]))
            break
    if not first and len(ours) != len(ref):
        first = "lengths %d vs %d" % (len(ours), len(ref))
    return max(len(ours), len(ref)), mismatches, first


def mixtrain_tokenize(binary, tokenizer, corpus, out, threads):
    r = subprocess.run([binary, "tokenize", "--tokenizer", tokenizer, "--out", out, "--overwrite",
                        "--threads", str(threads), corpus], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("mixtrain tokenize failed: " + r.stderr)
    m = re.search(r"tokens in ([0-9.]+) s", r.stdout)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--corpus", nargs="+", default=["/tmp/corpus/fortunes.txt", "/tmp/corpus/utf8-heavy.txt"])
    ap.add_argument("--tokenizers", default="/tmp/gpt2-tokenizer")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    binary = os.path.join(args.build, "tools", "mixtrain", "mixtrain")
    python = sys.executable
    work = tempfile.mkdtemp(prefix="mixtrain-tokenizer-")
    results = {"parity": [], "speed": []}
    failed = False

    import tiktoken  # noqa: E402  (the venv's)
    from transformers import AutoTokenizer  # noqa: E402
    sys.path.insert(0, HERE)
    from speed_anchors import load_ranks  # noqa: E402
    enc = tiktoken.Encoding(name="gpt2", pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
                            mergeable_ranks=load_ranks(os.path.join(args.tokenizers, "gpt2.tiktoken")),
                            special_tokens={"<|endoftext|>": 50256})
    text_of = lambda ids: enc.decode(ids)  # noqa: E731

    # A tokenizer mixtrain wrote: the run directory of a 1-step gpt2 run with --tokenizer.
    saved = os.path.join(work, "run")
    config = os.path.join(work, "config.json")
    with open(config, "w") as f:
        json.dump({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 32, "n_layer": 1,
                   "n_head": 2}, f)
    sample = os.path.join(work, "sample.txt")
    with open(args.corpus[0], "rb") as src, open(sample, "wb") as dst:
        dst.write(src.read(200000))
    r = subprocess.run([binary, "train", "--model", "gpt2", "--gpt2-config", config, "--tokenizer",
                        os.path.join(args.tokenizers, "gpt2.tiktoken"), "--data", "text:" + sample, "--context", "32",
                        "--batch-size", "2", "--steps", "1", "--out", saved, "--threads", "2"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("mixtrain train failed: " + r.stderr)
    hf_saved = AutoTokenizer.from_pretrained(saved)

    for corpus in args.corpus:
        name = os.path.splitext(os.path.basename(corpus))[0]
        refs = {}
        for ref, flag in [("tiktoken", ["--tiktoken", os.path.join(args.tokenizers, "gpt2.tiktoken")]),
                          ("transformers", ["--tokenizer-dir", os.path.join(args.tokenizers, "hf-vocab")])]:
            out = os.path.join(work, "%s.%s.bin" % (name, ref))
            subprocess.run([python, os.path.join(HERE, "reference_tokens.py")] + flag + [corpus, "--out", out],
                           check=True, capture_output=True)
            refs[ref] = read_tokens(out)
        with open(corpus, "rb") as f:
            text = f.read().decode("utf-8")
        refs["transformers (mixtrain's saved files)"] = [50256] + hf_saved.encode(text)
        for layout in LAYOUTS + ["mixtrain-saved"]:
            source = saved if layout == "mixtrain-saved" else os.path.join(args.tokenizers, layout)
            out = os.path.join(work, "%s.mixtrain.%s.bin" % (name, layout))
            mixtrain_tokenize(binary, source, corpus, out, threads=2)
            ours = read_tokens(out)
            for ref, ref_tokens in refs.items():
                n, bad, first = compare(ours, ref_tokens, text_of)
                failed = failed or bad > 0
                row = {"corpus": name, "bytes": os.path.getsize(corpus), "layout": layout, "reference": ref,
                       "tokens": n, "mismatches": bad, "first": first}
                results["parity"].append(row)
                print("parity %-10s %-15s vs %-38s %8d tokens, %d mismatches %s" % (name, layout, ref, n, bad, first))

    # Speed: mixtrain (one thread, every thread) and the anchors, on the first corpus.
    corpus = args.corpus[0]
    nbytes = os.path.getsize(corpus)
    out = os.path.join(work, "speed.bin")
    ntok = len(read_tokens(os.path.join(work, "%s.tiktoken.bin" % os.path.splitext(os.path.basename(corpus))[0]))) - 1
    for threads in (1, os.cpu_count()):
        times = [mixtrain_tokenize(binary, os.path.join(args.tokenizers, "gpt2.tiktoken"), corpus, out, threads)
                 for _ in range(args.reps)]
        med = statistics.median(times)
        row = {"library": "mixtrain", "mode": "tokenize --threads %d" % threads, "tokens_per_s": ntok / med,
               "MB_per_s": nbytes / med / 1e6, "times_s": times}
        results["speed"].append(row)
        print(json.dumps(row))
    r = subprocess.run([python, os.path.join(HERE, "speed_anchors.py"), corpus, "--reps", str(args.reps),
                        "--tiktoken", os.path.join(args.tokenizers, "gpt2.tiktoken"),
                        "--tokenizer-json", os.path.join(args.tokenizers, "hf-json", "tokenizer.json"),
                        "--tokenizer-json", os.path.join(args.tokenizers, "hf-bytelevel", "tokenizer.json")],
                       capture_output=True, text=True, check=True)
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            results["speed"].append(row)
            print(line)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print("parity: %s" % ("FAILED" if failed else "all equal"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

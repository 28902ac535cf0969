#!/usr/bin/env python3
"""Build Hugging Face layouts of the GPT-2 BPE tokenizer from a tiktoken rank file, offline.

Input: gpt2.tiktoken (50256 lines "base64(token bytes) rank"). It ships in the
openai-whisper sdist on PyPI (MIT licence) at whisper/assets/gpt2.tiktoken:

    pip download openai-whisper --no-deps --no-binary :all: -d /tmp/whisper-dl
    tar xzf /tmp/whisper-dl/openai_whisper-*.tar.gz --wildcards -O \\
        '*/whisper/assets/gpt2.tiktoken' > /tmp/gpt2-tokenizer/gpt2.tiktoken

(openai-whisper 20250625; sha256 of the file
306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930.)

Output (under --out-dir, default /tmp/gpt2-tokenizer):
  hf-json/       transformers.integrations.tiktoken.convert_tiktoken_to_fast() output:
                 tokenizer.json (+ tiktoken/tokenizer.model) plus tokenizer_config.json and
                 special_tokens_map.json.  Its pre_tokenizer is
                 Sequence[Split(tiktoken regex, Isolated), ByteLevel(use_regex=false)], its
                 model has ignore_merges=true and ~108k merges (every (a, b) with a, b, a+b in
                 the vocab, ordered by rank of a+b), not GPT-2's 50000.
  hf-bytelevel/  the same tokenizer.json with ONLY the pre_tokenizer replaced by plain
                 ByteLevel(add_prefix_space=false, trim_offsets=true, use_regex=true), the
                 shape of the GPT-2 hub repo's tokenizer.json (same configs as hf-json).
  hf-vocab/      classic layout: vocab.json + merges.txt ("#version: 0.2" first line) +
                 tokenizer_config.json + special_tokens_map.json, no tokenizer.json.
                 merges.txt holds the canonical 50000 GPT-2 merges, recovered from the ranks
                 (merge for token of rank r = the two parts that BPE with ranks < r leaves);
                 they are the converter's merges restricted to one pair per token and in the
                 same order.  Pass --vocab-merges converter to write the converter's ~108k
                 merges instead.

No network access: the tiktoken Encoding is built by hand and HF_HUB_OFFLINE=1 is set.
"""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"
EOT_ID = 50256

PLAIN_BYTELEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}

TOKENIZER_CONFIG = {
    "add_bos_token": False,
    "add_prefix_space": False,
    "added_tokens_decoder": {
        str(EOT_ID): {
            "content": EOT, "lstrip": False, "normalized": True, "rstrip": False,
            "single_word": False, "special": True,
        }
    },
    "bos_token": EOT,
    "clean_up_tokenization_spaces": False,
    "eos_token": EOT,
    "errors": "replace",
    "model_max_length": 1024,
    "pad_token": None,
    "tokenizer_class": "GPT2Tokenizer",
    "unk_token": EOT,
}
SPECIAL_TOKENS_MAP = {"bos_token": EOT, "eos_token": EOT, "unk_token": EOT}


def load_ranks(path):
    """Parse 'base64 rank' lines (same as tiktoken.load.load_tiktoken_bpe, no caching)."""
    import base64
    ranks = {}
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            tok, rank = line.split()
            ranks[base64.b64decode(tok, validate=True)] = int(rank)
    return ranks


def make_encoding(tiktoken_file):
    import tiktoken
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT, mergeable_ranks=load_ranks(tiktoken_file),
                             special_tokens={EOT: EOT_ID})


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def canonical_merges(ranks):
    """GPT-2's merges.txt order: one merge per multi-byte token, by rank."""
    b2u = bytes_to_unicode()
    tok = lambda b: "".join(b2u[x] for x in b)

    def bpe_below(b, max_rank):
        parts = [bytes([x]) for x in b]
        while True:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < max_rank and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                return parts
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]

    merges = []
    for b, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(b) == 1:
            continue
        p = bpe_below(b, r)
        if len(p) != 2:
            raise ValueError(f"token {b!r} (rank {r}) is not a merge of two lower-ranked tokens: {p}")
        merges.append((tok(p[0]), tok(p[1])))
    return merges


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiktoken", default="/tmp/gpt2-tokenizer/gpt2.tiktoken")
    ap.add_argument("--out-dir", default="/tmp/gpt2-tokenizer")
    ap.add_argument("--vocab-merges", choices=["canonical", "converter"], default="canonical")
    a = ap.parse_args(argv)
    out = Path(a.out_dir)
    enc = make_encoding(a.tiktoken)
    ranks = enc._mergeable_ranks
    assert len(ranks) == 50256 and sorted(ranks.values()) == list(range(50256)), "not the GPT-2 rank file"

    from transformers.integrations.tiktoken import convert_tiktoken_to_fast

    # 1. hf-json: the converter's output, untouched, plus configs
    out.mkdir(parents=True, exist_ok=True)
    d_json = out / "hf-json"
    if d_json.exists():
        shutil.rmtree(d_json)
    convert_tiktoken_to_fast(enc, str(d_json))
    write_json(d_json / "tokenizer_config.json", TOKENIZER_CONFIG)
    write_json(d_json / "special_tokens_map.json", SPECIAL_TOKENS_MAP)
    with open(d_json / "tokenizer.json", encoding="utf-8") as f:
        tj = json.load(f)
    print("hf-json pre_tokenizer:", json.dumps(tj["pre_tokenizer"]), file=sys.stderr)

    # 2. hf-bytelevel: same tokenizer.json, plain ByteLevel pre-tokenizer
    d_bl = out / "hf-bytelevel"
    d_bl.mkdir(parents=True, exist_ok=True)
    tj_bl = dict(tj)
    tj_bl["pre_tokenizer"] = PLAIN_BYTELEVEL
    with open(d_bl / "tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tj_bl, f, ensure_ascii=False)
    write_json(d_bl / "tokenizer_config.json", TOKENIZER_CONFIG)
    write_json(d_bl / "special_tokens_map.json", SPECIAL_TOKENS_MAP)

    # 3. hf-vocab: classic vocab.json + merges.txt
    d_v = out / "hf-vocab"
    d_v.mkdir(parents=True, exist_ok=True)
    vocab = dict(tj["model"]["vocab"])
    vocab[EOT] = EOT_ID  # GPT-2's encoder.json has it as the last entry
    assert sorted(vocab.values()) == list(range(50257))
    with open(d_v / "vocab.json", "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    if a.vocab_merges == "canonical":
        merges = canonical_merges(ranks)
        conv = [tuple(m) for m in tj["model"]["merges"]]
        pos = {m: i for i, m in enumerate(conv)}
        idx = [pos[m] for m in merges]  # KeyError => not a subset
        assert idx == sorted(idx), "canonical merges not in converter order"
    else:
        merges = [tuple(m) for m in tj["model"]["merges"]]
    with open(d_v / "merges.txt", "w", encoding="utf-8", newline="\n") as f:
        f.write("#version: 0.2\n")
        for x, y in merges:
            assert " " not in x and " " not in y
            f.write(f"{x} {y}\n")
    write_json(d_v / "tokenizer_config.json", TOKENIZER_CONFIG)
    write_json(d_v / "special_tokens_map.json", SPECIAL_TOKENS_MAP)
    print(f"hf-vocab: {len(vocab)} vocab entries, {len(merges)} merges ({a.vocab_merges}); "
          f"converter tokenizer.json: {len(tj['model']['merges'])} merges, "
          f"ignore_merges={tj['model'].get('ignore_merges')}", file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Write reference GPT-2 token ids of a text file in llm.c's token file format.

    reference_tokens.py (--tiktoken FILE | --tokenizer-dir DIR) INPUT.txt --out OUT.bin

The whole input is ONE document: ids = [50256 (<|endoftext|>)] + encode(text).
  --tiktoken FILE      tiktoken Encoding built by hand from the rank file (GPT-2 regex,
                       special <|endoftext|>=50256); text ids via encode_ordinary(text), so a
                       literal "<|endoftext|>" in the text is tokenized as ordinary text.
  --tokenizer-dir DIR  transformers GPT2TokenizerFast.from_pretrained(DIR).encode(text); NOTE
                       transformers turns a literal "<|endoftext|>" in the text into id 50256
                       (a warning goes to stderr when the input contains it).

Input is read in binary and decoded as strict UTF-8 (no newline translation: "\\r\\n" and lone
"\\r" are kept).  Output (llm.c data file format, as written by llm.c's dev/data/data_common.py):
  header: 256 little-endian int32: [0]=20240520 (magic), [1]=1 (version), [2]=token count
          (including the leading 50256), rest 0;
  body:   token count little-endian uint16.
Stdout: one JSON line {"tokens": N, "seconds": t} where t is the wall time of the encode call
only (N includes the leading 50256).
"""

import argparse
import json
import os
import struct
import sys
import time
from array import array

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MAGIC = 20240520
VERSION = 1
EOT = "<|endoftext|>"
EOT_ID = 50256
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


from speed_anchors import load_ranks  # noqa: E402  (one reader of rank files for the anchors)


def make_tiktoken_encoder(path):
    import tiktoken
    enc = tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT, mergeable_ranks=load_ranks(path),
                            special_tokens={EOT: EOT_ID})
    return enc.encode_ordinary


def make_hf_encoder(d):
    from transformers import GPT2TokenizerFast
    tok = GPT2TokenizerFast.from_pretrained(d)
    tok.model_max_length = 1 << 62  # silence the "longer than 1024" warning
    return tok.encode


def write_llmc_tokens(path, ids):
    if any(not (0 <= t < 65536) for t in ids):
        raise ValueError("token id out of uint16 range")
    header = [0] * 256
    header[0], header[1], header[2] = MAGIC, VERSION, len(ids)
    body = array("H", ids)
    if sys.byteorder != "little":
        body.byteswap()
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(body.tobytes())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tiktoken", metavar="FILE", help="tiktoken rank file (gpt2.tiktoken)")
    src.add_argument("--tokenizer-dir", metavar="DIR", help="Hugging Face tokenizer directory")
    ap.add_argument("input", help="UTF-8 text file, tokenized as one document")
    ap.add_argument("--out", required=True, help="output .bin in llm.c token format")
    a = ap.parse_args(argv)

    with open(a.input, "rb") as f:
        text = f.read().decode("utf-8", errors="strict")
    if EOT in text:
        what = ("tokenized as ordinary text (encode_ordinary)" if a.tiktoken
                else "turned into the special id 50256 by transformers")
        print(f"warning: {a.input} contains {text.count(EOT)} literal {EOT!r}; {what}", file=sys.stderr)

    encode = make_tiktoken_encoder(a.tiktoken) if a.tiktoken else make_hf_encoder(a.tokenizer_dir)
    t0 = time.perf_counter()
    ids = encode(text)
    seconds = time.perf_counter() - t0
    ids = [EOT_ID] + list(ids)
    write_llmc_tokens(a.out, ids)
    print(json.dumps({"tokens": len(ids), "seconds": round(seconds, 6)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

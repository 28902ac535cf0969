#!/usr/bin/env python3
"""Check that the GPT-2 tokenizer layouts built by build_gpt2_tokenizer_dirs.py agree with tiktoken.

For each HF dir it compares, against tiktoken's encode_ordinary on the same text:
  * transformers GPT2TokenizerFast.from_pretrained(dir).encode(text)
  * tokenizers.Tokenizer.from_file(dir/tokenizer.json).encode(text).ids (dirs that have one)
on built-in sentences and, optionally, whole corpus files (--corpus FILE ..., read as
strict UTF-8 in binary mode so "\\r\\n" survives).  It also prints the pre-tokenizer shape
found in each tokenizer.json and the one transformers actually ends up using.
Exit status 1 on any mismatch.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build_gpt2_tokenizer_dirs import make_encoding  # noqa: E402

SENTENCES = [
    "Hello world",
    " Hello world",
    " it's",
    "it's it'S it’s IT'S we'll they've I'm you'd don't",
    "   leading and trailing   ",
    "numbers: 1 12 123 1234 12345 3.14159 1,000,000 2024-05-20 0x7fff ٣١٤ १२३ １２３",
    "emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸 #️⃣",
    "Γειά σου κόσμε Привет мир مرحبا بالعالم שלום עולם नमस्ते दुनिया สวัสดีชาวโลก 你好世界 こんにちは 안녕하세요",
    "e\u0301cole nai\u0308ve Z\u0335\u0321\u0327a\u0336\u0322l\u0334g\u0337o\u0338",
    "tabs\tand\r\nCRLF\rCR\u00a0nbsp\u2003em\u3000ideo\u2028ls\u0085nel  \n\n  \t",
    "def f(x):\n    return x**2  # comment\n",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" * 4,
    "",
    " ",
    "\n",
]


def read_text(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="strict")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiktoken", default="/tmp/gpt2-tokenizer/gpt2.tiktoken")
    ap.add_argument("--dirs", nargs="+", default=[
        "/tmp/gpt2-tokenizer/hf-json", "/tmp/gpt2-tokenizer/hf-bytelevel", "/tmp/gpt2-tokenizer/hf-vocab"])
    ap.add_argument("--corpus", nargs="*", default=[])
    a = ap.parse_args(argv)

    import tokenizers
    import transformers
    from transformers import GPT2TokenizerFast

    enc = make_encoding(a.tiktoken)
    texts = [("sentence %d" % i, s) for i, s in enumerate(SENTENCES)]
    texts += [(p, read_text(p)) for p in a.corpus]
    ref = {name: enc.encode_ordinary(t) for name, t in texts}
    for p in a.corpus:
        t = dict(texts)[p]
        print(json.dumps({"corpus": p, "bytes": len(t.encode("utf-8")), "tiktoken_tokens": len(ref[p]),
                          "contains_endoftext": "<|endoftext|>" in t}))
    ok = True
    for d in a.dirs:
        tj_path = os.path.join(d, "tokenizer.json")
        encoders = {}
        tok = GPT2TokenizerFast.from_pretrained(d)
        encoders["transformers"] = tok.encode
        shape = None
        if os.path.exists(tj_path):
            with open(tj_path, encoding="utf-8") as f:
                shape = json.load(f)["pre_tokenizer"]
            raw = tokenizers.Tokenizer.from_file(tj_path)
            encoders["tokenizers"] = lambda t, raw=raw: raw.encode(t, add_special_tokens=False).ids
        used = json.loads(tok.backend_tokenizer.to_str())
        print(json.dumps({"dir": d, "tokenizer_json_pre_tokenizer": shape,
                          "transformers_uses_pre_tokenizer": used["pre_tokenizer"],
                          "transformers_merges": len(used["model"]["merges"]),
                          "transformers_ignore_merges": used["model"].get("ignore_merges"),
                          "transformers_class": type(tok).__name__}, ensure_ascii=False))
        for ename, fn in encoders.items():
            bad = []
            for name, t in texts:
                ids = fn(t)
                if ids != ref[name]:
                    n = next((i for i, (x, y) in enumerate(zip(ids, ref[name])) if x != y), min(len(ids), len(ref[name])))
                    bad.append({"text": name, "len": len(ids), "ref_len": len(ref[name]), "first_diff": n,
                                "got": ids[max(0, n - 3):n + 5], "want": ref[name][max(0, n - 3):n + 5]})
            ok &= not bad
            print(json.dumps({"dir": d, "encoder": ename, "texts": len(texts), "mismatches": bad}, ensure_ascii=False))
    # the special string: transformers treats it as the special token, encode_ordinary does not
    tok = GPT2TokenizerFast.from_pretrained(a.dirs[0])
    s = "a<|endoftext|>b"
    print(json.dumps({"special_in_text": s, "tiktoken_encode_ordinary": enc.encode_ordinary(s),
                      "transformers_encode": tok.encode(s)}))
    print(json.dumps({"versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                                   "tiktoken": __import__("tiktoken").__version__}, "all_match": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

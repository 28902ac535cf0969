#!/usr/bin/env python3
"""GPT-2 with text in and text out, against transformers: a GPT2LMHeadModel with GPT-2's vocabulary
saved by transformers together with its tokenizer, and mixtrain's greedy continuation of text
prompts compared with transformers' generate + decode, text for text.

    /tmp/venv/bin/python bench/gpt2/text_interop.py [--build build] [--tokenizer /tmp/gpt2-tokenizer/hf-vocab]
        [--work /tmp/gpt2-text-interop] [--layers 4] [--embd 256] [--max-new-tokens 40]

The model: GPT-2's vocabulary (50257) and 1024 positions, a narrower and shallower body (C 256, 4
layers, 4 heads by default: random weights, so that it runs in seconds), initialised by transformers
from seed 0 with initializer_range 0.2 (GPT-2's 0.02 gives near-uniform logits whose argmax is decided
by rounding noise, and a greedy comparison would test the noise). The directory holds config.json,
model.safetensors and the tokenizer's files (AutoTokenizer.save_pretrained of --tokenizer).

For each prompt: transformers' ids = tokenizer(prompt), generate(do_sample=False, the model's
eos_token_id 50256 stops it), continuation = decode(generated ids, skip_special_tokens=True);
mixtrain: `mixtrain generate --model gpt2 --weights DIR --prompt P --temperature 0 --json`, its
"text". Both must be the same string; the prompt ids (mixtrain's "prompt_tokens" vs the tokenizer's)
and the generated ids must be the same too. Exit status 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys

import torch
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = [
    "The meaning of life is",
    "Once upon a time, in a village far away,",
    "def fibonacci(n):\n    ",
    "Ça va? Très bien, merci. 日本語のテキストも",
    "  leading spaces and\ttabs\n\nand a blank line",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--tokenizer", default="/tmp/gpt2-tokenizer/hf-vocab")
    ap.add_argument("--work", default="/tmp/gpt2-text-interop")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    args = ap.parse_args()
    cli = os.path.join(args.build, "tools", "mixtrain", "mixtrain")

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    config = GPT2Config(n_embd=args.embd, n_layer=args.layers, n_head=4, vocab_size=50257, n_positions=1024,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.2,
                        bos_token_id=50256, eos_token_id=50256)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    model.save_pretrained(args.work)
    tok.save_pretrained(args.work)
    print("model and tokenizer in %s: %s" % (args.work, ", ".join(sorted(os.listdir(args.work)))))

    failed = False
    for prompt in PROMPTS:
        ids = tok(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                 do_sample=False, eos_token_id=50256, pad_token_id=50256)
        theirs_ids = out[0, ids.shape[1]:].tolist()
        theirs = tok.decode(theirs_ids, skip_special_tokens=True)
        r = subprocess.run([cli, "generate", "--model", "gpt2", "--weights", args.work, "--prompt", prompt,
                            "--temperature", "0", "--max-new-tokens", str(args.max_new_tokens), "--json"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("mixtrain generate failed: " + r.stderr)
            sys.exit(1)
        ours = json.loads(r.stdout)
        same_prompt = ours["prompt_tokens"] == ids[0].tolist()
        same_ids = ours["tokens"] == theirs_ids
        same_text = ours["text"] == theirs
        failed = failed or not (same_prompt and same_ids and same_text)
        print("%-45r prompt ids %s, %d generated ids %s, text %s%s" % (
            prompt[:40], "equal" if same_prompt else "DIFFER", len(theirs_ids), "equal" if same_ids else "DIFFER",
            "equal" if same_text else "DIFFERS", "" if same_text else ":\n  ours   %r\n  theirs %r" % (ours["text"], theirs)))
        print("    -> %r" % theirs[:100])
    print("text interop: %s" % ("FAILED" if failed else "every continuation equal"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

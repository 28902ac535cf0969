#!/usr/bin/env bash
# The bytes a set of short runs produces, hashed: run it with the binary from before and after a
# change that should not change what mixtrain computes (a restructuring), and diff the two outputs.
#
#   scripts/hash-sample.sh MIXTRAIN_BINARY WORK_DIR > hashes.txt
#
# Runs every model (mlp, mlp-wide, cnn on synthetic images, gpt on a text, gpt2 from the committed
# tiny fixture on a token file) in fp32, bf16, fp16 and fp8, the bf16 weight-update modes, compact
# state, activation checkpointing, a resumed run, generation and an evaluation; prints one line
# "sha256  file" per weight file, checkpoint and generated output, and the losses of each run's
# metrics.jsonl and summary.json (times and rates left out: they change from run to run).
set -euo pipefail
bin=$(realpath "$1")
work=$2
root=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$work" && mkdir -p "$work"
cd "$work"
fixture=$root/tests/fixtures/tiny-gpt2

# A text for the byte-level gpt: a fixed pseudo-random mix of words (deterministic, no files needed).
python3 - <<'PY'
import random, struct
r = random.Random(7)
words = "the of and to a in is it you that he was for on are with as I his they be at one have this".split()
open("corpus.txt", "w").write(" ".join(r.choice(words) for _ in range(20000)) + "\n")
# llm.c token files for the tiny gpt2 (vocabulary 64)
def tokens(path, n, seed):
    g = random.Random(seed)
    toks = [g.randrange(64) for _ in range(n)]
    hdr = struct.pack("<256i", *([20240520, 1, n] + [0] * 253))
    open(path, "wb").write(hdr + struct.pack("<%dH" % n, *toks))
tokens("tokens-train.bin", 4000, 1)
tokens("tokens-val.bin", 600, 2)
PY

run() {  # run NAME ARGS...: one training run into runs/NAME
  local name=$1
  shift
  "$bin" train --threads 2 --seed 5 --out "runs/$name" --overwrite "$@" > "runs-$name.log" 2>&1 ||
    { echo "hash-sample: run $name failed:" >&2; cat "runs-$name.log" >&2; exit 1; }
}
img=(--data synthetic:600 --steps 4 --batch-size 32 --checkpoint-every 2)
gpt=(--model gpt --data text:corpus.txt --context 32 --steps 3 --batch-size 4 --checkpoint-every 3)
gpt2=(--model gpt2 --init-from "$fixture" --data tokens:tokens-train.bin,tokens-val.bin --context 16 --steps 4
      --batch-size 4 --checkpoint-every 2)
for p in fp32 bf16 fp16 fp8; do
  run "mlp-$p" --model mlp "${img[@]}" --precision "$p"
  run "cnn-$p" --model cnn "${img[@]}" --precision "$p"
  run "gpt-$p" "${gpt[@]}" --precision "$p"
  run "gpt2-$p" "${gpt2[@]}" --precision "$p"
done
run mlp-wide-bf16 --model mlp-wide "${img[@]}" --precision bf16
for m in stochastic kahan nearest; do
  run "mlp-bf16-$m" --model mlp "${img[@]}" --precision bf16 --master-weights bf16 --weight-update "$m"
done
run mlp-bf16-compact --model mlp "${img[@]}" --precision bf16 --master-weights bf16 --compact-state
run gpt-bf16-ckpt "${gpt[@]}" --precision bf16 --checkpoint-activations
run gpt2-resumed "${gpt2[@]}" --precision bf16 --resume runs/gpt2-bf16/checkpoint-2.safetensors

mkdir -p gen
"$bin" generate --model gpt2 --weights runs/gpt2-bf16 --tokens 1,2,3 --max-new-tokens 12 --temperature 0 --json \
  --threads 2 > gen/gpt2-greedy.json
"$bin" generate --model gpt2 --weights runs/gpt2-fp32 --tokens 1,2,3 --max-new-tokens 12 --seed 3 --json \
  --threads 2 > gen/gpt2-sampled.json
"$bin" generate --model gpt --weights runs/gpt-fp32/model.safetensors --prompt "the of" --max-new-tokens 16 \
  --temperature 0 --json --threads 2 > gen/gpt-greedy.json

# Losses and counts only (times, rates, memory of the allocator and host names vary).
python3 - <<'PY'
import glob, json
keep = ("loss", "scale", "skipped", "accuracy", "num_parameters", "lr")
for f in sorted(glob.glob("runs/*/metrics.jsonl")):
    with open(f) as src, open(f + ".losses", "w") as dst:
        for line in src:
            d = json.loads(line)
            dst.write(json.dumps({k: v for k, v in d.items() if any(s in k for s in keep)}, sort_keys=True) + "\n")
for f in sorted(glob.glob("runs/*/summary.json")):
    d = json.load(open(f))
    json.dump({k: v for k, v in d.items() if any(s in k for s in ("loss", "final_scale", "skipped", "accuracy"))},
              open(f + ".losses", "w"), sort_keys=True)
for f in sorted(glob.glob("gen/*.json")):
    d = json.load(open(f))
    json.dump({k: v for k, v in d.items() if k in ("tokens", "text")}, open(f + ".out", "w"), sort_keys=True)
PY
find runs gen \( -name '*.safetensors' -o -name '*.losses' -o -name '*.out' -o -name config.json \) -print0 |
  sort -z | xargs -0 sha256sum

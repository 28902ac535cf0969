#!/usr/bin/env bash
# GPT-2 on real text, end to end with the CLI alone: tokenize Debian's fortunes with GPT-2's
# tokenizer, train a small GPT-2 from scratch in fp32 and bf16 (same seed, same data order), report
# the validation loss side by side, and generate from a text prompt with each result.
#
#   bench/gpt2/text_workflow.sh [BUILD_DIR] [WORK_DIR] [STEPS]
#
# Needs: fortunes (apt-get install fortunes) and GPT-2's tokenizer: a Hugging Face directory or the
# gpt2.tiktoken rank file (bench/tokenizer/README.md says where one comes from), in $TOKENIZER
# (default /tmp/gpt2-tokenizer/gpt2.tiktoken).
set -euo pipefail
build=${1:-build}
work=${2:-/tmp/gpt2-text-workflow}
steps=${3:-600}
tokenizer=${TOKENIZER:-/tmp/gpt2-tokenizer/gpt2.tiktoken}
mixtrain=$build/tools/mixtrain/mixtrain
mkdir -p "$work"
# shellcheck source=bench/gpt2/fortunes_tokens.sh
source "$(dirname "$0")/fortunes_tokens.sh"
"$mixtrain" compare --model gpt2 --gpt2-config "$work/config.json" --tokenizer "$tokenizer" \
  --data "tokens:$work/train.bin,$work/val.bin" --precisions fp32,bf16 --context 128 --batch-size 16 \
  --steps "$steps" --lr 2e-3 --weight-decay 0.1 --seed 1 --sample-every $((steps / 3)) --overwrite \
  --out "$work/compare"
for p in fp32 bf16; do
  python3 -c "import json,math,sys; s=json.load(open(sys.argv[1])); print(sys.argv[2], 'validation loss %.4f (perplexity %.1f), final training loss %.4f, step %.0f ms' % (s['test_loss'], math.exp(s['test_loss']), s['final_loss'], s['step_ms_median']))" \
    "$work/compare/$p/summary.json" "$p"
done
for p in fp32 bf16; do
  echo "--- generate, $p weights, greedy:"
  "$mixtrain" generate --model gpt2 --weights "$work/compare/$p" --prompt "Q: What is the meaning of life?
A:" --max-new-tokens 48 --temperature 0
done

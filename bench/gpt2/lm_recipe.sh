#!/usr/bin/env bash
# The language-model recipe on real text with the CLI alone: Debian's fortunes tokenized with GPT-2's
# tokenizer, a small GPT-2 trained from scratch in fp32 and bf16 (same seed, same data order) with
# gradient accumulation, clipping, warmup then cosine decay, and evaluation during training; the
# validation loss of both precisions side by side at every evaluation, and TensorBoard's own reader
# checked against metrics.jsonl when the tensorboard Python package is at hand.
#
#   bench/gpt2/lm_recipe.sh [BUILD_DIR] [WORK_DIR] [STEPS]
#
# Needs: fortunes (apt-get install fortunes) and GPT-2's tokenizer in $TOKENIZER (default
# /tmp/gpt2-tokenizer/gpt2.tiktoken; bench/tokenizer/README.md says where one comes from); optional:
# $PYTHON with the tensorboard package for the event-file check (default /tmp/venv/bin/python).
set -euo pipefail
build=${1:-build}
work=${2:-/tmp/gpt2-lm-recipe}
steps=${3:-200}
tokenizer=${TOKENIZER:-/tmp/gpt2-tokenizer/gpt2.tiktoken}
python=${PYTHON:-/tmp/venv/bin/python}
root=$(cd "$(dirname "$0")/../.." && pwd)
mixtrain=$build/tools/mixtrain/mixtrain
mkdir -p "$work"
# shellcheck source=bench/gpt2/fortunes_tokens.sh
source "$(dirname "$0")/fortunes_tokens.sh"
# 8 sequences of 64 tokens per micro-batch, 4 micro-batches per step (2048 tokens a step), clipping
# at 1.0, 10% of the steps warming up, cosine to 0.1x, 8 validation batches every steps/5 steps.
"$mixtrain" compare --model gpt2 --gpt2-config "$work/config.json" --tokenizer "$tokenizer" \
  --data "tokens:$work/train.bin,$work/val.bin" --precisions fp32,bf16 --context 64 --batch-size 8 \
  --grad-accum 4 --grad-clip 1.0 --warmup-steps $((steps / 10)) --eval-every $((steps / 5)) --eval-batches 8 \
  --steps "$steps" --lr 2e-3 --weight-decay 0.1 --seed 1 --overwrite --out "$work/compare"
for p in fp32 bf16; do
  python3 -c "
import json, math, sys
s = json.load(open(sys.argv[1]))
clipped = sum(1 for l in open(sys.argv[3]) if json.loads(l).get('grad_norm', 0) > 1.0)
print(sys.argv[2], 'validation loss %.4f (perplexity %.1f), final training loss %.4f, %d x %d examples a step, '
      '%d of %d steps clipped, step %.0f ms' % (s['test_loss'], math.exp(s['test_loss']), s['final_loss'],
      s['accumulation_steps'], s['batch_size'], clipped, s['steps'], s['step_ms_median']))" \
    "$work/compare/$p/summary.json" "$p" "$work/compare/$p/metrics.jsonl"
done
if "$python" -c "import tensorboard" 2>/dev/null; then
  "$python" "$root/bench/tensorboard/check_events.py" "$work/compare" | tail -1
else
  echo "(no tensorboard package for $python: event files not checked with TensorBoard's reader)"
fi

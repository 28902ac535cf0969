# Sourced by text_workflow.sh and lm_recipe.sh: Debian's fortunes as one text file, tokenized with
# GPT-2's tokenizer into $work/train.bin and $work/val.bin (5% validation), and $work/config.json, a
# small GPT-2: GPT-2's vocabulary and layout, 256 positions, C 192, 4 layers, 4 heads (11.5M
# parameters, 9.6M of them the tied embedding). Needs $mixtrain, $work and $tokenizer set.
corpus=$work/fortunes.txt
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' | sort | xargs cat > "$corpus"

"$mixtrain" tokenize --tokenizer "$tokenizer" --out "$work/train.bin" --val-out "$work/val.bin" \
  --val-fraction 0.05 --overwrite "$corpus"

cat > "$work/config.json" <<'JSON'
{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 256, "n_embd": 192, "n_layer": 4, "n_head": 4,
 "bos_token_id": 50256, "eos_token_id": 50256}
JSON

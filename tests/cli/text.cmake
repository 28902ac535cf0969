# GPT-2 with text in and text out through the CLI, on a tokenizer made by the tests (tiny.tiktoken:
# the 256 bytes and 24 merges; make_hostile_files.cpp) and a GPT-2 of vocabulary 300:
#   - `mixtrain tokenize` writes token files, the same for 1 and 2 threads, a validation file beside;
#   - `train --data tokens:` on them and `train --data text:FILE` (tokenized on the fly) both train;
#     the run directory gets the tokenizer's files, `--sample-every` prints samples;
#   - `generate --weights RUN --prompt TEXT --json` gives "text" and stops at <|endoftext|> or the
#     token budget, deterministically; the text is the decoded "tokens" (no stop token).
#   cmake -DMIXTRAIN=<binary> -DFILES=<dir of make_hostile_files> -DCORPUS=<text file> -DDIR=<scratch> -P text.cmake
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
function(mixtrain out)
  execute_process(COMMAND ${MIXTRAIN} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "text: mixtrain ${ARGN} failed (${rc}): ${err}")
  endif()
  set(${out} "${stdout}" PARENT_SCOPE)
endfunction()
set(tok ${FILES}/tiny.tiktoken)
set(config ${FILES}/tiny-gpt2-300.json)

mixtrain(out tokenize --tokenizer ${tok} --out ${DIR}/one/train.bin --val-out ${DIR}/one/val.bin --val-fraction 0.1
         --threads 1 ${CORPUS})
if(NOT out MATCHES "wrote .*train.bin: ([0-9]+) tokens")
  message(FATAL_ERROR "text: tokenize printed no token count: ${out}")
endif()
mixtrain(out tokenize --tokenizer ${tok} --out ${DIR}/two/train.bin --val-out ${DIR}/two/val.bin --val-fraction 0.1
         --threads 2 ${CORPUS})
foreach(f train.bin val.bin)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DIR}/one/${f} ${DIR}/two/${f} RESULT_VARIABLE differ)
  if(NOT differ EQUAL 0)
    message(FATAL_ERROR "text: tokenize with 1 and 2 threads wrote different ${f}")
  endif()
endforeach()
# The corpus has 24 merges' worth of English: BPE must make fewer tokens than bytes.
file(SIZE ${CORPUS} bytes)
file(SIZE ${DIR}/one/train.bin train_size)
math(EXPR train_tokens "(${train_size} - 1024) / 2")
if(NOT train_tokens LESS bytes)
  message(FATAL_ERROR "text: ${train_tokens} tokens for ${bytes} bytes: the merges were not applied")
endif()

set(common train --model gpt2 --gpt2-config ${config} --context 16 --batch-size 4 --lr 1e-3 --seed 3 --threads 2)
mixtrain(out ${common} --data tokens:${DIR}/one/train.bin,${DIR}/one/val.bin --steps 3 --out ${DIR}/from-tokens)
mixtrain(out ${common} --tokenizer ${tok} --data text:${CORPUS} --steps 4 --sample-every 2 --out ${DIR}/from-text)
string(REGEX MATCHALL "sample at step [0-9]+:" samples "${out}")
list(LENGTH samples n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "text: --sample-every 2 over 4 steps printed ${n} samples: ${out}")
endif()
foreach(f vocab.json merges.txt tokenizer_config.json special_tokens_map.json config.json model.safetensors)
  if(NOT EXISTS ${DIR}/from-text/${f})
    message(FATAL_ERROR "text: the gpt2 run with a tokenizer wrote no ${f}")
  endif()
endforeach()
if(EXISTS ${DIR}/from-tokens/vocab.json)
  message(FATAL_ERROR "text: a run without a tokenizer wrote tokenizer files")
endif()

# generate from the run directory: its tokenizer, its config.json.
set(gen generate --model gpt2 --weights ${DIR}/from-text --prompt "the quick brown" --temperature 0 --threads 2 --json)
mixtrain(a ${gen} --max-new-tokens 12)
mixtrain(b ${gen} --max-new-tokens 12)
foreach(key tokens text)
  string(JSON a_${key} GET "${a}" ${key})
  string(JSON b_${key} GET "${b}" ${key})
  if(NOT a_${key} STREQUAL b_${key})
    message(FATAL_ERROR "text: greedy generation from a text prompt is not deterministic: ${a} vs ${b}")
  endif()
endforeach()
string(JSON text GET "${a}" text)
string(JSON prompt_tokens GET "${a}" prompt_tokens)
string(JSON n_prompt LENGTH "${a}" prompt_tokens)
string(JSON n_new LENGTH "${a}" tokens)
string(JSON stopped GET "${a}" stopped_at_end_of_text)
if(n_prompt GREATER_EQUAL 15 OR n_prompt LESS 3)
  message(FATAL_ERROR "text: \"the quick brown\" became ${n_prompt} tokens (${prompt_tokens}): expected merges")
endif()
if(NOT (n_new EQUAL 12 OR stopped))
  message(FATAL_ERROR "text: ${n_new} tokens generated of 12, without reaching <|endoftext|>: ${a}")
endif()
# The same continuation as ids: generate --tokens with the prompt's ids gives the same tokens.
string(REGEX REPLACE "[][ ]" "" ids "${prompt_tokens}")
mixtrain(c generate --model gpt2 --weights ${DIR}/from-text --tokens ${ids} --temperature 0 --threads 2 --json
         --max-new-tokens 12)
string(JSON tokens_a GET "${a}" tokens)
string(JSON tokens_c GET "${c}" tokens)
if(NOT tokens_a STREQUAL tokens_c)
  message(FATAL_ERROR "text: --prompt and --tokens of the same ids differ: ${tokens_a} vs ${tokens_c}")
endif()
# Plain output: the prompt and the continuation as text.
mixtrain(plain generate --model gpt2 --weights ${DIR}/from-text --prompt "the quick brown" --temperature 0
         --threads 2 --max-new-tokens 12)
if(NOT plain MATCHES "^the quick brown")
  message(FATAL_ERROR "text: generate printed '${plain}', not the prompt and its continuation")
endif()
message(STATUS "text: ${train_tokens} tokens for ${bytes} bytes; \"the quick brown\" -> ${n_prompt} tokens -> '${text}'")

# GPT-2 through the CLI, from the committed tiny fixture (a GPT2LMHeadModel saved by transformers):
# fine-tuning on llm.c token files writes config.json and model.safetensors in Hugging Face's layout,
# a run resumed from its checkpoint ends with the same bytes, and `mixtrain generate` continues token
# ids greedily, deterministically, from the run's directory, from a checkpoint, on the checked device
# (the same tokens as on the CPU) and under bf16 autocast; the byte-level gpt generates text.
#   cmake -DMIXTRAIN=<binary> -DFIXTURE=<tests/fixtures/tiny-gpt2> -DTOKENS=<dir with tokens-*.bin>
#         -DCORPUS=<text file> -DDIR=<scratch dir> -P gpt2.cmake
file(REMOVE_RECURSE ${DIR})
set(common train --model gpt2 --init-from ${FIXTURE} --data tokens:${TOKENS}/tokens-train.bin,${TOKENS}/tokens-val.bin
    --context 16 --batch-size 4 --lr 1e-3 --lr-decay constant --seed 3 --precision bf16 --threads 2)
set(LABEL gpt2)
include(${CMAKE_CURRENT_LIST_DIR}/train_runs.cmake)
run(straight --steps 6)
run(resumed --steps 3 --checkpoint-every 3)
run(resumed --steps 6 --resume auto)
expect_same(straight resumed "a resumed gpt2 run differs from the uninterrupted one")
foreach(f config.json model.safetensors checkpoint.safetensors summary.json)
  if(NOT EXISTS ${DIR}/straight/${f})
    message(FATAL_ERROR "gpt2: the run wrote no ${f}")
  endif()
endforeach()
file(READ ${DIR}/straight/config.json config)
string(JSON n_layer GET "${config}" n_layer)
string(JSON vocab GET "${config}" vocab_size)
string(JSON tied GET "${config}" tie_word_embeddings)
if(NOT n_layer EQUAL 2 OR NOT vocab EQUAL 64 OR NOT tied)
  message(FATAL_ERROR "gpt2: config.json says n_layer ${n_layer}, vocab_size ${vocab}, tied ${tied}")
endif()
file(READ ${DIR}/straight/summary.json summary)
string(JSON test_loss GET "${summary}" test_loss)
message(STATUS "gpt2: 6 bf16 steps from the fixture, validation loss ${test_loss}")

# generate: the JSON line's "tokens"; fatal unless the command succeeds.
function(generate out)
  execute_process(COMMAND ${MIXTRAIN} generate --model gpt2 --tokens 1,2,3 --max-new-tokens 12 --threads 2 --json ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gpt2: generate ${ARGN} failed (${rc}): ${err}")
  endif()
  string(JSON tokens GET "${stdout}" tokens)
  set(${out} "${tokens}" PARENT_SCOPE)
endfunction()
generate(a --weights ${DIR}/straight --temperature 0)
generate(b --weights ${DIR}/straight --temperature 0)
if(NOT a STREQUAL b)
  message(FATAL_ERROR "gpt2: greedy generation is not deterministic: ${a} vs ${b}")
endif()
generate(from_checkpoint --weights ${DIR}/resumed/checkpoint-3.safetensors --temperature 0)
generate(at_3 --weights ${DIR}/resumed/checkpoint-3.safetensors --temperature 0)
if(NOT from_checkpoint STREQUAL at_3)
  message(FATAL_ERROR "gpt2: generation from a checkpoint is not deterministic")
endif()
set(ENV{MIXTRAIN_CHECKED_DEVICE} 1)
generate(checked --weights ${DIR}/straight --temperature 0 --device checked)
if(NOT checked STREQUAL a)
  message(FATAL_ERROR "gpt2: the checked device generates ${checked}, the CPU ${a}")
endif()
generate(bf16 --weights ${DIR}/straight --temperature 0 --precision bf16)
generate(sampled --weights ${FIXTURE} --temperature 1.0 --top-k 5 --seed 4)
generate(sampled_again --weights ${FIXTURE} --temperature 1.0 --top-k 5 --seed 4)
if(NOT sampled STREQUAL sampled_again)
  message(FATAL_ERROR "gpt2: sampling with one seed is not reproducible")
endif()
message(STATUS "gpt2: greedy ${a}; bf16 ${bf16}; sampled ${sampled}")

# The byte-level gpt: text in, text out.
execute_process(COMMAND ${MIXTRAIN} train --model gpt --context 16 --data text:${CORPUS} --steps 4 --batch-size 4
                        --threads 2 --out ${DIR}/gpt RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpt: training failed: ${err}")
endif()
foreach(i 1 2)
  execute_process(COMMAND ${MIXTRAIN} generate --model gpt --weights ${DIR}/gpt/model.safetensors --prompt "the quick"
                          --max-new-tokens 20 --temperature 0 --threads 2 RESULT_VARIABLE rc OUTPUT_VARIABLE text${i}
                          ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gpt: generate failed (${rc}): ${err}")
  endif()
endforeach()
string(LENGTH "${text1}" n)
if(NOT text1 STREQUAL text2 OR NOT text1 MATCHES "^the quick" OR n LESS 30)
  message(FATAL_ERROR "gpt: greedy text '${text1}' / '${text2}'")
endif()
message(STATUS "gpt: '${text1}'")

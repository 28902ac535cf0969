# FP8 training through the CLI (--precision fp8): the trained bytes do not depend on the thread
# count, and a run resumed from its checkpoint ends with the bytes of the uninterrupted run (the
# checkpoint holds every FP8 layer's scales and amax histories; without them the resumed run would
# quantise its first steps with scale 1 and drift).
#   cmake -DMIXTRAIN=<binary> -DCORPUS=<text file> -DDIR=<scratch dir> -P fp8.cmake
file(REMOVE_RECURSE ${DIR})
set(common train --model gpt --data text:${CORPUS} --precision fp8 --fp8-history 4 --batch-size 4 --lr 3e-3
    --lr-decay constant --seed 5)
set(LABEL fp8)
include(${CMAKE_CURRENT_LIST_DIR}/train_runs.cmake)
run(one_thread --steps 6 --threads 1)
run(two_threads --steps 6 --threads 2)
expect_same(one_thread two_threads "the trained bytes depend on the thread count")
run(resumed --steps 3 --threads 2 --checkpoint-every 3)
file(GLOB checkpoints ${DIR}/resumed/checkpoint-*)
execute_process(COMMAND ${MIXTRAIN} inspect ${checkpoints} OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
if(NOT listing MATCHES "fp8\\.blocks\\.0\\.attn\\.qkv\\.grad_output\\.amax_history")
  message(FATAL_ERROR "fp8: the checkpoint lacks the FP8 scaling state:\n${listing}")
endif()
run(resumed --steps 6 --threads 2 --resume auto)
expect_same(one_thread resumed "a resumed run differs from the uninterrupted one")
file(READ ${DIR}/one_thread/summary.json summary)
string(JSON precision GET "${summary}" precision)
if(NOT precision STREQUAL "fp8")
  message(FATAL_ERROR "fp8: summary says precision ${precision}")
endif()
message(STATUS "fp8: thread-count independent, resumable with its scaling state")

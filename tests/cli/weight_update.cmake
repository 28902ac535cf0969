# bf16 weights without masters (--weight-update stochastic|kahan) through the CLI: the trained bytes
# do not depend on the thread count, a run resumed from its checkpoint ends with the bytes of the
# uninterrupted run (the stochastic bits follow the restored step counts, the Kahan compensation is
# saved), and the model state is the advertised bytes per parameter.
#   cmake -DMIXTRAIN=<binary> -DCORPUS=<text file> -DDIR=<scratch dir> -DMODE=stochastic -DBYTES=8 -P weight_update.cmake
file(REMOVE_RECURSE ${DIR})
set(common train --model gpt --data text:${CORPUS} --precision bf16 --master-weights bf16 --weight-update ${MODE}
    --batch-size 4 --lr 3e-3 --lr-decay constant --seed 5)
set(LABEL ${MODE})
include(${CMAKE_CURRENT_LIST_DIR}/train_runs.cmake)
run(one_thread --steps 6 --threads 1)
run(two_threads --steps 6 --threads 2)
expect_same(one_thread two_threads "the trained bytes depend on the thread count")
run(resumed --steps 3 --threads 2 --checkpoint-every 3)
run(resumed --steps 6 --threads 2 --resume auto)
expect_same(one_thread resumed "a resumed run differs from the uninterrupted one")
file(READ ${DIR}/one_thread/summary.json summary)
string(JSON bytes GET "${summary}" model_state_bytes_per_param)
string(JSON mode GET "${summary}" weight_update)
if(NOT bytes EQUAL ${BYTES} OR NOT mode STREQUAL MODE)
  message(FATAL_ERROR "${MODE}: summary says ${bytes} bytes per parameter, weight_update ${mode}; expected ${BYTES}")
endif()
message(STATUS "${MODE}: thread-count independent, resumable, ${bytes} bytes per parameter")

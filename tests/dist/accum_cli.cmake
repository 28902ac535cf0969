# `mpirun mixtrain train --grad-accum / --global-batch-size` (docs/cli.md, "Gradient accumulation"):
#   1. 2 processes x batch 16 x 2 micro-batches end with the weights of 1 process x batch 64, to a
#      relative difference of 1e-4 (the DDP tests' bound: the same 12 steps over the same samples);
#   2. ZeRO-1 with accumulation ends with DDP-with-accumulation's weights, bit for bit;
#   3. a ZeRO-1 run with --global-batch-size 64 checkpointed at step 6 on 2 processes (2 micro-batches
#      each) and resumed on 1 process (4 micro-batches) keeps its global batch, and ends within 1e-4 of
#      the uninterrupted 2-process run; resuming with another global batch is refused;
#   4. a global batch that the processes' batches do not divide, or given with --grad-accum, is refused.
#   -DMIXTRAIN=path -DMPIEXEC=path -DCOMPARE=path -DWORK_DIR=dir
cmake_minimum_required(VERSION 3.22)
set(mpi ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2)
# A constant lr: a cosine schedule depends on the run's length, which is not what is compared here.
set(common train --model mlp --data synthetic:768 --precision fp32 --steps 12 --seed 4 --threads 1
    --lr-decay constant)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

include(${CMAKE_CURRENT_LIST_DIR}/run_or_fail.cmake)

# 1. Accumulation over two processes against one large batch.
run("the 2-process accumulated run" ${mpi} ${MIXTRAIN} ${common} --batch-size 16 --grad-accum 2 --out ${WORK_DIR}/two)
if(NOT last_out MATCHES "batch 16 per process x 2 processes x 2 micro-batches = 64")
  message(FATAL_ERROR "rank 0's banner does not state the global batch:\n${last_out}")
endif()
file(READ ${WORK_DIR}/two/summary.json summary)
string(JSON global GET "${summary}" global_batch_size)
string(JSON accumulation GET "${summary}" accumulation_steps)
if(NOT global EQUAL 64 OR NOT accumulation EQUAL 2)
  message(FATAL_ERROR "summary.json: global_batch_size ${global}, accumulation_steps ${accumulation} (expected 64, 2)")
endif()
run("the 1-process run" ${MIXTRAIN} ${common} --batch-size 64 --out ${WORK_DIR}/one)
run("the weight comparison" ${COMPARE} ${WORK_DIR}/two/model.safetensors ${WORK_DIR}/one/model.safetensors 1e-4)
message(STATUS "2 processes x 2 micro-batches vs 1 process: ${last_out}")

# 2. ZeRO-1 with accumulation against DDP with accumulation.
run("the ZeRO-1 accumulated run" ${mpi} ${MIXTRAIN} ${common} --batch-size 16 --grad-accum 2 --zero 1
    --out ${WORK_DIR}/zero)
run("ZeRO-1 against DDP" ${COMPARE} ${WORK_DIR}/zero/model.safetensors ${WORK_DIR}/two/model.safetensors 0)

# 3. The global batch across a change of process count.
run("the ZeRO-1 run with a global batch" ${mpi} ${MIXTRAIN} ${common} --batch-size 16 --global-batch-size 64
    --zero 1 --checkpoint-every 6 --out ${WORK_DIR}/global)
run("ZeRO-1 with --global-batch-size against --grad-accum" ${COMPARE} ${WORK_DIR}/global/model.safetensors
    ${WORK_DIR}/zero/model.safetensors 0)
run("the resume on 1 process" ${MIXTRAIN} ${common} --batch-size 16 --global-batch-size 64 --zero 1
    --resume ${WORK_DIR}/global/checkpoint-6.safetensors --out ${WORK_DIR}/global_one)
if(NOT last_out MATCHES "batch 16 x 4 micro-batches = 64")
  message(FATAL_ERROR "the 1-process resume does not accumulate 4 micro-batches:\n${last_out}")
endif()
run("the resumed comparison" ${COMPARE} ${WORK_DIR}/global_one/model.safetensors ${WORK_DIR}/global/model.safetensors 1e-4)
message(STATUS "resumed on 1 process vs 2 throughout: ${last_out}")
execute_process(COMMAND ${MIXTRAIN} ${common} --batch-size 16 --global-batch-size 32 --zero 1
                        --resume ${WORK_DIR}/global/checkpoint-6.safetensors --out ${WORK_DIR}/global_other
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "global_batch_size = 64 in the checkpoint, 32 in this run")
  message(FATAL_ERROR "a resume with another global batch was not refused by name (${rc}):\n${out}\n${err}")
endif()

# 4. Refusals.
foreach(case "--global-batch-size;48" "--global-batch-size;64;--grad-accum;2")
  execute_process(COMMAND ${mpi} ${MIXTRAIN} ${common} --batch-size 16 ${case} --out ${WORK_DIR}/refused
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "not a multiple of --batch-size 16 x 2 processes = 32|give one of them")
    message(FATAL_ERROR "'${case}' was not refused clearly (${rc}):\n${out}\n${err}")
  endif()
endforeach()

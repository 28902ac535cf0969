# `mpirun mixtrain train --zero 1` (docs/distributed.md, "Sharded optimizer state"), bf16 weights with
# fp32 masters:
#   1. 2 processes with --zero 1 end with the weights of --zero 0, bit for bit (and so does the model
#      moved to the checked device), and each holds at most 0.55x of the optimizer state
#      (summary.json), one shard file per rank beside each checkpoint;
#   2. a rank that cannot write its shard of checkpoint-4 (the write fails, or the rank is killed in
#      the middle of it) ends the job; checkpoint-2 is intact and a resume from it ends with the
#      uninterrupted run's weights;
#   3. re-sharding: checkpoint-4 of 2 ranks resumed on 3 (written again as 3 shards), then on 2 again
#      to the end: the uninterrupted run's weights; a plain (--zero 0) resume is refused, clearly;
#   4. a checkpoint with a missing shard, or a shard of another write, is refused with the reason.
#   -DMIXTRAIN=path -DMPIEXEC=path -DCOMPARE=path -DLIMITED=path (exec_limited.cpp) -DWORK_DIR=dir
cmake_minimum_required(VERSION 3.22)
set(mpi ${MPIEXEC} --allow-run-as-root --oversubscribe)
# A constant lr: a cosine schedule depends on the run's length, which the continuations extend.
set(common train --model mlp --data synthetic:512 --precision bf16 --master-weights bf16 --batch-size 16 --seed 3
    --lr-decay constant --threads 1)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

include(${CMAKE_CURRENT_LIST_DIR}/run_or_fail.cmake)

function(expect_files)
  foreach(f ${ARGN})
    if(NOT EXISTS ${WORK_DIR}/${f})
      file(GLOB present RELATIVE ${WORK_DIR} ${WORK_DIR}/*/*)
      message(FATAL_ERROR "${f} is missing; present: ${present}")
    endif()
  endforeach()
endfunction()

# 1. ZeRO-1 against plain DDP.
run("the ZeRO-1 run" ${mpi} -np 2 ${MIXTRAIN} ${common} --steps 6 --checkpoint-every 2 --zero 1 --out ${WORK_DIR}/zero)
if(NOT last_out MATCHES "optimizer state [^\n]* per process \\(ZeRO-1: sharded over 2\\)")
  message(FATAL_ERROR "rank 0 does not report its shard of the optimizer state:\n${last_out}")
endif()
run("the DDP run" ${mpi} -np 2 ${MIXTRAIN} ${common} --steps 6 --zero 0 --out ${WORK_DIR}/ddp)
# The model built on the CPU and moved to the checked device (the GPU's stand-in): the same bytes.
run("the ZeRO-1 run on the checked device" ${CMAKE_COMMAND} -E env MIXTRAIN_CHECKED_DEVICE=1
    ${mpi} -np 2 -x MIXTRAIN_CHECKED_DEVICE ${MIXTRAIN} ${common} --steps 6 --zero 1 --device checked
    --out ${WORK_DIR}/checked)
run("the device/CPU comparison" ${COMPARE} ${WORK_DIR}/checked/model.safetensors ${WORK_DIR}/zero/model.safetensors 0)
foreach(run_and_path "zero|mpi" "checked|mpi, host-staged from checked:0")
  string(REPLACE "|" ";" pair "${run_and_path}")
  list(GET pair 0 dir)
  list(GET pair 1 want)
  file(READ ${WORK_DIR}/${dir}/summary.json summary)
  string(JSON got GET "${summary}" gradient_reduction)
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "${dir}/summary.json: gradient_reduction '${got}', expected '${want}'")
  endif()
endforeach()
run("the ZeRO-1/DDP comparison" ${COMPARE} ${WORK_DIR}/zero/model.safetensors ${WORK_DIR}/ddp/model.safetensors 0)
file(READ ${WORK_DIR}/zero/summary.json zs)
file(READ ${WORK_DIR}/ddp/summary.json ds)
string(JSON zero_stage GET "${zs}" zero_stage)
string(JSON zero_bytes GET "${zs}" optimizer_state_bytes)
string(JSON ddp_bytes GET "${ds}" optimizer_state_bytes)
math(EXPR limit "${ddp_bytes} * 55 / 100")
if(NOT zero_stage EQUAL 1 OR zero_bytes GREATER limit OR zero_bytes LESS 1)
  message(FATAL_ERROR "summary.json: zero_stage ${zero_stage}, optimizer state ${zero_bytes} bytes per rank against "
                      "${ddp_bytes} for DDP (at most ${limit} expected)")
endif()
message(STATUS "optimizer state per rank: ${zero_bytes} bytes (ZeRO-1) vs ${ddp_bytes} (DDP)")
expect_files(zero/checkpoint-2.safetensors zero/checkpoint-2.zero-0-of-2.safetensors
             zero/checkpoint-2.zero-1-of-2.safetensors zero/checkpoint.zero-1-of-2.safetensors)

# 2. Two steps and a checkpoint; then continuations whose rank 1 cannot write its shard of
# checkpoint-4: first the write fails past 512 bytes (as on a full disk: every rank stops with the
# reason), then rank 1 is killed (SIGKILL) as soon as the shard's temporary file appears.
run("the first two steps" ${mpi} -np 2 ${MIXTRAIN} ${common} --steps 2 --checkpoint-every 2 --zero 1
    --out ${WORK_DIR}/killed)
file(GLOB finals ${WORK_DIR}/killed/checkpoint.* ${WORK_DIR}/killed/model.safetensors)
file(REMOVE ${finals})
set(continue ${MIXTRAIN} ${common} --steps 6 --checkpoint-every 2 --zero 1
    --resume ${WORK_DIR}/killed/checkpoint-2.safetensors --out ${WORK_DIR}/killed)
foreach(mode fail kill)
  string(TIMESTAMP t0 "%s")
  if(mode STREQUAL "fail")
    set(limit fail 512 1)
  else()
    set(limit kill ${WORK_DIR}/killed .checkpoint-4.zero-1-of-2.safetensors 1)
  endif()
  execute_process(COMMAND ${mpi} -np 2 ${LIMITED} ${limit} ${continue}
                  TIMEOUT 120 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(TIMESTAMP t1 "%s")
  math(EXPR seconds "${t1} - ${t0}")
  if(NOT rc MATCHES "^[0-9]+$" OR rc EQUAL 0)
    message(FATAL_ERROR "${mode}: the job did not end by itself with a failure (${rc}):\n${out}\n${err}")
  endif()
  if(mode STREQUAL "fail")
    set(why "rank 0 of 2: [^\n]*rank 1 could not write its shard of the optimizer state")
  else()
    set(why "rank 1 [^\n]*signal 9")
  endif()
  if(NOT "${out}${err}" MATCHES "${why}")
    message(FATAL_ERROR "${mode}: the job did not end for the expected reason ('${why}'):\n${out}\n${err}")
  endif()
  if(EXISTS ${WORK_DIR}/killed/checkpoint-4.safetensors)
    message(FATAL_ERROR "${mode}: checkpoint-4.safetensors exists although rank 1 could not write its shard")
  endif()
  file(GLOB temporaries ${WORK_DIR}/killed/.checkpoint-4.zero-1-of-2.safetensors.mixtrain-tmp.*)
  if(mode STREQUAL "kill" AND NOT temporaries)
    message(FATAL_ERROR "kill: rank 1 left no temporary shard: it was not killed in the middle of its write")
  endif()
  message(STATUS "${mode}: rank 1 could not write its shard of checkpoint-4; the job ended with status ${rc} after "
                 "about ${seconds} s, leaving '${temporaries}'")
  expect_files(killed/checkpoint-2.safetensors killed/checkpoint-2.zero-0-of-2.safetensors
               killed/checkpoint-2.zero-1-of-2.safetensors)
endforeach()
run("the resume after the kill" ${mpi} -np 2 ${MIXTRAIN} ${common} --steps 6 --checkpoint-every 2 --zero 1
    --resume ${WORK_DIR}/killed/checkpoint-2.safetensors --out ${WORK_DIR}/killed)
run("the resumed comparison" ${COMPARE} ${WORK_DIR}/killed/model.safetensors ${WORK_DIR}/zero/model.safetensors 0)
file(GLOB temporaries ${WORK_DIR}/killed/.*mixtrain-tmp*)
if(temporaries)
  message(FATAL_ERROR "the resume left the killed rank's temporary files: ${temporaries}")
endif()

# 3. Re-sharding: 2 shards -> 3 (no step: the final checkpoint is written again, as 3 shards) -> 2.
run("the resume on 3 ranks" ${mpi} -np 3 ${MIXTRAIN} ${common} --steps 4 --zero 1
    --resume ${WORK_DIR}/zero/checkpoint-4.safetensors --out ${WORK_DIR}/resharded)
expect_files(resharded/checkpoint.zero-0-of-3.safetensors resharded/checkpoint.zero-2-of-3.safetensors)
run("the resume on 2 ranks" ${mpi} -np 2 ${MIXTRAIN} ${common} --steps 6 --zero 1
    --resume ${WORK_DIR}/resharded/checkpoint.safetensors --out ${WORK_DIR}/resharded)
run("the re-sharded comparison" ${COMPARE} ${WORK_DIR}/resharded/model.safetensors ${WORK_DIR}/zero/model.safetensors 0)
# The checkpoint rewritten by 2 ranks has 2 shards: the 3 of the earlier write are gone.
file(GLOB stale "${WORK_DIR}/resharded/checkpoint.zero-*-of-3.safetensors")
if(stale)
  message(FATAL_ERROR "shards of the 3-rank write stayed behind after the 2-rank rewrite: ${stale}")
endif()
expect_files(resharded/checkpoint.zero-0-of-2.safetensors resharded/checkpoint.zero-1-of-2.safetensors)
execute_process(COMMAND ${MIXTRAIN} ${common} --steps 6 --zero 0 --resume ${WORK_DIR}/zero/checkpoint-4.safetensors
                        --out ${WORK_DIR}/plain
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "sharded over 2 ranks \\(ZeRO-1\\): resume it with zero_stage 1 \\(--zero 1\\)")
  message(FATAL_ERROR "a plain resume of a ZeRO-1 checkpoint was not refused clearly (${rc}):\n${out}\n${err}")
endif()

# 4. Damaged sharded checkpoints are refused with the reason: a missing shard, and a shard of another
# write of the same checkpoint (its token differs).
file(MAKE_DIRECTORY ${WORK_DIR}/damaged)
foreach(f checkpoint-4.safetensors checkpoint-4.zero-0-of-2.safetensors)
  file(COPY ${WORK_DIR}/zero/${f} DESTINATION ${WORK_DIR}/damaged)
endforeach()
function(expect_refused what regex)
  execute_process(COMMAND ${mpi} -np 2 ${MIXTRAIN} ${common} --steps 6 --zero 1
                          --resume ${WORK_DIR}/damaged/checkpoint-4.safetensors --out ${WORK_DIR}/damaged-run
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "${what}: not refused with '${regex}' (${rc}):\n${out}\n${err}")
  endif()
endfunction()
expect_refused("a missing shard" "the shard of rank 1 [^\n]*is missing: the checkpoint is incomplete")
file(COPY_FILE ${WORK_DIR}/zero/checkpoint-2.zero-1-of-2.safetensors
     ${WORK_DIR}/damaged/checkpoint-4.zero-1-of-2.safetensors)
expect_refused("a shard of another write" "belongs to another write of")

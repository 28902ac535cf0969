# The kill test: SIGKILLs `mixtrain train` at KILLS random moments (start-up, steps, checkpoint
# writes, the final files), restarts it each time with `--resume auto` from whatever is on disk, and
# checks that the run ends with the weights of an uninterrupted run, bit for bit, a metrics file of
# exactly one line per step, and no temporary file left behind.
#   -DMIXTRAIN=path -DWORK_DIR=dir [-DKILLS=20] [-DSEED=1] [-DMAX_MS=700]
# execute_process's TIMEOUT kills the child with SIGKILL (CMake's process library), so the kill
# lands wherever the process happens to be.
cmake_minimum_required(VERSION 3.22)
if(NOT DEFINED KILLS)
  set(KILLS 20)
endif()
if(NOT DEFINED SEED)
  set(SEED 1)
endif()
if(NOT DEFINED MAX_MS)
  set(MAX_MS 700)
endif()

set(steps 300)
# A checkpoint after every step (the newest two kept): most of the run is spent writing them, so
# kills land inside writes.
set(args train --model mlp --data synthetic:512 --batch-size 64 --threads 2 --precision fp16 --steps ${steps}
         --lr-decay cosine --checkpoint-every 1 --keep-checkpoints 2)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

execute_process(COMMAND ${MIXTRAIN} ${args} --out ${WORK_DIR}/reference RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the uninterrupted run failed (${rc}):\n${out}\n${err}")
endif()

set(killed 0)
set(finished 0)
string(RANDOM LENGTH 8 ALPHABET 0123456789 RANDOM_SEED ${SEED} unused)
foreach(i RANGE 1 ${KILLS})
  # 40 .. MAX_MS milliseconds after the start.
  string(RANDOM LENGTH 3 ALPHABET 0123456789 ms)
  math(EXPR ms "40 + (${ms} % (${MAX_MS} - 40))")
  if(ms LESS 100)
    set(timeout "0.0${ms}")
  elseif(ms LESS 1000)
    set(timeout "0.${ms}")
  else()
    math(EXPR whole "${ms} / 1000")
    math(EXPR frac "${ms} % 1000")
    set(timeout "${whole}.${frac}")
  endif()
  execute_process(COMMAND ${MIXTRAIN} ${args} --resume auto --out ${WORK_DIR}/killed TIMEOUT ${timeout}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    math(EXPR finished "${finished} + 1")
  elseif(rc MATCHES "timeout|Timeout|Process terminated")
    math(EXPR killed "${killed} + 1")
  else()
    message(FATAL_ERROR "attempt ${i} (kill after ${timeout} s) failed on its own (${rc}):\n${out}\n${err}")
  endif()
endforeach()
message(STATUS "${killed} of ${KILLS} attempts killed, ${finished} finished before their kill")
if(killed LESS 15)
  message(FATAL_ERROR "only ${killed} of ${KILLS} attempts were killed: the kill times are too long for this machine")
endif()

# The last attempt runs to the end.
execute_process(COMMAND ${MIXTRAIN} ${args} --resume auto --out ${WORK_DIR}/killed RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the final resume failed (${rc}):\n${out}\n${err}")
endif()

foreach(f model.safetensors checkpoint.safetensors)
  file(SHA256 ${WORK_DIR}/reference/${f} want)
  file(SHA256 ${WORK_DIR}/killed/${f} got)
  if(NOT want STREQUAL got)
    message(FATAL_ERROR "${f} differs from the uninterrupted run's")
  endif()
endforeach()
file(STRINGS ${WORK_DIR}/killed/metrics.jsonl lines)
list(LENGTH lines n)
if(NOT n EQUAL steps)
  message(FATAL_ERROR "metrics.jsonl has ${n} lines, expected ${steps} (one per step)")
endif()
foreach(k RANGE 1 ${steps})
  math(EXPR idx "${k} - 1")
  list(GET lines ${idx} line)
  string(JSON step GET "${line}" step)
  if(NOT step EQUAL k)
    message(FATAL_ERROR "metrics.jsonl line ${k} is step ${step}")
  endif()
endforeach()
file(GLOB leftovers ${WORK_DIR}/killed/.*mixtrain-tmp*)
if(leftovers)
  message(FATAL_ERROR "temporary files left behind: ${leftovers}")
endif()
message(STATUS "bit-identical to the uninterrupted run after ${killed} kills")
file(REMOVE_RECURSE ${WORK_DIR})

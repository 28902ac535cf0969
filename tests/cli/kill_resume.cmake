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

# The killed run ends with the uninterrupted run's weights, bit for bit, one metrics line per step,
# and no temporary file.
function(expect_same_as_reference dir)
  foreach(f model.safetensors checkpoint.safetensors)
    file(SHA256 ${WORK_DIR}/reference/${f} want)
    file(SHA256 ${dir}/${f} got)
    if(NOT want STREQUAL got)
      message(FATAL_ERROR "${f} differs from the uninterrupted run's")
    endif()
  endforeach()
  file(STRINGS ${dir}/metrics.jsonl lines)
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
  file(GLOB leftovers ${dir}/.*mixtrain-tmp*)
  if(leftovers)
    message(FATAL_ERROR "temporary files left behind: ${leftovers}")
  endif()
endfunction()

# KILLS kills in all. On a machine fast enough that the resumed attempts complete the run before
# KILLS of them were killed (the whole run takes about 2.4 s on an AMD Zen 5), the attempt that
# completes it ends a chain: the chain is checked against the reference and a new one starts from
# nothing, so every attempt still resumes a run in progress. At most 4 x KILLS attempts.
set(killed 0)
set(finished 0)
set(chains 0)
set(attempts 0)
math(EXPR max_attempts "4 * ${KILLS}")
string(RANDOM LENGTH 8 ALPHABET 0123456789 RANDOM_SEED ${SEED} unused)
while(killed LESS KILLS)
  if(attempts EQUAL max_attempts)
    message(FATAL_ERROR "only ${killed} of ${attempts} attempts were killed (${finished} finished before their "
                        "kill): the kill times are too long for this machine")
  endif()
  math(EXPR attempts "${attempts} + 1")
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
    expect_same_as_reference(${WORK_DIR}/killed)
    math(EXPR chains "${chains} + 1")
    file(REMOVE_RECURSE ${WORK_DIR}/killed)
  elseif(rc MATCHES "timeout|Timeout|Process terminated")
    math(EXPR killed "${killed} + 1")
  else()
    message(FATAL_ERROR "attempt ${attempts} (kill after ${timeout} s) failed on its own (${rc}):\n${out}\n${err}")
  endif()
endwhile()
message(STATUS "${killed} of ${attempts} attempts killed, ${finished} finished before their kill "
               "(${chains} runs completed through kills and checked)")

# The last attempt runs to the end.
execute_process(COMMAND ${MIXTRAIN} ${args} --resume auto --out ${WORK_DIR}/killed RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the final resume failed (${rc}):\n${out}\n${err}")
endif()
expect_same_as_reference(${WORK_DIR}/killed)
message(STATUS "bit-identical to the uninterrupted run after ${killed} kills")
file(REMOVE_RECURSE ${WORK_DIR})

# The placement check through the real CLI (docs/notes/backends.md): `mixtrain train --device checked`
# builds the model on the CPU and moves it, as a user's run does, with the non-finite origin finder
# and the numerics report on. Its model.safetensors must be byte-identical to the --device cpu run's;
# with RESUME=ON a run resumed on the checked device from its step-2 checkpoint must be too. Without
# MIXTRAIN_CHECKED_DEVICE=1 the device is refused with a message naming the variable.
# FULL=OFF (gpt-small: 85M parameters, whose checkpoints are 1.4 GB and whose numerics report scans
# every parameter on the host) runs 2 plain steps instead: the Trainer test covers the rest with a
# one-block gpt-small (tests/cli/test_placement.cpp).
#   cmake -DMIXTRAIN=<binary> -DDIR=<scratch dir> -DMODEL=gpt -DPRECISION=bf16 -DEXTRA="--context|32"
#         [-DFULL=ON] -P placement.cmake
file(REMOVE_RECURSE ${DIR})
string(REPLACE "|" ";" EXTRA "${EXTRA}")
set(common train --model ${MODEL} --precision ${PRECISION} --data synthetic:64 --threads 2 --seed 3 ${EXTRA})
if(FULL)
  list(APPEND common --steps 4 --find-nonfinite-origin --numerics-every 2)
else()
  list(APPEND common --steps 2)
endif()
set(LABEL "${MODEL} ${PRECISION}")
include(${CMAKE_CURRENT_LIST_DIR}/train_runs.cmake)

set(ENV{MIXTRAIN_CHECKED_DEVICE} "")
execute_process(COMMAND ${MIXTRAIN} ${common} --device checked --out ${DIR}/refused RESULT_VARIABLE rc
                ERROR_VARIABLE err OUTPUT_QUIET)
if(rc EQUAL 0 OR NOT err MATCHES "MIXTRAIN_CHECKED_DEVICE=1")
  message(FATAL_ERROR "${LABEL}: --device checked without MIXTRAIN_CHECKED_DEVICE=1 was not refused (${rc}): ${err}")
endif()

set(ENV{MIXTRAIN_CHECKED_DEVICE} 1)
if(FULL)
  run(cpu --device cpu --numerics-report ${DIR}/numerics_cpu)
  run(checked --device checked --checkpoint-every 2 --numerics-report ${DIR}/numerics_checked)
  run(resumed --device checked --resume ${DIR}/checked/checkpoint-2.safetensors
      --numerics-report ${DIR}/numerics_resumed)
  expect_same(cpu resumed "the run resumed on the checked device differs from the cpu run")
  foreach(run cpu checked resumed)
    if(NOT EXISTS ${DIR}/numerics_${run}/report.md)
      message(FATAL_ERROR "${LABEL}: ${run} wrote no numerics report")
    endif()
  endforeach()
else()
  run(cpu --device cpu)
  run(checked --device checked)
endif()
expect_same(cpu checked "the checked-device run differs from the cpu run")
message(STATUS "${LABEL}: the checked device trains to the cpu's bytes")
file(REMOVE_RECURSE ${DIR})

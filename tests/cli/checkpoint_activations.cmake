# Trains the gpt model for a few steps with and without --checkpoint-activations and requires the
# same model bytes (the gradients are bit-identical, so every update is) and a lower peak.
#   cmake -DMIXTRAIN=<binary> -DCORPUS=<text file> -DDIR=<scratch dir> -DPRECISION=bf16 -P checkpoint_activations.cmake
file(REMOVE_RECURSE ${DIR})
set(common train --model gpt --data text:${CORPUS} --precision ${PRECISION} --steps 4 --batch-size 4 --threads 2
    --seed 3)
foreach(run plain checkpointed)
  set(extra)
  if(run STREQUAL "checkpointed")
    set(extra --checkpoint-activations)
  endif()
  execute_process(COMMAND ${MIXTRAIN} ${common} ${extra} --out ${DIR}/${run} RESULT_VARIABLE rc ERROR_VARIABLE err
                  OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${run} run failed (${rc}): ${err}")
  endif()
  file(READ ${DIR}/${run}/summary.json summary)
  string(JSON peak_${run} GET "${summary}" peak_bytes)
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DIR}/plain/model.safetensors
                        ${DIR}/checkpointed/model.safetensors RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "--checkpoint-activations changed the trained model (${PRECISION})")
endif()
if(NOT peak_checkpointed LESS peak_plain)
  message(FATAL_ERROR "--checkpoint-activations did not lower the peak: ${peak_checkpointed} vs ${peak_plain} bytes")
endif()
message(STATUS "${PRECISION}: same model bytes; peak ${peak_checkpointed} vs ${peak_plain} bytes")

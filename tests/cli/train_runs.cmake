# Helpers of the CLI scripts that train several runs and compare their weights (fp8.cmake,
# weight_update.cmake). The including script sets MIXTRAIN, DIR, LABEL and `common` (the flags of
# every run).
#   run(NAME FLAGS...): `mixtrain ${common} FLAGS... --out ${DIR}/NAME`, fatal on failure.
#   expect_same(A B WHAT): fatal with WHAT unless the two runs' model.safetensors are byte-identical.
function(run name)
  execute_process(COMMAND ${MIXTRAIN} ${common} ${ARGN} --out ${DIR}/${name} RESULT_VARIABLE rc ERROR_VARIABLE err
                  OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${LABEL}: ${name} run failed (${rc}): ${err}")
  endif()
endfunction()
function(expect_same a b what)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DIR}/${a}/model.safetensors ${DIR}/${b}/model.safetensors
                  RESULT_VARIABLE differ)
  if(NOT differ EQUAL 0)
    message(FATAL_ERROR "${LABEL}: ${what}")
  endif()
endfunction()

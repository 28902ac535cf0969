# Shared by the mpirun CLI scripts (ddp_cli.cmake, zero_cli.cmake): run(WHAT COMMAND...) runs the
# command, fails the test with its output unless it exits 0, and leaves its stdout in last_out.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
endfunction()

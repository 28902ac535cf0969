# A rank that fails must end the whole MPI job, not leave the others waiting: runs
# tests/dist/abort_helper.cpp under mpirun with 2 processes and checks that the job ends with a
# non-zero status well within the time limit, and that its output names the failure.
#   -DMPIEXEC=mpirun -DHELPER=path -DMODE=throw|timeout -DREGEX=r [-DLIMIT=30]
cmake_minimum_required(VERSION 3.22)
if(NOT DEFINED LIMIT)
  set(LIMIT 30)
endif()

string(TIMESTAMP t0 "%s")
# execute_process's TIMEOUT kills mpirun; the helper's own watchdog (MIXTRAIN_DIST_TIMEOUT, set by
# the test) ends any rank left behind.
execute_process(COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2 ${HELPER} ${MODE}
                TIMEOUT ${LIMIT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(TIMESTAMP t1 "%s")
math(EXPR seconds "${t1} - ${t0}")
set(all "${out}\n${err}")

if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the job did not end by itself within ${LIMIT} s (${rc}): a failed rank left the others "
                      "waiting.\n${all}")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the job exited with status 0 although a rank failed:\n${all}")
endif()
if(NOT all MATCHES "${REGEX}")
  message(FATAL_ERROR "the job's output does not match '${REGEX}':\n${all}")
endif()
message(STATUS "the job ended with status ${rc} after about ${seconds} s; its output:\n${all}")

# Install test: installs the build tree into a scratch prefix, then configures, builds and runs a
# separate project (consumer/) that finds mixtrain with find_package() through CMAKE_PREFIX_PATH,
# the way a user's project would. Run by CTest (tests/CMakeLists.txt) as
#   cmake -DSOURCE_DIR=... -DBUILD_DIR=... -DWORK_DIR=... -DGENERATOR=... -P run_consumer.cmake
cmake_minimum_required(VERSION 3.22)

foreach(var SOURCE_DIR BUILD_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})  # a stale prefix could hide a broken install
file(MAKE_DIRECTORY ${WORK_DIR})

# Runs one step; on failure prints its output and stops the test.
function(step name)
  message(STATUS "install_consumer: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${name} failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/mixtrain/mixtrain.h)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install_consumer: ${prefix}/${f} was not installed")
  endif()
endforeach()

# Only the prefix is on the search path: the consumer must not see the source or build tree.
step("configure consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${consumer_build}
     -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix})
step("build consumer" ${CMAKE_COMMAND} --build ${consumer_build})
step("run consumer" ${consumer_build}/consumer)
if(NOT step_output MATCHES "OK")
  message(FATAL_ERROR "install_consumer: the consumer did not print OK:\n${step_output}")
endif()
message(STATUS "install_consumer: passed")

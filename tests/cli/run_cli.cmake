# Runs one mixtrain CLI command for CTest and checks its exit code, output and files.
#   -DCMD=a|b|c          the command line, '|'-separated (';' does not survive add_test)
#   -DEXPECT=pass|fail   exit code 0, or a non-zero exit code (a crash or signal is never a pass)
#   -DEXIT_CODE=n        with fail: exactly this exit code
#   -DREGEX=...          stdout + stderr must match
#   -DONE_LINE=ON        stderr must be exactly one non-empty line (the CLI's error promise)
#   -DJSON_KEYS=a|b      the last line of stdout is a JSON object holding these keys
#   -DJSON_FILE=path -DJSON_FILE_KEYS=a|b   the same for a file
#   -DFILES=p|q          files that must exist afterwards
cmake_minimum_required(VERSION 3.22)

string(REPLACE "|" ";" cmd "${CMD}")
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("command: ${cmd}\nexit code: ${rc}\n--- stdout\n${out}--- stderr\n${err}---")

if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the command did not exit normally: ${rc}")
endif()
if(EXPECT STREQUAL "fail")
  if(rc EQUAL 0)
    message(FATAL_ERROR "expected a non-zero exit code")
  endif()
  if(DEFINED EXIT_CODE AND NOT rc EQUAL EXIT_CODE)
    message(FATAL_ERROR "expected exit code ${EXIT_CODE}")
  endif()
elseif(NOT rc EQUAL 0)
  message(FATAL_ERROR "expected exit code 0")
endif()

if(DEFINED REGEX AND NOT "${out}${err}" MATCHES "${REGEX}")
  message(FATAL_ERROR "output does not match '${REGEX}'")
endif()

if(ONE_LINE)
  string(REGEX REPLACE "\n$" "" line "${err}")
  if(line STREQUAL "" OR line MATCHES "\n")
    message(FATAL_ERROR "expected exactly one line on stderr")
  endif()
endif()

function(check_json text keys what)
  string(REPLACE "|" ";" keys "${keys}")
  foreach(key IN LISTS keys)
    string(JSON value ERROR_VARIABLE error GET "${text}" "${key}")
    if(error)
      message(FATAL_ERROR "${what}: no key '${key}' (${error})")
    endif()
  endforeach()
endfunction()

if(DEFINED JSON_KEYS)
  string(STRIP "${out}" stripped)
  string(REGEX REPLACE ".*\n" "" last_line "${stripped}")
  check_json("${last_line}" "${JSON_KEYS}" "stdout JSON")
endif()
if(DEFINED JSON_FILE)
  file(READ "${JSON_FILE}" text)
  check_json("${text}" "${JSON_FILE_KEYS}" "${JSON_FILE}")
endif()

if(DEFINED FILES)
  string(REPLACE "|" ";" files "${FILES}")
  foreach(f IN LISTS files)
    if(NOT EXISTS "${f}")
      message(FATAL_ERROR "missing file ${f}")
    endif()
  endforeach()
endif()

# The disk-full test: a run resumed under a file-size limit (`ulimit -f`, as on a full disk) fails
# at its first checkpoint with a clear one-line error and exit code 1, leaves the previous
# checkpoint byte for byte as it was, and leaves no temporary file.
#   -DMIXTRAIN=path -DWORK_DIR=dir
cmake_minimum_required(VERSION 3.22)
set(args train --model mlp --data synthetic:256 --batch-size 32 --threads 2 --lr-decay constant)
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${MIXTRAIN} ${args} --steps 4 --out ${WORK_DIR} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the first run failed (${rc}): ${err}")
endif()
file(SHA256 ${WORK_DIR}/checkpoint.safetensors before)
file(SIZE ${WORK_DIR}/checkpoint.safetensors size)

# 2048 blocks of 512 or 1024 bytes (dash or bash): far below the checkpoint's size.
execute_process(COMMAND sh -c "ulimit -f 2048 && exec \"$0\" \"$@\"" ${MIXTRAIN} ${args} --steps 8 --checkpoint-every 2
                        --resume auto --out ${WORK_DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit code ${rc}\n--- stdout\n${out}--- stderr\n${err}---")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit code 1 (a run-time error), got ${rc}")
endif()
if(NOT err MATCHES "mixtrain: error: .*cannot write '[^']*checkpoint-6.safetensors': .*File too large.*unchanged")
  message(FATAL_ERROR "stderr does not name the checkpoint and the cause")
endif()
string(REGEX REPLACE "\n$" "" line "${err}")
if(line MATCHES "\n")
  message(FATAL_ERROR "expected one line on stderr")
endif()
file(SHA256 ${WORK_DIR}/checkpoint.safetensors after)
if(NOT before STREQUAL after)
  message(FATAL_ERROR "the previous checkpoint changed")
endif()
file(GLOB leftovers ${WORK_DIR}/.*mixtrain-tmp*)
if(leftovers)
  message(FATAL_ERROR "temporary files left behind: ${leftovers}")
endif()
message(STATUS "checkpoint of ${size} bytes kept; error reported")

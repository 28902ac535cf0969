# The CLI's placement run on another device than the checked one (tests/cli/CMakeLists.txt registers
# it for the CUDA device of a -DMIXTRAIN_CUDA=HOST build): `mixtrain train --device DEVICE` builds the
# model on the CPU and moves it, as a user's run does, and its model.safetensors is compared with the
# --device cpu run's: the weights after 4 steps within TOL of ||a - b|| / ||b|| over the whole model
# (mixtrain_compare_weights --whole-model: the device's GEMMs and reductions add in another order than
# the CPU's, and AdamW moves tensors whose gradient is rounding noise by +-lr; docs/cuda.md gives the
# measured values and why).
#   cmake -DMIXTRAIN=<binary> -DCOMPARE=<mixtrain_compare_weights> -DDIR=<scratch dir> -DDEVICE=cuda
#         -DMODEL=gpt -DPRECISION=bf16 -DTOL=1e-2 -DEXTRA="--context|32" -P device_placement.cmake
file(REMOVE_RECURSE ${DIR})
string(REPLACE "|" ";" EXTRA "${EXTRA}")
set(common train --model ${MODEL} --precision ${PRECISION} --data synthetic:64 --threads 2 --seed 3 --steps 4 ${EXTRA})
set(LABEL "${MODEL} ${PRECISION} on ${DEVICE}")
include(${CMAKE_CURRENT_LIST_DIR}/train_runs.cmake)
run(cpu --device cpu)
run(device --device ${DEVICE})
execute_process(COMMAND ${COMPARE} ${DIR}/device/model.safetensors ${DIR}/cpu/model.safetensors ${TOL} --whole-model
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${LABEL}: the weights differ from the cpu run's beyond ${TOL}: ${out}${err}")
endif()
string(STRIP "${out}" out)
message(STATUS "${LABEL}: ${out}")
file(REMOVE_RECURSE ${DIR})

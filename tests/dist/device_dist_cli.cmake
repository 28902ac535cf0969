# Data-parallel training through the CLI with the model on another device than the CPU (registered for
# the CUDA device of a -DMIXTRAIN_CUDA=HOST build, label cuda_host): `mpirun -np 2 mixtrain train
# --device DEVICE` with DDP (--zero 0) and with ZeRO-1 (--zero 1), each against the same 2-process run
# on the CPU. The device's gradients come from its own kernels (another GEMM order), so the weights
# agree within TOL (||a - b|| / ||b||, compare_weights); ZeRO-1 on the device must equal DDP on the
# device bit for bit, as on the CPU. The collectives are the host-staged path (no NCCL on the host).
#   -DMIXTRAIN=path -DMPIEXEC=path -DCOMPARE=path -DWORK_DIR=dir -DDEVICE=cuda -DPRECISION=bf16 -DTOL=1e-3
cmake_minimum_required(VERSION 3.22)
set(mpi ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2)
set(common train --model mlp --data synthetic:512 --precision ${PRECISION} --steps 6 --seed 0 --threads 1
           --batch-size 32)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
include(${CMAKE_CURRENT_LIST_DIR}/run_or_fail.cmake)

foreach(zero 0 1)
  run("the --zero ${zero} run on the cpu" ${mpi} ${MIXTRAIN} ${common} --zero ${zero} --device cpu
      --out ${WORK_DIR}/cpu_${zero})
  run("the --zero ${zero} run on ${DEVICE}" ${mpi} ${MIXTRAIN} ${common} --zero ${zero} --device ${DEVICE}
      --out ${WORK_DIR}/device_${zero})
  run("the --zero ${zero} comparison" ${COMPARE} ${WORK_DIR}/device_${zero}/model.safetensors
      ${WORK_DIR}/cpu_${zero}/model.safetensors ${TOL})
  message(STATUS "${PRECISION}, --zero ${zero}: 2 processes on ${DEVICE} against 2 on the cpu: ${last_out}")
endforeach()
run("ZeRO-1 against DDP on ${DEVICE}" ${COMPARE} ${WORK_DIR}/device_1/model.safetensors
    ${WORK_DIR}/device_0/model.safetensors 0)
message(STATUS "${PRECISION}: ZeRO-1 on ${DEVICE} = DDP on ${DEVICE}: ${last_out}")
file(REMOVE_RECURSE ${WORK_DIR})

# The CUDA backend (docs/cuda.md): built when cmake/Cuda.cmake found a toolkit (MIXTRAIN_CUDA).
# settings.cpp (mixtrain/cuda.h: availability questions, the TF32 switch) is built either way.
set(BACKEND_ENABLED ${MIXTRAIN_WITH_CUDA})
list(APPEND BACKEND_ALWAYS_BUILT settings.cpp)
# host/: the CUDA-on-host layer (host/block_runner.h, the runtime and cuBLASLt on the host). With
# MIXTRAIN_CUDA=HOST it is part of the library and the .cu files are C++ compiled against it;
# otherwise only its engine is built, as mixtrain_cuda_host, for its tests.
if(NOT MIXTRAIN_CUDA_ON_HOST)
  list(APPEND BACKEND_EXCLUDE "/host/")
endif()
if(NOT BACKEND_ENABLED)
  return()
endif()
# Files named *_cudnn.cpp need cuDNN too (cmake/Cudnn.cmake), or on the host its API from host/.
if(NOT MIXTRAIN_WITH_CUDNN AND NOT MIXTRAIN_CUDA_ON_HOST)
  list(APPEND BACKEND_EXCLUDE "_cudnn\\.(cpp|cu)$")
endif()
if(NOT MIXTRAIN_WITH_NCCL)  # files named *_nccl.cpp need NCCL too (cmake/Nccl.cmake)
  list(APPEND BACKEND_EXCLUDE "_nccl\\.(cpp|cu)$")
endif()
# CUDA stays out of the public headers and out of every other target: consumers see only Device{kCUDA}.
target_compile_definitions(${BACKEND_TARGET} PRIVATE MIXTRAIN_WITH_CUDA=1)
if(MIXTRAIN_CUDA_ON_HOST)
  # The same sources, compiled as C++ against host/include's cuda_runtime.h, cuda_fp16.h, cuda_bf16.h,
  # mma.h and cublasLt.h. No contraction into FMAs anywhere (optim.cu's --fmad=false, and the CPU's).
  file(GLOB_RECURSE _mt_cu CONFIGURE_DEPENDS ${BACKEND_DIR}/*.cu)
  set_source_files_properties(${_mt_cu} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-ffp-contract=off;-Wno-unknown-pragmas")
  target_include_directories(${BACKEND_TARGET} BEFORE PRIVATE ${BACKEND_DIR}/host/include)
  target_compile_definitions(${BACKEND_TARGET} PRIVATE MIXTRAIN_CUDA_ON_HOST=1)
  # cuDNN's legacy convolution API from host/cudnn_host.cpp (host/include/cudnn.h): conv_cudnn.cpp is
  # built and registered as in a cuDNN build. No library is linked and MIXTRAIN_WITH_CUDNN stays FALSE
  # for CMake (cmake/Cuda.cmake), so the installed package config claims no cuDNN; the definition
  # reaches this target's sources only. Its reference convolution contracts nothing into FMAs either.
  target_compile_definitions(${BACKEND_TARGET} PRIVATE MIXTRAIN_WITH_CUDNN=1)
  set_source_files_properties(${BACKEND_DIR}/host/cudnn_host.cpp PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
  return()
endif()
if(MIXTRAIN_WITH_CUDNN)
  # Before the toolkit: cuDNN's include dir must win over a toolkit dir holding another cuDNN.
  target_compile_definitions(${BACKEND_TARGET} PRIVATE MIXTRAIN_WITH_CUDNN=1)
  list(APPEND BACKEND_LIBRARIES mixtrain::cudnn)
endif()
if(MIXTRAIN_WITH_NCCL)
  # The device collectives (core/device_collectives.h) of collectives_nccl.cpp, listed for
  # cmake/Backends.cmake.
  set(BACKEND_COLLECTIVES ON)
  target_compile_definitions(${BACKEND_TARGET} PRIVATE MIXTRAIN_WITH_NCCL=1)
  list(APPEND BACKEND_LIBRARIES mixtrain::nccl)
endif()
list(APPEND BACKEND_LIBRARIES CUDA::cudart CUDA::cublasLt)
target_compile_options(${BACKEND_TARGET} PRIVATE
  "$<$<COMPILE_LANGUAGE:CUDA>:--extended-lambda;--expt-relaxed-constexpr;-Xcompiler=-Wall;-Xcompiler=-Wno-unused-parameter>")
# The optimizer and scaler kernels perform the CPU kernels' IEEE operations in the same order:
# no contraction into FMAs, so that a step gives the same bits on both devices.
set_source_files_properties(${BACKEND_DIR}/kernels/optim.cu PROPERTIES COMPILE_OPTIONS "--fmad=false")

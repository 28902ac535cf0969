# The optional CUDA backend (docs/cuda.md).
#   MIXTRAIN_CUDA=AUTO  built when a CUDA compiler and toolkit are found (the default)
#   MIXTRAIN_CUDA=ON    required: configuring fails, saying what is missing
#   MIXTRAIN_CUDA=OFF   never
# Sets MIXTRAIN_WITH_CUDA (TRUE/FALSE) for the caller. nvcc is often not on PATH: the toolkit's usual
# prefixes are tried after CUDACXX / CMAKE_CUDA_COMPILER / PATH. Architectures default to sm_80
# (Ampere) and sm_90 (Hopper) as machine code, plus PTX of sm_90 for newer GPUs.
#   MIXTRAIN_CUDA=HOST  the backend's own sources compiled by the C++ compiler against the project's
#                       CUDA-on-host layer (src/backends/cuda/host/): no toolkit, no GPU; sanitizers
#                       allowed; cuDNN's convolution API from the host layer (no library), NCCL off
#                       (docs/cuda.md, "CUDA on the host")
include(${CMAKE_CURRENT_LIST_DIR}/TristateOption.cmake)
set(MIXTRAIN_CUDA_ON_HOST FALSE)
if(MIXTRAIN_CUDA STREQUAL "HOST")
  set(MIXTRAIN_WITH_CUDA TRUE)
  set(MIXTRAIN_CUDA_ON_HOST TRUE)
  # MIXTRAIN_WITH_CUDNN means "links cuDNN" (the imported target, the package config's dependency):
  # FALSE here. conv2d's cuDNN kernels still build, against src/backends/cuda/host/cudnn_host.cpp
  # (src/backends/cuda/backend.cmake defines MIXTRAIN_WITH_CUDNN=1 for the backend's own sources).
  set(MIXTRAIN_WITH_CUDNN FALSE)
  set(MIXTRAIN_WITH_NCCL FALSE)
  message(STATUS "mixtrain: CUDA backend ON, on the host (MIXTRAIN_CUDA=HOST: kernels run as fibers on the CPU; "
                 "cuDNN's convolution API on the host; NCCL off)")
  return()
endif()
mt_tristate_option(MIXTRAIN_CUDA "Build the CUDA backend: AUTO (when the toolkit is found), ON (required) or OFF" _mt_cuda_mode)

set(MIXTRAIN_WITH_CUDA FALSE)
set(_mt_cuda_why "")
if(_mt_cuda_mode STREQUAL "OFF")
  set(_mt_cuda_why "MIXTRAIN_CUDA=OFF")
elseif(MIXTRAIN_SANITIZE OR MIXTRAIN_FUZZ)
  # nvcc's host compiler does not take the sanitizer flags, and instrumented host code linked with
  # uninstrumented device stubs proves nothing about the device code.
  set(_mt_cuda_why "sanitizer and fuzz builds are CPU-only")
else()
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(_mt_nvcc nvcc HINTS ENV CUDA_PATH PATH_SUFFIXES bin
                 PATHS /usr/local/cuda/bin /usr/local/cuda-13.0/bin /opt/cuda/bin NO_CACHE)
    if(_mt_nvcc)
      set(CMAKE_CUDA_COMPILER "${_mt_nvcc}" CACHE FILEPATH "CUDA compiler")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    set(_mt_cuda_why "no CUDA compiler (nvcc) found on PATH, in CUDACXX or under /usr/local/cuda")
  else()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
      set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual" CACHE STRING "CUDA architectures")
    endif()
    # nvcc compiles host code with the C++ compiler of the rest of the build.
    if(NOT CMAKE_CUDA_HOST_COMPILER AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}" CACHE FILEPATH "nvcc host compiler")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cublasLt)
      set(_mt_cuda_why "the CUDA toolkit's libraries (cudart, cublasLt) were not found")
    else()
      set(MIXTRAIN_WITH_CUDA TRUE)
    endif()
  endif()
endif()

if(MIXTRAIN_WITH_CUDA)
  # The library is C++20 in device code too; CMake 3.25 does not know nvcc 13's flag for it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  # One CUDA runtime in the process: the shared one that CUDA::cudart and cuBLASLt use (CMake's
  # default would add the static runtime as well, a second copy with its own state).
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  message(STATUS "mixtrain: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
elseif(_mt_cuda_mode STREQUAL "ON")
  message(FATAL_ERROR "MIXTRAIN_CUDA=ON but the CUDA backend cannot be built: ${_mt_cuda_why}. "
                      "Set CUDACXX or CMAKE_CUDA_COMPILER to nvcc, or configure with -DMIXTRAIN_CUDA=AUTO.")
else()
  message(STATUS "mixtrain: CUDA backend OFF (${_mt_cuda_why})")
endif()

# cuDNN (conv2d's kernels), only with the CUDA backend: MIXTRAIN_CUDNN=AUTO|ON|OFF -> MIXTRAIN_WITH_CUDNN.
include(${CMAKE_CURRENT_LIST_DIR}/Cudnn.cmake)
# NCCL (device collectives for data-parallel training), only with the CUDA backend:
# MIXTRAIN_NCCL=AUTO|ON|OFF -> MIXTRAIN_WITH_NCCL.
include(${CMAKE_CURRENT_LIST_DIR}/Nccl.cmake)

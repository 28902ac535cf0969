# NCCL for the CUDA backend's device collectives (src/backends/cuda/collectives_nccl.cpp): data-parallel
# training reduces a CUDA model's gradient buckets in device memory (docs/distributed.md, "Models on a
# device"). Included by cmake/Cuda.cmake once the CUDA backend is decided.
#   MIXTRAIN_NCCL=AUTO  used when nccl.h and libnccl (2.14 or newer) are found (the default)
#   MIXTRAIN_NCCL=ON    required: configuring fails, saying what is missing
#   MIXTRAIN_NCCL=OFF   never: DDP then reduces a CUDA model's buckets through host copies
# Only with the CUDA backend. Search order, header and library alike: NCCL_ROOT (a CMake variable or the
# environment variable; the prefix holding include/nccl.h and lib/ or lib64/, such as a pip wheel's
# site-packages/nvidia/nccl), then the CUDA toolkit's own include and library dirs (CUDA 13's toolkit may
# ship NCCL there), then the system's. The library may be a versioned file only (libnccl.so.2, as pip
# wheels ship it). NCCL_INCLUDE_DIR and NCCL_LIBRARY (cache) override the search; an NCCL_ROOT different
# from the last configure's searches again.
# Sets MIXTRAIN_WITH_NCCL (TRUE/FALSE), and when TRUE the imported target mixtrain::nccl (the library and
# its include dir), MIXTRAIN_NCCL_VERSION and MIXTRAIN_NCCL_LIBRARY_DIR; src/backends/cuda/backend.cmake
# compiles the NCCL file, defines MIXTRAIN_WITH_NCCL=1 and links mixtrain::nccl privately.
include(${CMAKE_CURRENT_LIST_DIR}/TristateOption.cmake)
mt_tristate_option(MIXTRAIN_NCCL "Use NCCL for data-parallel reductions of CUDA tensors: AUTO (when found), ON (required) or OFF"
                   _mt_nccl_mode)

set(MIXTRAIN_WITH_NCCL FALSE)
set(MIXTRAIN_NCCL_VERSION "")
set(_mt_nccl_why "")
if(_mt_nccl_mode STREQUAL "OFF")
  set(_mt_nccl_why "MIXTRAIN_NCCL=OFF")
elseif(NOT MIXTRAIN_WITH_CUDA)
  set(_mt_nccl_why "no CUDA backend in this build")
else()
  set(_mt_nccl_root "")
  if(DEFINED NCCL_ROOT AND NOT "${NCCL_ROOT}" STREQUAL "")
    set(_mt_nccl_root "${NCCL_ROOT}")
  elseif(DEFINED ENV{NCCL_ROOT} AND NOT "$ENV{NCCL_ROOT}" STREQUAL "")
    set(_mt_nccl_root "$ENV{NCCL_ROOT}")
  endif()
  # A new root searches again instead of keeping the previous configure's results.
  if(DEFINED _MT_NCCL_SEARCHED_ROOT AND NOT "${_MT_NCCL_SEARCHED_ROOT}" STREQUAL "${_mt_nccl_root}")
    unset(NCCL_INCLUDE_DIR CACHE)
    unset(NCCL_LIBRARY CACHE)
  endif()
  set(_MT_NCCL_SEARCHED_ROOT "${_mt_nccl_root}" CACHE INTERNAL "NCCL_ROOT of the last NCCL search")

  # The toolkit's dirs, and the lib/ and lib64/ beside them (CUDAToolkit_LIBRARY_DIR may be
  # targets/<arch>/lib while NCCL's packages install into the toolkit's lib64/).
  set(_mt_nccl_inc_hints ${CUDAToolkit_INCLUDE_DIRS})
  set(_mt_nccl_lib_hints ${CUDAToolkit_LIBRARY_DIR})
  if(CUDAToolkit_LIBRARY_ROOT)
    list(APPEND _mt_nccl_inc_hints ${CUDAToolkit_LIBRARY_ROOT}/include)
    list(APPEND _mt_nccl_lib_hints ${CUDAToolkit_LIBRARY_ROOT}/lib64 ${CUDAToolkit_LIBRARY_ROOT}/lib)
  endif()
  if(_mt_nccl_root)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_mt_nccl_root} PATH_SUFFIXES include NO_DEFAULT_PATH
              DOC "Directory of nccl.h")
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_mt_nccl_root} PATH_SUFFIXES lib64 lib
                 NO_DEFAULT_PATH DOC "The NCCL library (libnccl.so or libnccl.so.2)")
    if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
      message(WARNING "NCCL_ROOT=${_mt_nccl_root} holds no include/nccl.h and lib/libnccl.so(.2): "
                      "looking in the CUDA toolkit and the system paths instead")
    endif()
  endif()
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_mt_nccl_inc_hints} DOC "Directory of nccl.h")
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_mt_nccl_lib_hints}
               DOC "The NCCL library (libnccl.so or libnccl.so.2)")

  set(_mt_nccl_where "")
  if(_mt_nccl_root)
    set(_mt_nccl_where "NCCL_ROOT=${_mt_nccl_root}, ")
  endif()
  string(APPEND _mt_nccl_where
         "the CUDA toolkit (${CUDAToolkit_INCLUDE_DIRS}; ${CUDAToolkit_LIBRARY_DIR}) and the system paths")
  if(NOT NCCL_INCLUDE_DIR OR NOT EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
    set(_mt_nccl_why "nccl.h not found (NCCL_INCLUDE_DIR=${NCCL_INCLUDE_DIR}) in ${_mt_nccl_where}")
  elseif(NOT NCCL_LIBRARY OR NOT EXISTS "${NCCL_LIBRARY}")
    string(CONCAT _mt_nccl_why "nccl.h found in ${NCCL_INCLUDE_DIR}, but no libnccl.so or libnccl.so.2 "
                  "(NCCL_LIBRARY=${NCCL_LIBRARY}) in ${_mt_nccl_where}")
  else()
    file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _mt_nccl_defines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
    set(_mt_nccl_v "")
    foreach(part MAJOR MINOR PATCH)
      string(REGEX MATCH "NCCL_${part} +([0-9]+)" _mt_nccl_m "${_mt_nccl_defines}")
      list(APPEND _mt_nccl_v "${CMAKE_MATCH_1}")
    endforeach()
    string(REPLACE ";" "." MIXTRAIN_NCCL_VERSION "${_mt_nccl_v}")
    # 2.14: ncclInProgress; ncclGetLastError (the text of an error) came in 2.13, bf16 and ncclAvg in 2.10.
    if(MIXTRAIN_NCCL_VERSION STREQUAL "" OR MIXTRAIN_NCCL_VERSION VERSION_LESS 2.14)
      string(CONCAT _mt_nccl_why "NCCL '${MIXTRAIN_NCCL_VERSION}' in ${NCCL_INCLUDE_DIR} is older than 2.14 "
                    "(ncclGetLastError, ncclInProgress, bf16 and ncclAvg are needed)")
    else()
      set(MIXTRAIN_WITH_NCCL TRUE)
    endif()
  endif()
endif()

if(MIXTRAIN_WITH_NCCL)
  if(NOT TARGET mixtrain::nccl)
    # UNKNOWN: linked by its full path, which works for a versioned-only file as for libnccl.so.
    add_library(mixtrain::nccl UNKNOWN IMPORTED)
    set_target_properties(mixtrain::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
  get_filename_component(MIXTRAIN_NCCL_LIBRARY_DIR "${NCCL_LIBRARY}" DIRECTORY)
  message(STATUS "mixtrain: NCCL ON (${MIXTRAIN_NCCL_VERSION}: ${NCCL_INCLUDE_DIR}, ${NCCL_LIBRARY})")
elseif(_mt_nccl_mode STREQUAL "ON")
  message(FATAL_ERROR "MIXTRAIN_NCCL=ON but NCCL cannot be used: ${_mt_nccl_why}. "
                      "Point NCCL_ROOT at the prefix holding include/nccl.h and lib/libnccl.so* (for a pip "
                      "wheel: <site-packages>/nvidia/nccl), or configure with -DMIXTRAIN_NCCL=AUTO (data-parallel "
                      "training then reduces CUDA tensors through host copies).")
else()
  message(STATUS "mixtrain: NCCL OFF (${_mt_nccl_why})")
endif()

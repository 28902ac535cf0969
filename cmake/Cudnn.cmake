# cuDNN for the CUDA backend's conv2d kernels (src/backends/cuda/kernels/conv_cudnn.cpp, docs/cuda.md).
# Included by cmake/Cuda.cmake once the CUDA backend is decided.
#   MIXTRAIN_CUDNN=AUTO  used when cudnn.h and libcudnn (version 9 or newer) are found (the default)
#   MIXTRAIN_CUDNN=ON    required: configuring fails, saying what is missing
#   MIXTRAIN_CUDNN=OFF   never: conv2d then has no CUDA kernel
# Only with the CUDA backend. Search order, headers and library alike: CUDNN_ROOT (a CMake variable or
# the environment variable; the prefix holding include/ and lib/ or lib64/, such as a pip wheel's
# site-packages/nvidia/cudnn), then the CUDA toolkit's own include and library dirs, then the system's.
# The library may be a versioned file only (libcudnn.so.9, as pip wheels ship it). CUDNN_INCLUDE_DIR
# and CUDNN_LIBRARY (cache) override the search; a CUDNN_ROOT different from the last configure's
# searches again.
# Sets MIXTRAIN_WITH_CUDNN (TRUE/FALSE), and when TRUE the imported target mixtrain::cudnn (the
# library and its include dir) and MIXTRAIN_CUDNN_VERSION; the caller compiles the conv file, defines
# MIXTRAIN_WITH_CUDNN=1 and links mixtrain::cudnn privately. libcudnn.so is cuDNN 9's dispatcher: it
# loads libcudnn_ops/_cnn/... from its own directory (RUNPATH $ORIGIN) when first used.
include(${CMAKE_CURRENT_LIST_DIR}/TristateOption.cmake)
mt_tristate_option(MIXTRAIN_CUDNN "Use cuDNN for conv2d on CUDA: AUTO (when found), ON (required) or OFF"
                   _mt_cudnn_mode)

set(MIXTRAIN_WITH_CUDNN FALSE)
set(MIXTRAIN_CUDNN_VERSION "")
set(_mt_cudnn_why "")
if(_mt_cudnn_mode STREQUAL "OFF")
  set(_mt_cudnn_why "MIXTRAIN_CUDNN=OFF")
elseif(NOT MIXTRAIN_WITH_CUDA)
  set(_mt_cudnn_why "no CUDA backend in this build")
else()
  set(_mt_cudnn_root "")
  if(DEFINED CUDNN_ROOT AND NOT "${CUDNN_ROOT}" STREQUAL "")
    set(_mt_cudnn_root "${CUDNN_ROOT}")
  elseif(DEFINED ENV{CUDNN_ROOT} AND NOT "$ENV{CUDNN_ROOT}" STREQUAL "")
    set(_mt_cudnn_root "$ENV{CUDNN_ROOT}")
  endif()
  # A new root searches again instead of keeping the previous configure's results.
  if(DEFINED _MT_CUDNN_SEARCHED_ROOT AND NOT "${_MT_CUDNN_SEARCHED_ROOT}" STREQUAL "${_mt_cudnn_root}")
    unset(CUDNN_INCLUDE_DIR CACHE)
    unset(CUDNN_LIBRARY CACHE)
  endif()
  set(_MT_CUDNN_SEARCHED_ROOT "${_mt_cudnn_root}" CACHE INTERNAL "CUDNN_ROOT of the last cuDNN search")

  # The toolkit's dirs: its include dirs, its library dir, and the lib/ and lib64/ beside them
  # (cuDNN's tarball and Debian packages install there; CUDAToolkit_LIBRARY_DIR may be
  # targets/<arch>/lib instead).
  set(_mt_cudnn_inc_hints ${CUDAToolkit_INCLUDE_DIRS})
  set(_mt_cudnn_lib_hints ${CUDAToolkit_LIBRARY_DIR})
  if(CUDAToolkit_LIBRARY_ROOT)
    list(APPEND _mt_cudnn_inc_hints ${CUDAToolkit_LIBRARY_ROOT}/include)
    list(APPEND _mt_cudnn_lib_hints ${CUDAToolkit_LIBRARY_ROOT}/lib64 ${CUDAToolkit_LIBRARY_ROOT}/lib)
  endif()
  if(_mt_cudnn_root)
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_mt_cudnn_root} PATH_SUFFIXES include NO_DEFAULT_PATH
              DOC "Directory of cudnn.h")
    find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${_mt_cudnn_root} PATH_SUFFIXES lib64 lib
                 NO_DEFAULT_PATH DOC "The cuDNN library (libcudnn.so or libcudnn.so.9)")
    if(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
      message(WARNING "CUDNN_ROOT=${_mt_cudnn_root} holds no include/cudnn.h and lib/libcudnn.so(.9): "
                      "looking in the CUDA toolkit and the system paths instead")
    endif()
  endif()
  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_mt_cudnn_inc_hints} DOC "Directory of cudnn.h")
  find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${_mt_cudnn_lib_hints}
               DOC "The cuDNN library (libcudnn.so or libcudnn.so.9)")

  set(_mt_cudnn_where "")
  if(_mt_cudnn_root)
    set(_mt_cudnn_where "CUDNN_ROOT=${_mt_cudnn_root}, ")
  endif()
  string(APPEND _mt_cudnn_where
         "the CUDA toolkit (${CUDAToolkit_INCLUDE_DIRS}; ${CUDAToolkit_LIBRARY_DIR}) and the system paths")
  if(NOT CUDNN_INCLUDE_DIR OR NOT EXISTS "${CUDNN_INCLUDE_DIR}/cudnn.h")
    set(_mt_cudnn_why "cudnn.h not found (CUDNN_INCLUDE_DIR=${CUDNN_INCLUDE_DIR}) in ${_mt_cudnn_where}")
  elseif(NOT CUDNN_LIBRARY OR NOT EXISTS "${CUDNN_LIBRARY}")
    string(CONCAT _mt_cudnn_why "cudnn.h found in ${CUDNN_INCLUDE_DIR}, but no libcudnn.so or libcudnn.so.9 "
                  "(CUDNN_LIBRARY=${CUDNN_LIBRARY}) in ${_mt_cudnn_where}")
  else()
    # cuDNN 9 keeps its version in cudnn_version.h (cuDNN 7 in cudnn.h itself).
    set(_mt_cudnn_version_file "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
    if(NOT EXISTS "${_mt_cudnn_version_file}")
      set(_mt_cudnn_version_file "${CUDNN_INCLUDE_DIR}/cudnn.h")
    endif()
    file(STRINGS "${_mt_cudnn_version_file}" _mt_cudnn_defines
         REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
    set(_mt_cudnn_v "")
    foreach(part MAJOR MINOR PATCHLEVEL)
      string(REGEX MATCH "CUDNN_${part} +([0-9]+)" _mt_cudnn_m "${_mt_cudnn_defines}")
      list(APPEND _mt_cudnn_v "${CMAKE_MATCH_1}")
    endforeach()
    list(GET _mt_cudnn_v 0 _mt_cudnn_major)
    string(REPLACE ";" "." MIXTRAIN_CUDNN_VERSION "${_mt_cudnn_v}")
    if(_mt_cudnn_major STREQUAL "" OR _mt_cudnn_major LESS 9)
      string(CONCAT _mt_cudnn_why "cuDNN '${MIXTRAIN_CUDNN_VERSION}' in ${CUDNN_INCLUDE_DIR} is older than 9 "
                    "(cudnnGetLastErrorString and cuDNN 9's packaging are needed)")
    else()
      set(MIXTRAIN_WITH_CUDNN TRUE)
    endif()
  endif()
endif()

if(MIXTRAIN_WITH_CUDNN)
  if(NOT TARGET mixtrain::cudnn)
    # UNKNOWN: linked by its full path, which works for a versioned-only file as for libcudnn.so.
    add_library(mixtrain::cudnn UNKNOWN IMPORTED)
    set_target_properties(mixtrain::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
  endif()
  get_filename_component(MIXTRAIN_CUDNN_LIBRARY_DIR "${CUDNN_LIBRARY}" DIRECTORY)
  message(STATUS "mixtrain: cuDNN ON (${MIXTRAIN_CUDNN_VERSION}: ${CUDNN_INCLUDE_DIR}, ${CUDNN_LIBRARY})")
elseif(_mt_cudnn_mode STREQUAL "ON")
  message(FATAL_ERROR "MIXTRAIN_CUDNN=ON but cuDNN cannot be used: ${_mt_cudnn_why}. "
                      "Point CUDNN_ROOT at the prefix holding include/cudnn.h and lib/libcudnn.so* (for a pip "
                      "wheel: <site-packages>/nvidia/cudnn), or configure with -DMIXTRAIN_CUDNN=AUTO (conv2d then "
                      "has no CUDA kernel).")
else()
  message(STATUS "mixtrain: cuDNN OFF (${_mt_cudnn_why})")
endif()

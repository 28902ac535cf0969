# The layers of the library (docs/notes/layers.md) and the layer of a path, shared by the include
# check (CheckLayers.cmake) and the link check (CheckLinkLayers.cmake).
# Layers, lowest first; a file may include its own layer's headers and lower ones'.
set(LAYERS core kernels autograd ops optim amp nn io text data dist train)
# Public headers outside a layer folder, and the functional API that the ops layer implements.
set(HEADER_LAYER_tensor.h core)
set(HEADER_LAYER_device.h core)
set(HEADER_LAYER_dtype.h core)
set(HEADER_LAYER_shape.h core)
set(HEADER_LAYER_half.h core)
set(HEADER_LAYER_error.h core)
set(HEADER_LAYER_memory.h core)
set(HEADER_LAYER_random.h core)
set(HEADER_LAYER_factory.h core)
set(HEADER_LAYER_cpu.h core)
set(HEADER_LAYER_parallel.h core)
set(HEADER_LAYER_cuda.h core)
set(HEADER_LAYER_float8.h core)
set(HEADER_LAYER_autograd.h autograd)
set(HEADER_LAYER_op_id.h ops)
set(HEADER_LAYER_mixtrain.h train)
set(HEADER_LAYER_nn/functional.h ops)
set(HEADER_LAYER_nn/batch_norm.h ops)

# The layer of a path relative to the repository: "src/<layer>/...", "include/mixtrain/...", or a
# backend's folder (docs/notes/backends.md): its kernels ("src/backends/<name>/kernels/...") are in
# the kernels layer, the rest of it (its memory side and descriptor) in core.
function(layer_of rel out)
  set(result "")
  if(rel MATCHES "^src/backends/[a-z0-9_]+/kernels/")
    set(result kernels)
  elseif(rel MATCHES "^src/backends/[a-z0-9_]+/")
    set(result core)
  elseif(rel MATCHES "^src/([a-z]+)/")
    set(result ${CMAKE_MATCH_1})
  elseif(rel MATCHES "^include/mixtrain/(.+)$")
    set(name ${CMAKE_MATCH_1})
    if(DEFINED HEADER_LAYER_${name})
      set(result ${HEADER_LAYER_${name}})
    elseif(name MATCHES "^([a-z]+)/")
      set(result ${CMAKE_MATCH_1})
    endif()
  endif()
  list(FIND LAYERS "${result}" rank)
  if(rank LESS 0)
    set(result "")
  endif()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()


# The backend a path belongs to ("cpu" for "src/backends/cpu/..."), or "" outside src/backends/.
# Each backend is a layer apart: its files may include their own backend's headers and the layers'
# (by rank, as above), never another backend's; no file outside src/backends/ includes a backend's.
# Generated sources ("src/core/builtin_backends_list.cpp" and "src/kernels/builtin_kernels_list.cpp",
# cmake/Backends.cmake) are the one place that names every backend: they count as part of all.
function(backend_of rel out)
  set(result "")
  if(rel MATCHES "^src/backends/([a-z0-9_]+)/")
    set(result ${CMAKE_MATCH_1})
  elseif(rel MATCHES "^src/(core/builtin_backends_list|kernels/builtin_kernels_list)\\.cpp")
    set(result "*")
  endif()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

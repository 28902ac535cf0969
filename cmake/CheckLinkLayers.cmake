# The link-level half of the layer check (docs/notes/layers.md): fails when an object file of one
# layer refers to a symbol that only a higher layer defines (a function declared low and defined
# high is a loop at link time even when every include goes down), or to a symbol that only another
# backend defines (each backend is a layer apart). Runs after the library is built.
#   cmake -DSOURCE_DIR=<repo> -DOBJECTS_FILE=<file listing the library's objects> -DNM=<nm> -P cmake/CheckLinkLayers.cmake
# An object's layer is its source's: "<...>/mixtrain.dir/src/..." as in Layers.cmake, and a source
# that CMake generates ("<...>/mixtrain.dir/generated/<layer>/...") the layer its folder names.
include(${CMAKE_CURRENT_LIST_DIR}/Layers.cmake)

file(STRINGS ${OBJECTS_FILE} objects)
set(map "")
set(unplaced "")
foreach(obj IN LISTS objects)
  string(REPLACE "/./" "/" rel "${obj}")
  string(REGEX REPLACE "^.*/mixtrain(_backend_[a-z0-9_]+)?\\.dir/" "" rel "${rel}")
  string(REGEX REPLACE "^generated/" "src/" rel "${rel}")
  layer_of("${rel}" layer)
  if(layer STREQUAL "")
    list(APPEND unplaced "${obj}")
    continue()
  endif()
  list(FIND LAYERS ${layer} rank)
  backend_of("${rel}" backend)
  if(backend STREQUAL "")
    set(backend "-")
  endif()
  string(APPEND map "${obj} ${rank} ${layer} ${backend}\n")
endforeach()
if(unplaced)
  list(JOIN unplaced "\n  " text)
  message(FATAL_ERROR "link layers: objects that no layer claims:\n  ${text}")
endif()
get_filename_component(work "${OBJECTS_FILE}" DIRECTORY)
file(WRITE ${work}/layer_of_objects.txt "${map}")

# nm -P -A: "<object>: <symbol> <type> [value size]"; U is undefined, lowercase types are local.
execute_process(COMMAND ${NM} -P -A ${objects}
                COMMAND awk -f ${CMAKE_CURRENT_LIST_DIR}/link_layers.awk ${work}/layer_of_objects.txt -
                OUTPUT_VARIABLE violations RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "link layers: nm or awk failed (${rc}): ${err}")
endif()
if(NOT violations STREQUAL "")
  execute_process(COMMAND c++filt INPUT_FILE /dev/null RESULT_VARIABLE have_filt OUTPUT_QUIET ERROR_QUIET)
  if(have_filt EQUAL 0)
    file(WRITE ${work}/link_layer_violations.txt "${violations}")
    execute_process(COMMAND c++filt INPUT_FILE ${work}/link_layer_violations.txt OUTPUT_VARIABLE violations)
  endif()
  message(FATAL_ERROR "link layers: a lower layer uses a symbol that only a higher layer defines "
                      "(define it in the layer that declares it; docs/notes/layers.md):\n${violations}")
endif()

# The device backends: every folder of src/backends/ (docs/notes/backends.md). A folder holds
#   backend.cmake   run here with BACKEND_DIR and BACKEND_TARGET set: sets BACKEND_ENABLED (ON unless it
#                   says otherwise) and, when enabled, configures its own target, BACKEND_TARGET
#                   (definitions, include folders, per-file flags), and lists in BACKEND_LIBRARIES the
#                   libraries it needs (compiled against by its target, linked into mixtrain); may add
#                   to BACKEND_ALWAYS_BUILT (files compiled
#                   even when the backend is off; descriptor.cpp always is) and BACKEND_EXCLUDE
#                   (regexes of its files not to build); sets BACKEND_COLLECTIVES ON when the build
#                   includes its device collectives (core/device_collectives.h: CUDA's NCCL)
#   descriptor.cpp  mixtrain::<name>::descriptor(): name, device type, autocast defaults, --help text
#   the rest        its memory side (mixtrain::<name>::backend()), with BACKEND_COLLECTIVES its device
#                   collectives (mixtrain::<name>::device_collectives()) and, under kernels/, its kernels
#                   (mixtrain::kernels::register_<name>(Registry&))
# Each backend is a library target of its own, mixtrain_backend_<name> (an object library whose
# objects mixtrain holds), so that what one backend needs -- its definitions, its include folders (the
# CUDA-on-host headers), its vendor libraries -- reaches its own files and no others. Files under
# kernels/ are in the kernels layer, the rest in core, and each backend is a layer apart from the
# others (cmake/Layers.cmake: no backend includes another's headers or uses its symbols, and nothing
# outside src/backends/ includes a backend's). This file adds the targets and generates the two lists the library reads: the descriptors and memory sides
# (core) and the kernel registrations (kernels). The CPU comes first: other backends may wrap its
# kernels (the checked device does).
file(GLOB backend_names LIST_DIRECTORIES true RELATIVE ${PROJECT_SOURCE_DIR}/src/backends
     CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backends/*)
list(SORT backend_names)
list(REMOVE_ITEM backend_names cpu)
list(PREPEND backend_names cpu)
set(MIXTRAIN_BACKENDS "")
set(MIXTRAIN_BACKENDS_BUILT "")
set(MIXTRAIN_BACKEND_OBJECTS "")  # their objects, one per line, for the link-level layer check
set(decls "")
set(memory_fns "")
set(entries "")
set(kernel_decls "")
set(kernel_calls "")
foreach(name IN LISTS backend_names)
  set(BACKEND_DIR ${PROJECT_SOURCE_DIR}/src/backends/${name})
  if(NOT IS_DIRECTORY ${BACKEND_DIR})
    continue()
  endif()
  if(NOT name MATCHES "^[a-z][a-z0-9_]*$" OR NOT EXISTS ${BACKEND_DIR}/backend.cmake OR NOT EXISTS ${BACKEND_DIR}/descriptor.cpp)
    message(FATAL_ERROR "src/backends/${name}: a backend folder has a lower-case name and holds backend.cmake "
                        "and descriptor.cpp (docs/notes/backends.md)")
  endif()
  set(BACKEND_TARGET mixtrain_backend_${name})
  add_library(${BACKEND_TARGET} OBJECT)
  target_link_libraries(${BACKEND_TARGET} PRIVATE mixtrain_compile_settings)
  set_target_properties(${BACKEND_TARGET} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  set(BACKEND_LIBRARIES "")
  set(BACKEND_ENABLED ON)
  set(BACKEND_ALWAYS_BUILT descriptor.cpp)
  set(BACKEND_EXCLUDE "")
  set(BACKEND_COLLECTIVES OFF)
  include(${BACKEND_DIR}/backend.cmake)
  list(APPEND MIXTRAIN_BACKENDS ${name})
  string(APPEND decls "namespace ${name} {\nconst BackendDescriptor& descriptor();\n")
  if(BACKEND_ENABLED)
    list(APPEND MIXTRAIN_BACKENDS_BUILT ${name})
    file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${BACKEND_DIR}/*.cpp ${BACKEND_DIR}/*.cu)
    foreach(pattern IN LISTS BACKEND_EXCLUDE)
      list(FILTER sources EXCLUDE REGEX "${pattern}")
    endforeach()
    string(APPEND decls "Backend& backend();\n")
    string(APPEND memory_fns "Backend* ${name}_backend() { return &::mixtrain::${name}::backend(); }\n")
    if(BACKEND_COLLECTIVES)
      string(APPEND decls "DeviceCollectives& device_collectives();\n")
      string(APPEND memory_fns
             "DeviceCollectives* ${name}_collectives() { return &::mixtrain::${name}::device_collectives(); }\n")
      string(APPEND entries "      {&::mixtrain::${name}::descriptor(), &${name}_backend, &${name}_collectives},\n")
    else()
      string(APPEND entries "      {&::mixtrain::${name}::descriptor(), &${name}_backend},\n")
    endif()
    string(APPEND kernel_decls "void register_${name}(Registry& registry);\n")
    string(APPEND kernel_calls "  {\n    Registry registry(::mixtrain::${name}::descriptor().type);\n    register_${name}(registry);\n  }\n")
    string(APPEND kernel_decls "")
  else()
    set(sources "")
    foreach(file IN LISTS BACKEND_ALWAYS_BUILT)
      list(APPEND sources ${BACKEND_DIR}/${file})
    endforeach()
    string(APPEND entries "      {&::mixtrain::${name}::descriptor(), nullptr},\n")
  endif()
  string(APPEND decls "}  // namespace ${name}\n")
  target_sources(${BACKEND_TARGET} PRIVATE ${sources})
  if(BACKEND_LIBRARIES)
    target_link_libraries(${BACKEND_TARGET} PRIVATE ${BACKEND_LIBRARIES})
    target_link_libraries(mixtrain PRIVATE ${BACKEND_LIBRARIES})
  endif()
  target_sources(mixtrain PRIVATE $<TARGET_OBJECTS:${BACKEND_TARGET}>)
  string(APPEND MIXTRAIN_BACKEND_OBJECTS "$<JOIN:$<TARGET_OBJECTS:${BACKEND_TARGET}>,\n>\n")
endforeach()
message(STATUS "mixtrain backends: ${MIXTRAIN_BACKENDS_BUILT} (of ${MIXTRAIN_BACKENDS})")

set(generated_note "// Generated by cmake/Backends.cmake from the folders of src/backends/; do not edit.")
set(core_list "${generated_note}
#include \"core/backend_descriptor.h\"

namespace mixtrain {
${decls}
namespace {
${memory_fns}}  // namespace

std::span<const BuiltinBackend> builtin_backends() {
  static const BuiltinBackend list[] = {
${entries}  };
  return list;
}

}  // namespace mixtrain
")
set(kernels_list "${generated_note}
#include \"core/backend_descriptor.h\"
#include \"kernels/dispatch.h\"

namespace mixtrain {
${decls}
namespace kernels {

${kernel_decls}
// Called once, by register_builtin_kernels (registry.cpp).
void register_builtin_backends_kernels() {
${kernel_calls}}

}  // namespace kernels
}  // namespace mixtrain
")
# Written only when changed, so that reconfiguring does not rebuild them.
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/generated/core/builtin_backends_list.cpp CONTENT "${core_list}" @ONLY)
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/generated/kernels/builtin_kernels_list.cpp CONTENT "${kernels_list}" @ONLY)
target_sources(mixtrain PRIVATE ${PROJECT_BINARY_DIR}/generated/core/builtin_backends_list.cpp
                                ${PROJECT_BINARY_DIR}/generated/kernels/builtin_kernels_list.cpp)

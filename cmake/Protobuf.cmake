# Protocol Buffers (Debian: libprotobuf-dev, protobuf-compiler), the encoder of TensorBoard's event
# files (src/io/tensorboard/, docs/notes/tensorboard.md). protoc turns src/io/tensorboard/event.proto
# into C++ in the build tree; that code is compiled into the library and linked privately to
# libprotobuf-lite (the .proto asks for the lite runtime: no descriptors or reflection are needed).
# No public header includes a generated one, so consumers never see protobuf's headers. The runtime
# is linked as the imported target mixtrain::protobuf, which the installed package creates again
# (cmake/mixtrainConfig.cmake.in), so a project linking the static library finds the same
# libprotobuf-lite the generated code was made for (that code checks the version at start-up).
find_package(Protobuf QUIET)
if(NOT Protobuf_FOUND OR NOT Protobuf_LITE_LIBRARY OR NOT TARGET protobuf::protoc)
  message(FATAL_ERROR "Protocol Buffers (libprotobuf-lite and protoc) not found: install libprotobuf-dev and "
                      "protobuf-compiler (scripts/packages.txt), or set Protobuf_ROOT")
endif()
if(NOT TARGET mixtrain::protobuf)
  add_library(mixtrain::protobuf UNKNOWN IMPORTED)
  set_target_properties(mixtrain::protobuf PROPERTIES IMPORTED_LOCATION "${Protobuf_LITE_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${Protobuf_INCLUDE_DIRS}")
endif()
get_filename_component(MIXTRAIN_PROTOBUF_LIBRARY_DIR "${Protobuf_LITE_LIBRARY}" DIRECTORY)

# protoc is run directly rather than through protobuf_generate(): the -I directory decides the name
# the file is registered under in protobuf's global descriptor pool ("io/tensorboard/event.proto";
# two files of one name in a process abort it at start-up, so not a bare "event.proto"), and the
# output lands in build/generated/io/tensorboard/, which the include check and the link check
# (cmake/CheckLinkLayers.cmake) place in the io layer. protobuf_generate()'s output folder for a given
# -I has changed between CMake versions.
set(MIXTRAIN_PROTO_DIR ${PROJECT_SOURCE_DIR}/src)
set(MIXTRAIN_PROTO_OUT ${PROJECT_BINARY_DIR}/generated)
set(MIXTRAIN_PROTO_SOURCES)
foreach(proto io/tensorboard/event.proto)
  string(REGEX REPLACE "\\.proto$" "" stem ${proto})
  set(outputs ${MIXTRAIN_PROTO_OUT}/${stem}.pb.cc ${MIXTRAIN_PROTO_OUT}/${stem}.pb.h)
  add_custom_command(OUTPUT ${outputs}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${MIXTRAIN_PROTO_OUT}
    COMMAND protobuf::protoc --cpp_out=${MIXTRAIN_PROTO_OUT} -I ${MIXTRAIN_PROTO_DIR} ${MIXTRAIN_PROTO_DIR}/${proto}
    DEPENDS ${MIXTRAIN_PROTO_DIR}/${proto} protobuf::protoc
    COMMENT "protoc: ${proto}"
    VERBATIM)
  list(APPEND MIXTRAIN_PROTO_SOURCES ${MIXTRAIN_PROTO_OUT}/${stem}.pb.cc)
endforeach()

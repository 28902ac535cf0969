# PCRE2 (8-bit code units), the regular-expression library of the tokenizer's pre-tokenizer
# (src/text/pretokenizer.cpp; Debian: libpcre2-dev). It is linked as the imported target
# mixtrain::pcre2, which the installed package creates again (cmake/mixtrainConfig.cmake.in), so a
# project linking the static library finds it the same way.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(MIXTRAIN_PC_PCRE2 QUIET libpcre2-8)
endif()
find_path(MIXTRAIN_PCRE2_INCLUDE_DIR pcre2.h HINTS ${MIXTRAIN_PC_PCRE2_INCLUDE_DIRS}
          DOC "Where pcre2.h is (PCRE2, libpcre2-dev)")
find_library(MIXTRAIN_PCRE2_LIBRARY NAMES pcre2-8 HINTS ${MIXTRAIN_PC_PCRE2_LIBRARY_DIRS}
             DOC "The PCRE2 library, 8-bit (libpcre2-8)")
if(NOT MIXTRAIN_PCRE2_INCLUDE_DIR OR NOT MIXTRAIN_PCRE2_LIBRARY)
  message(FATAL_ERROR "PCRE2 (pcre2.h and libpcre2-8) not found: install libpcre2-dev (scripts/packages.txt), "
                      "or set MIXTRAIN_PCRE2_INCLUDE_DIR and MIXTRAIN_PCRE2_LIBRARY")
endif()
if(NOT TARGET mixtrain::pcre2)
  add_library(mixtrain::pcre2 UNKNOWN IMPORTED)
  set_target_properties(mixtrain::pcre2 PROPERTIES IMPORTED_LOCATION "${MIXTRAIN_PCRE2_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${MIXTRAIN_PCRE2_INCLUDE_DIR}")
endif()
get_filename_component(MIXTRAIN_PCRE2_LIBRARY_DIR "${MIXTRAIN_PCRE2_LIBRARY}" DIRECTORY)

# mt_tristate_option(NAME DOC OUT): a cache option NAME that is AUTO (the default), ON or OFF, as
# MIXTRAIN_CUDA and MIXTRAIN_MPI are; its value, upper-cased and validated, lands in OUT.
function(mt_tristate_option name doc out)
  set(${name} AUTO CACHE STRING "${doc}")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${name}}" mode)
  if(NOT mode MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${name} must be AUTO, ON or OFF, not '${${name}}'")
  endif()
  set(${out} ${mode} PARENT_SCOPE)
endfunction()

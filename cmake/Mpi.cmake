# MPI for data-parallel training (docs/distributed.md): the process group of src/dist/mpi.
#   MIXTRAIN_MPI=AUTO  built when an MPI library is found (the default)
#   MIXTRAIN_MPI=ON    required: configuring fails, saying what is missing (sanitizer and fuzz
#                      builds are always without MPI)
#   MIXTRAIN_MPI=OFF   never (dist::world() is then always a single process, and refuses to run
#                      under mpirun with several processes)
# Sets MIXTRAIN_WITH_MPI (TRUE/FALSE) for the caller, which then defines MIXTRAIN_WITH_MPI=1 on the
# library and links MPI::MPI_CXX privately. Only MPI's C API is used; MPI_CXX_SKIP_MPICXX keeps the
# deprecated C++ bindings' declarations out of the compile (Open MPI's wrapper still names
# libmpi_cxx, which comes with libmpi). The CXX component and not C: the C one needs the C language
# enabled, here and in every project that links the installed package. On Debian 12 the packages
# are libopenmpi-dev and openmpi-bin (scripts/packages.txt).
include(${CMAKE_CURRENT_LIST_DIR}/TristateOption.cmake)
mt_tristate_option(MIXTRAIN_MPI "Build the MPI process group: AUTO (when MPI is found), ON (required) or OFF" _mt_mpi_mode)

set(MIXTRAIN_WITH_MPI FALSE)
set(_mt_mpi_why "")
if(_mt_mpi_mode STREQUAL "OFF")
  set(_mt_mpi_why "MIXTRAIN_MPI=OFF")
elseif(MIXTRAIN_SANITIZE OR MIXTRAIN_FUZZ)
  # Open MPI 4.1 leaks at MPI_Finalize (LeakSanitizer: about 120 KB in 3,350 allocations per rank,
  # all in libmpi/libopen-pal/PMIx, for a program that only initialises, all-reduces and finalizes),
  # so an instrumented MPI test would fail on Open MPI's leaks, not ours.
  set(_mt_mpi_why "sanitizer and fuzz builds leave MPI out (Open MPI's own leaks at MPI_Finalize)")
else()
  set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "Do not link MPI's deprecated C++ bindings")
  find_package(MPI COMPONENTS CXX)
  if(NOT MPI_CXX_FOUND)
    set(_mt_mpi_why "no MPI library found (apt-get install libopenmpi-dev openmpi-bin)")
  elseif(NOT MPIEXEC_EXECUTABLE)
    set(_mt_mpi_why "MPI found but no launcher (mpirun/mpiexec) to run its tests (apt-get install openmpi-bin)")
  else()
    set(MIXTRAIN_WITH_MPI TRUE)
  endif()
endif()

if(MIXTRAIN_WITH_MPI)
  message(STATUS "mixtrain: MPI process group ON (MPI ${MPI_CXX_VERSION}, ${MPIEXEC_EXECUTABLE})")
elseif(_mt_mpi_mode STREQUAL "ON")
  message(FATAL_ERROR "MIXTRAIN_MPI=ON but the MPI process group cannot be built: ${_mt_mpi_why}. "
                      "Install an MPI (Debian: libopenmpi-dev openmpi-bin), or configure with -DMIXTRAIN_MPI=AUTO.")
else()
  message(STATUS "mixtrain: MPI process group OFF (${_mt_mpi_why})")
endif()

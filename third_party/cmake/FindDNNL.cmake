# Finds oneDNN (Debian's libdnnl-dev) for the CPU GEMMs of ops/cpu/matmul_dnnl.cpp.
# Not the package's own dnnl-config.cmake: Debian builds it with an OpenCL GPU
# runtime, so that file demands OpenCL headers fanout never uses.
# Defines DNNL_FOUND, DNNL_VERSION, DNNL_CPU_RUNTIME (OMP, TBB, SEQ, ...) and the
# imported target DNNL::dnnl; with the OpenMP runtime the target also links the
# OpenMP library, whose omp_set_num_threads keeps every GEMM on its calling thread.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(DNNL_LIBRARY NAMES dnnl)
if(DNNL_INCLUDE_DIR)
  file(STRINGS "${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h" _dnnl_version_lines
       REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*DNNL_VERSION_${part} ([0-9]+).*" "\\1" _dnnl_${part}
                         "${_dnnl_version_lines}")
  endforeach()
  set(DNNL_VERSION "${_dnnl_MAJOR}.${_dnnl_MINOR}.${_dnnl_PATCH}")
  file(STRINGS "${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_config.h" _dnnl_runtime
       REGEX "#define DNNL_CPU_THREADING_RUNTIME ")
  string(REGEX REPLACE ".*DNNL_RUNTIME_([A-Z]+).*" "\\1" DNNL_CPU_RUNTIME "${_dnnl_runtime}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(DNNL REQUIRED_VARS DNNL_LIBRARY DNNL_INCLUDE_DIR
                                  VERSION_VAR DNNL_VERSION)
if(DNNL_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION "${DNNL_LIBRARY}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE_DIR}")
  if(DNNL_CPU_RUNTIME STREQUAL "OMP")
    find_package(OpenMP REQUIRED COMPONENTS CXX)
    # The library only (no -fopenmp for fanout's own sources): omp.h and omp_* calls.
    set_property(TARGET DNNL::dnnl APPEND PROPERTY INTERFACE_LINK_LIBRARIES
                                                   ${OpenMP_CXX_LIBRARIES})
    if(OpenMP_CXX_INCLUDE_DIRS)
      set_property(TARGET DNNL::dnnl APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES
                                                     ${OpenMP_CXX_INCLUDE_DIRS})
    endif()
  endif()
endif()
mark_as_advanced(DNNL_INCLUDE_DIR DNNL_LIBRARY)

# Finds NCCL 2 in the CUDA toolkit folder or pip's nvidia-nccl wheel.
# Defines NCCL_FOUND and the imported target NCCL::nccl.
include(${CMAKE_CURRENT_LIST_DIR}/FanoutFindHelpers.cmake)
fanout_nvidia_search_roots(_nccl_roots nccl)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_roots} ENV CPATH PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
  HINTS ${_nccl_roots} ENV LIBRARY_PATH PATH_SUFFIXES lib64 lib)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL DEFAULT_MSG NCCL_LIBRARY NCCL_INCLUDE_DIR)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

# Finds cuDNN 9 in the CUDA toolkit folder or pip's nvidia-cudnn wheel.
# Defines CUDNN_FOUND and the imported target CUDNN::cudnn.
include(${CMAKE_CURRENT_LIST_DIR}/FanoutFindHelpers.cmake)
fanout_nvidia_search_roots(_cudnn_roots cudnn)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_roots} ENV CPATH PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
  HINTS ${_cudnn_roots} ENV LIBRARY_PATH PATH_SUFFIXES lib64 lib)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN DEFAULT_MSG CUDNN_LIBRARY CUDNN_INCLUDE_DIR)
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
                                                INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)

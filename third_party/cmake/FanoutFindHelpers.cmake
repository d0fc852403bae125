# Shared search paths for the cuDNN / NCCL find modules: the CUDA toolkit folder
# and pip's nvidia-* wheel folders (which ship only versioned names such as
# libcudnn.so.9, so the modules look for those too).
function(fanout_nvidia_search_roots out component)
  set(roots "")
  if(CUDAToolkit_LIBRARY_ROOT)
    list(APPEND roots "${CUDAToolkit_LIBRARY_ROOT}")
  endif()
  if(DEFINED ENV{CUDA_HOME})
    list(APPEND roots "$ENV{CUDA_HOME}")
  endif()
  list(APPEND roots /usr/local/cuda)
  if(DEFINED ENV{FANOUT_NVIDIA_PIP_ROOT})
    list(APPEND roots "$ENV{FANOUT_NVIDIA_PIP_ROOT}/${component}")
  endif()
  # pip wheels in the active python's site-packages
  find_program(_fanout_python NAMES python3)
  if(_fanout_python)
    execute_process(
      COMMAND "${_fanout_python}" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
      OUTPUT_VARIABLE site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(site AND EXISTS "${site}/nvidia/${component}")
      list(APPEND roots "${site}/nvidia/${component}")
    endif()
  endif()
  set(${out} "${roots}" PARENT_SCOPE)
endfunction()

# Dependencies, all from the system (installed by .ci/setup through apt and pip):
#   CUDA toolkit headers + NVRTC (compile kernels at run time), GoogleTest (tests),
#   Threads. The CUDA driver itself is dlopen'ed at run time, never linked.
find_package(Threads REQUIRED)

find_package(CUDAToolkit QUIET)
add_library(megamoe_cuda_headers INTERFACE)
if(CUDAToolkit_FOUND)
  target_include_directories(megamoe_cuda_headers INTERFACE ${CUDAToolkit_INCLUDE_DIRS})
  if(TARGET CUDA::nvrtc)
    set(MEGAMOE_HAVE_NVRTC ON)
  endif()
  message(STATUS "megamoe: CUDA toolkit ${CUDAToolkit_VERSION} at ${CUDAToolkit_BIN_DIR}")
else()
  message(FATAL_ERROR "megamoe needs the CUDA toolkit headers and NVRTC (no GPU needed). "
                      "Install the CUDA toolkit or set CUDAToolkit_ROOT.")
endif()

# Decides whether the NCCL transport of context parallelism (flashattn_dist_nccl) is built
# (FLASHATTN_NCCL = AUTO/ON/OFF; it needs the CUDA backends) and finds nccl.h and libnccl: in
# NCCL_ROOT (a CMake or environment variable), next to the CUDA toolkit (NVIDIA's HPC images ship it
# there), or in the system directories (Debian/Ubuntu libnccl-dev). Sets FLASHATTN_WITH_NCCL,
# NCCL_INCLUDE_DIR and NCCL_LIBRARY.

set(FLASHATTN_WITH_NCCL OFF)
if(NOT FLASHATTN_NCCL STREQUAL "OFF")
  if(NOT FLASHATTN_WITH_CUDA)
    if(FLASHATTN_NCCL STREQUAL "ON")
      message(FATAL_ERROR "FLASHATTN_NCCL=ON needs the CUDA backends (FLASHATTN_CUDA), which are off")
    endif()
  else()
    set(_fa_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_fa_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl HINTS ${_fa_nccl_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(FLASHATTN_WITH_NCCL ON)
    elseif(FLASHATTN_NCCL STREQUAL "ON")
      message(FATAL_ERROR "FLASHATTN_NCCL=ON but nccl.h or libnccl was not found (set NCCL_ROOT); "
                          "header: ${NCCL_INCLUDE_DIR}, library: ${NCCL_LIBRARY}")
    endif()
  endif()
endif()
if(FLASHATTN_WITH_NCCL)
  message(STATUS "flashattn: NCCL transport for context parallelism ON (${NCCL_LIBRARY})")
else()
  message(STATUS "flashattn: NCCL transport for context parallelism OFF")
endif()

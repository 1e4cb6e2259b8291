# The sm_70 image of cuda_sm70 (src/cuda/sm70): CUDA 13 compiles nothing older than sm_75, so the Volta
# kernels reach a V100 another way. src/cuda/sm70/image_entries.cu is compiled to PTX for the oldest
# virtual architecture nvcc has, the PTX is retargeted to sm_70 (cmake/Sm70Image.cmake: the kernels use
# only sm_70 instructions, which an assembler for sm_70 checks), and a CUDA 12 ptxas, when one is found,
# assembles the sm_70 cubin from it. Both go into one compressed fatbin (CUDA 13's fatbinary still writes
# sm_70 entries), embedded in the library (generated sm70_image.cpp) and loaded at run time on compute
# capability 7.x (src/cuda/sm70/image.cpp): the driver takes the cubin, or compiles the PTX on first use.
#
# FLASHATTN_SM70_PTXAS: the CUDA 12 ptxas (PyPI nvidia-cuda-nvcc-cu12 has one, and scripts/setup.sh
# installs it into .venv); empty: looked for there and next to nvcc. With "70" in FLASHATTN_CUDA_ARCHS it
# is required; otherwise the cubin is built when one is found (which also checks the PTX for sm_70).

set(FLASHATTN_SM70_PTXAS "" CACHE FILEPATH "A CUDA 12 ptxas for the sm_70 cubin of cuda_sm70 (empty: searched)")

# Sets `out` to `ptxas` when it is a CUDA 12 ptxas (the last major release that assembles sm_70).
function(flashattn_ptxas_12 out ptxas)
  set(${out} "" PARENT_SCOPE)
  if(NOT EXISTS "${ptxas}")
    return()
  endif()
  execute_process(COMMAND "${ptxas}" --version OUTPUT_VARIABLE _v ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _v MATCHES "release 12\\.")
    set(${out} "${ptxas}" PARENT_SCOPE)
  endif()
endfunction()

function(flashattn_find_sm70_ptxas out)
  if(FLASHATTN_SM70_PTXAS)
    flashattn_ptxas_12(_found "${FLASHATTN_SM70_PTXAS}")
    if(NOT _found)
      message(FATAL_ERROR "FLASHATTN_SM70_PTXAS=${FLASHATTN_SM70_PTXAS} is not a CUDA 12 ptxas")
    endif()
    set(${out} "${_found}" PARENT_SCOPE)
    return()
  endif()
  get_filename_component(_nvcc_dir "${CMAKE_CUDA_COMPILER}" DIRECTORY)
  file(GLOB _candidates ${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas)
  list(APPEND _candidates ${_nvcc_dir}/ptxas)
  foreach(_c IN LISTS _candidates)
    flashattn_ptxas_12(_found "${_c}")
    if(_found)
      set(${out} "${_found}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

# Adds the generated sm70_image.cpp (the embedded PTX and, when a CUDA 12 ptxas is found, cubin) to `target`.
function(flashattn_add_sm70_image target want_cubin)
  flashattn_find_sm70_ptxas(_ptxas)
  if(want_cubin AND NOT _ptxas)
    message(FATAL_ERROR "FLASHATTN_CUDA_ARCHS has 70: the sm_70 cubin of cuda_sm70 needs a CUDA 12 ptxas "
                        "(pip install nvidia-cuda-nvcc-cu12, which scripts/setup.sh puts in .venv, or set "
                        "FLASHATTN_SM70_PTXAS)")
  endif()
  if(_ptxas)
    message(STATUS "flashattn: cuda_sm70 image: PTX and sm_70 cubin (ptxas ${_ptxas})")
  else()
    message(STATUS "flashattn: cuda_sm70 image: PTX only (no CUDA 12 ptxas: a V100 compiles it on first use)")
  endif()
  set(_dir ${PROJECT_BINARY_DIR}/generated/cuda/sm70)
  set(_raw ${_dir}/image_entries.raw.ptx)
  set(_cpp ${_dir}/sm70_image.cpp)
  set(_defs -DFLASHATTN_WITH_CUDA=1)
  foreach(_d IN LISTS FLASHATTN_HEAD_DIM_DEFINITIONS)
    list(APPEND _defs -D${_d})
  endforeach()
  # The oldest virtual architecture of this nvcc: compute_75 from CUDA 13 on.
  set(_virtual compute_70)
  if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
    set(_virtual compute_75)
  endif()
  set(_src ${PROJECT_SOURCE_DIR}/src/cuda/sm70/image_entries.cu)
  add_custom_command(
    OUTPUT ${_raw}
    COMMAND ${CMAKE_CUDA_COMPILER} -std=c++20 -O3 -arch=${_virtual} --expt-relaxed-constexpr ${_defs}
            -I${PROJECT_SOURCE_DIR}/src -I${PROJECT_SOURCE_DIR}/include -ptx ${_src} -o ${_raw} -MD -MF ${_raw}.d
    DEPFILE ${_raw}.d
    DEPENDS ${_src}
    COMMENT "cuda_sm70: PTX of the sm_70 image"
    VERBATIM)
  get_filename_component(_nvcc_dir "${CMAKE_CUDA_COMPILER}" DIRECTORY)
  find_program(FLASHATTN_FATBINARY fatbinary HINTS ${_nvcc_dir} REQUIRED)
  add_custom_command(
    OUTPUT ${_cpp}
    COMMAND ${CMAKE_COMMAND} -DRAW_PTX=${_raw} -DPTX=${_dir}/image_entries.sm70.ptx
            -DCUBIN=${_dir}/image_entries.sm70.cubin
            -DFATBIN=${_dir}/image_entries.sm70.fatbin -DFATBINARY=${FLASHATTN_FATBINARY} -DPTXAS=${_ptxas}
            -DOUT=${_cpp} -P ${PROJECT_SOURCE_DIR}/cmake/Sm70Image.cmake
    DEPENDS ${_raw} ${PROJECT_SOURCE_DIR}/cmake/Sm70Image.cmake
    COMMENT "cuda_sm70: sm_70 image (retargeted PTX, cubin) embedded"
    VERBATIM)
  target_sources(${target} PRIVATE ${_cpp})
endfunction()

include(${CMAKE_CURRENT_LIST_DIR}/FlashattnSm70.cmake)

# Decides whether the CUDA backends are built (FLASHATTN_CUDA = AUTO/ON/OFF) and provides
# flashattn_add_cuda_sources(target) that adds every kernel under src/cuda/.

set(FLASHATTN_WITH_CUDA OFF)
if(NOT FLASHATTN_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER AND CMAKE_VERSION VERSION_LESS 3.28)
    # Older CMake does not know nvcc 13's C++20 dialect; scripts/setup.sh installs a newer CMake.
    set(_fa_why "CMake ${CMAKE_VERSION} is older than 3.28, which the CUDA backends need")
    if(FLASHATTN_CUDA STREQUAL "ON")
      message(FATAL_ERROR "FLASHATTN_CUDA=ON: ${_fa_why}")
    endif()
    message(WARNING "flashattn: building without CUDA: ${_fa_why}")
  elseif(CMAKE_CUDA_COMPILER)
    # The toolkit must take C++20 (nvcc 12.0+) and every requested architecture: AUTO falls back to the
    # CPU backends with a warning (rather than a build that stops in the middle), ON stops here.
    execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --version OUTPUT_VARIABLE _fa_nvcc_version ERROR_QUIET)
    execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-arch OUTPUT_VARIABLE _fa_nvcc_archs ERROR_QUIET)
    string(REGEX MATCH "release ([0-9]+)\\.([0-9]+)" _fa_release "${_fa_nvcc_version}")
    set(_fa_nvcc_major "${CMAKE_MATCH_1}")
    set(_fa_why "")
    if(NOT _fa_release OR _fa_nvcc_major LESS 12)
      set(_fa_why "nvcc (${CMAKE_CUDA_COMPILER}) is older than 12.0, which C++20 device code needs")
    else()
      # --list-gpu-arch names the base architectures (compute_90); their a/f variants come with them.
      foreach(_fa_arch IN LISTS FLASHATTN_CUDA_ARCHS)
        if(_fa_arch STREQUAL "70")
          continue()  # not compiled by nvcc: the sm_70 image of cuda_sm70 (cmake/FlashattnSm70.cmake)
        endif()
        string(REGEX REPLACE "-(real|virtual)$" "" _fa_base "${_fa_arch}")
        string(REGEX REPLACE "[a-z]$" "" _fa_base "${_fa_base}")
        if(_fa_base MATCHES "^[0-9]+$" AND NOT _fa_nvcc_archs MATCHES "compute_${_fa_base}([^0-9]|$)")
          set(_fa_why "nvcc ${_fa_release} cannot compile for ${_fa_arch} (FLASHATTN_CUDA_ARCHS)")
          break()
        endif()
      endforeach()
    endif()
    if(_fa_why STREQUAL "")
      set(FLASHATTN_WITH_CUDA ON)
    elseif(FLASHATTN_CUDA STREQUAL "ON")
      message(FATAL_ERROR "FLASHATTN_CUDA=ON: ${_fa_why}")
    else()
      message(WARNING "flashattn: building without CUDA: ${_fa_why}")
    endif()
  elseif(FLASHATTN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FLASHATTN_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()

if(FLASHATTN_WITH_CUDA)
  # "70" asks for cuda_sm70's sm_70 cubin (cmake/FlashattnSm70.cmake); nvcc compiles the others.
  set(FLASHATTN_SM70_CUBIN OFF)
  set(_fa_nvcc_archs ${FLASHATTN_CUDA_ARCHS})
  if("70" IN_LIST _fa_nvcc_archs)
    set(FLASHATTN_SM70_CUBIN ON)
    list(REMOVE_ITEM _fa_nvcc_archs "70")
  endif()
  if(NOT _fa_nvcc_archs)
    message(FATAL_ERROR "FLASHATTN_CUDA_ARCHS=${FLASHATTN_CUDA_ARCHS}: add an architecture of 80 or newer "
                        "(every backend but cuda_sm70 needs sm_80's instructions), e.g. 70;80")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES ${_fa_nvcc_archs})
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "flashattn: CUDA backends ON (archs ${FLASHATTN_CUDA_ARCHS}, nvcc ${CMAKE_CUDA_COMPILER_VERSION})")
else()
  message(STATUS "flashattn: CUDA backends OFF")
endif()

# FLASHATTN_HEAD_DIMS -> FLASHATTN_HDIM_<d> definitions: the head-dim buckets the tensor-core kernels
# (src/cuda/sm80) are instantiated for. Fewer buckets build faster; calls in a pruned bucket are refused
# by the backend ("head_dim bucket N not compiled") and fall through to the next one.
set(_fa_all_head_dims 32 64 96 128 160 192 224 256)
if(FLASHATTN_HEAD_DIMS STREQUAL "all")
  set(_fa_head_dims ${_fa_all_head_dims})
else()
  set(_fa_head_dims ${FLASHATTN_HEAD_DIMS})
  foreach(_d IN LISTS _fa_head_dims)
    if(NOT _d IN_LIST _fa_all_head_dims)
      message(FATAL_ERROR "FLASHATTN_HEAD_DIMS: '${_d}' is not a head-dim bucket; expected 'all' or a list of "
                          "${_fa_all_head_dims}")
    endif()
  endforeach()
endif()
set(FLASHATTN_HEAD_DIM_DEFINITIONS "")
foreach(_d IN LISTS _fa_head_dims)
  list(APPEND FLASHATTN_HEAD_DIM_DEFINITIONS FLASHATTN_HDIM_${_d}=1)
endforeach()

# Writes build/generated/cuda/<arch>/<dir>_hdim<D>.cu from src/cuda/<arch>/<dir>_hdim.cu.in for each bucket D
# of `buckets` and each `dir` of `dirs` (fwd, bwd), removes the files of buckets that an earlier configure of
# this build tree had and this one pruned (of the same dirs), and returns the files in `out`.
function(flashattn_generate_instances out arch dirs buckets)
  set(_files "")
  foreach(FLASHATTN_HDIM IN LISTS buckets)
    foreach(_dir IN LISTS dirs)
      set(_file ${PROJECT_BINARY_DIR}/generated/cuda/${arch}/${_dir}_hdim${FLASHATTN_HDIM}.cu)
      configure_file(${PROJECT_SOURCE_DIR}/src/cuda/${arch}/${_dir}_hdim.cu.in ${_file} @ONLY)
      list(APPEND _files ${_file})
    endforeach()
  endforeach()
  foreach(_dir IN LISTS dirs)
    file(GLOB _old ${PROJECT_BINARY_DIR}/generated/cuda/${arch}/${_dir}_hdim*.cu)
    foreach(_f IN LISTS _old)
      if(NOT _f IN_LIST _files)
        file(REMOVE ${_f})
      endif()
    endforeach()
  endforeach()
  set(${out} ${_files} PARENT_SCOPE)
endfunction()

function(flashattn_add_cuda_sources target)
  file(GLOB_RECURSE _fa_cuda_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cu
       ${PROJECT_SOURCE_DIR}/src/cuda/*.cpp)
  # The sm_70 image's kernels are compiled to PTX and embedded, not linked (cmake/FlashattnSm70.cmake).
  list(FILTER _fa_cuda_sources EXCLUDE REGEX "/src/cuda/sm70/image_entries\\.cu$")
  flashattn_add_sm70_image(${target} ${FLASHATTN_SM70_CUBIN})
  # The sm80 kernel instances: one forward and one backward file per compiled head-dim bucket, generated
  # from src/cuda/sm80/{fwd,bwd}_hdim.cu.in (a pruned bucket has no file).
  flashattn_generate_instances(_fa_instances sm80 "fwd;bwd" "${_fa_head_dims}")
  list(APPEND _fa_cuda_sources ${_fa_instances})
  target_sources(${target} PRIVATE ${_fa_cuda_sources})
  target_compile_definitions(${target} PUBLIC FLASHATTN_WITH_CUDA=1 PRIVATE ${FLASHATTN_HEAD_DIM_DEFINITIONS})
  # The build holds sm_90a code (wgmma): the decode backend may pick its warpgroup kernels on sm_90.
  # Only the file that reads it gets the definition, so changing the arch list rebuilds one file.
  set(_fa_sm90a_archs ${FLASHATTN_CUDA_ARCHS})
  list(FILTER _fa_sm90a_archs INCLUDE REGEX "^90a(-real|-virtual)?$")  # 90a, 90a-real, 90a-virtual
  if(_fa_sm90a_archs)
    set_source_files_properties(${PROJECT_SOURCE_DIR}/src/cuda/decode/decode_backend.cpp
                                ${PROJECT_SOURCE_DIR}/src/cuda/sm90/backend.cpp
                                ${PROJECT_SOURCE_DIR}/src/cuda/sm90/launch_bwd.cu TARGET_DIRECTORY ${target}
                                PROPERTIES COMPILE_DEFINITIONS FLASHATTN_SM90A=1)
    # The Hopper forward's buckets are 64, 128, 192 and 256 (src/cuda/sm90/fwd_tile.h): one instance file per
    # compiled one, generated from src/cuda/sm90/fwd_hdim.cu.in like sm80's. They hold sm_90a instructions
    # only, so they are built for 90a alone, in an object library of their own.
    set(_fa_sm90_buckets ${_fa_head_dims})
    list(FILTER _fa_sm90_buckets INCLUDE REGEX "^(64|128|192|256)$")
    flashattn_generate_instances(_fa_sm90_fwd sm90 "fwd" "${_fa_sm90_buckets}")
    # The backward's buckets are 64 and 128 (src/cuda/sm90/bwd_tile.h): larger head dims stay with sm80.
    set(_fa_sm90_bwd_buckets ${_fa_sm90_buckets})
    list(FILTER _fa_sm90_bwd_buckets INCLUDE REGEX "^(64|128)$")
    flashattn_generate_instances(_fa_sm90_bwd sm90 "bwd" "${_fa_sm90_bwd_buckets}")
    set(_fa_sm90_kernels ${_fa_sm90_fwd} ${_fa_sm90_bwd})
    # The FP8 forward (head dim 128 only) comes with the 128 bucket.
    if("128" IN_LIST _fa_sm90_buckets)
      list(APPEND _fa_sm90_kernels ${PROJECT_SOURCE_DIR}/src/cuda/sm90/fp8_fwd.cu)
    endif()
  endif()
  if(_fa_sm90a_archs AND _fa_sm90_kernels)
    add_library(${target}_sm90_kernels OBJECT ${_fa_sm90_kernels})
    set_target_properties(${target}_sm90_kernels PROPERTIES CUDA_ARCHITECTURES 90a POSITION_INDEPENDENT_CODE ON
                                                            CUDA_SEPARABLE_COMPILATION OFF)
    target_include_directories(${target}_sm90_kernels PRIVATE ${PROJECT_SOURCE_DIR}/src
                                                              ${PROJECT_SOURCE_DIR}/include)
    target_compile_definitions(${target}_sm90_kernels PRIVATE FLASHATTN_WITH_CUDA=1 ${FLASHATTN_HEAD_DIM_DEFINITIONS})
    target_compile_options(${target}_sm90_kernels PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
    target_link_libraries(${target}_sm90_kernels PRIVATE CUDA::cudart)
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:${target}_sm90_kernels>)
  endif()
  target_link_libraries(${target} PUBLIC CUDA::cudart)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
  set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
endfunction()

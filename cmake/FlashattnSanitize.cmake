# FLASHATTN_SANITIZE instruments every C++ target of the build (library, tests, tools) with compiler
# sanitizers; FLASHATTN_BUILD_FUZZ adds the libFuzzer targets of tests/fuzz. docs/reliability.md says how
# `make test-asan`, `make test-tsan` and `make fuzz` use them. Entries of FLASHATTN_SANITIZE:
#   address, undefined  AddressSanitizer + UndefinedBehaviorSanitizer; every report aborts the process
#   thread              ThreadSanitizer. With Clang, OpenMP is LLVM's libomp, whose synchronisation TSan
#                       learns through the Archer OMPT tool (FLASHATTN_ARCHER_LIBRARY, loaded by setting
#                       OMP_TOOL_LIBRARIES); GCC's libgomp is opaque to TSan and gives false reports.
#   fuzzer              libFuzzer coverage instrumentation (Clang only)
# Sanitized builds are CPU-only: device memory is checked by compute-sanitizer instead.

set(FLASHATTN_SANITIZE "" CACHE STRING "Sanitizers for every C++ target: a list of address, undefined, thread, fuzzer")
option(FLASHATTN_BUILD_FUZZ "Build the libFuzzer targets of tests/fuzz (Clang, FLASHATTN_SANITIZE with fuzzer)" OFF)

if(FLASHATTN_BUILD_FUZZ AND NOT "fuzzer" IN_LIST FLASHATTN_SANITIZE)
  message(FATAL_ERROR "FLASHATTN_BUILD_FUZZ=ON needs FLASHATTN_SANITIZE to contain 'fuzzer' "
                      "(e.g. 'fuzzer;address;undefined'), got '${FLASHATTN_SANITIZE}'")
endif()

if(FLASHATTN_SANITIZE)
  foreach(_s IN LISTS FLASHATTN_SANITIZE)
    if(NOT _s MATCHES "^(address|undefined|thread|fuzzer)$")
      message(FATAL_ERROR "FLASHATTN_SANITIZE: '${_s}' is not one of address, undefined, thread, fuzzer")
    endif()
  endforeach()
  if("thread" IN_LIST FLASHATTN_SANITIZE AND "address" IN_LIST FLASHATTN_SANITIZE)
    message(FATAL_ERROR "FLASHATTN_SANITIZE: thread and address cannot be combined in one build")
  endif()
  if(FLASHATTN_WITH_CUDA)
    message(FATAL_ERROR "FLASHATTN_SANITIZE needs FLASHATTN_CUDA=OFF (GPU code is checked with compute-sanitizer)")
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang|GNU")
    message(FATAL_ERROR "FLASHATTN_SANITIZE needs Clang or GCC, got ${CMAKE_CXX_COMPILER_ID}")
  endif()
  if("fuzzer" IN_LIST FLASHATTN_SANITIZE AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FLASHATTN_SANITIZE: fuzzer needs Clang (configure with -DCMAKE_CXX_COMPILER=clang++)")
  endif()

  set(_fa_runtime_sanitizers ${FLASHATTN_SANITIZE})
  list(REMOVE_ITEM _fa_runtime_sanitizers fuzzer)
  list(JOIN _fa_runtime_sanitizers "," _fa_runtime_list)
  # Line tables are all a sanitizer report's stack trace needs, and full debug info of the CPU kernels'
  # inlined templates doubled their compile time under the sanitizers.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(_fa_compile -fno-omit-frame-pointer -gline-tables-only)
  else()
    set(_fa_compile -fno-omit-frame-pointer -g1)
  endif()
  set(_fa_link "")
  if(_fa_runtime_list)
    list(APPEND _fa_compile -fsanitize=${_fa_runtime_list} -fno-sanitize-recover=all)
    list(APPEND _fa_link -fsanitize=${_fa_runtime_list})
  endif()
  if("fuzzer" IN_LIST FLASHATTN_SANITIZE)
    # Coverage only; the fuzz targets themselves link libFuzzer (and its main) with -fsanitize=fuzzer.
    list(APPEND _fa_compile -fsanitize=fuzzer-no-link)
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_fa_compile}>")
  if(_fa_link)
    add_link_options(${_fa_link})
  endif()
  message(STATUS "flashattn: sanitizers ${FLASHATTN_SANITIZE}")

  if("thread" IN_LIST FLASHATTN_SANITIZE)
    if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
      # Archer ships with LLVM's OpenMP runtime, next to libomp in the compiler's lib directory.
      get_filename_component(_fa_cxx_real "${CMAKE_CXX_COMPILER}" REALPATH)
      get_filename_component(_fa_llvm_root "${_fa_cxx_real}" DIRECTORY)
      find_library(FLASHATTN_ARCHER_LIBRARY NAMES archer HINTS "${_fa_llvm_root}/../lib"
                   DOC "Archer OMPT tool: tells ThreadSanitizer about libomp's synchronisation")
    endif()
    if(NOT FLASHATTN_ARCHER_LIBRARY)
      message(WARNING "flashattn: ThreadSanitizer without the Archer OMPT tool reports false races inside "
                      "the OpenMP runtime; configure with clang++ (LLVM's libomp and libarcher)")
    endif()
  endif()
endif()

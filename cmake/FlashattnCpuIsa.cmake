# cpu_flash's kernels (src/cpu/flash/*.cpp but backend.cpp and isa.cpp) are compiled once per instruction
# set, each copy in its own namespace cpu_flash::<isa> (FLASH_ISA), into object libraries linked into
# flashattn. src/cpu/flash/isa.cpp lists the copies compiled in and picks the best one the CPU runs
# (CPUID) once per process, so one build serves every x86-64 CPU (docs/cpu_flash.md, "Builds").
#   FLASHATTN_NATIVE=ON    one copy, "native", compiled with -march=native (fastest on the build machine,
#                          may die with an illegal instruction elsewhere)
#   FLASHATTN_CPU_ISAS     the copies of a portable x86-64 build; other processors build "generic" only.

set(FLASHATTN_CPU_ISAS "generic;avx2;avx512;avx512_bf16" CACHE STRING
    "Instruction-set builds of the cpu_flash kernels (x86-64): any of generic, avx2, avx512, avx512_bf16")

set(_fa_isa_flags_generic "")
set(_fa_isa_flags_avx2 -march=x86-64-v3)
set(_fa_isa_flags_avx512 -march=x86-64-v4)
set(_fa_isa_flags_avx512_bf16 -march=x86-64-v4 -mavx512bf16)
set(_fa_isa_flags_native -march=native)

if(FLASHATTN_NATIVE)
  set(_fa_isas native)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(_fa_isas ${FLASHATTN_CPU_ISAS})
  # generic runs on every x86-64 CPU: the fallback is always there.
  list(APPEND _fa_isas generic)
  list(REMOVE_DUPLICATES _fa_isas)
else()
  set(_fa_isas generic)
endif()
foreach(_isa IN LISTS _fa_isas)
  if(NOT DEFINED _fa_isa_flags_${_isa})
    message(FATAL_ERROR "FLASHATTN_CPU_ISAS: '${_isa}' is not one of generic, avx2, avx512, avx512_bf16")
  endif()
endforeach()
message(STATUS "flashattn: cpu_flash instruction-set builds: ${_fa_isas}")

file(GLOB _fa_isa_sources CONFIGURE_DEPENDS src/cpu/flash/*.cpp)
list(FILTER _fa_isa_sources EXCLUDE REGEX "/(backend|isa)\\.cpp$")
# The library's own glob (src/cpu/*/*.cpp) must not compile them a second time without FLASH_ISA.
list(REMOVE_ITEM FLASHATTN_CPU_SOURCES ${_fa_isa_sources})

set(FLASHATTN_CPU_ISA_TARGETS "")
foreach(_isa IN LISTS _fa_isas)
  set(_t flashattn_cpu_${_isa})
  add_library(${_t} OBJECT ${_fa_isa_sources})
  target_include_directories(${_t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_compile_definitions(${_t} PRIVATE FLASH_ISA=${_isa})
  target_compile_options(${_t} PRIVATE -Wall -Wextra ${_fa_isa_flags_${_isa}})
  target_link_libraries(${_t} PRIVATE OpenMP::OpenMP_CXX)
  list(APPEND FLASHATTN_CPU_ISA_TARGETS ${_t})
endforeach()
string(TOUPPER "${_fa_isas}" _fa_isas_upper)
list(TRANSFORM _fa_isas_upper PREPEND FLASHATTN_CPU_ISA_)
set(FLASHATTN_CPU_ISA_DEFINITIONS ${_fa_isas_upper})

# ctest -R cpu_isa_symbols: every symbol an instruction-set build of cpu_flash defines (other than local
# ones) must live in its namespace cpu_flash::<isa>. An inline function or template instantiation outside
# it (say, a std:: helper on a shared type) would be merged by the linker with the copies of the other
# builds, and the generic build could end up calling an AVX-512 copy on a CPU without AVX-512.
# Usage: cmake -DNM=<nm> -DISA=<name> -DOBJECTS=<a;b;...> -P CheckCpuIsaSymbols.cmake
set(_bad "")
foreach(_o IN LISTS OBJECTS)
  execute_process(COMMAND ${NM} -C --defined-only ${_o} OUTPUT_VARIABLE _syms RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${_o}")
  endif()
  string(REPLACE "\n" ";" _lines "${_syms}")
  foreach(_l IN LISTS _lines)
    # Global, weak and unique symbols: capital type letters. The personality routine's reference is data.
    if(_l MATCHES "^[0-9a-f]+ [A-Zu] " AND NOT _l MATCHES "cpu_flash::${ISA}::" AND NOT _l MATCHES "DW.ref.__gxx_personality_v0")
      list(APPEND _bad "${_o}: ${_l}")
    endif()
  endforeach()
endforeach()
if(_bad)
  string(REPLACE ";" "\n" _msg "${_bad}")
  message(FATAL_ERROR "symbols of the ${ISA} build outside cpu_flash::${ISA}:\n${_msg}")
endif()
message(STATUS "${ISA}: every exported symbol is in cpu_flash::${ISA}")

# Included by the top-level CMakeLists.txt when GYRE_BUILD_FUZZERS is on: builds fuzz/
# with clang (an ExternalProject, since the library itself may be built with g++ or
# another sanitizer) and runs each target for GYRE_FUZZ_SECONDS as a test, seeded by the
# checked-in corpus fuzz/corpus/<target>/. Without a clang that links -fsanitize=fuzzer
# it says so and adds nothing.
include(ExternalProject)

set(GYRE_FUZZ_SECONDS 10 CACHE STRING "Seconds each fuzz target runs in the test suite")
set(GYRE_FUZZ_TARGETS fuzz_hello fuzz_frame fuzz_store_hello fuzz_store_request
    fuzz_store_reply fuzz_tcp_stream fuzz_handshake fuzz_store_auth fuzz_sealed_stream)

find_program(GYRE_FUZZ_CXX NAMES clang++ clang++-18 clang++-17 clang++-16 clang++-15 clang++-14)
if(NOT GYRE_FUZZ_CXX)
  message(STATUS "gyre: fuzzers off: no clang++ found")
  return()
endif()
set(probe ${CMAKE_BINARY_DIR}/fuzz-probe/probe.cc)
file(WRITE ${probe} "#include <cstddef>\n#include <cstdint>\nextern \"C\" int "
     "LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
execute_process(
  COMMAND ${GYRE_FUZZ_CXX} -fsanitize=fuzzer,address,undefined ${probe}
          -o ${CMAKE_BINARY_DIR}/fuzz-probe/probe
  RESULT_VARIABLE probe_result OUTPUT_QUIET ERROR_QUIET)
if(NOT probe_result EQUAL 0)
  message(STATUS "gyre: fuzzers off: ${GYRE_FUZZ_CXX} cannot link -fsanitize=fuzzer "
                 "(install libclang-rt-dev or the clang runtime)")
  return()
endif()
message(STATUS "gyre: fuzzers on (${GYRE_FUZZ_CXX}), ${GYRE_FUZZ_SECONDS} s each in the suite")

set(byproducts)
foreach(t ${GYRE_FUZZ_TARGETS})
  list(APPEND byproducts ${CMAKE_BINARY_DIR}/fuzz/${t})
endforeach()
ExternalProject_Add(gyre_fuzzers
  SOURCE_DIR ${PROJECT_SOURCE_DIR}/fuzz
  BINARY_DIR ${CMAKE_BINARY_DIR}/fuzz
  CMAKE_GENERATOR ${CMAKE_GENERATOR}
  CMAKE_ARGS -DCMAKE_CXX_COMPILER=${GYRE_FUZZ_CXX} -DGYRE_SOURCE_DIR=${PROJECT_SOURCE_DIR}
  BUILD_ALWAYS ON
  INSTALL_COMMAND ""
  BUILD_BYPRODUCTS ${byproducts})

foreach(t ${GYRE_FUZZ_TARGETS})
  add_test(NAME fuzz.${t}
           COMMAND ${PROJECT_SOURCE_DIR}/fuzz/run_fuzzer.sh ${CMAKE_BINARY_DIR}/fuzz/${t}
                   ${PROJECT_SOURCE_DIR}/fuzz/corpus/${t} ${CMAKE_BINARY_DIR}/fuzz-work/${t}
                   ${GYRE_FUZZ_SECONDS})
  math(EXPR limit "${GYRE_FUZZ_SECONDS} * 3 + 60")
  set_tests_properties(fuzz.${t} PROPERTIES TIMEOUT ${limit} LABELS fuzz)
endforeach()

# Compiler flags of the sanitizer and fuzz builds (LONGSCOPE_SANITIZE, LONGSCOPE_FUZZ), for
# every target. A report aborts the process (no recovery), so a test or a fuzz run fails on it.
set(LONGSCOPE_ASAN_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined)

if(LONGSCOPE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "LONGSCOPE_FUZZ needs clang with libFuzzer (scripts/fuzz sets "
                        "CMAKE_CXX_COMPILER=clang++-14); this is ${CMAKE_CXX_COMPILER_ID}")
  endif()
  if(LONGSCOPE_SANITIZE)
    message(FATAL_ERROR "LONGSCOPE_FUZZ already builds with ASan+UBSan: leave LONGSCOPE_SANITIZE OFF")
  endif()
  # The harnesses link with -fsanitize=fuzzer (tests/fuzz/CMakeLists.txt); everything else is
  # only instrumented for coverage.
  # -O1 with line tables only (after the build type's flags, so they win): the usual fuzzing
  # trade, a third less compile time than -O2 -g for symbolized stacks and fast enough code.
  add_compile_options(${LONGSCOPE_ASAN_FLAGS} -fsanitize=fuzzer-no-link -O1 -gline-tables-only)
  add_link_options(-fsanitize=address,undefined)
# The sanitizer builds keep line tables only (-g1, after the build type's -g, so it wins):
# reports still name file and line, and the compile is a third cheaper (server_api.cpp under
# TSan: 26.4 CPU-seconds with -g, 18.0 with -g1). TSan's build is also -O1, the level its
# documentation suggests (qdot_avx2.cpp under TSan: 18.4 CPU-seconds at -O2, 12.6 at -O1).
elseif(LONGSCOPE_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -O1 -g1)
  add_link_options(-fsanitize=thread)
elseif(LONGSCOPE_SANITIZE STREQUAL "address" OR LONGSCOPE_SANITIZE)
  add_compile_options(${LONGSCOPE_ASAN_FLAGS} -g1)
  add_link_options(-fsanitize=address,undefined)
endif()

# In the fuzz build, the sources no harness reaches are compiled without the coverage
# instrumentation (they keep ASan+UBSan): the CPU compute kernels (no harness runs a forward
# pass) and the Qt Test suites with their helpers (the harnesses use the helpers only to write
# their fixed inputs). Their coverage counters could never guide the fuzzer, and the
# instrumentation (a counter per edge, a call per comparison) only slows the ASan+UBSan suites
# that CI runs from this build. The SIMD kernels also leave out UBSan's pointer checks (below).
# Called at the end of the top-level CMakeLists, once every target exists.
function(longscope_fuzz_coverage_exclusions)
  if(NOT LONGSCOPE_FUZZ)
    return()
  endif()
  set(kernels qdot qdot_vnni qdot_avx2 packed gemm attention attention_qk simd quant ops)
  list(TRANSFORM kernels REPLACE "(.+)" "${PROJECT_SOURCE_DIR}/engine/src/cpu/\\1.cpp")
  set_property(SOURCE ${kernels} TARGET_DIRECTORY longscope_engine
               APPEND PROPERTY COMPILE_OPTIONS -fno-sanitize=fuzzer-no-link)
  # The unrolled SIMD kernels without UBSan's pointer checks (pointer-overflow, alignment, null,
  # object-size); ASan still checks their every load and store. With them clang 14 spends
  # minutes optimizing each file (qdot.cpp before its split: 528 CPU-seconds with them, 90
  # without, 68 with ASan alone; packed.cpp 111 -> 17; docs/testing.md). The arithmetic checks
  # (signed overflow, float to integer conversion, shifts, bounds, division) stay.
  set(tiles qdot qdot_vnni qdot_avx2 packed gemm attention)
  list(TRANSFORM tiles REPLACE "(.+)" "${PROJECT_SOURCE_DIR}/engine/src/cpu/\\1.cpp")
  set_property(SOURCE ${tiles} TARGET_DIRECTORY longscope_engine
               APPEND PROPERTY COMPILE_OPTIONS -fno-sanitize=pointer-overflow,alignment,null,object-size)
  get_property(test_targets DIRECTORY ${PROJECT_SOURCE_DIR}/tests PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS test_targets)
    if(target MATCHES "^(tst_|longscope_test_)")
      target_compile_options(${target} PRIVATE -fno-sanitize=fuzzer-no-link)
    endif()
  endforeach()
endfunction()

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
# TSan: 26.4 CPU-seconds with -g, 18.0 with -g1).
elseif(LONGSCOPE_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -g1)
  add_link_options(-fsanitize=thread)
elseif(LONGSCOPE_SANITIZE STREQUAL "address" OR LONGSCOPE_SANITIZE)
  add_compile_options(${LONGSCOPE_ASAN_FLAGS} -g1)
  add_link_options(-fsanitize=address,undefined)
endif()

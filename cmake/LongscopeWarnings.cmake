# Warnings for the project's own targets (not for third-party headers).
function(longscope_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow=local
                           -Wnon-virtual-dtor -Wno-unused-parameter
                           -Wno-missing-field-initializers)
  endif()
endfunction()

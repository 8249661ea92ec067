# Warnings for the project's own targets (not for third-party headers).
function(longscope_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    set(shadow)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      set(shadow -Wshadow=local) # clang (the fuzz build) has no such option
    endif()
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic ${shadow}
                           -Wnon-virtual-dtor -Wno-unused-parameter
                           -Wno-missing-field-initializers)
  endif()
endfunction()

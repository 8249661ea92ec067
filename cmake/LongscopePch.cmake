# Precompiled headers for the libraries where parsing the same headers is a large share of
# every compile (the desktop app's two libraries: Qt Widgets and QCustomPlot, Qt Core and Qt
# Network; the CLI's library: nlohmann-json) and for the test suites (tests/CMakeLists.txt). On by default where no
# compiler launcher is set (CI's fresh machines); off with one, because ccache does not cache
# a compile that uses a precompiled header unless its sloppiness allows it
# (pch_defines,time_macros,include_file_mtime,include_file_ctime). Builds with it off still
# check that every source includes what it uses.
if(CMAKE_CXX_COMPILER_LAUNCHER)
  set(longscope_pch_default OFF)
else()
  set(longscope_pch_default ON)
endif()
option(LONGSCOPE_PCH "Precompiled headers for the app's libraries, the CLI library and the test suites"
       ${longscope_pch_default})

# longscope_pch(TARGET HEADER...): TARGET's sources (its moc file too) are compiled with
# HEADERs precompiled once.
function(longscope_pch target)
  if(LONGSCOPE_PCH)
    target_precompile_headers(${target} PRIVATE ${ARGN})
  endif()
endfunction()

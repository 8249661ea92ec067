# The linker: LLVM's lld where the compiler accepts -fuse-ld=lld (scripts/install-deps installs
# it), else the toolchain's default. It links the same objects into the same programs many times
# faster than GNU ld: a suite of the fuzz build (ASan, line tables) 2.2 s -> 0.7 s, one of the
# Release build 2.0 s -> 0.25 s, and CI links about 200 programs in its three builds. Only the
# links the C++ compiler drives get it (nvcc links nothing here, but LINK_LANGUAGE keeps it so).
option(LONGSCOPE_LLD "Link with LLVM's lld when the compiler accepts -fuse-ld=lld" ON)
if(LONGSCOPE_LLD)
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-fuse-ld=lld" LONGSCOPE_HAVE_LLD)
  if(LONGSCOPE_HAVE_LLD)
    add_link_options($<$<LINK_LANGUAGE:CXX>:-fuse-ld=lld>)
  endif()
endif()

# The release build (scripts/release.sh): binaries that start on glibc 2.28 and
# newer, built on Debian 12.
#
# Debian 12's clang compiles against a Debian 11 sysroot (glibc 2.31, GCC 10's
# libstdc++ and libgcc, OpenSSL 1.1.1), so no symbol newer than that glibc can
# be linked; libstdc++, libgcc and libcrypto go inside the binary. The header-only
# libraries (fmt, CLI11, nlohmann-json, Asio) are Debian 12's, staged by the script
# in a folder of their own so that no other host header is seen.
#
#   -DRANKCHECK_SYSROOT=DIR   the Debian 11 root (made and cached by scripts/release.sh)
#   -DRANKCHECK_STAGE=DIR     the staged header-only libraries (a usr/ tree)
#
# The CUDA and NCCL headers come from the host (cuda.h and nccl.h declare, they
# link nothing: the GPU stage dlopens both at run time).

# A toolchain file is read again by every try_compile: pass the two folders on.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES RANKCHECK_SYSROOT RANKCHECK_STAGE)
if(NOT RANKCHECK_SYSROOT OR NOT EXISTS "${RANKCHECK_SYSROOT}/usr/include/stdio.h")
  message(FATAL_ERROR "release toolchain: RANKCHECK_SYSROOT='${RANKCHECK_SYSROOT}' is not a "
                      "sysroot (scripts/release.sh makes one)")
endif()

set(CMAKE_C_COMPILER clang)
set(CMAKE_CXX_COMPILER clang++)
set(CMAKE_C_COMPILER_TARGET x86_64-linux-gnu)
set(CMAKE_CXX_COMPILER_TARGET x86_64-linux-gnu)
set(CMAKE_SYSROOT "${RANKCHECK_SYSROOT}")

# GCC 10 of the sysroot gives libstdc++, crtbegin and libgcc. The prelude keeps
# libstdc++'s inline code off glibc 2.30's pthread_*clock* functions.
# Paths in the debug info and in __FILE__ are relative to the checkout, so that
# the binaries (and ccache's objects) are the same from any clone.
get_filename_component(_rankcheck_src "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
set(_rankcheck_common
    "--gcc-toolchain=${RANKCHECK_SYSROOT}/usr -ffile-prefix-map=${_rankcheck_src}=.")
set(CMAKE_C_FLAGS_INIT "${_rankcheck_common}")
set(CMAKE_CXX_FLAGS_INIT
    "${_rankcheck_common} -include ${CMAKE_CURRENT_LIST_DIR}/release-prelude.h")
# lld; a build id for the debug files; no library that nothing is used from (Open
# MPI's C++ bindings, gone in Open MPI 5); the C++ runtime inside the binary.
set(_rankcheck_link
    "-fuse-ld=lld -Wl,--build-id=sha1 -Wl,--as-needed -static-libstdc++ -static-libgcc")
set(CMAKE_EXE_LINKER_FLAGS_INIT "${_rankcheck_link}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${_rankcheck_link}")

# CMake packages only from the sysroot and the stage. Headers and libraries from
# there first, then from the host: FindCUDAToolkit wants cudart found (nothing
# links it) and cuda.h is the host's. scripts/release.sh checks that no other host
# header or library reaches a command line. Programs from the host.
set(CMAKE_FIND_ROOT_PATH "${RANKCHECK_STAGE}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)

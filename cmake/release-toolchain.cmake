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
#   -DRANKCHECK_ARCH=ARCH     x86_64 (the default) or aarch64 (Grace: GH200, GB200),
#                             compiled here with clang's --target against an arm64
#                             root; nothing of it runs here but under qemu-user
#
# The CUDA and NCCL headers come from the host (cuda.h and nccl.h declare, they
# link nothing: the GPU stage dlopens both at run time).

# A toolchain file is read again by every try_compile: pass the two folders on.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES RANKCHECK_SYSROOT RANKCHECK_STAGE RANKCHECK_ARCH)
if(NOT RANKCHECK_SYSROOT OR NOT EXISTS "${RANKCHECK_SYSROOT}/usr/include/stdio.h")
  message(FATAL_ERROR "release toolchain: RANKCHECK_SYSROOT='${RANKCHECK_SYSROOT}' is not a "
                      "sysroot (scripts/release.sh makes one)")
endif()

if(NOT RANKCHECK_ARCH)
  set(RANKCHECK_ARCH x86_64)
endif()
if(NOT RANKCHECK_ARCH MATCHES "^(x86_64|aarch64)$")
  message(FATAL_ERROR "release toolchain: RANKCHECK_ARCH='${RANKCHECK_ARCH}' is not x86_64 or aarch64")
endif()
if(NOT RANKCHECK_ARCH STREQUAL CMAKE_HOST_SYSTEM_PROCESSOR)
  # Another machine's binaries: CMake runs nothing it builds (try_run), and finds
  # the other machine's libraries in the root only.
  set(CMAKE_SYSTEM_NAME Linux)
  set(CMAKE_SYSTEM_PROCESSOR ${RANKCHECK_ARCH})
  # fmt is used header-only: the host's package describes its headers as well.
  set(fmt_DIR "${RANKCHECK_STAGE}/usr/lib/${CMAKE_HOST_SYSTEM_PROCESSOR}-linux-gnu/cmake/fmt")
endif()
if(RANKCHECK_ARCH STREQUAL "aarch64")
  # Clang 14 miscompiles Asio's coroutines for aarch64 from -O1 on: the master's
  # first accepted connection asked fmt for a buffer the size of a stack address,
  # and no member ever joined. Clang 16 does not (a two-connection Asio program
  # showed it; the loopback suites under qemu-user check it on every release).
  set(CMAKE_C_COMPILER clang-16)
  set(CMAKE_CXX_COMPILER clang++-16)
else()
  set(CMAKE_C_COMPILER clang)
  set(CMAKE_CXX_COMPILER clang++)
endif()
set(CMAKE_C_COMPILER_TARGET ${RANKCHECK_ARCH}-linux-gnu)
set(CMAKE_CXX_COMPILER_TARGET ${RANKCHECK_ARCH}-linux-gnu)
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

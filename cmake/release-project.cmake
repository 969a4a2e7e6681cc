# Read at the end of the top-level project() in the release build
# (scripts/release.sh passes it as CMAKE_PROJECT_INCLUDE).
#
# `rankcheck --version` states the oldest glibc the binary starts on: the highest
# GLIBC_ symbol version it needs, which scripts/release.sh measures after linking
# and passes as RANKCHECK_GLIBC_FLOOR. Only main.cc carries it, so that a new value
# recompiles one file, not the whole build.
set(RANKCHECK_GLIBC_FLOOR "" CACHE STRING "The release binary's glibc floor, e.g. 2.17")
if(RANKCHECK_GLIBC_FLOOR)
  set_property(SOURCE src/main.cc APPEND PROPERTY COMPILE_DEFINITIONS
               "RANKCHECK_GLIBC_FLOOR=\"${RANKCHECK_GLIBC_FLOOR}\"")
endif()

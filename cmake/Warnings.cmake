# Warnings for the project's own targets, and an optional sanitizer build.
function(rankcheck_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
    -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual
    -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
  if(RANKCHECK_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(RANKCHECK_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 mistakes Asio's coroutine frame allocator for a new/delete mismatch
    # when sanitizers are on.
    target_compile_options(${target} PRIVATE -Wno-mismatched-new-delete)
  endif()
endfunction()

if(RANKCHECK_SANITIZE)
  add_compile_options(-fsanitize=${RANKCHECK_SANITIZE} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${RANKCHECK_SANITIZE})
endif()

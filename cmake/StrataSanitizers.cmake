# Sanitizer builds: -DSTRATA_SANITIZE=address|thread (scripts/sanitize.sh, docs/sanitizers.md).
#   address: AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer; UBSan findings abort
#            (-fno-sanitize-recover=undefined), so a test with one fails.
#   thread:  ThreadSanitizer.
# The flags apply to every target of the project (libraries, plugins, tests, the strata binary); third-party
# libraries (oneDNN, Gloo, protobuf, libgomp) are Debian's uninstrumented builds. CUDA must be off (nvcc and the
# sanitizer runtimes do not mix): scripts/sanitize.sh configures with -DSTRATA_CUDA=OFF.
set(STRATA_SANITIZE "" CACHE STRING "Sanitizer build: address (ASan+UBSan) or thread (TSan); empty for none")
set_property(CACHE STRATA_SANITIZE PROPERTY STRINGS "" address thread)
if(STRATA_SANITIZE)
  if(STRATA_CUDA)
    message(FATAL_ERROR "STRATA_SANITIZE=${STRATA_SANITIZE} needs -DSTRATA_CUDA=OFF")
  endif()
  if(STRATA_SANITIZE STREQUAL "address")
    set(strata_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=undefined)
  elseif(STRATA_SANITIZE STREQUAL "thread")
    set(strata_sanitize_flags -fsanitize=thread)
  else()
    message(FATAL_ERROR "STRATA_SANITIZE=${STRATA_SANITIZE}: expected address or thread")
  endif()
  # Frame pointers give the reports whole stacks; -g1 (line tables: function names, files and lines, all a report
  # shows) compiles about 25% faster than -g.
  add_compile_options(${strata_sanitize_flags} -fno-omit-frame-pointer -g1)
  add_link_options(${strata_sanitize_flags})
  message(STATUS "Strata sanitizers: ${strata_sanitize_flags}")
endif()

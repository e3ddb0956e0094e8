# Warning, ISA and sanitizer flags shared by every loom target.
add_library(loom_build_flags INTERFACE)
target_compile_options(loom_build_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wnon-virtual-dtor
    # Designated initializers deliberately leave optional context fields out.
    -Wno-missing-field-initializers>
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra>)
# Two GCC 12 false positives that fire on ordinary code (both fixed in GCC 13):
# -Wrestrict on inlined `"literal" + std::string&&` (bug 105329), and
# -Wmaybe-uninitialized inside its own AVX-512 headers, which build results from
# _mm512_undefined_*() (hit by our kernels and by Eigen under -march=native).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(loom_build_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict -Wno-maybe-uninitialized>)
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(loom_build_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wshadow=local>)
endif()
if(LOOM_WERROR)
  target_compile_options(loom_build_flags INTERFACE -Werror)
endif()
if(LOOM_NATIVE)
  target_compile_options(loom_build_flags INTERFACE -march=native)
endif()
if(LOOM_SANITIZE)
  target_compile_options(loom_build_flags INTERFACE
    -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_link_options(loom_build_flags INTERFACE -fsanitize=address,undefined)
endif()
if(LOOM_SANITIZE_THREAD)
  target_compile_options(loom_build_flags INTERFACE -fsanitize=thread -fno-omit-frame-pointer)
  target_link_options(loom_build_flags INTERFACE -fsanitize=thread)
endif()

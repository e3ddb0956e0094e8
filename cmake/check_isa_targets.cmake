# The ISA portability check: the library's SIMD sources must compile for CPUs below the
# build machine's. The kernels carry their ISA in function target attributes
# (LOOM_TARGET_AVX2, LOOM_TARGET_AVX512_VNNI, ... in src/common/simd.hpp) and pick one at
# run time, so a build with -march=native on an AVX2-only machine compiles the AVX-512
# kernels too; code outside such a function that touches a 512-bit type (a struct's
# default member initializers, which GCC compiles into an implicit constructor without
# the attribute) compiles where the build machine has AVX-512 and fails where it has not.
# This check recompiles each such file from compile_commands.json with -march=native
# replaced by each target of LOOM_MARCHES (default: x86-64, the baseline, and x86-64-v3,
# AVX2 without AVX-512), at -O0 (always_inline and ABI errors show there too) and
# -Werror, writing no object. Fails listing every file and target that failed, with the
# compiler's first lines.
#
#   cmake -DLOOM_COMPILE_COMMANDS=<build>/compile_commands.json -DLOOM_SOURCE_DIR=<root>
#         [-DLOOM_MARCHES="x86-64;x86-64-v3"] [-DLOOM_COMPILER=<clang++>] -P check_isa_targets.cmake
#
# LOOM_COMPILER compiles with another compiler than the build's (its unknown warning
# options and unused arguments are let pass): clang and GCC reject different things (clang a
# 512-bit operand of an inline asm in a helper without AVX-512, which GCC takes).
#
# Checked: the entries of <root>/src whose file, or a project header it includes
# directly, names a LOOM_TARGET_ attribute or includes <immintrin.h>. Run by ctest as
# "build: isa: ..."; the test beside it (tests/layering/check_isa_targets_test.cmake)
# runs it on a file with the fault and checks that it fails naming the file.
cmake_minimum_required(VERSION 3.22)

if(NOT LOOM_COMPILE_COMMANDS OR NOT LOOM_SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DLOOM_COMPILE_COMMANDS=<file> -DLOOM_SOURCE_DIR=<root> "
                      "[-DLOOM_MARCHES=<list>] -P check_isa_targets.cmake")
endif()
if(NOT LOOM_MARCHES)
  set(LOOM_MARCHES "x86-64;x86-64-v3")
endif()
get_filename_component(_root "${LOOM_SOURCE_DIR}" ABSOLUTE)
file(READ "${LOOM_COMPILE_COMMANDS}" _json)
string(JSON _count LENGTH "${_json}")

set(_simd_regex "LOOM_TARGET_|#include <immintrin.h>")

# Whether `file` or a project header it includes directly (resolved next to it, then in
# src/) matches _simd_regex.
function(_uses_simd file out)
  file(READ "${file}" _text)
  if(_text MATCHES "${_simd_regex}")
    set(${out} TRUE PARENT_SCOPE)
    return()
  endif()
  get_filename_component(_dir "${file}" DIRECTORY)
  string(REGEX MATCHALL "#include \"[^\"]+\"" _includes "${_text}")
  foreach(_inc IN LISTS _includes)
    string(REGEX REPLACE "#include \"([^\"]+)\"" "\\1" _name "${_inc}")
    foreach(_candidate "${_dir}/${_name}" "${_root}/src/${_name}")
      if(EXISTS "${_candidate}")
        file(READ "${_candidate}" _header)
        if(_header MATCHES "${_simd_regex}")
          set(${out} TRUE PARENT_SCOPE)
          return()
        endif()
        break()
      endif()
    endforeach()
  endforeach()
  set(${out} FALSE PARENT_SCOPE)
endfunction()

set(_problems "")
set(_checked 0)
set(_with "")
if(LOOM_COMPILER)
  set(_with " with ${LOOM_COMPILER}")
endif()
math(EXPR _last "${_count} - 1")
foreach(_i RANGE 0 ${_last})
  string(JSON _file GET "${_json}" ${_i} file)
  string(JSON _dir GET "${_json}" ${_i} directory)
  string(JSON _command GET "${_json}" ${_i} command)
  if(NOT _file MATCHES "^${_root}/src/")
    continue()
  endif()
  _uses_simd("${_file}" _simd)
  if(NOT _simd)
    continue()
  endif()
  math(EXPR _checked "${_checked} + 1")
  separate_arguments(_args UNIX_COMMAND "${_command}")
  list(GET _args 0 _first)
  if(_first MATCHES "ccache$")  # the compiler itself: ccache has nothing to cache here
    list(REMOVE_AT _args 0)
  endif()
  if(LOOM_COMPILER)
    list(REMOVE_AT _args 0)
    list(INSERT _args 0 "${LOOM_COMPILER}" -Wno-unknown-warning-option -Wno-unused-command-line-argument)
  endif()
  # Drop the ISA, optimization, output and dependency-file arguments; keep the rest
  # (defines, includes, warnings, standard) as the build has them.
  set(_kept "")
  set(_skip_next FALSE)
  foreach(_a IN LISTS _args)
    if(_skip_next)
      set(_skip_next FALSE)
    elseif(_a MATCHES "^-(o|MF|MT|MQ)$")
      set(_skip_next TRUE)
    elseif(NOT _a MATCHES "^-(march=|mtune=|O[0-9sgz]?$|MD$|MMD$)")
      list(APPEND _kept "${_a}")
    endif()
  endforeach()
  foreach(_march IN LISTS LOOM_MARCHES)
    execute_process(COMMAND ${_kept} -march=${_march} -O0 -Werror -o /dev/null
                    WORKING_DIRECTORY "${_dir}" RESULT_VARIABLE _rc ERROR_VARIABLE _err OUTPUT_VARIABLE _out)
    if(NOT _rc EQUAL 0)
      file(RELATIVE_PATH _rel "${_root}" "${_file}")
      string(REGEX MATCHALL "[^\n]*error[^\n]*" _errors "${_err}")
      list(LENGTH _errors _n)
      if(_n GREATER 3)
        list(SUBLIST _errors 0 3 _errors)
      endif()
      list(JOIN _errors "\n    " _shown)
      string(APPEND _problems "${_rel}: does not compile for -march=${_march}${_with}:\n    ${_shown}\n")
    endif()
  endforeach()
endforeach()

if(_checked EQUAL 0)
  message(FATAL_ERROR "no SIMD source of ${_root}/src found in ${LOOM_COMPILE_COMMANDS}")
endif()
if(_problems)
  message(FATAL_ERROR "SIMD sources that need the build machine's ISA:\n${_problems}")
endif()
message(STATUS "${_checked} SIMD sources compile for ${LOOM_MARCHES}${_with}")

# Runs cmake/check_isa_targets.cmake on a small tree written here: a kernel whose
# constants struct has 512-bit default member initializers and no constructor of its
# own (the fault that broke the build on an AVX2-only machine), through a header; the
# same with the constructor given the kernel's target attribute; and a file with no
# SIMD at all (not checked). The first tree must fail naming the file and the target,
# the second must pass.
#
#   cmake -DLOOM_CHECKER=<check_isa_targets.cmake> -DLOOM_CXX=<compiler> -DLOOM_WORK_DIR=<dir>
#         -P check_isa_targets_test.cmake
cmake_minimum_required(VERSION 3.22)

set(_work "${LOOM_WORK_DIR}")
file(REMOVE_RECURSE "${_work}")

function(_fail text)
  message(FATAL_ERROR "check_isa_targets_test: ${text}")
endfunction()

# A tree under dir: src/kernel.hpp (the target macro), src/kernel.cpp with `ctor` in
# its constants struct, src/plain.cpp; and compile_commands.json compiling both .cpp
# files as the build does (-march=native, -O3, an object and a dependency file).
function(_tree dir ctor)
  file(WRITE "${dir}/src/kernel.hpp" [=[
#pragma once
#include <immintrin.h>
#define TARGET_512 __attribute__((target("avx512f,avx512bw")))
]=])
  file(WRITE "${dir}/src/kernel.cpp" "#include \"kernel.hpp\"
struct Constants {
  ${ctor}
  __m512i mask = _mm512_set1_epi8(0x0F);
};
TARGET_512 void masked(const void* p, void* q) {
  const Constants k;
  _mm512_storeu_si512(q, _mm512_and_si512(_mm512_loadu_si512(p), k.mask));
}
")
  file(WRITE "${dir}/src/plain.cpp" "int plain(int x) { return x + 1; }\n")
  set(_entries "")
  foreach(_name kernel plain)
    list(APPEND _entries "{\"directory\": \"${dir}\", \"file\": \"${dir}/src/${_name}.cpp\", \"command\": \"${LOOM_CXX} -std=c++20 -O3 -march=native -MD -MT ${_name}.o -MF ${_name}.o.d -o ${_name}.o -c ${dir}/src/${_name}.cpp\"}")
  endforeach()
  list(JOIN _entries ",\n" _body)
  file(WRITE "${dir}/compile_commands.json" "[\n${_body}\n]\n")
endfunction()

function(_run dir out_rc out_text)
  execute_process(COMMAND ${CMAKE_COMMAND} -DLOOM_COMPILE_COMMANDS=${dir}/compile_commands.json
                          -DLOOM_SOURCE_DIR=${dir} -P ${LOOM_CHECKER}
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  set(${out_rc} "${_rc}" PARENT_SCOPE)
  set(${out_text} "${_out}${_err}" PARENT_SCOPE)
endfunction()

_tree("${_work}/bad" "")
_run("${_work}/bad" _rc _text)
if(_rc EQUAL 0)
  _fail("the checker passed a constants struct with 512-bit initializers and no targeted constructor:\n${_text}")
endif()
foreach(_want "src/kernel.cpp: does not compile for -march=x86-64:" "src/kernel.cpp: does not compile for -march=x86-64-v3:")
  string(FIND "${_text}" "${_want}" _at)
  if(_at EQUAL -1)
    _fail("expected \"${_want}\" in the checker's output:\n${_text}")
  endif()
endforeach()
string(FIND "${_text}" "plain.cpp" _at)
if(NOT _at EQUAL -1)
  _fail("the checker named plain.cpp, which has no SIMD:\n${_text}")
endif()

_tree("${_work}/good" "TARGET_512 Constants() {}")
_run("${_work}/good" _rc _text)
if(NOT _rc EQUAL 0)
  _fail("the checker failed the same struct with a targeted constructor:\n${_text}")
endif()
string(FIND "${_text}" "1 SIMD sources compile" _at)
if(_at EQUAL -1)
  _fail("expected the one SIMD source counted:\n${_text}")
endif()

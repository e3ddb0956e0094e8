# Runs cmake/check_layering.cmake on two small trees written here, with a two-layer
# table (low below high): a clean one, which must pass, and the same tree with an
# upward include in a source file, one in a public header, an include of a file that
# does not exist and a folder of no layer, which must fail naming each (file:line and
# the include) and nothing else.
#
#   cmake -DLOOM_CHECKER=<check_layering.cmake> -DLOOM_WORK_DIR=<scratch dir> -P check_layering_test.cmake
cmake_minimum_required(VERSION 3.22)

set(_work "${LOOM_WORK_DIR}")
file(REMOVE_RECURSE "${_work}")

function(_write path text)
  file(WRITE "${path}" "${text}")
endfunction()

function(_fail text)
  message(FATAL_ERROR "check_layering_test: ${text}")
endfunction()

# The table both trees use.
_write("${_work}/layers.cmake" [=[
set(LOOM_LAYERS low high)
set(LOOM_LAYER_low_DIRS src/low)
set(LOOM_LAYER_low_DEPS)
set(LOOM_LAYER_low_HEADERS low_api)
set(LOOM_LAYER_high_DIRS src/high)
set(LOOM_LAYER_high_DEPS low)
set(LOOM_LAYER_high_HEADERS high_api)
set(LOOM_LAYER_ROOT_FILES src/root.cpp)
]=])

# A clean tree: includes point down or stay within a layer; the root includes both.
function(_clean_tree dir)
  _write("${dir}/include/loom/low_api.hpp" "#pragma once\n")
  _write("${dir}/include/loom/high_api.hpp" "#pragma once\n#include \"loom/low_api.hpp\"\n")
  _write("${dir}/src/low/low.hpp" "#pragma once\n#include \"loom/low_api.hpp\"\n")
  _write("${dir}/src/low/low.cpp" "#include \"low/low.hpp\"\n\n#include <vector>\n")
  _write("${dir}/src/high/high.hpp" "#pragma once\n#include \"low/low.hpp\"\n")
  _write("${dir}/src/high/high.cpp" "#include \"high/high.hpp\"\n#include \"loom/high_api.hpp\"\n// #include \"nowhere.hpp\" (a comment, not an include)\n")
  _write("${dir}/src/root.cpp" "#include \"high/high.hpp\"\n#include \"low/low.hpp\"\n")
endfunction()

function(_run dir out_rc out_text)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -DLOOM_SOURCE_DIR=${dir} -DLOOM_LAYERS_FILE=${_work}/layers.cmake
            -P ${LOOM_CHECKER}
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  set(${out_rc} "${_rc}" PARENT_SCOPE)
  set(${out_text} "${_out}${_err}" PARENT_SCOPE)
endfunction()

# 1. The clean tree passes.
_clean_tree("${_work}/good")
_run("${_work}/good" _rc _text)
if(NOT _rc EQUAL 0)
  _fail("the clean tree failed the check (exit ${_rc}):\n${_text}")
endif()
if(NOT _text MATCHES "layering: 7 files, every include within its layer or below")
  _fail("the clean tree's summary is not the expected one:\n${_text}")
endif()

# 2. The same tree with four problems fails, naming each.
_clean_tree("${_work}/bad")
_write("${_work}/bad/src/low/uses_high.cpp"
       "// low must not know high\n#include \"low/low.hpp\"\n#include \"high/high.hpp\"\n")
_write("${_work}/bad/include/loom/low_api.hpp" "#pragma once\n#include \"loom/high_api.hpp\"\n")
_write("${_work}/bad/src/low/missing.cpp" "#include \"low/not_there.hpp\"\n")
_write("${_work}/bad/src/stray/stray.cpp" "int x;\n")
_run("${_work}/bad" _rc _text)
if(_rc EQUAL 0)
  _fail("the tree with upward includes passed the check:\n${_text}")
endif()
foreach(_expected
    "src/low/uses_high.cpp:3: #include \"high/high.hpp\" reaches layer high from layer low, which may include only: low"
    "include/loom/low_api.hpp:2: #include \"loom/high_api.hpp\" reaches layer high from layer low"
    "src/low/missing.cpp:1: #include \"low/not_there.hpp\" names no file of the tree"
    "src/stray/stray.cpp: belongs to no layer"
    "layering: 4 problem\\(s\\)")
  if(NOT _text MATCHES "${_expected}")
    _fail("the check's output lacks '${_expected}':\n${_text}")
  endif()
endforeach()
# Only the bad files are named.
foreach(_clean "src/high/high.cpp" "src/root.cpp" "src/low/low.cpp" "include/loom/high_api.hpp")
  string(FIND "${_text}" "${_clean}:" _pos)
  if(_pos GREATER_EQUAL 0)
    _fail("the check names ${_clean}, which has no bad include:\n${_text}")
  endif()
endforeach()
message(STATUS "check_layering_test: the clean tree passes; the bad one fails naming all 4 problems")

# Proves a table typo is caught by the compiler: the rule in rule.cpp compiles with a
# real slot and fails, naming the misspelt slot, with a made-up one.
#   cmake -DCXX=... -DSOURCE_DIR=... -P check.cmake
set(_src ${SOURCE_DIR}/tests/model/table_check/rule.cpp)
set(_flags -std=c++20 -fsyntax-only -I${SOURCE_DIR}/src -I${SOURCE_DIR}/include -I${SOURCE_DIR}/capi)
execute_process(COMMAND ${CXX} ${_flags} ${_src} RESULT_VARIABLE _good ERROR_VARIABLE _good_err)
if(NOT _good EQUAL 0)
  message(FATAL_ERROR "the correct rule does not compile:\n${_good_err}")
endif()
execute_process(COMMAND ${CXX} ${_flags} -DLOOM_TABLE_TYPO ${_src} RESULT_VARIABLE _bad ERROR_VARIABLE _bad_err)
if(_bad EQUAL 0)
  message(FATAL_ERROR "a rule naming the slot 'attn_qq', which does not exist, compiled")
endif()
if(NOT _bad_err MATCHES "attn_qq")
  message(FATAL_ERROR "the misspelt rule failed to compile, but the error does not name 'attn_qq':\n${_bad_err}")
endif()
message(STATUS "a rule naming a slot that does not exist fails to compile, naming it")

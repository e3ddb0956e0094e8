# Runs cmake/check_layer_links.cmake on the library's own objects with the real table
# changed so that the runtime may not use the model layer: it must fail, naming a
# runtime object and the model function it calls (session.cpp.o and
# kv_cache_bytes_for, defined by model.cpp.o), and blame no layer below the runtime.
#
#   cmake -DLOOM_CHECKER=... -DLOOM_LAYERS_FILE=<real table> -DLOOM_OBJECTS_FILE=...
#         -DLOOM_NM=... [-DLOOM_CXXFILT=...] -DLOOM_WORK_DIR=<scratch> -P check_layer_links_test.cmake
cmake_minimum_required(VERSION 3.22)

file(REMOVE_RECURSE "${LOOM_WORK_DIR}")
set(_table "${LOOM_WORK_DIR}/layers_runtime_without_model.cmake")
file(WRITE "${_table}" "include(\"${LOOM_LAYERS_FILE}\")\nset(LOOM_LAYER_runtime_DEPS template)\n")

execute_process(
  COMMAND ${CMAKE_COMMAND} -DLOOM_LAYERS_FILE=${_table} -DLOOM_OBJECTS_FILE=${LOOM_OBJECTS_FILE}
          -DLOOM_NM=${LOOM_NM} -DLOOM_CXXFILT=${LOOM_CXXFILT} -P ${LOOM_CHECKER}
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
set(_text "${_out}${_err}")
if(_rc EQUAL 0)
  message(FATAL_ERROR "check_layer_links_test: the check passed although the runtime calls the model:\n${_text}")
endif()
if(LOOM_CXXFILT)
  set(_expected "session.cpp.o \\(layer runtime\\) references loom::kv_cache_bytes_for\\([^\n]*\\), defined by model.cpp.o \\(layer model\\)")
else()
  set(_expected "session.cpp.o \\(layer runtime\\) references _ZN4loom18kv_cache_bytes_for[^\n]*, defined by model.cpp.o \\(layer model\\)")
endif()
if(NOT _text MATCHES "${_expected}")
  message(FATAL_ERROR "check_layer_links_test: the output lacks the runtime -> model reference:\n${_text}")
endif()
# Only the runtime and capi (which reaches the model through it) are blamed: the lower
# layers' rules did not change.
foreach(_lower common tensor format sample template tokenizer model)
  if(_text MATCHES "\\(layer ${_lower}\\) references")
    message(FATAL_ERROR "check_layer_links_test: the check blames layer ${_lower}, whose rules did not change:\n${_text}")
  endif()
endforeach()
message(STATUS "check_layer_links_test: a runtime object calling the model layer is caught")

# The layering check at the level of symbols: no object of a layer may reference a
# function or variable defined (strongly) by an object of a layer above it, as
# cmake/LoomLayers.cmake orders them. It catches what the include check cannot see: a
# lower layer's header declaring something a higher layer defines, and calling it.
# Weak and inline definitions (templates, inline functions) are not counted: every
# object that uses them has its own copy. The composition root (LOOM_LAYER_ROOT_FILES)
# defines only the hooks lower layers' registries call to be filled, so any layer may
# reference it.
#
#   cmake -DLOOM_LAYERS_FILE=<table> -DLOOM_OBJECTS_FILE=<objects> -DLOOM_NM=<nm>
#         [-DLOOM_CXXFILT=<c++filt>] -P check_layer_links.cmake
#
# LOOM_OBJECTS_FILE (written by src/CMakeLists.txt into the build tree) sets
# LOOM_OBJECTS_<layer> and LOOM_OBJECTS_root to each layer's object files. Run by ctest
# as "build: layering: no layer's objects reference a layer above it".
cmake_minimum_required(VERSION 3.22)

foreach(_v LOOM_LAYERS_FILE LOOM_OBJECTS_FILE LOOM_NM)
  if(NOT ${_v})
    message(FATAL_ERROR "check_layer_links: -D${_v}=... is required")
  endif()
endforeach()
include("${LOOM_LAYERS_FILE}")
include("${LOOM_OBJECTS_FILE}")

set(_problems "")
include("${CMAKE_CURRENT_LIST_DIR}/LoomLayerCheck.cmake")
loom_layer_allowed_sets(_problems)
foreach(_layer IN LISTS LOOM_LAYERS)
  list(APPEND _allowed_${_layer} root)  # the composition root's hooks (see above)
endforeach()
set(_all_layers ${LOOM_LAYERS} root)
set(_allowed_root ${_all_layers})

# Every object, and its layer.
set(_all_objects "")
foreach(_layer IN LISTS _all_layers)
  foreach(_obj IN LISTS LOOM_OBJECTS_${_layer})
    set("_layer_of_${_obj}" ${_layer})
    list(APPEND _all_objects "${_obj}")
  endforeach()
endforeach()
list(LENGTH _all_objects _objects)
if(_objects EQUAL 0)
  message(FATAL_ERROR "check_layer_links: no object files listed in ${LOOM_OBJECTS_FILE}")
endif()

# One nm over every object (-A: each line starts with "<object>:"), as a list of
# "<object>|<symbol>" for the symbols whose type letter is in `types`.
function(_symbols flags types out)
  execute_process(COMMAND ${LOOM_NM} -A ${flags} ${_all_objects}
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _text ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "check_layer_links: ${LOOM_NM} ${flags} failed (are the libraries built?): ${_err}")
  endif()
  string(REGEX MATCHALL "[^\n]+:[0-9a-fA-F ]* [${types}] [^\n]+" _lines "${_text}")
  list(TRANSFORM _lines REPLACE "^([^\n]+):[0-9a-fA-F ]* [${types}] " "\\1|")
  set(${out} "${_lines}" PARENT_SCOPE)
endfunction()

# Splits an "<object>|<symbol>" entry of _symbols.
macro(_split entry)
  string(FIND "${entry}" "|" _bar REVERSE)
  string(SUBSTRING "${entry}" 0 ${_bar} _obj)
  math(EXPR _bar "${_bar} + 1")
  string(SUBSTRING "${entry}" ${_bar} -1 _s)
endmacro()

# Who defines what.
_symbols("--defined-only;-g" "TDBR" _defs)
foreach(_entry IN LISTS _defs)
  _split("${_entry}")
  set("_def_${_s}" "${_layer_of_${_obj}}")
  set("_defobj_${_s}" "${_obj}")
endforeach()

function(_readable symbol out)
  set(${out} "${symbol}" PARENT_SCOPE)
  if(LOOM_CXXFILT)
    execute_process(COMMAND ${LOOM_CXXFILT} "${symbol}" OUTPUT_VARIABLE _d OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND NOT _d STREQUAL "")
      set(${out} "${_d}" PARENT_SCOPE)
    endif()
  endif()
endfunction()

# Who references what.
_symbols("-u" "U" _refs)
foreach(_entry IN LISTS _refs)
  _split("${_entry}")
  if(NOT DEFINED "_def_${_s}")
    continue()  # the C++ runtime, a third-party library, or a weak definition
  endif()
  set(_layer "${_layer_of_${_obj}}")
  set(_to "${_def_${_s}}")
  if(_to IN_LIST _allowed_${_layer})
    continue()
  endif()
  _readable("${_s}" _name)
  get_filename_component(_from_name "${_obj}" NAME)
  get_filename_component(_to_name "${_defobj_${_s}}" NAME)
  string(APPEND _problems
    "${_from_name} (layer ${_layer}) references ${_name}, defined by ${_to_name} (layer ${_to})\n")
endforeach()

loom_layer_report("${_problems}" "reference(s) to a layer above" "${_objects} objects, every reference within its layer or below")

# Shared by the two layering checks (check_layering.cmake on includes,
# check_layer_links.cmake on symbols), after they include the layer table
# (cmake/LoomLayers.cmake).

# Sets _allowed_<layer> for every layer of LOOM_LAYERS: itself and every layer below it
# through its LOOM_LAYER_<layer>_DEPS. A dependency on a layer not listed before it is
# appended to the variable `problems` (one line each).
macro(loom_layer_allowed_sets problems)
  set(_seen "")
  foreach(_layer IN LISTS LOOM_LAYERS)
    set(_allowed_${_layer} ${_layer})
    foreach(_dep IN LISTS LOOM_LAYER_${_layer}_DEPS)
      if(NOT _dep IN_LIST _seen)
        string(APPEND ${problems}
          "${LOOM_LAYERS_FILE}: layer ${_layer} depends on '${_dep}', which is not a layer listed before it in LOOM_LAYERS\n")
        continue()
      endif()
      list(APPEND _allowed_${_layer} ${_allowed_${_dep}})
    endforeach()
    list(REMOVE_DUPLICATES _allowed_${_layer})
    list(APPEND _seen ${_layer})
  endforeach()
endmacro()

# Ends a check: with problems, prints them as they are (FATAL_ERROR would rewrap them)
# and fails counting them as `what`; else prints `ok_message`.
function(loom_layer_report problems what ok_message)
  if(NOT problems STREQUAL "")
    string(REGEX MATCHALL "\n" _lines "${problems}")
    list(LENGTH _lines _count)
    message(NOTICE "${problems}")
    message(FATAL_ERROR "layering: ${_count} ${what}; the layer table is ${LOOM_LAYERS_FILE} (docs/architecture.md, \"Layers and folders\")")
  endif()
  message(STATUS "layering: ${ok_message}")
endfunction()

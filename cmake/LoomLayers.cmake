# The layers of the library, lowest first, and what each may depend on: the one table
# that both src/CMakeLists.txt (one object library per layer, loom_<layer>, linking only
# the layers it names) and the include check (cmake/check_layering.cmake, run by ctest as
# "build: layering ...") read. docs/architecture.md, "Layers and folders", explains it.
#
# Per layer:
#   LOOM_LAYER_<layer>_DIRS    its folders (relative to the source root); every .cpp under
#                              them is compiled into loom_<layer>
#   LOOM_LAYER_<layer>_DEPS    the layers directly below it that it may include and call;
#                              what those may use, it may use too (the check takes the
#                              transitive closure)
#   LOOM_LAYER_<layer>_HEADERS the public headers it defines: include/loom/<name>.hpp
#                              (or, for capi, the header file names in capi/)
# LOOM_LAYER_ROOT_FILES are files above every layer (the composition root, which wires a
# higher layer's answers into a lower layer's registry); they may include anything.
#
# A new folder under src/ or a new public header must be added here, or the check fails.
set(LOOM_LAYERS common tensor format sample template tokenizer model runtime capi)

set(LOOM_LAYER_common_DIRS src/common src/io)
set(LOOM_LAYER_common_DEPS)
set(LOOM_LAYER_common_HEADERS error log cpu mapped_file thread_pool)

set(LOOM_LAYER_tensor_DIRS src/tensor)
set(LOOM_LAYER_tensor_DEPS common)
set(LOOM_LAYER_tensor_HEADERS dtype shape tensor convert)

set(LOOM_LAYER_format_DIRS src/format)
set(LOOM_LAYER_format_DEPS tensor)
set(LOOM_LAYER_format_HEADERS format)

set(LOOM_LAYER_sample_DIRS src/sample)
set(LOOM_LAYER_sample_DEPS common)
set(LOOM_LAYER_sample_HEADERS sampler)

set(LOOM_LAYER_template_DIRS src/template)
set(LOOM_LAYER_template_DEPS common)
set(LOOM_LAYER_template_HEADERS chat_template)

set(LOOM_LAYER_tokenizer_DIRS src/tokenizer)
set(LOOM_LAYER_tokenizer_DEPS format)
set(LOOM_LAYER_tokenizer_HEADERS tokenizer)

set(LOOM_LAYER_model_DIRS src/model)
set(LOOM_LAYER_model_DEPS tokenizer sample)
set(LOOM_LAYER_model_HEADERS config weights model generation_defaults manifest load_report loader
    pack exporter demo)

set(LOOM_LAYER_runtime_DIRS src/runtime)
set(LOOM_LAYER_runtime_DEPS model template)
set(LOOM_LAYER_runtime_HEADERS trace session generate batch chat speculative)

set(LOOM_LAYER_capi_DIRS capi)
set(LOOM_LAYER_capi_DEPS runtime)
set(LOOM_LAYER_capi_HEADERS loom.h loom.hpp capi_internal.hpp)

set(LOOM_LAYER_ROOT_FILES src/compose.cpp)

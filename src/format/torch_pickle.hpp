// Internal: a restricted unpickler for the `data.pkl` of a torch.save archive.
//
// It interprets the pickle opcodes torch.save emits (protocol 2, plus the protocol 3-4
// opcodes a caller may ask torch for) over a private object model. It calls nothing:
// the only "callables" are an allow-list of globals — collections.OrderedDict,
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter / _rebuild_parameter_with_state
// and the typed storage classes (torch.FloatStorage, ...) — each of which it models
// itself. Any other global (os.system, builtins.eval, subprocess.Popen, ...) and any
// opcode that would instantiate arbitrary classes (INST, OBJ, NEWOBJ, EXT*) is refused
// with an error naming it. Limits on stack size, memo size, object count and nesting
// depth stop pickle bombs; the object model is an arena, so cycles and deep nesting
// cost no recursion.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "loom/dtype.hpp"
#include "loom/shape.hpp"

namespace loom::format {

struct TorchStorage {
  std::string key;        // the persistent id's key: the entry `<archive>/data/<key>`
  std::string type_name;  // "FloatStorage"
  DType dtype = DType::f32;
  uint64_t numel = 0;     // elements, as the persistent id states
};

struct TorchTensor {
  std::string name;  // the state dict key
  size_t storage = 0;  // index into TorchStateDict::storages
  uint64_t storage_offset = 0;  // in elements
  Shape shape;
  Strides strides;
};

struct TorchStateDict {
  std::vector<TorchStorage> storages;
  std::vector<TorchTensor> tensors;  // in the dict's order
};

struct UnpickleLimits {
  size_t max_stack = 1u << 20;     // stack entries and marks
  size_t max_memo = 1u << 20;      // memo entries
  size_t max_objects = 1u << 23;   // objects created in total
  uint32_t max_depth = 256;        // container nesting
};

// `base_offset` is where the pickle starts in `file` (error offsets are absolute).
TorchStateDict unpickle_torch_state_dict(std::span<const std::byte> pickle, const std::string& file,
                                         uint64_t base_offset = 0, const UnpickleLimits& limits = {});

}  // namespace loom::format

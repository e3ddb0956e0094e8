// libFuzzer harness: the restricted unpickler on arbitrary bytes as data.pkl.
#include "format/torch_pickle.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Smaller limits than the defaults keep each run fast; the limits themselves are
  // what is being exercised.
  static const loom::format::UnpickleLimits limits{
      .max_stack = 1u << 14, .max_memo = 1u << 14, .max_objects = 1u << 16, .max_depth = 64};
  try {
    const auto dict = loom::format::unpickle_torch_state_dict(loom::fuzz::as_span(data, size), "fuzz.pkl", 0, limits);
    for (const auto& t : dict.tensors) {
      if (t.storage >= dict.storages.size()) __builtin_trap();
    }
  } catch (const loom::Error&) {
  }
  return 0;
}

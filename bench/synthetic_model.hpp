// Generated Llama-shaped models for the end-to-end benchmarks (tokens_per_second,
// batched_decode): the shapes, deterministic random weights in any dtype, and the
// matrix bytes and parameters that achieved GB/s and GFLOP/s are computed from.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/median.hpp"
#include "loom/dtype.hpp"
#include "loom/model.hpp"

namespace loom::bench {

// "small": hidden 1024, 8 layers, 16/4 heads, ffn 2816, vocab 32000; "1b": Llama-3.2-1B.
loom::ModelConfig shape_config(const std::string& shape);
// Matrices in `dtype` (quantized ones too), norms f32; the same weights on every run.
// `output_scale` multiplies the output projection's spread: random weights give flat
// logits (a spread of ~0.4), a scale of ~25 peaked ones, as a trained model's are
// (speculative decoding's acceptance depends on it).
std::shared_ptr<const loom::Model> synthetic_model(const loom::ModelConfig& c, loom::DType dtype,
                                                   float output_scale = 1.0f);
// `m` with each projection matrix in the kernel-native layout its dtype has on this CPU
// and each layer's q, k and v back to back (what LoadOptions::repack = automatic does at
// load), or nullptr when no matrix has one.
std::shared_ptr<const loom::Model> repacked_copy(const loom::Model& m);
// The models a --repack list ("off,auto") names: `rows` for off, its repacked_copy for
// auto (none where no matrix has a kernel layout); nullopt, with a message on stderr,
// for an unknown mode.
std::optional<std::vector<std::shared_ptr<const loom::Model>>> models_for_repack(
    const std::shared_ptr<const loom::Model>& rows, const std::string& modes);
// "rows", or the packing of the model's first packed projection matrix.
std::string layout_of(const loom::Model& m);
// Weight bytes decode reads per pass: every projection matrix and the output matrix.
double matrix_bytes(const loom::Model& m);
// Parameters of those matrices (2 x this = FLOPs per token, attention aside).
double matrix_params(const loom::ModelConfig& c);
// Of those, the output matrix's (vocab x hidden): a prefill that keeps only the last
// position's logits runs it for one token, not for every prompt token.
double output_params(const loom::ModelConfig& c);

// "a,b,c" -> {"a", "b", "c"} (the benchmarks' list flags).
std::vector<std::string> split(const std::string& s);
using ::loom::median;  // common/median.hpp: the middle value, the mean of two for an even count

}  // namespace loom::bench

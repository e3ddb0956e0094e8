#include "tensor/quant/quant.hpp"

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "loom/convert.hpp"
#include "loom/error.hpp"
#include "loom/thread_pool.hpp"
#include "tensor/quant/quant_formats.hpp"

namespace loom::quant {

namespace {

struct Codec {
  DType dtype;
  codec::DequantizeFn dequantize;
  codec::QuantizeFn quantize;
};

// One row per quantized dtype; every one can be read and written.
constexpr std::array<Codec, 18> kCodecs{{
    {DType::q8_0, codec::dequantize_q8_0, codec::quantize_q8_0},
    {DType::q4_0, codec::dequantize_q4_0, codec::quantize_q4_0},
    {DType::q4_1, codec::dequantize_q4_1, codec::quantize_q4_1},
    {DType::q5_0, codec::dequantize_q5_0, codec::quantize_q5_0},
    {DType::q5_1, codec::dequantize_q5_1, codec::quantize_q5_1},
    {DType::q2_k, codec::dequantize_q2_k, codec::quantize_q2_k},
    {DType::q3_k, codec::dequantize_q3_k, codec::quantize_q3_k},
    {DType::q4_k, codec::dequantize_q4_k, codec::quantize_q4_k},
    {DType::q5_k, codec::dequantize_q5_k, codec::quantize_q5_k},
    {DType::q6_k, codec::dequantize_q6_k, codec::quantize_q6_k},
    {DType::q8_k, codec::dequantize_q8_k, codec::quantize_q8_k},
    {DType::q8_1, codec::dequantize_q8_1, codec::quantize_q8_1},
    {DType::gq8_32, codec::dequantize_gq8<32>, codec::quantize_gq8<32>},
    {DType::gq8_64, codec::dequantize_gq8<64>, codec::quantize_gq8<64>},
    {DType::gq8_128, codec::dequantize_gq8<128>, codec::quantize_gq8<128>},
    {DType::gq4_32, codec::dequantize_gq4<32>, codec::quantize_gq4<32>},
    {DType::gq4_64, codec::dequantize_gq4<64>, codec::quantize_gq4<64>},
    {DType::gq4_128, codec::dequantize_gq4<128>, codec::quantize_gq4<128>},
}};

constexpr std::array<GroupType, 6> kGroupTypes{{
    {DType::gq8_32, 8, 32},
    {DType::gq8_64, 8, 64},
    {DType::gq8_128, 8, 128},
    {DType::gq4_32, 4, 32},
    {DType::gq4_64, 4, 64},
    {DType::gq4_128, 4, 128},
}};

const Codec* find_codec(DType dtype) noexcept {
  for (const auto& c : kCodecs) {
    if (c.dtype == dtype) return &c;
  }
  return nullptr;
}

size_t whole_blocks(DType dtype, size_t n) {
  const auto block = static_cast<size_t>(dtype_traits(dtype).block_elems);
  if (n % block != 0) {
    throw Error(ErrorCode::invalid_argument,
                std::to_string(n) + " elements are not a whole number of " +
                    std::string(dtype_name(dtype)) + " blocks of " + std::to_string(block));
  }
  return n / block;
}

// `first`: the index of src[0] in the caller's whole input, for the message.
void require_finite(const float* src, size_t n, DType to, size_t first = 0) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(src[i])) {
      throw Error(ErrorCode::numeric, "cannot quantize a non-finite value (element " +
                                          std::to_string(first + i) + ") to " +
                                          std::string(dtype_name(to)));
    }
  }
}

}  // namespace

std::span<const GroupType> group_types() noexcept { return kGroupTypes; }

std::optional<DType> group_dtype(int bits, int group) noexcept {
  for (const auto& g : kGroupTypes) {
    if (g.bits == bits && g.group == group) return g.dtype;
  }
  return std::nullopt;
}

bool can_dequantize(DType dtype) noexcept { return find_codec(dtype) != nullptr; }

bool dequantize(DType dtype, const void* src, float* dst, size_t n) {
  const Codec* c = find_codec(dtype);
  if (c == nullptr) return false;
  c->dequantize(static_cast<const uint8_t*>(src), dst, whole_blocks(dtype, n));
  return true;
}

bool can_quantize(DType dtype) noexcept {
  const Codec* c = find_codec(dtype);
  return c != nullptr && c->quantize != nullptr;
}

void quantize(DType dtype, const float* src, void* dst, size_t n) { quantize_from(DType::f32, src, dtype, dst, n); }

void quantize_from(DType from, const void* src, DType to, void* dst, size_t n, ThreadPool* pool) {
  const Codec* c = find_codec(to);
  if (c == nullptr || c->quantize == nullptr) {
    throw Error(ErrorCode::unsupported, "no quantizer writes " + std::string(dtype_name(to)));
  }
  if (from != DType::f32 && (!can_convert(from, DType::f32) || is_quantized(from))) {
    throw Error(ErrorCode::unsupported, "cannot quantize from " + std::string(dtype_name(from)));
  }
  whole_blocks(to, n);
  // Chunks of whole blocks of `to` (every block size divides 4096), widened into a
  // buffer of the thread's own unless they are f32 already. A block's bytes depend on its
  // own values only, so the chunks may go to any thread in any order.
  constexpr size_t kChunk = 4096;
  const auto in_size = static_cast<size_t>(dtype_size(from));
  const auto& traits = dtype_traits(to);
  const auto block = static_cast<size_t>(traits.block_elems);
  const auto run = [&](size_t first_chunk, size_t end_chunk) {
    std::vector<float> buffer(from == DType::f32 ? 0 : kChunk);
    for (size_t chunk = first_chunk; chunk < end_chunk; ++chunk) {
      const size_t done = chunk * kChunk, count = std::min(kChunk, n - done);
      const auto* in = static_cast<const uint8_t*>(src) + done * in_size;
      const float* values = reinterpret_cast<const float*>(in);
      if (from != DType::f32) {
        convert(from, in, DType::f32, buffer.data(), count);
        values = buffer.data();
      }
      require_finite(values, count, to, done);
      c->quantize(values, static_cast<uint8_t*>(dst) + done / block * static_cast<size_t>(traits.block_bytes),
                  count / block);
    }
  };
  const size_t chunks = (n + kChunk - 1) / kChunk;
  if (pool != nullptr && pool->size() > 1 && chunks > 1) {
    pool->parallel_for(static_cast<int64_t>(chunks), 1, [&](int64_t begin, int64_t end, int) {
      run(static_cast<size_t>(begin), static_cast<size_t>(end));
    });
  } else {
    run(0, chunks);
  }
}

}  // namespace loom::quant

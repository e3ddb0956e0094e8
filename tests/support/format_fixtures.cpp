#include "support/format_fixtures.hpp"

#include <catch2/catch.hpp>

#include <cstring>

#include "format/crc32.hpp"

namespace loom::test {

Tensor patterned_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.mutable_raw_data());
  uint32_t x = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < t.nbytes(); ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = static_cast<uint8_t>(x >> 8);
  }
  return t;
}

std::vector<NamedTensor> tiny_format_model() {
  return {
      {"embed.weight", patterned_tensor({4, 8}, DType::f32, 1)},
      {"layers.0.norm", patterned_tensor({16}, DType::f16, 2)},
      {"layers.0.proj.weight", patterned_tensor({2, 3, 4}, DType::f64, 3)},
      {"positions", patterned_tensor({5}, DType::i32, 4)},
      {"layers.0.codes", patterned_tensor({3, 2}, DType::i8, 5)},
      {"scale", patterned_tensor({}, DType::f32, 6)},
  };
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || !(a.shape() == b.shape())) return false;
  const Tensor ca = a.is_contiguous() ? a : a.copy();
  const Tensor cb = b.is_contiguous() ? b : b.copy();
  return ca.nbytes() == cb.nbytes() &&
         (ca.nbytes() == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(ca.nbytes())) == 0);
}

uint64_t fnv1a64(const void* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t fnv1a64(const Tensor& t) {
  const Tensor c = t.is_contiguous() ? t : t.copy();
  return fnv1a64(c.raw_data(), static_cast<size_t>(c.nbytes()));
}

Bytes& Bytes::u8(uint8_t v) {
  data.push_back(v);
  return *this;
}
Bytes& Bytes::u16(uint16_t v) {
  for (int i = 0; i < 2; ++i) data.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}
Bytes& Bytes::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) data.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}
Bytes& Bytes::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) data.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}
Bytes& Bytes::f32(float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, 4);
  return u32(bits);
}
Bytes& Bytes::str(std::string_view s) {
  data.insert(data.end(), s.begin(), s.end());
  return *this;
}
Bytes& Bytes::zeros(size_t n) {
  data.resize(data.size() + n, 0);
  return *this;
}
Bytes& Bytes::pad_to(size_t alignment) {
  while (data.size() % alignment) data.push_back(0);
  return *this;
}

std::vector<uint8_t> safetensors_file(std::string_view json, size_t data_bytes) {
  Bytes b;
  b.u64(json.size()).str(json);
  for (size_t i = 0; i < data_bytes; ++i) b.u8(static_cast<uint8_t>(i * 7 + 1));
  return b.data;
}

std::vector<uint8_t> zip_archive(const std::vector<ZipItem>& items) {
  Bytes out;
  std::vector<uint64_t> offsets;
  for (const auto& it : items) {
    offsets.push_back(out.size());
    const uint32_t crc = loom::format::crc32(std::as_bytes(std::span<const uint8_t>(it.data)));
    out.u32(0x04034b50).u16(20).u16(0).u16(it.method).u32(0).u32(crc);
    out.u32(static_cast<uint32_t>(it.data.size())).u32(static_cast<uint32_t>(it.data.size()));
    out.u16(static_cast<uint16_t>(it.name.size())).u16(0).str(it.name);
    out.data.insert(out.data.end(), it.data.begin(), it.data.end());
  }
  const uint64_t cd = out.size();
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    const uint32_t crc = loom::format::crc32(std::as_bytes(std::span<const uint8_t>(it.data)));
    out.u32(0x02014b50).u16(20).u16(20).u16(0).u16(it.method).u32(0).u32(crc);
    out.u32(static_cast<uint32_t>(it.data.size())).u32(static_cast<uint32_t>(it.data.size()));
    out.u16(static_cast<uint16_t>(it.name.size())).u16(0).u16(0).u16(0).u16(0).u32(0);
    out.u32(static_cast<uint32_t>(offsets[i])).str(it.name);
  }
  const uint64_t cd_size = out.size() - cd;
  out.u32(0x06054b50).u16(0).u16(0).u16(static_cast<uint16_t>(items.size())).u16(static_cast<uint16_t>(items.size()));
  out.u32(static_cast<uint32_t>(cd_size)).u32(static_cast<uint32_t>(cd)).u16(0);
  return out.data;
}

loom::Error expect_error(const std::function<void()>& fn, ErrorCode code, std::string_view needle,
                         const std::string& file, const std::string& tensor,
                         std::optional<uint64_t> offset) {
  try {
    fn();
  } catch (const loom::Error& e) {
    INFO("error: " << e.what());
    CHECK(error_code_name(e.code()) == error_code_name(code));
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains(std::string(needle)));
    if (!file.empty()) CHECK(e.context().file == file);
    if (!tensor.empty()) CHECK(e.context().tensor == tensor);
    if (offset) {
      CHECK(e.context().offset.has_value());
      if (e.context().offset) CHECK(*e.context().offset == *offset);
    }
    return e;
  }
  FAIL("expected a loom::Error containing '" << needle << "'");
  return loom::Error(ErrorCode::internal, "unreachable");
}

}  // namespace loom::test

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "loom/error.hpp"
#include "loom/tensor.hpp"
#include "support/test_support.hpp"
#include "tensor/gather.hpp"
#include "tensor/packing.hpp"

using loom::DType;
using loom::Shape;
using loom::Tensor;

namespace {
Tensor iota_f32(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.mutable_data<float>();
  std::iota(p, p + t.numel(), 0.0f);
  return t;
}
}  // namespace

TEST_CASE("owned storage is 64-byte aligned and accounted") {
  const auto before = loom::Storage::owned_bytes_live();
  {
    auto s = loom::Storage::allocate(1000);
    CHECK(reinterpret_cast<uintptr_t>(s->data()) % 64 == 0);
    CHECK(s->size() == 1000);
    CHECK_FALSE(s->is_mapped());
    CHECK(loom::Storage::owned_bytes_live() == before + 1000);
    CHECK(loom::Storage::owned_bytes_peak() >= before + 1000);
  }
  CHECK(loom::Storage::owned_bytes_live() == before);
  auto empty = loom::Storage::allocate(0);
  CHECK(empty->data() != nullptr);
}

TEST_CASE("slices and reshapes are views that share storage") {
  Tensor t = iota_f32(Shape{4, 6});
  Tensor rows = t.slice(0, 1, 2);
  CHECK(rows.shape() == Shape{2, 6});
  CHECK(rows.shares_storage_with(t));
  CHECK(rows.is_contiguous());
  CHECK(rows.data<float>()[0] == 6.0f);

  Tensor cols = t.slice(1, 2, 3);
  CHECK(cols.shape() == Shape{4, 3});
  CHECK_FALSE(cols.is_contiguous());
  CHECK(cols.data<float>()[0] == 2.0f);
  CHECK(cols.strides()[0] == 6);

  Tensor flat = t.reshape(Shape{24});
  CHECK(flat.shares_storage_with(t));
  CHECK(flat.data<float>()[23] == 23.0f);
  CHECK_THROWS_AS(t.reshape(Shape{5, 5}), loom::Error);
  CHECK_THROWS_AS(cols.reshape(Shape{12}), loom::Error);
  CHECK_THROWS_AS(t.slice(0, 3, 2), loom::Error);
  CHECK_THROWS_AS(t.slice(2, 0, 1), loom::Error);

  // Writes through a view are visible in the parent (no copy happened).
  rows.mutable_data<float>()[0] = -1.0f;
  CHECK(t.data<float>()[6] == -1.0f);
}

TEST_CASE("copy is explicit, deep and contiguous, also from strided views") {
  Tensor t = iota_f32(Shape{3, 4});
  Tensor tr = t.transpose2d();
  CHECK(tr.shape() == Shape{4, 3});
  CHECK_FALSE(tr.is_contiguous());
  Tensor c = tr.copy();
  CHECK(c.is_contiguous());
  CHECK_FALSE(c.shares_storage_with(t));
  const std::vector<float> expect{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11};
  CHECK(std::vector<float>(c.data<float>(), c.data<float>() + 12) == expect);
  Tensor sub = t.slice(1, 1, 2).copy();
  CHECK(std::vector<float>(sub.data<float>(), sub.data<float>() + 6) ==
        std::vector<float>{1, 2, 5, 6, 9, 10});
}

TEST_CASE("quantized tensors slice by whole rows only") {
  // q8_0: 34 bytes per 32 elements; 3 rows of 64 elements = 2 blocks per row.
  Tensor q = Tensor::zeros(Shape{3, 64}, DType::q8_0);
  CHECK(q.nbytes() == 3 * 2 * 34);
  Tensor row = q.slice(0, 1, 1);
  CHECK(row.byte_offset() == 68);
  CHECK(row.nbytes() == 68);
  CHECK_THROWS_AS(q.slice(1, 0, 32), loom::Error);
  CHECK_THROWS_AS(q.transpose2d(), loom::Error);
  CHECK_THROWS_AS(Tensor::zeros(Shape{2, 40}, DType::q4_0), loom::Error);
}

TEST_CASE("a tensor cannot be larger than its storage") {
  auto s = loom::Storage::allocate(16);
  CHECK_NOTHROW(Tensor(s, 0, Shape{4}, DType::f32));
  CHECK_THROWS_AS(Tensor(s, 4, Shape{4}, DType::f32), loom::Error);
  CHECK_THROWS_AS(Tensor(s, 0, Shape{2, 2}, DType::f64), loom::Error);
  Tensor t(s, 0, Shape{2, 2}, DType::f32, loom::Layout::transposed);
  CHECK(t.layout() == loom::Layout::transposed);
  CHECK(t.describe() == "f32[2, 2] transposed cpu");
}

TEST_CASE("tensors over a mapped file are zero-copy and read-only") {
  loom::test::TempDir dir;
  std::vector<uint8_t> bytes(256);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i);
  loom::test::write_file_bytes(dir / "w.bin", bytes);
  auto file = loom::MappedFile::open((dir / "w.bin").string(), loom::IoMode::mmap);
  auto storage = loom::Storage::view(file, 64, 128);
  Tensor t(storage, 0, Shape{32}, DType::f32);
  CHECK(t.is_mapped());
  CHECK(file->contains(t.raw_data(), static_cast<size_t>(t.nbytes())));
  CHECK(std::memcmp(t.raw_data(), bytes.data() + 64, 128) == 0);
  CHECK_THROWS_AS(t.mutable_raw_data(), loom::Error);
  CHECK_THROWS_AS(loom::Storage::view(file, 200, 100), loom::Error);
  // The storage keeps the mapping alive after the last outside reference goes.
  std::weak_ptr<const loom::MappedFile> weak = file;
  file.reset();
  CHECK_FALSE(weak.expired());
  CHECK(static_cast<const uint8_t*>(t.raw_data())[0] == 64);
}

TEST_CASE("gather_into_one_buffer moves owned tensors into one aligned buffer, values and sharing kept") {
  Tensor a = iota_f32(Shape{3, 5});
  Tensor b = Tensor::empty(Shape{7}, DType::f16);
  auto* bp = b.mutable_data<uint16_t>();
  for (int i = 0; i < 7; ++i) bp[i] = static_cast<uint16_t>(0x3c00 + i);
  Tensor tied = a;          // the same storage: stays one copy
  Tensor undefined;         // skipped
  const std::vector<float> a_values(a.data<float>(), a.data<float>() + 15);
  std::vector<Tensor*> list{&a, &b, &tied, &undefined};
  loom::gather_into_one_buffer(list);
  REQUIRE(a.defined());
  CHECK(a.storage() == b.storage());
  CHECK(a.storage() == tied.storage());
  CHECK(a.raw_data() == tied.raw_data());
  CHECK_FALSE(undefined.defined());
  CHECK(a.shape() == Shape{3, 5});
  CHECK(b.dtype() == DType::f16);
  CHECK(std::equal(a_values.begin(), a_values.end(), a.data<float>()));
  for (int i = 0; i < 7; ++i) CHECK(b.data<uint16_t>()[i] == 0x3c00 + i);
  CHECK(reinterpret_cast<uintptr_t>(a.raw_data()) % 64 == 0);
  CHECK(reinterpret_cast<uintptr_t>(b.raw_data()) % 64 == 0);
  CHECK(a.storage()->size() == 64 + 64);  // 60 bytes and 14, each rounded to 64
}

TEST_CASE("gather_into_one_buffer refuses a non-contiguous tensor, changing nothing") {
  Tensor a = iota_f32(Shape{4, 4});
  Tensor col = a.transpose2d();
  Tensor b = iota_f32(Shape{2});
  const void* before = b.raw_data();
  std::vector<Tensor*> list{&b, &col};
  CHECK_THROWS_WITH(loom::gather_into_one_buffer(list), Catch::Contains("non-contiguous"));
  CHECK(b.raw_data() == before);
}

TEST_CASE("stacked_rows_view reads matrices gathered back to back as one, and only then") {
  // Three f32 matrices of one row length, back to back: one [9, 4] view of their rows.
  Tensor q = iota_f32(Shape{4, 4}), k = iota_f32(Shape{2, 4}), v = iota_f32(Shape{3, 4});
  std::vector<Tensor*> parts{&q, &k, &v};
  loom::gather_into_one_buffer(parts, /*align=*/1);
  const Tensor* views[] = {&q, &k, &v};
  const Tensor whole = loom::stacked_rows_view(views);
  REQUIRE(whole.defined());
  CHECK(whole.shape() == Shape{9, 4});
  CHECK(whole.raw_data() == q.raw_data());
  CHECK(whole.data<float>()[4 * 4] == k.data<float>()[0]);
  CHECK(whole.data<float>()[6 * 4 + 3] == v.data<float>()[3]);
  // Padding between them (the default 64-byte alignment: 64, 32 and 48 bytes), another
  // row length, another dtype, another buffer: none.
  Tensor a = iota_f32(Shape{2, 4}), b = iota_f32(Shape{2, 4});
  std::vector<Tensor*> ab{&a, &b};
  loom::gather_into_one_buffer(ab);
  const Tensor* padded[] = {&a, &b};
  CHECK_FALSE(loom::stacked_rows_view(padded).defined());  // 32 bytes each: b at 64, not 32
  std::vector<Tensor*> again{&a, &b};
  loom::gather_into_one_buffer(again, 1);
  CHECK(loom::stacked_rows_view(padded).defined());
  Tensor wide = iota_f32(Shape{2, 8}), narrow = iota_f32(Shape{2, 4});
  std::vector<Tensor*> mixed{&wide, &narrow};
  loom::gather_into_one_buffer(mixed, 1);
  const Tensor* mixed_views[] = {&wide, &narrow};
  CHECK_FALSE(loom::stacked_rows_view(mixed_views).defined());
  Tensor apart1 = iota_f32(Shape{2, 4}), apart2 = iota_f32(Shape{2, 4});
  const Tensor* apart[] = {&apart1, &apart2};
  CHECK_FALSE(loom::stacked_rows_view(apart).defined());
  // Packed parts: every part but the last must fill whole panels (16 rows for q8_0_x16).
  Tensor rows16 = Tensor::zeros(Shape{16, 32}, DType::q8_0), rows20 = Tensor::zeros(Shape{20, 32}, DType::q8_0);
  Tensor p16 = loom::pack(rows16, loom::Packing::q8_0_x16), p20 = loom::pack(rows20, loom::Packing::q8_0_x16);
  Tensor p16b = p16, p20b = p20;
  std::vector<Tensor*> full_first{&p16, &p20};
  loom::gather_into_one_buffer(full_first, 1);
  const Tensor* ok[] = {&p16, &p20};
  const Tensor packed_whole = loom::stacked_rows_view(ok);
  REQUIRE(packed_whole.defined());
  CHECK(packed_whole.shape() == Shape{36, 32});
  CHECK(packed_whole.packing() == loom::Packing::q8_0_x16);
  std::vector<Tensor*> ragged_first{&p20b, &p16b};
  loom::gather_into_one_buffer(ragged_first, 1);
  const Tensor* ragged[] = {&p20b, &p16b};
  CHECK_FALSE(loom::stacked_rows_view(ragged).defined());
}

TEST_CASE("pack_into packs into a given buffer at an offset, the bytes pack gives, and refuses a buffer without room") {
  // Two f16 matrices (64-row panels of f16_x64; the second ragged) packed back to back
  // into one buffer, as the loader packs the matrices it multiplies as one.
  Tensor a = Tensor::empty(Shape{64, 32}, DType::f16), b = Tensor::empty(Shape{40, 32}, DType::f16);
  for (Tensor* t : {&a, &b}) {
    auto* h = t->mutable_data<uint16_t>();
    for (int64_t i = 0; i < t->numel(); ++i) h[i] = static_cast<uint16_t>(0x3c00 + (i * 37 + t->shape()[0]) % 1021);
  }
  const loom::Packing p = loom::Packing::f16_x64;
  const auto a_bytes = static_cast<uint64_t>(loom::packed_nbytes(p, a.shape()));
  const auto b_bytes = static_cast<uint64_t>(loom::packed_nbytes(p, b.shape()));
  REQUIRE(b_bytes == a_bytes);  // the ragged one padded to a whole panel
  auto storage = loom::Storage::allocate(static_cast<size_t>(a_bytes + b_bytes));
  const Tensor pa = loom::pack_into(a, p, storage, 0), pb = loom::pack_into(b, p, storage, a_bytes);
  CHECK(pa.storage() == storage);
  CHECK(pb.storage() == storage);
  CHECK(pb.byte_offset() == a_bytes);
  CHECK(pb.packing() == p);
  CHECK(pb.shape() == b.shape());
  const Tensor ref_a = loom::pack(a, p), ref_b = loom::pack(b, p);
  CHECK(std::memcmp(pa.raw_data(), ref_a.raw_data(), static_cast<size_t>(a_bytes)) == 0);
  CHECK(std::memcmp(pb.raw_data(), ref_b.raw_data(), static_cast<size_t>(b_bytes)) == 0);
  const Tensor* parts[] = {&pa, &pb};
  CHECK(loom::stacked_rows_view(parts).shape() == Shape{104, 32});
  // One byte short, an offset past the end, no buffer: an internal error naming the tensor.
  auto small = loom::Storage::allocate(static_cast<size_t>(b_bytes - 1));
  CHECK_THROWS_WITH(loom::pack_into(b, p, small, 0), Catch::Contains("no room to pack") && Catch::Contains("f16"));
  CHECK_THROWS_AS(loom::pack_into(b, p, storage, a_bytes + 1), loom::Error);
  CHECK_THROWS_AS(loom::pack_into(b, p, storage, a_bytes + b_bytes + 64), loom::Error);
  CHECK_THROWS_AS(loom::pack_into(b, p, nullptr, 0), loom::Error);
  // Not packable as asked (the wrong dtype): invalid_argument, as pack says.
  CHECK_THROWS_AS(loom::pack_into(a, loom::Packing::q8_0_x16, storage, 0), loom::Error);
}

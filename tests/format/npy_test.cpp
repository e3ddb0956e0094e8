// .npy: round trips, header parsing, refusals, and folders of .npy files.
#include <catch2/catch.hpp>

#include "format/byte_source.hpp"
#include "format/npy.hpp"
#include "loom/format.hpp"
#include "support/format_fixtures.hpp"
#include "support/test_support.hpp"

using loom::DType;
using loom::ErrorCode;
using loom::Shape;
using loom::test::Bytes;
using loom::test::expect_error;
using loom::test::TempDir;

namespace {

std::vector<uint8_t> npy_file(std::string_view dict, size_t data_bytes, uint8_t major = 1) {
  Bytes b;
  b.str("\x93NUMPY").u8(major).u8(0);
  if (major == 1) {
    b.u16(static_cast<uint16_t>(dict.size()));
  } else {
    b.u32(static_cast<uint32_t>(dict.size()));
  }
  b.str(dict).zeros(data_bytes);
  return b.data;
}

loom::format::NpyHeader parse_bytes(const std::vector<uint8_t>& bytes, const std::string& name = "a.npy") {
  loom::format::SpanSource src(std::as_bytes(std::span<const uint8_t>(bytes)), name);
  return loom::format::parse_npy(src);
}

}  // namespace

TEST_CASE("npy round-trips every dtype it can hold") {
  TempDir dir;
  uint32_t seed = 1;
  for (DType d : {DType::f32, DType::f16, DType::f64, DType::i8, DType::u8, DType::i16, DType::i32, DType::i64,
                  DType::boolean}) {
    for (const Shape& shape : {Shape{}, Shape{7}, Shape{2, 3, 4}, Shape{0, 5}}) {
      INFO(loom::dtype_name(d) << shape.to_string());
      const auto t = loom::test::patterned_tensor(shape, d, seed++);
      const auto path = dir / "t.npy";
      loom::write_npy(path, t);
      const auto bytes = loom::test::read_file_bytes(path);
      CHECK(bytes[6] == 1);  // version 1.0
      const auto h = parse_bytes(bytes);
      CHECK(h.data_offset % 64 == 0);  // numpy pads the preamble to 64 bytes
      for (auto mode : {loom::IoMode::mmap, loom::IoMode::stream}) {
        auto src = loom::open_weights(path, {.io_mode = mode});
        REQUIRE(src->tensors().size() == 1);
        CHECK(src->tensors()[0].name == "t");
        CHECK(src->tensors()[0].shape == shape);
        CHECK(loom::test::same_bytes(src->load(src->tensors()[0]), t));
      }
    }
  }
  expect_error([&] { loom::write_npy(dir / "b.npy", loom::test::patterned_tensor({2}, DType::bf16, 1)); },
               ErrorCode::unsupported, "cannot hold dtype bf16");
}

TEST_CASE("npy headers numpy writes") {
  auto h = parse_bytes(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }          \n", 48));
  CHECK(h.dtype == DType::f32);
  CHECK(h.shape == Shape{3, 4});
  CHECK(h.nbytes == 48);
  // Any key order, double quotes, 1-tuples, scalars, v2 and v3 headers.
  CHECK(parse_bytes(npy_file("{\"shape\": (5,), \"fortran_order\": False, \"descr\": \"|u1\"}\n", 5, 2)).shape ==
        Shape{5});
  CHECK(parse_bytes(npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': ()}", 8, 3)).shape.rank() == 0);
  // Fortran order of a 1-D array is the same bytes.
  CHECK(parse_bytes(npy_file("{'descr': '<f2', 'fortran_order': True, 'shape': (4,)}", 8)).dtype == DType::f16);
}

TEST_CASE("npy refusals") {
  expect_error([&] { parse_bytes(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2)}", 16)); },
               ErrorCode::unsupported, "Fortran-order", "a.npy");
  expect_error([&] { parse_bytes(npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (2,)}", 8)); },
               ErrorCode::unsupported, "big-endian .npy dtype '>f4'", "a.npy");
  expect_error([&] { parse_bytes(npy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (2,)}", 16)); },
               ErrorCode::unsupported, "dtype '<c8' is not supported", "a.npy");
  expect_error([&] { parse_bytes(npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", 8)); },
               ErrorCode::unsupported, "structured", "a.npy");
  expect_error([&] { parse_bytes(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 7)); },
               ErrorCode::format, "needs 8 bytes of data but the file holds 7", "a.npy");
  expect_error([&] { parse_bytes(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 9)); },
               ErrorCode::format, "holds 9", "a.npy");
  expect_error([&] { parse_bytes(npy_file("{'descr': '<f4', 'shape': (2,)}", 8)); }, ErrorCode::format,
               "must have 'descr', 'fortran_order' and 'shape'", "a.npy");
  expect_error([&] { parse_bytes(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8)); },
               ErrorCode::format, "unexpected or repeated key 'x'", "a.npy");
  expect_error([&] { parse_bytes(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", 8)); },
               ErrorCode::format, "non-negative integer", "a.npy");
  expect_error([&] { parse_bytes(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 8)); },
               ErrorCode::format, "overflows", "a.npy");
  expect_error([&] { parse_bytes(npy_file("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}", 8)); },
               ErrorCode::format, "expected True or False", "a.npy");
  expect_error([&] { parse_bytes(npy_file("{'descr': '<f4", 0)); }, ErrorCode::format, "unterminated", "a.npy");
  expect_error([&] { parse_bytes(npy_file("{}", 0, 4)); }, ErrorCode::unsupported, "unknown .npy version 4.0",
               "a.npy", {}, 6);
  auto truncated = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8);
  truncated.resize(20);
  expect_error([&] { parse_bytes(truncated); }, ErrorCode::format, "npy header of", "a.npy");
}

TEST_CASE("a folder of .npy files is one tensor per file") {
  TempDir dir;
  const auto model = loom::test::tiny_format_model();
  for (const auto& t : model) {
    loom::write_npy(dir / (t.name + ".npy"), t.tensor);
  }
  loom::test::write_file_bytes(dir / "README.txt", {'h', 'i'});
  auto src = loom::open_weights(dir.path());
  CHECK(src->format() == loom::FormatKind::npy);
  CHECK(src->root() == dir.path().string());
  REQUIRE(src->tensors().size() == model.size());
  CHECK(src->files().size() == model.size());
  for (const auto& t : model) {
    const auto* r = src->find(t.name);
    REQUIRE(r != nullptr);
    CHECK(loom::test::same_bytes(src->load(*r), t.tensor));
  }
  // One bad file names itself.
  loom::test::write_file_bytes(dir / "zz.npy", {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 2, 0, '{', '}'});
  expect_error([&] { loom::open_weights(dir.path()); }, ErrorCode::format, "", (dir / "zz.npy").string());
}

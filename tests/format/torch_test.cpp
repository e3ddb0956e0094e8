// PyTorch .bin: the zip reader, the restricted unpickler, and the torch writer.
#include <catch2/catch.hpp>

#include <cstring>

#include "format/byte_source.hpp"
#include "format/torch.hpp"
#include "format/torch_pickle.hpp"
#include "format/zip.hpp"
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

// Pickle opcodes, spelled out for hand-made pickles.
struct Pickle {
  Bytes b;
  Pickle() { b.u8(0x80).u8(2); }
  Pickle& op(uint8_t c) {
    b.u8(c);
    return *this;
  }
  Pickle& global(std::string_view module, std::string_view name) {
    b.u8('c').str(module).u8('\n').str(name).u8('\n');
    return *this;
  }
  Pickle& text(std::string_view s) {
    b.u8('X').u32(static_cast<uint32_t>(s.size())).str(s);
    return *this;
  }
  Pickle& small(uint8_t v) {
    b.u8('K').u8(v);
    return *this;
  }
  // key -> _rebuild_tensor_v2(storage(key, numel), offset, (n,), (1,), False, OrderedDict())
  Pickle& tensor_1d(std::string_view name, std::string_view storage_key, uint8_t numel,
                    std::string_view storage_class = "FloatStorage") {
    text(name).global("torch._utils", "_rebuild_tensor_v2").op('(');
    op('(').text("storage").global("torch", storage_class).text(storage_key).text("cpu").small(numel).op('t');
    op('Q').small(0).small(numel).op(0x85).small(1).op(0x85).op(0x89);
    global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
    return *this;
  }
  Pickle& begin_dict() { return global("collections", "OrderedDict").op(')').op('R').op('('); }
  std::vector<uint8_t> end_dict() {
    op('u').op('.');
    return b.data;
  }
};

loom::format::TorchStateDict unpickle(const std::vector<uint8_t>& p, const loom::format::UnpickleLimits& limits = {}) {
  return loom::format::unpickle_torch_state_dict(std::as_bytes(std::span<const uint8_t>(p)), "f.bin", 0, limits);
}

std::vector<uint8_t> floats(int n) {
  std::vector<uint8_t> out(static_cast<size_t>(n) * 4);
  for (int i = 0; i < n; ++i) {
    const float v = static_cast<float>(i) + 0.5f;
    std::memcpy(out.data() + 4 * i, &v, 4);
  }
  return out;
}

}  // namespace

TEST_CASE("torch writer and reader round-trip every dtype") {
  TempDir dir;
  std::vector<loom::NamedTensor> tensors;
  uint32_t seed = 1;
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i64, DType::i32, DType::i16,
                  DType::i8, DType::u8, DType::boolean, DType::f8_e4m3, DType::f8_e5m2}) {
    tensors.push_back({"t." + std::string(loom::dtype_name(d)), loom::test::patterned_tensor({4, 3}, d, seed++)});
  }
  tensors.push_back({"scalar", loom::test::patterned_tensor({}, DType::f32, seed++)});
  tensors.push_back({"empty", loom::test::patterned_tensor({0, 3}, DType::f32, seed++)});
  tensors.push_back({"big", loom::test::patterned_tensor({300, 301}, DType::f32, seed++)});
  for (bool zip64 : {false, true}) {
    INFO("zip64 " << zip64);
    const auto path = dir / (zip64 ? "z64.bin" : "m.bin");
    loom::write_torch(path, tensors, {.archive_name = zip64 ? "pytorch_model" : "archive", .force_zip64 = zip64});
    for (auto mode : {loom::IoMode::mmap, loom::IoMode::stream}) {
      auto src = loom::open_weights(path, {.io_mode = mode});
      CHECK(src->format() == loom::FormatKind::torch);
      REQUIRE(src->tensors().size() == tensors.size());
      for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& r = src->tensors()[i];
        INFO(r.name);
        CHECK(r.name == tensors[i].name);
        CHECK(r.dtype == tensors[i].tensor.dtype());
        CHECK(r.shape == tensors[i].tensor.shape());
        CHECK(r.is_contiguous());
        if (r.nbytes > 0) CHECK(r.offset % 64 == 0);  // torch aligns entries to 64 bytes
        CHECK(loom::test::same_bytes(src->load(r), tensors[i].tensor));
      }
    }
  }
}

TEST_CASE("torch views: shared storages, storage offsets and strides") {
  TempDir dir;
  const loom::Tensor base = loom::test::patterned_tensor({6, 4}, DType::f32, 7);
  const loom::Tensor transposed = base.transpose2d();  // [4, 6], strides (1, 4)
  const loom::Tensor rows = base.slice(0, 2, 3);        // [3, 4], storage offset 8
  const loom::Tensor column = base.slice(1, 1, 1);      // [6, 1], strides (4, 1), offset 1
  std::vector<loom::NamedTensor> tensors{
      {"base", base}, {"tied", base}, {"transposed", transposed}, {"rows", rows}, {"column", column}};
  const auto path = dir / "views.bin";
  loom::write_torch(path, tensors);

  // One storage entry for all five tensors, as torch.save dedups storages.
  loom::format::FileSource fs(loom::MappedFile::open(path.string()));
  const auto zip = loom::format::read_zip_directory(fs);
  int data_entries = 0;
  for (const auto& e : zip.entries) data_entries += e.name.starts_with("archive/data/");
  CHECK(data_entries == 1);

  for (auto mode : {loom::IoMode::mmap, loom::IoMode::stream}) {
    auto src = loom::open_weights(path, {.io_mode = mode});
    const auto* t = src->find("transposed");
    REQUIRE(t != nullptr);
    REQUIRE(t->strides.has_value());
    CHECK((*t->strides)[0] == 1);
    CHECK((*t->strides)[1] == 4);
    CHECK(t->span_bytes == 24 * 4);
    CHECK(loom::test::same_bytes(src->load(*t), transposed.copy()));
    CHECK_THROWS_AS(src->read(*t, 0, std::span<std::byte>()), loom::Error);

    const auto* r = src->find("rows");
    CHECK(r->is_contiguous());
    CHECK(r->offset == src->find("base")->offset + 8 * 4);
    CHECK(loom::test::same_bytes(src->load(*r), rows.copy()));

    const auto* c = src->find("column");
    CHECK(c->is_contiguous() == false);
    CHECK(loom::test::same_bytes(src->load(*c), column.copy()));
    CHECK(src->find("tied")->offset == src->find("base")->offset);
  }
}

TEST_CASE("unpickler reads hand-made state dicts") {
  Pickle p;
  p.begin_dict().tensor_1d("a", "0", 4).tensor_1d("b", "1", 2, "HalfStorage");
  // A BUILD setting the OrderedDict's _metadata, as model.state_dict() pickles have.
  auto bytes = p.end_dict();
  bytes.pop_back();  // STOP
  Bytes tail;
  tail.u8('}').u8('X').u32(9).str("_metadata").u8('}').u8('s').u8('b').u8('.');
  for (uint8_t c : tail.data) bytes.push_back(c);
  const auto sd = unpickle(bytes);
  REQUIRE(sd.tensors.size() == 2);
  CHECK(sd.tensors[0].name == "a");
  CHECK(sd.tensors[0].shape == Shape{4});
  CHECK(sd.storages[sd.tensors[1].storage].dtype == DType::f16);
  CHECK(sd.storages[sd.tensors[1].storage].key == "1");
  CHECK(sd.storages[sd.tensors[1].storage].numel == 2);
}

TEST_CASE("unpickler refuses globals off the allow-list and never executes") {
  const auto marker = std::filesystem::temp_directory_path() / "loom-pickle-pwned";
  std::filesystem::remove(marker);
  const std::vector<std::pair<std::string, std::string>> bad{
      {"os", "system"}, {"posix", "system"}, {"builtins", "eval"}, {"builtins", "exec"},
      {"subprocess", "Popen"}, {"torch._utils", "_rebuild_qtensor"}, {"torch", "load"},
      {"torch.serialization", "_load"}, {"__builtin__", "getattr"},
  };
  for (const auto& [module, name] : bad) {
    Pickle p;
    p.global(module, name).op('(').text("touch " + marker.string()).op('t').op('R').op('.');
    INFO(module << "." << name);
    expect_error([&] { unpickle(p.b.data); }, ErrorCode::format, "global '" + module + "." + name + "'", "f.bin");
  }
  // STACK_GLOBAL spells the same thing differently.
  Pickle sg;
  sg.text("os").text("system").op(0x93).op('(').text("true").op('t').op('R').op('.');
  expect_error([&] { unpickle(sg.b.data); }, ErrorCode::format, "global 'os.system'", "f.bin", {}, 20);
  CHECK_FALSE(std::filesystem::exists(marker));
}

TEST_CASE("unpickler refuses object-building opcodes and misuse of allowed globals") {
  struct Case {
    std::vector<uint8_t> pickle;
    std::string needle;
  };
  auto raw = [](std::initializer_list<uint8_t> ops) {
    std::vector<uint8_t> v{0x80, 2};
    for (uint8_t o : ops) v.push_back(o);
    return v;
  };
  std::vector<Case> cases{
      {raw({'i', 'o', 's', '\n', 's', 'y', 's', 't', 'e', 'm', '\n', '.'}), "INST (0x69)"},
      {raw({'(', 'o', '.'}), "OBJ (0x6f)"},
      {raw({')', ')', 0x81, '.'}), "NEWOBJ (0x81)"},
      {raw({0x82, 1, '.'}), "EXT1 (0x82)"},
      {raw({'S', '\'', 'x', '\'', '\n', '.'}), "STRING (0x53)"},
      {raw({0xff, '.'}), "unknown opcode 0xff"},
      {raw({'N'}), "pickle ends without STOP"},
      {raw({']', 0x85}), "pickle ends without STOP"},  // found by fuzz_unpickler: an over-read
      {raw({'X', 5, 0}), "pickle ends inside BINUNICODE (0x58)"},
      {raw({'N', 'N', '.'}), "holds a None, not a state dict"},
      {raw({'a', '.'}), "on an empty stack"},
      {raw({'h', 7, '.'}), "memo index 7 was never stored"},
      {raw({'N', ']', 's', '.'}), "on an empty stack"},
  };
  {
    Pickle p;
    p.global("torch", "FloatStorage").op(')').op('R').op('.');
    cases.push_back({p.b.data, "may only appear in a persistent id"});
  }
  {
    Pickle p;
    p.global("collections", "OrderedDict").text("x").op(0x85).op('R').op('.');
    cases.push_back({p.b.data, "only rebuilt empty"});
  }
  {
    Pickle p;
    p.begin_dict().text("epoch").small(3);
    cases.push_back({p.end_dict(), "not a tensor"});
  }
  {
    Pickle p;
    p.begin_dict().tensor_1d("a", "0", 4);
    auto b = p.end_dict();
    b.pop_back();
    b.push_back('N');
    b.push_back('b');  // BUILD on the OrderedDict with None is fine ...
    b.push_back(']');
    b.push_back('N');
    b.push_back('b');  // ... but not on a list
    b.push_back('.');
    cases.push_back({b, "BUILD on a list"});
  }
  for (const auto& c : cases) {
    INFO(c.needle);
    expect_error([&] { unpickle(c.pickle); }, ErrorCode::format, c.needle, "f.bin");
  }
  Pickle complex;
  complex.begin_dict().tensor_1d("c", "0", 2, "ComplexFloatStorage");
  expect_error([&] { unpickle(complex.end_dict()); }, ErrorCode::unsupported, "torch.ComplexFloatStorage");
}

TEST_CASE("unpickler limits stop pickle bombs") {
  SECTION("deep nesting (default limit)") {
    std::vector<uint8_t> p{0x80, 2, ']'};
    for (int i = 0; i < 300; ++i) p.push_back(0x85);  // TUPLE1 around TUPLE1 around ...
    p.push_back('.');
    expect_error([&] { unpickle(p); }, ErrorCode::format, "nested deeper than 256", "f.bin");
    // Nesting through APPEND into a list that contains itself costs nothing and ends.
    std::vector<uint8_t> cyc{0x80, 2, ']', 'q', 0};
    for (int i = 0; i < 1000; ++i) {
      cyc.push_back('h');
      cyc.push_back(0);
      cyc.push_back('a');
    }
    cyc.push_back('.');
    expect_error([&] { unpickle(cyc); }, ErrorCode::format, "nested deeper", "f.bin");
  }
  SECTION("huge memo") {
    Bytes b;
    b.u8(0x80).u8(2).u8('N');
    for (uint32_t i = 0; i < 2000; ++i) b.u8('r').u32(i * 7919u);
    b.u8('.');
    expect_error([&] { unpickle(b.data, {.max_memo = 1000}); }, ErrorCode::format, "memo grows past 1000", "f.bin");
  }
  SECTION("stack growth, marks and object count") {
    std::vector<uint8_t> p{0x80, 2};
    for (int i = 0; i < 5000; ++i) p.push_back('N');
    p.push_back('.');
    expect_error([&] { unpickle(p, {.max_stack = 1000}); }, ErrorCode::format, "stack grows past 1000", "f.bin");
    std::vector<uint8_t> m{0x80, 2};
    for (int i = 0; i < 5000; ++i) m.push_back('(');
    expect_error([&] { unpickle(m, {.max_stack = 1000}); }, ErrorCode::format, "too many MARKs", "f.bin");
    std::vector<uint8_t> o{0x80, 2};
    for (int i = 0; i < 5000; ++i) {
      o.push_back('N');
      o.push_back('0');  // POP: the stack stays small, the objects add up
    }
    expect_error([&] { unpickle(o, {.max_objects = 1000}); }, ErrorCode::format, "more than 1000 objects", "f.bin");
  }
  SECTION("oversized lengths are refused before allocating") {
    Bytes b;
    b.u8(0x80).u8(2).u8(0x8d).u64(1ull << 62);
    expect_error([&] { unpickle(b.data); }, ErrorCode::format, "pickle ends inside BINUNICODE8", "f.bin", {}, 2);
    Bytes l;
    l.u8(0x80).u8(2).u8(0x8b).u32(1000);
    expect_error([&] { unpickle(l.data); }, ErrorCode::format, "does not fit in 64 bits", "f.bin");
  }
}

TEST_CASE("torch archives with bad zip structure") {
  TempDir dir;
  const auto good = dir / "good.bin";
  loom::write_torch(good, loom::test::tiny_format_model());
  const auto bytes = loom::test::read_file_bytes(good);
  auto find_last = [&](uint32_t sig) {
    for (size_t i = bytes.size() - 4; i-- > 0;) {
      uint32_t v;
      std::memcpy(&v, bytes.data() + i, 4);
      if (v == sig) return i;
    }
    FAIL("signature not found");
    return size_t{0};
  };
  const size_t eocd = find_last(0x06054b50);
  uint32_t cd_offset;
  std::memcpy(&cd_offset, bytes.data() + eocd + 16, 4);
  auto write = [&](const std::vector<uint8_t>& b) {
    const auto p = (dir / "bad.bin").string();
    loom::test::write_file_bytes(p, b);
    return p;
  };
  SECTION("central directory entry signature") {
    auto b = bytes;
    b[cd_offset] = 'X';
    const auto p = write(b);
    expect_error([&] { loom::open_weights(p); }, ErrorCode::format, "bad central directory entry signature", p,
                 {}, cd_offset);
  }
  SECTION("central directory offset outside the file") {
    auto b = bytes;
    const uint32_t bogus = static_cast<uint32_t>(bytes.size() + 100);
    std::memcpy(b.data() + eocd + 16, &bogus, 4);
    const auto p = write(b);
    expect_error([&] { loom::open_weights(p); }, ErrorCode::format, "lies outside the archive", p, {}, eocd);
  }
  SECTION("absurd entry count") {
    auto b = bytes;
    b[eocd + 8] = b[eocd + 10] = 0xFE;
    b[eocd + 9] = b[eocd + 11] = 0xFF;
    const auto p = write(b);
    expect_error([&] { loom::open_weights(p); }, ErrorCode::format, "claims 65534 entries", p);
  }
  SECTION("truncated archive") {
    auto b = bytes;
    b.resize(b.size() - 10);
    const auto p = write(b);
    expect_error([&] { loom::open_weights(p); }, ErrorCode::format, "no zip end-of-central-directory", p);
  }
  SECTION("local header offset pointing nowhere") {
    auto b = bytes;
    const uint32_t bogus = cd_offset - 10;
    std::memcpy(b.data() + cd_offset + 42, &bogus, 4);
    const auto p = write(b);
    expect_error([&] { loom::open_weights(p); }, ErrorCode::format, "local header", p);
  }
  SECTION("corrupt data.pkl fails its CRC") {
    auto b = bytes;
    b[64 + 5] ^= 0x01;  // torch aligns data.pkl's data to byte 64
    const auto p = write(b);
    expect_error([&] { loom::open_weights(p); }, ErrorCode::format, "CRC-32", p, {}, 64);
  }
}

TEST_CASE("torch archives with bad contents") {
  TempDir dir;
  auto write = [&](const std::vector<uint8_t>& b) {
    const auto p = (dir / "c.bin").string();
    loom::test::write_file_bytes(p, b);
    return p;
  };
  Pickle good;
  good.begin_dict().tensor_1d("w", "0", 4);
  const auto pkl = good.end_dict();
  SECTION("a plain zip opens through the hand-made builder") {
    const auto p = write(loom::test::zip_archive({{"m/data.pkl", pkl}, {"m/data/0", floats(4)}}));
    auto src = loom::open_weights(p);
    REQUIRE(src->tensors().size() == 1);
    const auto t = src->load(src->tensors()[0]);
    float last = 0;  // the hand-made zip does not align its entries: copy, don't cast
    std::memcpy(&last, static_cast<const std::byte*>(t.raw_data()) + 12, 4);
    CHECK(last == 3.5f);
  }
  SECTION("disallowed global in a real archive") {
    Pickle evil;
    evil.global("os", "system").op('(').text("true").op('t').op('R').op('.');
    const auto p = write(loom::test::zip_archive({{"m/data.pkl", evil.b.data}}));
    expect_error([&] { loom::open_weights(p); }, ErrorCode::format, "global 'os.system'", p);
  }
  SECTION("compressed entries are refused") {
    const auto p = write(loom::test::zip_archive({{"m/data.pkl", pkl}, {"m/data/0", floats(4), 8}}));
    expect_error([&] { loom::open_weights(p); }, ErrorCode::unsupported, "is compressed (zip method 8)", p);
    const auto q = write(loom::test::zip_archive({{"m/data.pkl", pkl, 8}, {"m/data/0", floats(4)}}));
    expect_error([&] { loom::open_weights(q); }, ErrorCode::unsupported, "data.pkl is compressed", q);
  }
  SECTION("missing or short storage entries") {
    const auto p = write(loom::test::zip_archive({{"m/data.pkl", pkl}}));
    expect_error([&] { loom::open_weights(p); }, ErrorCode::format, "has no zip entry 'm/data/0'", p);
    const auto q = write(loom::test::zip_archive({{"m/data.pkl", pkl}, {"m/data/0", floats(3)}}));
    expect_error([&] { loom::open_weights(q); }, ErrorCode::format, "needs 16 bytes, its entry holds 12", q);
  }
  SECTION("a view reaching past its storage") {
    Pickle p;
    p.begin_dict().text("w").global("torch._utils", "_rebuild_tensor_v2").op('(');
    p.op('(').text("storage").global("torch", "FloatStorage").text("0").text("cpu").small(4).op('t');
    p.op('Q').small(2).small(3).op(0x85).small(1).op(0x85).op(0x89);
    p.global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
    const auto f = write(loom::test::zip_archive({{"m/data.pkl", p.end_dict()}, {"m/data/0", floats(4)}}));
    expect_error([&] { loom::open_weights(f); }, ErrorCode::format, "reaches element 4 of 4", f, "w");
  }
  SECTION("no data.pkl, or not a zip at all") {
    const auto p = write(loom::test::zip_archive({{"m/other", {1, 2}}}));
    expect_error([&] { loom::open_weights(p); }, ErrorCode::format, "no <archive>/data.pkl", p);
  }
  SECTION("legacy torch format") {
    const auto p = write({0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, '.'});
    expect_error([&] { loom::open_weights(p); }, ErrorCode::unsupported,
                 "unsupported: legacy torch format, re-save with torch>=1.6 or convert to safetensors", p);
  }
}

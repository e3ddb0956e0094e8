// The torch.save-compatible writer: a pickle (protocol 2) of an OrderedDict of tensors
// plus a zip archive with stored, 64-byte aligned entries, laid out as torch writes it.
#include <array>
#include <fmt/format.h>
#include <map>
#include <set>

#include "format/atomic_file.hpp"
#include "format/byte_source.hpp"
#include "format/crc32.hpp"
#include "loom/convert.hpp"
#include "loom/format.hpp"

namespace loom {

namespace {

using format::append_bytes;
using format::append_le;

struct StorageClass {
  DType dtype;
  std::string_view name;
};
constexpr std::array<StorageClass, 12> kStorageClasses{{
    {DType::f32, "FloatStorage"},
    {DType::f16, "HalfStorage"},
    {DType::bf16, "BFloat16Storage"},
    {DType::f64, "DoubleStorage"},
    {DType::i64, "LongStorage"},
    {DType::i32, "IntStorage"},
    {DType::i16, "ShortStorage"},
    {DType::i8, "CharStorage"},
    {DType::u8, "ByteStorage"},
    {DType::boolean, "BoolStorage"},
    {DType::f8_e4m3, "Float8_e4m3fnStorage"},
    {DType::f8_e5m2, "Float8_e5m2Storage"},
}};

std::optional<std::string_view> storage_class(DType dtype) {
  for (const auto& s : kStorageClasses) {
    if (s.dtype == dtype) return s.name;
  }
  return std::nullopt;
}

// ---- pickle emission (protocol 2, the opcodes torch.save uses) ----

class PickleWriter {
 public:
  PickleWriter() {
    op(0x80);
    op(2);
  }
  void op(uint8_t code) { format::append_le<uint8_t>(out_, code); }
  void unicode(std::string_view s) {
    op('X');
    append_le<uint32_t>(out_, static_cast<uint32_t>(s.size()));
    append_bytes(out_, s);
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      op('K');
      op(static_cast<uint8_t>(v));
    } else if (v >= 0 && v < 65536) {
      op('M');
      append_le<uint16_t>(out_, static_cast<uint16_t>(v));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J');
      append_le<int32_t>(out_, static_cast<int32_t>(v));
    } else {
      op(0x8a);  // LONG1 with 8 bytes, two's complement
      op(8);
      append_le<int64_t>(out_, v);
    }
  }
  void int_tuple(std::span<const int64_t> values) {
    if (values.empty()) {
      op(')');
      return;
    }
    const bool short_form = values.size() <= 3;
    if (!short_form) op('(');
    for (int64_t v : values) integer(v);
    op(short_form ? static_cast<uint8_t>(0x84 + values.size()) : 't');
  }
  // GLOBAL, memoized: a second use of the same global is a BINGET.
  void global(std::string_view module, std::string_view name) {
    const std::string key = std::string(module) + "\n" + std::string(name) + "\n";
    if (auto it = memo_.find(key); it != memo_.end()) {
      get(it->second);
      return;
    }
    op('c');
    append_bytes(out_, key);
    memo_[key] = put();
  }
  uint32_t put() {
    const uint32_t index = next_memo_++;
    if (index < 256) {
      op('q');
      op(static_cast<uint8_t>(index));
    } else {
      op('r');
      append_le<uint32_t>(out_, index);
    }
    return index;
  }
  void get(uint32_t index) {
    if (index < 256) {
      op('h');
      op(static_cast<uint8_t>(index));
    } else {
      op('j');
      append_le<uint32_t>(out_, index);
    }
  }
  std::vector<std::byte> finish() {
    op('.');
    return std::move(out_);
  }

 private:
  std::vector<std::byte> out_;
  std::map<std::string, uint32_t> memo_;
  uint32_t next_memo_ = 0;
};

// ---- the zip container ----

constexpr uint64_t kDataAlignment = 64;  // torch aligns every entry's data to 64 bytes
constexpr uint16_t kFlags = 0x0808;      // data descriptor follows; UTF-8 names (as torch)

struct WrittenEntry {
  std::string name;
  uint32_t crc = 0;
  uint64_t size = 0;
  uint64_t local_offset = 0;
};

class ZipWriter {
 public:
  ZipWriter(format::AtomicFile& out, bool force_zip64) : out_(out), force_zip64_(force_zip64) {}

  void add(const std::string& name, std::span<const std::byte> data) {
    WrittenEntry e{name, format::crc32(data), data.size(), out_.position()};
    const bool zip64 = force_zip64_ || data.size() >= 0xFFFFFFFFu || e.local_offset >= 0xFFFFFFFFu;
    std::vector<std::byte> h;
    append_le<uint32_t>(h, 0x04034b50);
    append_le<uint16_t>(h, zip64 ? 45 : 20);
    append_le<uint16_t>(h, kFlags);
    append_le<uint16_t>(h, 0);  // stored
    append_le<uint32_t>(h, 0);  // time, date
    append_le<uint32_t>(h, 0);  // crc and sizes are in the data descriptor
    append_le<uint32_t>(h, zip64 ? 0xFFFFFFFFu : 0);
    append_le<uint32_t>(h, zip64 ? 0xFFFFFFFFu : 0);
    append_le<uint16_t>(h, static_cast<uint16_t>(name.size()));
    std::vector<std::byte> extra;
    if (zip64) {
      append_le<uint16_t>(extra, 0x0001);
      append_le<uint16_t>(extra, 16);
      append_le<uint64_t>(extra, 0);
      append_le<uint64_t>(extra, 0);
    }
    // Padding extra field ("FB", filled with 'Z') so that the data starts aligned.
    const uint64_t data_at = e.local_offset + 30 + name.size() + extra.size();
    uint64_t pad = (kDataAlignment - data_at % kDataAlignment) % kDataAlignment;
    if (pad != 0 && pad < 4) pad += kDataAlignment;
    if (pad != 0) {
      append_le<uint16_t>(extra, 0x4246);
      append_le<uint16_t>(extra, static_cast<uint16_t>(pad - 4));
      format::append_fill(extra, std::byte{'Z'}, static_cast<size_t>(pad - 4));
    }
    append_le<uint16_t>(h, static_cast<uint16_t>(extra.size()));
    append_bytes(h, name);
    append_bytes(h, extra);
    out_.write(h);
    out_.write(data);
    std::vector<std::byte> d;  // data descriptor
    append_le<uint32_t>(d, 0x08074b50);
    append_le<uint32_t>(d, e.crc);
    if (zip64) {
      append_le<uint64_t>(d, e.size);
      append_le<uint64_t>(d, e.size);
    } else {
      append_le<uint32_t>(d, static_cast<uint32_t>(e.size));
      append_le<uint32_t>(d, static_cast<uint32_t>(e.size));
    }
    out_.write(d);
    entries_.push_back(std::move(e));
  }

  void finish() {
    const uint64_t cd_offset = out_.position();
    bool any64 = force_zip64_;
    for (const auto& e : entries_) {
      const bool zip64 = force_zip64_ || e.size >= 0xFFFFFFFFu || e.local_offset >= 0xFFFFFFFFu;
      any64 = any64 || zip64;
      std::vector<std::byte> c;
      append_le<uint32_t>(c, 0x02014b50);
      append_le<uint16_t>(c, zip64 ? 45 : 20);  // made by
      append_le<uint16_t>(c, zip64 ? 45 : 20);  // needed
      append_le<uint16_t>(c, kFlags);
      append_le<uint16_t>(c, 0);
      append_le<uint32_t>(c, 0);
      append_le<uint32_t>(c, e.crc);
      append_le<uint32_t>(c, zip64 ? 0xFFFFFFFFu : static_cast<uint32_t>(e.size));
      append_le<uint32_t>(c, zip64 ? 0xFFFFFFFFu : static_cast<uint32_t>(e.size));
      append_le<uint16_t>(c, static_cast<uint16_t>(e.name.size()));
      append_le<uint16_t>(c, zip64 ? 28 : 0);
      append_le<uint16_t>(c, 0);  // comment
      append_le<uint16_t>(c, 0);  // disk
      append_le<uint16_t>(c, 0);
      append_le<uint32_t>(c, 0);
      append_le<uint32_t>(c, zip64 ? 0xFFFFFFFFu : static_cast<uint32_t>(e.local_offset));
      append_bytes(c, e.name);
      if (zip64) {
        append_le<uint16_t>(c, 0x0001);
        append_le<uint16_t>(c, 24);
        append_le<uint64_t>(c, e.size);
        append_le<uint64_t>(c, e.size);
        append_le<uint64_t>(c, e.local_offset);
      }
      out_.write(c);
    }
    const uint64_t cd_size = out_.position() - cd_offset;
    any64 = any64 || cd_offset >= 0xFFFFFFFFu || entries_.size() >= 0xFFFF;
    std::vector<std::byte> end;
    if (any64) {
      const uint64_t rec = out_.position();
      append_le<uint32_t>(end, 0x06064b50);
      append_le<uint64_t>(end, 44);  // size of the rest of the record
      append_le<uint16_t>(end, 45);
      append_le<uint16_t>(end, 45);
      append_le<uint32_t>(end, 0);
      append_le<uint32_t>(end, 0);
      append_le<uint64_t>(end, entries_.size());
      append_le<uint64_t>(end, entries_.size());
      append_le<uint64_t>(end, cd_size);
      append_le<uint64_t>(end, cd_offset);
      append_le<uint32_t>(end, 0x07064b50);  // locator
      append_le<uint32_t>(end, 0);
      append_le<uint64_t>(end, rec);
      append_le<uint32_t>(end, 1);
    }
    append_le<uint32_t>(end, 0x06054b50);
    append_le<uint16_t>(end, 0);
    append_le<uint16_t>(end, 0);
    const auto count16 = static_cast<uint16_t>(any64 ? 0xFFFF : entries_.size());
    append_le<uint16_t>(end, count16);
    append_le<uint16_t>(end, count16);
    append_le<uint32_t>(end, any64 ? 0xFFFFFFFFu : static_cast<uint32_t>(cd_size));
    append_le<uint32_t>(end, any64 ? 0xFFFFFFFFu : static_cast<uint32_t>(cd_offset));
    append_le<uint16_t>(end, 0);
    out_.write(end);
  }

 private:
  format::AtomicFile& out_;
  bool force_zip64_;
  std::vector<WrittenEntry> entries_;
};

}  // namespace

void write_torch(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                 const TorchWriteOptions& options) {
  const std::string file = path.string();
  if (options.archive_name.empty() || options.archive_name.find('/') != std::string::npos) {
    throw Error(ErrorCode::invalid_argument, "archive name must be a single path component", {.file = file});
  }
  // One storage per distinct Storage object, as torch.save dedups by storage identity.
  struct StorageOut {
    const Storage* storage;
    DType dtype;
    std::string key;
    uint64_t numel;
  };
  std::vector<StorageOut> storages;
  std::map<const Storage*, size_t> storage_index;
  std::set<std::string_view> names;

  PickleWriter p;
  p.global("collections", "OrderedDict");
  p.op(')');
  p.op('R');
  p.put();
  p.op('(');
  for (const auto& nt : tensors) {
    const Tensor& t = nt.tensor;
    const ErrorContext ctx{.file = file, .tensor = nt.name};
    if (!names.insert(nt.name).second) throw Error(ErrorCode::invalid_argument, "duplicate tensor name", ctx);
    if (!t.defined()) throw Error(ErrorCode::invalid_argument, "tensor is undefined", ctx);
    const auto cls = storage_class(t.dtype());
    if (!cls) {
      throw Error(ErrorCode::unsupported, "torch cannot hold dtype " + std::string(dtype_name(t.dtype())), ctx);
    }
    if (!host_is_little_endian()) {
      throw Error(ErrorCode::unsupported, "write_torch needs a little-endian host", ctx);
    }
    const auto esize = static_cast<uint64_t>(dtype_size(t.dtype()));
    if (t.byte_offset() % esize != 0) {
      throw Error(ErrorCode::invalid_argument, "tensor does not start on an element boundary of its storage", ctx);
    }
    auto [it, fresh] = storage_index.try_emplace(t.storage().get(), storages.size());
    if (fresh) {
      storages.push_back(StorageOut{t.storage().get(), t.dtype(), std::to_string(storages.size()),
                                    t.storage()->size() / esize});
    } else if (storages[it->second].dtype != t.dtype()) {
      throw Error(ErrorCode::invalid_argument, "tensors of different dtypes share one storage", ctx);
    }
    const StorageOut& s = storages[it->second];

    p.unicode(nt.name);
    p.global("torch._utils", "_rebuild_tensor_v2");
    p.op('(');
    // The persistent id: ('storage', torch.<Type>Storage, key, location, numel).
    p.op('(');
    p.unicode("storage");
    p.global("torch", *cls);
    p.unicode(s.key);
    p.unicode("cpu");
    p.integer(static_cast<int64_t>(s.numel));
    p.op('t');
    p.op('Q');
    p.integer(static_cast<int64_t>(t.byte_offset() / esize));
    p.int_tuple(t.shape().dims());
    p.int_tuple(std::span<const int64_t>(t.strides().values.data(), static_cast<size_t>(t.strides().rank)));
    p.op(0x89);  // requires_grad = False
    p.global("collections", "OrderedDict");
    p.op(')');
    p.op('R');
    p.op('t');
    p.op('R');
  }
  p.op('u');
  const std::vector<std::byte> pickle = p.finish();

  const std::string prefix = options.archive_name + "/";
  format::AtomicFile out(path);
  ZipWriter zip(out, options.force_zip64);
  zip.add(prefix + "data.pkl", pickle);
  const std::string_view order = "little";
  zip.add(prefix + "byteorder", std::as_bytes(std::span<const char>(order.data(), order.size())));
  for (const auto& s : storages) {
    zip.add(prefix + "data/" + s.key,
            std::span<const std::byte>(s.storage->data(), static_cast<size_t>(s.numel * dtype_size(s.dtype))));
  }
  const std::string_view version = "3\n";
  zip.add(prefix + "version", std::as_bytes(std::span<const char>(version.data(), version.size())));
  zip.finish();
  out.commit();
}

}  // namespace loom

// loom external formats — the first of loom's three weight representations.
//
// Opening a path (a weight file, or a model directory laid out the way people download
// models) yields a WeightSource: the files it spans, the tensor records they hold
// (external name, dtype, row-major shape, file, byte offset, byte length) and the
// format's metadata (GGUF key/values with their types, safetensors `__metadata__`).
// The format is chosen by magic bytes, never by file name alone. This layer knows
// nothing about models: names are the files' own, shapes are as stored.
//
// Ownership: a WeightSource owns its MappedFiles through shared_ptr; tensors it hands
// out keep their file mapped even after the WeightSource is gone.
// Thread-safety: a WeightSource is immutable after open; all const methods may be
// called from any thread at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "loom/error.hpp"
#include "loom/mapped_file.hpp"
#include "loom/tensor.hpp"

namespace loom {

struct MetaArrayItems;  // the packed items of an array MetaValue (metadata.cpp)

// One metadata value. GGUF values keep their GGUF type tag (so a writer can
// round-trip them bit-exactly); safetensors metadata values are all strings.
class MetaValue {
 public:
  enum class Type : uint8_t { u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, boolean, string, array };

  MetaValue() = default;
  static MetaValue of_uint(uint64_t v, Type t = Type::u64);
  static MetaValue of_int(int64_t v, Type t = Type::i64);
  static MetaValue of_float(double v, Type t = Type::f64);
  static MetaValue of_bool(bool v);
  static MetaValue of_string(std::string v);
  // `element_type` is the type of the elements (GGUF arrays are homogeneous).
  static MetaValue of_array(const std::vector<MetaValue>& v, Type element_type);

  // Builds an array item by item without a MetaValue per item (a GGUF vocabulary is
  // hundreds of thousands of strings). Not thread-safe; finish() leaves it empty.
  class ArrayBuilder {
   public:
    explicit ArrayBuilder(Type element_type);
    ArrayBuilder(ArrayBuilder&&) noexcept;
    ArrayBuilder& operator=(ArrayBuilder&&) noexcept;
    ~ArrayBuilder();
    void reserve(size_t items);
    // Throws Error(invalid_argument) when the item's type is not the element type.
    void push(const MetaValue& item);
    // A string item; the caller writes `length` bytes at the pointer returned, which stays
    // valid until the next call on the builder.
    char* push_string(size_t length);
    MetaValue finish();

   private:
    Type element_type_;
    std::shared_ptr<MetaArrayItems> items_;
  };

  Type type() const noexcept { return type_; }
  Type element_type() const noexcept { return element_type_; }  // arrays only
  bool is_integer() const noexcept;
  bool is_number() const noexcept;
  // Conversions throw loom::Error(format) naming the expected type when they don't fit.
  int64_t as_int() const;
  uint64_t as_uint() const;
  double as_double() const;
  bool as_bool() const;
  const std::string& as_string() const;
  // Arrays keep their items packed (strings back to back, numbers as 8-byte words) and
  // shared: copying a MetaValue that holds an array copies a pointer, never the items.
  // These throw Error(format) unless this is an array, and Error(invalid_argument) for
  // an index past the end.
  size_t array_size() const;
  MetaValue array_item(size_t i) const;         // a copy of item i
  std::string_view string_item(size_t i) const;  // item i of a string array, not copied
  std::string to_display_string(size_t max_array_items = 8) const;

  // Same type tags and the same value (floats compared bit for bit).
  friend bool operator==(const MetaValue& a, const MetaValue& b) noexcept;

 private:
  Type type_ = Type::u64;
  Type element_type_ = Type::u64;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<const MetaArrayItems>> value_;
  const MetaArrayItems& items() const;
};

std::string_view meta_type_name(MetaValue::Type type) noexcept;

// Ordered key/value metadata (order is kept so writers can round-trip files).
class Metadata {
 public:
  const MetaValue* find(std::string_view key) const noexcept;
  bool contains(std::string_view key) const noexcept { return find(key) != nullptr; }
  // Adds or replaces a key (a replaced key keeps its position).
  void set(std::string key, MetaValue value);
  bool erase(std::string_view key);
  const std::vector<std::pair<std::string, MetaValue>>& entries() const noexcept { return entries_; }
  size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }
  friend bool operator==(const Metadata& a, const Metadata& b) noexcept {
    return a.entries_ == b.entries_;
  }

 private:
  std::vector<std::pair<std::string, MetaValue>> entries_;
  std::map<std::string, size_t, std::less<>> index_;
};

// llama2c: a llama2.c checkpoint (run.c's legacy .bin, or export.py version 1).
enum class FormatKind : uint8_t { safetensors, gguf, torch, npy, pack, llama2c };
std::string_view format_kind_name(FormatKind kind) noexcept;

struct SourceFile {
  std::string path;
  uint64_t size = 0;
  std::shared_ptr<const MappedFile> file;
};

// Where one tensor's bytes are. Offsets are absolute within the file.
struct TensorRecord {
  std::string name;  // external name, exactly as stored
  DType dtype = DType::f32;
  Shape shape;            // row-major (GGUF's ggml-order dims are reversed on read)
  uint32_t file_index = 0;  // into WeightSource::files()
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  // Element strides when the stored tensor is not contiguous (PyTorch views); absent
  // means contiguous row-major. For a strided record `nbytes` is still the dense size
  // (numel x element size, what load() returns) and `offset` is the first element's
  // byte; the elements lie within [offset, offset + span_bytes).
  std::optional<Strides> strides;
  uint64_t span_bytes = 0;  // bytes the stored elements cover (== nbytes when contiguous)
  // A kernel-native layout the bytes are stored in (only loom packs written with
  // --repack have them): `shape` stays the logical [rows, cols], `nbytes` is the
  // packing's size, and load() returns a Layout::repacked tensor.
  Packing packing = Packing::none;

  bool is_contiguous() const noexcept { return !strides.has_value(); }
};

struct OpenOptions {
  IoMode io_mode = IoMode::automatic;
  uint64_t fs_magic_override = 0;  // tests: pretend the files live on this filesystem
};

class WeightSource {
 public:
  // Normally built by open_weights. Checks every record against its file (throws
  // Error(format) for bytes past the end or a duplicate name) and sets span_bytes of
  // contiguous records where it was left 0.
  WeightSource(FormatKind kind, std::string root, std::vector<SourceFile> files,
               std::vector<TensorRecord> tensors, Metadata metadata);

  FormatKind format() const noexcept { return kind_; }
  // The path that was opened (file or directory).
  const std::string& root() const noexcept { return root_; }
  const std::vector<SourceFile>& files() const noexcept { return files_; }
  const std::vector<TensorRecord>& tensors() const noexcept { return tensors_; }
  const Metadata& metadata() const noexcept { return metadata_; }
  const TensorRecord* find(std::string_view name) const noexcept;
  const SourceFile& file_of(const TensorRecord& record) const;
  // What was forgiven while reading the source's side files, one line per file, e.g.
  // "model.safetensors.index.json: 1 trailing comma was ignored". Set by open_weights.
  const std::vector<std::string>& warnings() const noexcept { return warnings_; }
  void add_warning(std::string warning) { warnings_.push_back(std::move(warning)); }

  // The record's tensor: a zero-copy view into the mapping when the file is mapped and
  // the record is contiguous (and the host little-endian), otherwise an owned copy
  // (strided records are gathered into a dense tensor; empty ones are always owned).
  // A view's data pointer has the alignment the file gives it (torch and GGUF align,
  // safetensors offsets need not be element-aligned).
  Tensor load(const TensorRecord& record) const;
  // Copies dst.size() bytes of the record's (contiguous) data starting at
  // `offset_in_tensor` into dst: the building block of bounded streaming conversion.
  // On a big-endian host plain dtypes come back in host order, which needs the chunk
  // to start and end on element boundaries. Throws Error(invalid_argument) for a
  // strided record or a range outside the tensor.
  void read(const TensorRecord& record, uint64_t offset_in_tensor, std::span<std::byte> dst) const;

 private:
  FormatKind kind_;
  std::string root_;
  std::vector<SourceFile> files_;
  std::vector<TensorRecord> tensors_;
  Metadata metadata_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::vector<std::string> warnings_;
};

// Opens a weight file or a model directory. A directory resolves, in this order:
// `model.safetensors.index.json` + shards, `model.safetensors`,
// `pytorch_model.bin.index.json` + shards, `pytorch_model.bin`, then a directory holding
// exactly one `*.safetensors.index.json`, `*.safetensors`, `*.bin.index.json` or `*.gguf`,
// then a folder of `*.npy` files (one tensor per file, named by the file's stem). A file
// is identified by its magic bytes (a shard index by being a JSON object, a legacy
// llama2.c checkpoint by the size its header implies being the file's size). Throws
// loom::Error naming the path. (loom's own pack format is opened by its own layer.)
std::unique_ptr<WeightSource> open_weights(const std::filesystem::path& path,
                                           const OpenOptions& options = {});

// Identifies a file's format from its first bytes (at least 32 of them, or the whole
// file when shorter); nullopt when unknown. Legacy llama2.c checkpoints have no magic:
// they are recognised only when `file_size` is given and equals the size their header
// implies exactly (a torch zip named .bin is still a torch zip).
std::optional<FormatKind> sniff_format(std::span<const std::byte> head,
                                       std::optional<uint64_t> file_size = std::nullopt) noexcept;

// ---- Writers (all write to a temporary name and rename, so a failed write never
// leaves a file that looks complete) ----

struct NamedTensor {
  std::string name;
  Tensor tensor;  // contiguous (write_torch also takes strided views)
};

void write_safetensors(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                       const std::map<std::string, std::string>& metadata = {});
// Writes `shard_count` shards `<stem>-0000i-of-0000n.safetensors` plus
// `<stem>.safetensors.index.json` into `dir`, splitting the tensors in order by size.
void write_safetensors_sharded(const std::filesystem::path& dir, std::string_view stem,
                               std::span<const NamedTensor> tensors, int shard_count,
                               const std::map<std::string, std::string>& metadata = {});
// GGUF v3. Shapes are given row-major and written in ggml order; `alignment` is also
// stored as general.alignment when it is not 32.
void write_gguf(const std::filesystem::path& path, const Metadata& metadata,
                std::span<const NamedTensor> tensors, uint32_t alignment = 32);
void write_npy(const std::filesystem::path& path, const Tensor& tensor);

// A PyTorch `torch.save` zip archive holding an OrderedDict state dict, laid out the way
// torch (>= 1.6) writes it: stored entries `<archive>/data.pkl` (pickle protocol 2),
// `<archive>/byteorder`, `<archive>/data/<key>` (each 64-byte aligned),
// `<archive>/version`. Tensors that share a Storage share one data entry, and a
// non-contiguous tensor (e.g. Tensor::transpose2d()) is written as a view with its
// strides and storage offset, exactly as torch records views. Plain dtypes only.
struct TorchWriteOptions {
  std::string archive_name = "archive";
  bool force_zip64 = false;  // write ZIP64 records even for small files (tests)
};
void write_torch(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                 const TorchWriteOptions& options = {});

}  // namespace loom

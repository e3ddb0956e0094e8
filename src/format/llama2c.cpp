// The llama2.c checkpoint reader: header checks, the tensor-order tables of the legacy
// and version-1 layouts, and one zero-copy record per tensor and layer.
#include "format/llama2c.hpp"

#include <array>
#include <cstdlib>
#include <string_view>

namespace loom::format {

namespace {

// Bounds on the header's fields: generous for any model llama2.c can run, small enough
// that every size computed from them fits comfortably in 64 bits.
constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxHidden = int64_t{1} << 22;
constexpr int64_t kMaxLayers = int64_t{1} << 12;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxSeqLen = int64_t{1} << 24;

enum class Extent : uint8_t { none, dim, hidden, kv_dim, vocab, seq_len, half_head };

// One array of the file: `per_layer` arrays hold n_layers matrices back to back (each one
// a record); `cols == none` is a vector. `classifier` arrays exist only when the output
// projection is not shared with the embedding.
struct Piece {
  std::string_view name;
  bool per_layer;
  Extent rows;
  Extent cols;
  bool classifier = false;
};

using E = Extent;

// run.c's memory_map_weights / export.py legacy_export order (version 0).
constexpr Piece kLegacyOrder[] = {
    {"tok_embeddings.weight", false, E::vocab, E::dim},
    {"layers.{N}.attention_norm.weight", true, E::dim, E::none},
    {"layers.{N}.attention.wq.weight", true, E::dim, E::dim},
    {"layers.{N}.attention.wk.weight", true, E::kv_dim, E::dim},
    {"layers.{N}.attention.wv.weight", true, E::kv_dim, E::dim},
    {"layers.{N}.attention.wo.weight", true, E::dim, E::dim},
    {"layers.{N}.ffn_norm.weight", true, E::dim, E::none},
    {"layers.{N}.feed_forward.w1.weight", true, E::hidden, E::dim},
    {"layers.{N}.feed_forward.w2.weight", true, E::dim, E::hidden},
    {"layers.{N}.feed_forward.w3.weight", true, E::hidden, E::dim},
    {"norm.weight", false, E::dim, E::none},
    {"freq_cis_real", false, E::seq_len, E::half_head},
    {"freq_cis_imag", false, E::seq_len, E::half_head},
    {"output.weight", false, E::vocab, E::dim, true},
};

// export.py version1_export order: the norms first, no RoPE tables.
constexpr Piece kVersion1Order[] = {
    {"layers.{N}.attention_norm.weight", true, E::dim, E::none},
    {"layers.{N}.ffn_norm.weight", true, E::dim, E::none},
    {"norm.weight", false, E::dim, E::none},
    {"tok_embeddings.weight", false, E::vocab, E::dim},
    {"layers.{N}.attention.wq.weight", true, E::dim, E::dim},
    {"layers.{N}.attention.wk.weight", true, E::kv_dim, E::dim},
    {"layers.{N}.attention.wv.weight", true, E::kv_dim, E::dim},
    {"layers.{N}.attention.wo.weight", true, E::dim, E::dim},
    {"layers.{N}.feed_forward.w1.weight", true, E::hidden, E::dim},
    {"layers.{N}.feed_forward.w2.weight", true, E::dim, E::hidden},
    {"layers.{N}.feed_forward.w3.weight", true, E::hidden, E::dim},
    {"output.weight", false, E::vocab, E::dim, true},
};

std::span<const Piece> order_of(const Llama2cHeader& h) noexcept {
  if (h.version == 1) return kVersion1Order;
  return kLegacyOrder;
}

int64_t extent(const Llama2cHeader& h, Extent e) noexcept {
  const int64_t head_size = h.dim / h.n_heads;
  switch (e) {
    case E::none: return 1;
    case E::dim: return h.dim;
    case E::hidden: return h.hidden_dim;
    case E::kv_dim: return head_size * h.n_kv_heads;
    case E::vocab: return h.vocab_size;
    case E::seq_len: return h.seq_len;
    case E::half_head: return head_size / 2;
  }
  return 0;
}

std::string layer_name(std::string_view pattern, int64_t layer) {
  std::string out(pattern);
  if (auto at = out.find("{N}"); at != std::string::npos) out.replace(at, 3, std::to_string(layer));
  return out;
}

// Calls visit(piece, layer, shape, offset, bytes) for every tensor in file order and
// returns the offset after the last one; nullopt when a size overflows.
template <typename Visit>
std::optional<uint64_t> walk(const Llama2cHeader& h, Visit&& visit) {
  uint64_t at = h.header_bytes;
  for (const Piece& p : order_of(h)) {
    if (p.classifier && h.shared_classifier) continue;
    const int64_t layers = p.per_layer ? h.n_layers : 1;
    const Shape shape = p.cols == E::none ? Shape{extent(h, p.rows)} : Shape{extent(h, p.rows), extent(h, p.cols)};
    uint64_t bytes = sizeof(float);
    for (int64_t d : shape.dims()) {
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) return std::nullopt;
    }
    for (int64_t l = 0; l < layers; ++l) {
      visit(p, p.per_layer ? l : -1, shape, at, bytes);
      if (__builtin_add_overflow(at, bytes, &at)) return std::nullopt;
    }
  }
  return at;
}

std::string describe(const Llama2cHeader& h) {
  return "dim " + std::to_string(h.dim) + ", hidden_dim " + std::to_string(h.hidden_dim) + ", n_layers " +
         std::to_string(h.n_layers) + ", n_heads " + std::to_string(h.n_heads) + ", n_kv_heads " +
         std::to_string(h.n_kv_heads) + ", vocab_size " + std::to_string(h.vocab_size) + ", seq_len " +
         std::to_string(h.seq_len) + (h.shared_classifier ? ", shared classifier" : ", separate classifier");
}

// The seven int32 fields, in header order (legacy vocab sign already resolved by the caller).
struct RawFields {
  std::array<int32_t, 7> v{};
};

void assign(Llama2cHeader& h, const RawFields& f, bool legacy_sign) {
  h.dim = f.v[0];
  h.hidden_dim = f.v[1];
  h.n_layers = f.v[2];
  h.n_heads = f.v[3];
  h.n_kv_heads = f.v[4];
  const int64_t vocab = f.v[5];
  if (legacy_sign) h.shared_classifier = vocab > 0;
  // |INT32_MIN| does not fit: leave it negative so the header check refuses it.
  h.vocab_size = vocab < 0 && vocab != INT32_MIN ? static_cast<int32_t>(-vocab) : static_cast<int32_t>(vocab);
  h.seq_len = f.v[6];
}

}  // namespace

std::string llama2c_header_problem(const Llama2cHeader& h) {
  auto in = [](int64_t v, int64_t hi) { return v >= 1 && v <= hi; };
  if (!in(h.dim, kMaxDim)) return "dim must be between 1 and " + std::to_string(kMaxDim);
  if (!in(h.hidden_dim, kMaxHidden)) return "hidden_dim must be between 1 and " + std::to_string(kMaxHidden);
  if (!in(h.n_layers, kMaxLayers)) return "n_layers must be between 1 and " + std::to_string(kMaxLayers);
  if (!in(h.n_heads, h.dim)) return "n_heads must be between 1 and dim";
  if (h.dim % h.n_heads != 0) return "dim is not a multiple of n_heads";
  if ((h.dim / h.n_heads) % 2 != 0) return "the head size (dim / n_heads) must be even for RoPE";
  if (!in(h.n_kv_heads, h.n_heads)) return "n_kv_heads must be between 1 and n_heads";
  if (h.n_heads % h.n_kv_heads != 0) return "n_heads is not a multiple of n_kv_heads";
  if (!in(h.vocab_size, kMaxVocab)) return "vocab_size must be between 1 and " + std::to_string(kMaxVocab) + " in magnitude";
  if (!in(h.seq_len, kMaxSeqLen)) return "seq_len must be between 1 and " + std::to_string(kMaxSeqLen);
  return {};
}

std::optional<uint64_t> llama2c_file_size(const Llama2cHeader& h) noexcept {
  try {
    if (!llama2c_header_problem(h).empty()) return std::nullopt;
    return walk(h, [](const Piece&, int64_t, const Shape&, uint64_t, uint64_t) {});
  } catch (...) {  // only allocation can throw here
    return std::nullopt;
  }
}

std::optional<Llama2cHeader> read_llama2c_legacy_header(std::span<const std::byte> head) noexcept {
  if (head.size() < kLlama2cLegacyHeaderBytes) return std::nullopt;
  RawFields f;
  for (size_t i = 0; i < f.v.size(); ++i) f.v[i] = load_le<int32_t>(head.data() + 4 * i);
  Llama2cHeader h;
  assign(h, f, true);
  try {
    if (!llama2c_header_problem(h).empty()) return std::nullopt;
  } catch (...) {
    return std::nullopt;
  }
  return h;
}

bool looks_like_llama2c(std::span<const std::byte> head, std::optional<uint64_t> file_size) noexcept {
  if (head.size() >= 4 && load_le<uint32_t>(head.data()) == kLlama2cMagic) return true;
  if (!file_size) return false;
  const auto h = read_llama2c_legacy_header(head);
  if (!h) return false;
  const auto size = llama2c_file_size(*h);
  return size && *size == *file_size;
}

ParsedWeights parse_llama2c(const ByteSource& source) {
  const std::string& file = source.name();
  Cursor c(source);
  Llama2cHeader h;
  RawFields f;
  uint64_t fields_at = 0;
  if (source.size() >= 4 && c.read<uint32_t>() == kLlama2cMagic) {
    h.version = c.read<int32_t>();
    if (h.version == 2) {
      throw Error(ErrorCode::unsupported,
                  "llama2.c export.py version 2 (Q8_0: int8 weights with their f32 group scales stored "
                  "apart) is not read; export with --version 1 (f32) or 0",
                  {.file = file, .offset = 4});
    }
    if (h.version != 1) {
      throw Error(ErrorCode::unsupported,
                  "llama2.c export.py version " + std::to_string(h.version) + " is not supported (loom reads 0 and 1)",
                  {.file = file, .offset = 4});
    }
    fields_at = c.position();
    for (auto& v : f.v) v = c.read<int32_t>();
    assign(h, f, false);
    const uint64_t flag_at = c.position();
    const auto shared = c.read<uint8_t>();
    if (shared > 1) c.fail_at(flag_at, "shared_classifier flag is " + std::to_string(shared) + ", expected 0 or 1");
    h.shared_classifier = shared == 1;
    h.header_bytes = kLlama2cHeaderBytes;
    if (source.size() < kLlama2cHeaderBytes) {
      c.fail_at(source.size(), "truncated header: a version-1 llama2.c header is 256 bytes, the file has " +
                                   std::to_string(source.size()));
    }
  } else {
    c.seek(0);
    for (auto& v : f.v) v = c.read<int32_t>();
    assign(h, f, true);
  }
  if (const std::string why = llama2c_header_problem(h); !why.empty()) {
    c.fail_at(fields_at, "llama2.c header (" + describe(h) + "): " + why);
  }
  const auto implied = llama2c_file_size(h);
  if (!implied) c.fail_at(fields_at, "llama2.c header (" + describe(h) + "): tensor sizes overflow");
  if (*implied != source.size()) {
    const bool short_file = source.size() < *implied;
    c.fail_at(short_file ? source.size() : *implied,
              "llama2.c checkpoint header (" + describe(h) + ") implies " + std::to_string(*implied) +
                  " bytes, but the file has " + std::to_string(source.size()) +
                  (short_file ? " (truncated?)" : " (trailing bytes)"));
  }

  ParsedWeights out;
  walk(h, [&](const Piece& p, int64_t layer, const Shape& shape, uint64_t offset, uint64_t bytes) {
    TensorRecord r;
    r.name = layer_name(p.name, layer);
    r.dtype = DType::f32;
    r.shape = shape;
    r.offset = offset;
    r.nbytes = r.span_bytes = bytes;
    out.tensors.push_back(std::move(r));
  });
  using T = MetaValue::Type;
  auto set = [&](const char* key, int64_t v) { out.metadata.set(key, MetaValue::of_int(v, T::i32)); };
  set("llama2c.version", h.version);
  set("llama2c.dim", h.dim);
  set("llama2c.hidden_dim", h.hidden_dim);
  set("llama2c.n_layers", h.n_layers);
  set("llama2c.n_heads", h.n_heads);
  set("llama2c.n_kv_heads", h.n_kv_heads);
  set("llama2c.vocab_size", h.vocab_size);
  set("llama2c.seq_len", h.seq_len);
  out.metadata.set("llama2c.shared_classifier", MetaValue::of_bool(h.shared_classifier));
  return out;
}

}  // namespace loom::format

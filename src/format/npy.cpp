// The .npy reader and writer.
#include "format/npy.hpp"

#include <array>
#include <cctype>
#include <fmt/format.h>

#include "format/atomic_file.hpp"

namespace loom::format {

namespace {

struct Descr {
  std::string_view descr;
  DType dtype;
  bool canonical;  // what write_npy emits
};

constexpr std::array<Descr, 12> kDescrs{{
    {"<f4", DType::f32, true},
    {"<f2", DType::f16, true},
    {"<f8", DType::f64, true},
    {"|i1", DType::i8, true},
    {"<i1", DType::i8, false},
    {"|u1", DType::u8, true},
    {"<u1", DType::u8, false},
    {"<i2", DType::i16, true},
    {"<i4", DType::i32, true},
    {"<i8", DType::i64, true},
    {"|b1", DType::boolean, true},
    {"<b1", DType::boolean, false},
}};

// A parser for the small Python literal numpy writes: a dict of str keys whose values
// are str, True/False, or a tuple of non-negative ints.
class DictParser {
 public:
  DictParser(std::string_view text, const std::string& file, uint64_t offset)
      : text_(text), file_(file), offset_(offset) {}

  [[noreturn]] void fail(const std::string& message) const {
    throw Error(ErrorCode::format, "npy header: " + message,
                {.file = file_, .offset = offset_ + pos_});
  }

  void skip_ws() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool consume(char c) {
    skip_ws();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  std::string string_literal() {
    skip_ws();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) fail("expected a string");
    const char quote = text_[pos_++];
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') fail("escapes are not expected in an npy header");
      out += text_[pos_++];
    }
    if (pos_ >= text_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }
  bool boolean() {
    skip_ws();
    for (auto [word, value] : {std::pair{std::string_view("True"), true}, {"False", false}}) {
      if (text_.substr(pos_).starts_with(word)) {
        pos_ += word.size();
        return value;
      }
    }
    fail("expected True or False");
  }
  std::vector<int64_t> int_tuple() {
    expect('(');
    std::vector<int64_t> out;
    while (true) {
      if (consume(')')) break;
      skip_ws();
      if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        fail("expected a non-negative integer in the shape");
      }
      int64_t v = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text_[pos_] - '0', &v)) {
          fail("shape entry overflows");
        }
        ++pos_;
      }
      // numpy 1.x on some platforms wrote longs as "3L".
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
      if (out.size() == static_cast<size_t>(Shape::kMaxRank)) {
        fail("shape has more than " + std::to_string(Shape::kMaxRank) + " dimensions");
      }
      out.push_back(v);
      if (consume(')')) break;
      expect(',');
    }
    return out;
  }
  bool at_end() {
    skip_ws();
    return pos_ == text_.size();
  }
  size_t position() const { return pos_; }

 private:
  std::string_view text_;
  const std::string& file_;
  uint64_t offset_;
  size_t pos_ = 0;
};

}  // namespace

std::optional<std::string_view> npy_descr(DType dtype) noexcept {
  for (const auto& d : kDescrs) {
    if (d.dtype == dtype && d.canonical) return d.descr;
  }
  return std::nullopt;
}

NpyHeader parse_npy(const ByteSource& source) {
  const std::string& file = source.name();
  Cursor cur(source);
  if (source.size() < 10) source.fail("file is too short for an .npy header", 0);
  std::array<std::byte, 6> magic{};
  cur.read_bytes(magic);
  if (as_chars(magic) != "\x93NUMPY") source.fail("bad magic: not an .npy file", 0);
  const uint8_t major = cur.read<uint8_t>();
  const uint8_t minor = cur.read<uint8_t>();
  uint64_t header_len = 0;
  if (major == 1) {
    header_len = cur.read<uint16_t>();
  } else if (major == 2 || major == 3) {
    header_len = cur.read<uint32_t>();
  } else {
    throw Error(ErrorCode::unsupported,
                "unknown .npy version " + std::to_string(major) + "." + std::to_string(minor),
                {.file = file, .offset = 6});
  }
  const uint64_t header_at = cur.position();
  const std::string text = cur.read_string(header_len, kNpyMaxHeader, "npy header");
  for (char c : text) {
    // v1/v2 headers are latin-1, v3 UTF-8; numpy only ever writes ASCII for the keys
    // and values loom accepts, so a NUL or control byte means corruption.
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') {
      source.fail("npy header contains a control character", header_at);
    }
  }

  DictParser p(text, file, header_at);
  std::optional<std::string> descr;
  std::optional<bool> fortran;
  std::optional<std::vector<int64_t>> dims;
  p.expect('{');
  while (!p.consume('}')) {
    const std::string key = p.string_literal();
    p.expect(':');
    if (key == "descr" && !descr) {
      p.skip_ws();
      if (p.consume('[')) {
        throw Error(ErrorCode::unsupported, "structured .npy dtypes are not supported",
                    {.file = file, .offset = header_at});
      }
      descr = p.string_literal();
    } else if (key == "fortran_order" && !fortran) {
      fortran = p.boolean();
    } else if (key == "shape" && !dims) {
      dims = p.int_tuple();
    } else {
      p.fail("unexpected or repeated key '" + key + "'");
    }
    if (p.consume('}')) break;
    p.expect(',');
  }
  if (!p.at_end()) p.fail("trailing characters after the header dict");
  if (!descr || !fortran || !dims) p.fail("header must have 'descr', 'fortran_order' and 'shape'");

  NpyHeader h;
  h.shape = Shape(std::span<const int64_t>(dims->data(), dims->size()));
  const Descr* found = nullptr;
  for (const auto& d : kDescrs) {
    if (d.descr == *descr) found = &d;
  }
  if (found == nullptr) {
    const bool big_endian = descr->starts_with('>');
    throw Error(ErrorCode::unsupported,
                big_endian ? "big-endian .npy dtype '" + *descr + "' is not supported; save little-endian"
                           : ".npy dtype '" + *descr + "' is not supported",
                {.file = file, .offset = header_at});
  }
  h.dtype = found->dtype;
  // For rank <= 1 Fortran and C order are the same bytes.
  if (*fortran && h.shape.rank() > 1) {
    throw Error(ErrorCode::unsupported,
                "Fortran-order .npy arrays are not supported; save with np.ascontiguousarray()",
                {.file = file, .offset = header_at});
  }
  h.data_offset = cur.position();
  h.nbytes = tensor_bytes_or_fail(h.dtype, h.shape, file, {});
  const uint64_t have = source.size() - h.data_offset;
  if (have != h.nbytes) {
    throw Error(ErrorCode::format,
                "array " + std::string(dtype_name(h.dtype)) + h.shape.to_string() + " needs " +
                    std::to_string(h.nbytes) + " bytes of data but the file holds " + std::to_string(have),
                {.file = file, .offset = h.data_offset});
  }
  return h;
}

}  // namespace loom::format

namespace loom {

void write_npy(const std::filesystem::path& path, const Tensor& tensor) {
  const std::string file = path.string();
  if (!tensor.defined()) throw Error(ErrorCode::invalid_argument, "tensor is undefined", {.file = file});
  const auto descr = format::npy_descr(tensor.dtype());
  if (!descr) {
    throw Error(ErrorCode::unsupported,
                ".npy cannot hold dtype " + std::string(dtype_name(tensor.dtype())), {.file = file});
  }
  std::string shape = "(";
  for (int64_t d : tensor.shape().dims()) shape += fmt::format("{}, ", d);
  if (tensor.shape().rank() > 0) shape.resize(shape.size() - 2);
  if (tensor.shape().rank() == 1) shape += ",";
  shape += ")";
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", *descr, shape);
  // Version 1 has a 16-bit header length; numpy pads the whole preamble to 64 bytes.
  const bool v1 = dict.size() + 1 + 10 <= 65535;
  const size_t preamble = v1 ? 10 : 12;
  const size_t total = (preamble + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - preamble - dict.size() - 1, ' ');
  dict += '\n';

  std::vector<std::byte> head;
  format::append_bytes(head, "\x93NUMPY");
  format::append_le<uint8_t>(head, v1 ? 1 : 2);
  format::append_le<uint8_t>(head, 0);
  if (v1) {
    format::append_le<uint16_t>(head, static_cast<uint16_t>(dict.size()));
  } else {
    format::append_le<uint32_t>(head, static_cast<uint32_t>(dict.size()));
  }
  format::append_bytes(head, dict);
  format::AtomicFile out(path);
  out.write(head);
  out.write_tensor(tensor, {});
  out.commit();
}

}  // namespace loom

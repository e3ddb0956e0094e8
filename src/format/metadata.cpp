// MetaValue and Metadata: typed key/value metadata of the external formats.
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "loom/error.hpp"
#include "loom/format.hpp"

namespace loom {

namespace {

using T = MetaValue::Type;

struct TypeInfo {
  T type;
  std::string_view name;
  bool is_unsigned;
  bool is_signed;
  bool is_float;
  // Range of the integer types (as the widest types).
  int64_t min;
  uint64_t max;
};

constexpr std::array<TypeInfo, 13> kTypes{{
    {T::u8, "u8", true, false, false, 0, UINT8_MAX},
    {T::i8, "i8", false, true, false, INT8_MIN, INT8_MAX},
    {T::u16, "u16", true, false, false, 0, UINT16_MAX},
    {T::i16, "i16", false, true, false, INT16_MIN, INT16_MAX},
    {T::u32, "u32", true, false, false, 0, UINT32_MAX},
    {T::i32, "i32", false, true, false, INT32_MIN, INT32_MAX},
    {T::u64, "u64", true, false, false, 0, UINT64_MAX},
    {T::i64, "i64", false, true, false, INT64_MIN, INT64_MAX},
    {T::f32, "f32", false, false, true, 0, 0},
    {T::f64, "f64", false, false, true, 0, 0},
    {T::boolean, "bool", false, false, false, 0, 0},
    {T::string, "string", false, false, false, 0, 0},
    {T::array, "array", false, false, false, 0, 0},
}};

constexpr bool types_in_enum_order() {
  for (size_t i = 0; i < kTypes.size(); ++i) {
    if (static_cast<size_t>(kTypes[i].type) != i) return false;
  }
  return true;
}
static_assert(types_in_enum_order());

const TypeInfo& info(T t) { return kTypes[static_cast<size_t>(t)]; }

[[noreturn]] void wrong_type(const MetaValue& v, std::string_view wanted) {
  throw Error(ErrorCode::format, "metadata value is " + std::string(meta_type_name(v.type())) +
                                     ", expected " + std::string(wanted));
}

}  // namespace

std::string_view meta_type_name(MetaValue::Type type) noexcept {
  const auto i = static_cast<size_t>(type);
  return i < kTypes.size() ? kTypes[i].name : std::string_view("unknown");
}

MetaValue MetaValue::of_uint(uint64_t v, Type t) {
  if (!info(t).is_unsigned) {
    throw Error(ErrorCode::invalid_argument,
                "of_uint needs an unsigned type, not " + std::string(meta_type_name(t)));
  }
  if (v > info(t).max) {
    throw Error(ErrorCode::invalid_argument, std::to_string(v) + " does not fit in " +
                                                 std::string(meta_type_name(t)));
  }
  MetaValue m;
  m.type_ = t;
  m.value_ = v;
  return m;
}

MetaValue MetaValue::of_int(int64_t v, Type t) {
  if (!info(t).is_signed) {
    throw Error(ErrorCode::invalid_argument,
                "of_int needs a signed type, not " + std::string(meta_type_name(t)));
  }
  if (v < info(t).min || (v > 0 && static_cast<uint64_t>(v) > info(t).max)) {
    throw Error(ErrorCode::invalid_argument, std::to_string(v) + " does not fit in " +
                                                 std::string(meta_type_name(t)));
  }
  MetaValue m;
  m.type_ = t;
  m.value_ = v;
  return m;
}

MetaValue MetaValue::of_float(double v, Type t) {
  if (!info(t).is_float) {
    throw Error(ErrorCode::invalid_argument,
                "of_float needs f32 or f64, not " + std::string(meta_type_name(t)));
  }
  MetaValue m;
  m.type_ = t;
  // An f32 value is kept exactly as the f32 it is.
  m.value_ = t == Type::f32 ? static_cast<double>(static_cast<float>(v)) : v;
  return m;
}

MetaValue MetaValue::of_bool(bool v) {
  MetaValue m;
  m.type_ = Type::boolean;
  m.value_ = v;
  return m;
}

MetaValue MetaValue::of_string(std::string v) {
  MetaValue m;
  m.type_ = Type::string;
  m.value_ = std::move(v);
  return m;
}

MetaValue MetaValue::of_array(const std::vector<MetaValue>& v, Type element_type) {
  ArrayBuilder b(element_type);
  b.reserve(v.size());
  for (const auto& e : v) b.push(e);
  return b.finish();
}

// ---- arrays ----

struct MetaArrayItems {
  std::string chars;              // string arrays: the items back to back
  std::vector<uint64_t> words;    // string arrays: each item's end in `chars`; numbers and
                                  // bools: the value's bits as the scalar holds them
  std::vector<MetaValue> nested;  // arrays of arrays
  friend bool operator==(const MetaArrayItems&, const MetaArrayItems&) = default;
};

MetaValue::ArrayBuilder::ArrayBuilder(Type element_type)
    : element_type_(element_type), items_(std::make_shared<MetaArrayItems>()) {}
MetaValue::ArrayBuilder::ArrayBuilder(ArrayBuilder&&) noexcept = default;
MetaValue::ArrayBuilder& MetaValue::ArrayBuilder::operator=(ArrayBuilder&&) noexcept = default;
MetaValue::ArrayBuilder::~ArrayBuilder() = default;

void MetaValue::ArrayBuilder::reserve(size_t items) {
  if (element_type_ == Type::array) {
    items_->nested.reserve(items);
  } else {
    items_->words.reserve(items);
  }
}

void MetaValue::ArrayBuilder::push(const MetaValue& item) {
  if (item.type() != element_type_) {
    throw Error(ErrorCode::invalid_argument, "array of " + std::string(meta_type_name(element_type_)) +
                                                 " holds a " + std::string(meta_type_name(item.type())));
  }
  const auto& ti = info(element_type_);
  if (ti.is_signed) {
    items_->words.push_back(std::bit_cast<uint64_t>(std::get<int64_t>(item.value_)));
  } else if (ti.is_unsigned) {
    items_->words.push_back(std::get<uint64_t>(item.value_));
  } else if (ti.is_float) {
    items_->words.push_back(std::bit_cast<uint64_t>(std::get<double>(item.value_)));
  } else if (element_type_ == Type::boolean) {
    items_->words.push_back(std::get<bool>(item.value_) ? 1 : 0);
  } else if (element_type_ == Type::string) {
    const std::string& text = std::get<std::string>(item.value_);
    std::copy(text.begin(), text.end(), push_string(text.size()));
  } else {
    items_->nested.push_back(item);
  }
}

char* MetaValue::ArrayBuilder::push_string(size_t length) {
  if (element_type_ != Type::string) {
    throw Error(ErrorCode::invalid_argument,
                "array of " + std::string(meta_type_name(element_type_)) + " holds a string");
  }
  std::string& chars = items_->chars;
  const size_t at = chars.size();
  chars.resize(at + length);
  items_->words.push_back(chars.size());
  return chars.data() + at;
}

MetaValue MetaValue::ArrayBuilder::finish() {
  MetaValue m;
  m.type_ = Type::array;
  m.element_type_ = element_type_;
  m.value_ = std::shared_ptr<const MetaArrayItems>(std::exchange(items_, std::make_shared<MetaArrayItems>()));
  return m;
}

const MetaArrayItems& MetaValue::items() const {
  if (type_ != Type::array) wrong_type(*this, "array");
  return *std::get<std::shared_ptr<const MetaArrayItems>>(value_);
}

size_t MetaValue::array_size() const {
  const MetaArrayItems& it = items();
  return element_type_ == Type::array ? it.nested.size() : it.words.size();
}

namespace {
void check_index(size_t i, size_t size) {
  if (i >= size) {
    throw Error(ErrorCode::invalid_argument,
                "array item " + std::to_string(i) + " of " + std::to_string(size) + " items");
  }
}
}  // namespace

std::string_view MetaValue::string_item(size_t i) const {
  const MetaArrayItems& it = items();
  if (element_type_ != Type::string) {
    throw Error(ErrorCode::format, "metadata value is an array of " +
                                       std::string(meta_type_name(element_type_)) + ", expected strings");
  }
  check_index(i, it.words.size());
  const uint64_t begin = i == 0 ? 0 : it.words[i - 1];
  return std::string_view(it.chars).substr(begin, it.words[i] - begin);
}

MetaValue MetaValue::array_item(size_t i) const {
  const MetaArrayItems& it = items();
  check_index(i, array_size());
  if (element_type_ == Type::array) return it.nested[i];
  MetaValue m;
  m.type_ = element_type_;
  const uint64_t w = it.words[i];
  const auto& ti = info(element_type_);
  if (ti.is_signed) {
    m.value_ = std::bit_cast<int64_t>(w);
  } else if (ti.is_unsigned) {
    m.value_ = w;
  } else if (ti.is_float) {
    m.value_ = std::bit_cast<double>(w);
  } else if (element_type_ == Type::boolean) {
    m.value_ = w != 0;
  } else {
    m.value_ = std::string(string_item(i));
  }
  return m;
}

bool MetaValue::is_integer() const noexcept {
  return info(type_).is_signed || info(type_).is_unsigned;
}

bool MetaValue::is_number() const noexcept { return is_integer() || info(type_).is_float; }

int64_t MetaValue::as_int() const {
  if (info(type_).is_signed) return std::get<int64_t>(value_);
  if (info(type_).is_unsigned) {
    const uint64_t v = std::get<uint64_t>(value_);
    if (v > static_cast<uint64_t>(INT64_MAX)) wrong_type(*this, "an integer that fits in i64");
    return static_cast<int64_t>(v);
  }
  wrong_type(*this, "an integer");
}

uint64_t MetaValue::as_uint() const {
  if (info(type_).is_unsigned) return std::get<uint64_t>(value_);
  if (info(type_).is_signed) {
    const int64_t v = std::get<int64_t>(value_);
    if (v < 0) wrong_type(*this, "a non-negative integer");
    return static_cast<uint64_t>(v);
  }
  wrong_type(*this, "an unsigned integer");
}

double MetaValue::as_double() const {
  if (info(type_).is_float) return std::get<double>(value_);
  if (info(type_).is_signed) return static_cast<double>(std::get<int64_t>(value_));
  if (info(type_).is_unsigned) return static_cast<double>(std::get<uint64_t>(value_));
  wrong_type(*this, "a number");
}

bool MetaValue::as_bool() const {
  if (type_ != Type::boolean) wrong_type(*this, "bool");
  return std::get<bool>(value_);
}

const std::string& MetaValue::as_string() const {
  if (type_ != Type::string) wrong_type(*this, "string");
  return std::get<std::string>(value_);
}

std::string MetaValue::to_display_string(size_t max_array_items) const {
  const auto& ti = info(type_);
  if (ti.is_signed) return std::to_string(std::get<int64_t>(value_));
  if (ti.is_unsigned) return std::to_string(std::get<uint64_t>(value_));
  if (ti.is_float) return fmt::format("{}", std::get<double>(value_));
  switch (type_) {
    case Type::boolean: return std::get<bool>(value_) ? "true" : "false";
    case Type::string: {
      // Quoted, with control characters escaped so a display line stays one line.
      std::string out = "\"";
      for (char c : std::get<std::string>(value_)) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
          out += '\\';
          out += c;
        } else if (u < 0x20) {
          out += fmt::format("\\x{:02x}", u);
        } else {
          out += c;
        }
      }
      return out + "\"";
    }
    case Type::array: {
      const size_t n = array_size();
      std::string out = "[";
      for (size_t i = 0; i < n && i < max_array_items; ++i) {
        if (i) out += ", ";
        out += array_item(i).to_display_string(max_array_items);
      }
      if (n > max_array_items) out += fmt::format(", ... ({} {} items)", n, meta_type_name(element_type_));
      return out + "]";
    }
    default: return "?";
  }
}

bool operator==(const MetaValue& a, const MetaValue& b) noexcept {
  if (a.type_ != b.type_) return false;
  if (a.type_ == MetaValue::Type::array) {
    if (a.element_type_ != b.element_type_) return false;
    const auto& ia = std::get<std::shared_ptr<const MetaArrayItems>>(a.value_);
    const auto& ib = std::get<std::shared_ptr<const MetaArrayItems>>(b.value_);
    return ia == ib || *ia == *ib;  // float items compare as their bits, like scalars
  }
  if (info(a.type_).is_float) {
    return std::bit_cast<uint64_t>(std::get<double>(a.value_)) ==
           std::bit_cast<uint64_t>(std::get<double>(b.value_));
  }
  return a.value_ == b.value_;
}

const MetaValue* Metadata::find(std::string_view key) const noexcept {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Metadata::set(std::string key, MetaValue value) {
  if (auto it = index_.find(key); it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

bool Metadata::erase(std::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  const size_t pos = it->second;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(pos));
  index_.erase(it);
  for (auto& [k, i] : index_) {
    if (i > pos) --i;
  }
  return true;
}

std::string_view format_kind_name(FormatKind kind) noexcept {
  switch (kind) {
    case FormatKind::safetensors: return "safetensors";
    case FormatKind::gguf: return "gguf";
    case FormatKind::torch: return "torch";
    case FormatKind::npy: return "npy";
    case FormatKind::pack: return "pack";
    case FormatKind::llama2c: return "llama2c";
  }
  return "unknown";
}

}  // namespace loom

// The restricted unpickler for torch.save's data.pkl.
#include "format/torch_pickle.hpp"

#include <array>
#include <bit>
#include <cstring>
#include <fmt/format.h>
#include <optional>
#include <set>
#include <unordered_map>

#include "format/byte_source.hpp"
#include "loom/error.hpp"

namespace loom::format {

namespace {

// ---- The allow-list ----

enum class GlobalId : uint8_t {
  ordered_dict,
  rebuild_tensor_v2,
  rebuild_parameter,
  rebuild_parameter_with_state,
  storage_class,
};

struct AllowedGlobal {
  std::string_view module;
  std::string_view name;
  GlobalId id;
  std::optional<DType> dtype;  // storage classes: nullopt = known but unsupported
};

constexpr std::array<AllowedGlobal, 26> kAllowed{{
    {"collections", "OrderedDict", GlobalId::ordered_dict, std::nullopt},
    {"torch._utils", "_rebuild_tensor_v2", GlobalId::rebuild_tensor_v2, std::nullopt},
    {"torch._utils", "_rebuild_parameter", GlobalId::rebuild_parameter, std::nullopt},
    {"torch._utils", "_rebuild_parameter_with_state", GlobalId::rebuild_parameter_with_state,
     std::nullopt},
    {"torch", "FloatStorage", GlobalId::storage_class, DType::f32},
    {"torch", "HalfStorage", GlobalId::storage_class, DType::f16},
    {"torch", "BFloat16Storage", GlobalId::storage_class, DType::bf16},
    {"torch", "DoubleStorage", GlobalId::storage_class, DType::f64},
    {"torch", "LongStorage", GlobalId::storage_class, DType::i64},
    {"torch", "IntStorage", GlobalId::storage_class, DType::i32},
    {"torch", "ShortStorage", GlobalId::storage_class, DType::i16},
    {"torch", "CharStorage", GlobalId::storage_class, DType::i8},
    {"torch", "ByteStorage", GlobalId::storage_class, DType::u8},
    {"torch", "BoolStorage", GlobalId::storage_class, DType::boolean},
    {"torch", "Float8_e4m3fnStorage", GlobalId::storage_class, DType::f8_e4m3},
    {"torch", "Float8_e5m2Storage", GlobalId::storage_class, DType::f8_e5m2},
    // Storage classes torch has that loom has no dtype for: named, then refused.
    {"torch", "ComplexFloatStorage", GlobalId::storage_class, std::nullopt},
    {"torch", "ComplexDoubleStorage", GlobalId::storage_class, std::nullopt},
    {"torch", "QInt8Storage", GlobalId::storage_class, std::nullopt},
    {"torch", "QUInt8Storage", GlobalId::storage_class, std::nullopt},
    {"torch", "QInt32Storage", GlobalId::storage_class, std::nullopt},
    {"torch", "QUInt4x2Storage", GlobalId::storage_class, std::nullopt},
    {"torch", "UInt16Storage", GlobalId::storage_class, std::nullopt},
    {"torch", "UInt32Storage", GlobalId::storage_class, std::nullopt},
    {"torch", "UInt64Storage", GlobalId::storage_class, std::nullopt},
    {"torch", "UntypedStorage", GlobalId::storage_class, std::nullopt},
}};

// ---- Opcode names, for messages ----

struct OpName {
  uint8_t code;
  std::string_view name;
};
constexpr std::array<OpName, 68> kOpNames{{
    {'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"},
    {'F', "FLOAT"}, {'I', "INT"}, {'J', "BININT"}, {'K', "BININT1"}, {'L', "LONG"},
    {'M', "BININT2"}, {'N', "NONE"}, {'P', "PERSID"}, {'Q', "BINPERSID"}, {'R', "REDUCE"},
    {'S', "STRING"}, {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"}, {'V', "UNICODE"},
    {'X', "BINUNICODE"}, {'a', "APPEND"}, {'b', "BUILD"}, {'c', "GLOBAL"}, {'d', "DICT"},
    {'}', "EMPTY_DICT"}, {'e', "APPENDS"}, {'g', "GET"}, {'h', "BINGET"}, {'i', "INST"},
    {'j', "LONG_BINGET"}, {'l', "LIST"}, {']', "EMPTY_LIST"}, {'o', "OBJ"}, {'p', "PUT"},
    {'q', "BINPUT"}, {'r', "LONG_BINPUT"}, {'s', "SETITEM"}, {'t', "TUPLE"}, {')', "EMPTY_TUPLE"},
    {'u', "SETITEMS"}, {'G', "BINFLOAT"}, {0x80, "PROTO"}, {0x81, "NEWOBJ"}, {0x82, "EXT1"},
    {0x83, "EXT2"}, {0x84, "EXT4"}, {0x85, "TUPLE1"}, {0x86, "TUPLE2"}, {0x87, "TUPLE3"},
    {0x88, "NEWTRUE"}, {0x89, "NEWFALSE"}, {0x8a, "LONG1"}, {0x8b, "LONG4"}, {'B', "BINBYTES"},
    {'C', "SHORT_BINBYTES"}, {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"},
    {0x8e, "BINBYTES8"}, {0x8f, "EMPTY_SET"}, {0x90, "ADDITEMS"}, {0x91, "FROZENSET"},
    {0x92, "NEWOBJ_EX"}, {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"}, {0x95, "FRAME"},
    {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"},
}};

std::string op_label(uint8_t code) {
  for (const auto& op : kOpNames) {
    if (op.code == code) return fmt::format("{} (0x{:02x})", op.name, code);
  }
  return fmt::format("unknown opcode 0x{:02x}", code);
}

// ---- The object model ----

enum class Kind : uint8_t {
  none, boolean, integer, floating, string, bytes, tuple, list, dict, global, storage, tensor
};

std::string_view kind_name(Kind k) {
  constexpr std::array<std::string_view, 12> names{"None", "bool", "int", "float", "str", "bytes",
                                                   "tuple", "list", "dict", "global", "storage",
                                                   "tensor"};
  return names[static_cast<size_t>(k)];
}

using Id = uint32_t;

struct Obj {
  Kind kind = Kind::none;
  uint32_t depth = 0;   // containers: nesting depth of what they hold
  int64_t value = 0;    // bool/int value; global: kAllowed index; storage/tensor: index
  double real = 0;
  std::string text;        // str, bytes
  std::vector<Id> items;   // tuple, list; dict: key, value, key, value, ...
};

struct TensorObj {
  size_t storage;
  uint64_t storage_offset;
  Shape shape;
  Strides strides;
};

class Unpickler {
 public:
  Unpickler(std::span<const std::byte> data, const std::string& file, uint64_t base,
            const UnpickleLimits& limits)
      : data_(data), file_(file), base_(base), limits_(limits) {}

  TorchStateDict run() {
    while (true) {
      op_at_ = pos_;
      const uint8_t op = byte();
      if (op == '.') break;
      step(op);
    }
    if (stack_.empty()) fail("STOP with an empty stack");
    return extract(stack_.back());
  }

 private:
  // ---- errors and reading ----

  [[noreturn]] void fail(const std::string& message) const {
    throw Error(ErrorCode::format, "data.pkl: " + message, {.file = file_, .offset = base_ + op_at_});
  }

  // The opcode being executed, for messages.
  std::string current_op() const {
    return op_at_ < data_.size() ? op_label(static_cast<uint8_t>(data_[op_at_])) : std::string("the next opcode");
  }
  void need(uint64_t n) const {
    if (n > data_.size() - pos_) {
      if (op_at_ >= data_.size()) fail("pickle ends without STOP");
      fail("pickle ends inside " + current_op() + " (needs " + std::to_string(n) + " more bytes)");
    }
  }
  uint8_t byte() {
    need(1);
    return static_cast<uint8_t>(data_[pos_++]);
  }
  template <typename T>
  T le() {
    need(sizeof(T));
    T v = load_le<T>(data_.data() + pos_);
    pos_ += sizeof(T);
    return v;
  }
  std::string bytes_of(uint64_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(data_.data() + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }
  std::string line(size_t limit) {
    for (size_t i = pos_; i < data_.size() && i - pos_ <= limit; ++i) {
      if (data_[i] == std::byte{'\n'}) {
        std::string s(reinterpret_cast<const char*>(data_.data() + pos_), i - pos_);
        pos_ = i + 1;
        return s;
      }
    }
    fail("GLOBAL name is unterminated or longer than " + std::to_string(limit) + " bytes");
  }

  // ---- objects, stack, memo ----

  Id make(Obj o) {
    if (objects_.size() >= limits_.max_objects) {
      fail("pickle creates more than " + std::to_string(limits_.max_objects) + " objects (pickle bomb?)");
    }
    objects_.push_back(std::move(o));
    return static_cast<Id>(objects_.size() - 1);
  }
  Id make_container(Kind kind, std::vector<Id> items) {
    uint32_t depth = 1;
    for (Id i : items) depth = std::max(depth, objects_[i].depth + 1);
    check_depth(depth);
    return make(Obj{.kind = kind, .depth = depth, .items = std::move(items)});
  }
  void check_depth(uint32_t depth) const {
    if (depth > limits_.max_depth) {
      fail("containers nested deeper than " + std::to_string(limits_.max_depth) + " (pickle bomb?)");
    }
  }
  void push(Id id) {
    if (stack_.size() >= limits_.max_stack) {
      fail("stack grows past " + std::to_string(limits_.max_stack) + " entries (pickle bomb?)");
    }
    stack_.push_back(id);
  }
  Id pop() {
    if (stack_.size() <= floor()) fail(current_op() + " on an empty stack");
    const Id id = stack_.back();
    stack_.pop_back();
    return id;
  }
  Id top() const {
    if (stack_.size() <= floor()) fail(current_op() + " on an empty stack");
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<Id> pop_mark() {
    if (marks_.empty()) fail(current_op() + " without a MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Id> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  void memo_put(uint64_t index) {
    const Id id = top();
    auto it = memo_.find(index);
    if (it != memo_.end()) {
      it->second = id;
      return;
    }
    if (memo_.size() >= limits_.max_memo) {
      fail("memo grows past " + std::to_string(limits_.max_memo) + " entries (pickle bomb?)");
    }
    memo_.emplace(index, id);
  }
  void memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo index " + std::to_string(index) + " was never stored");
    push(it->second);
  }

  const Obj& obj(Id id) const { return objects_[id]; }
  Obj& expect(Id id, Kind kind, const char* what) {
    if (objects_[id].kind != kind) {
      fail(std::string(what) + " must be a " + std::string(kind_name(kind)) + ", found a " +
           std::string(kind_name(objects_[id].kind)));
    }
    return objects_[id];
  }
  int64_t expect_int(Id id, const char* what) { return expect(id, Kind::integer, what).value; }
  uint64_t expect_count(Id id, const char* what) {
    const int64_t v = expect_int(id, what);
    if (v < 0) fail(std::string(what) + " is negative");
    return static_cast<uint64_t>(v);
  }

  // Appends to a container and keeps its depth up to date.
  void add_items(Id target, std::span<const Id> items) {
    uint32_t depth = objects_[target].depth;
    for (Id i : items) depth = std::max(depth, objects_[i].depth + 1);
    check_depth(depth);
    objects_[target].depth = depth;
    objects_[target].items.insert(objects_[target].items.end(), items.begin(), items.end());
  }

  // ---- the opcodes ----

  void push_int(int64_t v) { push(make(Obj{.kind = Kind::integer, .value = v})); }
  void push_text(Kind kind, uint64_t length) {
    push(make(Obj{.kind = kind, .text = bytes_of(length)}));
  }
  void push_long(uint64_t n) {
    if (n > 8) fail("integer of " + std::to_string(n) + " bytes does not fit in 64 bits");
    need(n);
    uint64_t v = 0;
    for (uint64_t i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(data_[pos_ + i])} << (8 * i);
    if (n > 0 && n < 8 && (static_cast<uint8_t>(data_[pos_ + n - 1]) & 0x80)) {
      v |= ~uint64_t{0} << (8 * n);  // sign-extend
    }
    pos_ += n;
    push_int(static_cast<int64_t>(v));
  }

  void step(uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t proto = byte();
        if (proto > 5) fail("unknown pickle protocol " + std::to_string(proto));
        return;
      }
      case 0x95:  // FRAME: a length hint for buffered readers; the data is inline
        (void)le<uint64_t>();
        return;
      case '(':  // MARK
        if (marks_.size() >= limits_.max_stack) fail("too many MARKs (pickle bomb?)");
        marks_.push_back(stack_.size());
        return;
      case '0':  // POP
        if (!marks_.empty() && stack_.size() == marks_.back()) {
          marks_.pop_back();
        } else {
          (void)pop();
        }
        return;
      case '1': (void)pop_mark(); return;  // POP_MARK
      case '2': push(top()); return;       // DUP
      case 'N': push(make(Obj{.kind = Kind::none})); return;
      case 0x88: push(make(Obj{.kind = Kind::boolean, .value = 1})); return;  // NEWTRUE
      case 0x89: push(make(Obj{.kind = Kind::boolean, .value = 0})); return;  // NEWFALSE
      case 'J': push_int(le<int32_t>()); return;                              // BININT
      case 'K': push_int(le<uint8_t>()); return;                              // BININT1
      case 'M': push_int(le<uint16_t>()); return;                             // BININT2
      case 0x8a: push_long(byte()); return;                                   // LONG1
      case 0x8b: push_long(le<uint32_t>()); return;                           // LONG4
      case 'G': {  // BINFLOAT: big-endian double
        need(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = bits << 8 | static_cast<uint8_t>(data_[pos_ + i]);
        pos_ += 8;
        push(make(Obj{.kind = Kind::floating, .real = std::bit_cast<double>(bits)}));
        return;
      }
      case 'X': push_text(Kind::string, le<uint32_t>()); return;     // BINUNICODE
      case 0x8c: push_text(Kind::string, byte()); return;            // SHORT_BINUNICODE
      case 0x8d: push_text(Kind::string, le<uint64_t>()); return;    // BINUNICODE8
      case 'U': push_text(Kind::string, byte()); return;             // SHORT_BINSTRING
      case 'T': {                                                    // BINSTRING
        const int32_t n = le<int32_t>();
        if (n < 0) fail("BINSTRING with negative length");
        push_text(Kind::string, static_cast<uint64_t>(n));
        return;
      }
      case 'B': push_text(Kind::bytes, le<uint32_t>()); return;      // BINBYTES
      case 'C': push_text(Kind::bytes, byte()); return;              // SHORT_BINBYTES
      case 0x8e: push_text(Kind::bytes, le<uint64_t>()); return;     // BINBYTES8
      case ')': push(make_container(Kind::tuple, {})); return;       // EMPTY_TUPLE
      case 't': push(make_container(Kind::tuple, pop_mark())); return;  // TUPLE
      case 0x85: case 0x86: case 0x87: {                             // TUPLE1..3
        std::vector<Id> items(static_cast<size_t>(op - 0x84));
        for (size_t i = items.size(); i-- > 0;) items[i] = pop();
        push(make_container(Kind::tuple, std::move(items)));
        return;
      }
      case ']': push(make_container(Kind::list, {})); return;        // EMPTY_LIST
      case 'l': push(make_container(Kind::list, pop_mark())); return;  // LIST
      case 'a': {                                                    // APPEND
        const Id v = pop();
        const Id list = top();
        expect(list, Kind::list, "APPEND target");
        add_items(list, std::span<const Id>(&v, 1));
        return;
      }
      case 'e': {  // APPENDS
        const auto items = pop_mark();
        const Id list = top();
        expect(list, Kind::list, "APPENDS target");
        add_items(list, items);
        return;
      }
      case '}': push(make_container(Kind::dict, {})); return;        // EMPTY_DICT
      case 'd': {                                                    // DICT
        auto items = pop_mark();
        if (items.size() % 2) fail("DICT with an odd number of items");
        push(make_container(Kind::dict, std::move(items)));
        return;
      }
      case 's': {  // SETITEM
        const Id v = pop();
        const Id k = pop();
        const Id dict = top();
        expect(dict, Kind::dict, "SETITEM target");
        const std::array<Id, 2> kv{k, v};
        add_items(dict, kv);
        return;
      }
      case 'u': {  // SETITEMS
        const auto items = pop_mark();
        if (items.size() % 2) fail("SETITEMS with an odd number of items");
        const Id dict = top();
        expect(dict, Kind::dict, "SETITEMS target");
        add_items(dict, items);
        return;
      }
      case 'q': memo_put(byte()); return;                // BINPUT
      case 'r': memo_put(le<uint32_t>()); return;        // LONG_BINPUT
      case 0x94: memo_put(memo_.size()); return;         // MEMOIZE
      case 'h': memo_get(byte()); return;                // BINGET
      case 'j': memo_get(le<uint32_t>()); return;        // LONG_BINGET
      case 'c': {                                        // GLOBAL
        std::string module = line(256);
        std::string name = line(256);
        push_global(module, name);
        return;
      }
      case 0x93: {  // STACK_GLOBAL
        const Id name = pop();
        const Id module = pop();
        push_global(expect(module, Kind::string, "STACK_GLOBAL module").text,
                    expect(name, Kind::string, "STACK_GLOBAL name").text);
        return;
      }
      case 'Q': persistent_load(); return;  // BINPERSID
      case 'R': reduce(); return;           // REDUCE
      case 'b': build(); return;            // BUILD
      default:
        // INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT1/2/4 build arbitrary objects; the text
        // protocol-0 opcodes and sets never occur in a torch.save state dict.
        fail("pickle opcode " + op_label(op) + " is not allowed in a torch state dict");
    }
  }

  void push_global(const std::string& module, const std::string& name) {
    for (size_t i = 0; i < kAllowed.size(); ++i) {
      if (kAllowed[i].module == module && kAllowed[i].name == name) {
        push(make(Obj{.kind = Kind::global, .value = static_cast<int64_t>(i)}));
        return;
      }
    }
    fail("pickle refers to global '" + module + "." + name +
         "', which is not on the allow-list (loom reads torch state dicts only and executes nothing)");
  }

  std::string global_name(const Obj& g) const {
    const auto& a = kAllowed[static_cast<size_t>(g.value)];
    return std::string(a.module) + "." + std::string(a.name);
  }

  void persistent_load() {
    const Id pid = pop();
    const Obj& t = expect(pid, Kind::tuple, "persistent id");
    if (t.items.size() != 5) fail("persistent id must be a 5-tuple ('storage', type, key, location, numel)");
    const std::array<Id, 5> f{t.items[0], t.items[1], t.items[2], t.items[3], t.items[4]};
    if (expect(f[0], Kind::string, "persistent id tag").text != "storage") {
      fail("persistent id tag must be 'storage'");
    }
    const Obj& type = expect(f[1], Kind::global, "storage type");
    const auto& allowed = kAllowed[static_cast<size_t>(type.value)];
    if (allowed.id != GlobalId::storage_class) fail("storage type must be a torch storage class");
    if (!allowed.dtype) {
      throw Error(ErrorCode::unsupported,
                  "data.pkl: tensor storage type " + global_name(type) + " is not supported by loom",
                  {.file = file_, .offset = base_ + op_at_});
    }
    const std::string& key = expect(f[2], Kind::string, "storage key").text;
    (void)expect(f[3], Kind::string, "storage location");
    const uint64_t numel = expect_count(f[4], "storage size");
    size_t index = 0;
    if (auto it = storage_by_key_.find(key); it != storage_by_key_.end()) {
      index = it->second;
      const TorchStorage& s = result_.storages[index];
      if (s.dtype != *allowed.dtype || s.numel != numel) {
        fail("storage '" + key + "' is referenced with different types or sizes");
      }
    } else {
      index = result_.storages.size();
      storage_by_key_.emplace(key, index);
      result_.storages.push_back(TorchStorage{key, std::string(allowed.name), *allowed.dtype, numel});
    }
    push(make(Obj{.kind = Kind::storage, .value = static_cast<int64_t>(index)}));
  }

  std::vector<int64_t> int_tuple(Id id, const char* what) {
    const Obj& t = obj(id);
    if (t.kind != Kind::tuple && t.kind != Kind::list) {
      fail(std::string(what) + " must be a tuple of ints, found a " + std::string(kind_name(t.kind)));
    }
    if (t.items.size() > static_cast<size_t>(Shape::kMaxRank)) {
      fail(std::string(what) + " has " + std::to_string(t.items.size()) + " dimensions (at most " +
           std::to_string(Shape::kMaxRank) + ")");
    }
    std::vector<int64_t> out;
    for (Id i : t.items) out.push_back(static_cast<int64_t>(expect_count(i, what)));
    return out;
  }

  Id rebuild_tensor(const std::vector<Id>& args) {
    if (args.size() != 6 && args.size() != 7) {
      fail("_rebuild_tensor_v2 takes 6 or 7 arguments, got " + std::to_string(args.size()));
    }
    const Obj& storage = expect(args[0], Kind::storage, "_rebuild_tensor_v2 storage");
    TensorObj t{};
    t.storage = static_cast<size_t>(storage.value);
    t.storage_offset = expect_count(args[1], "storage offset");
    const auto size = int_tuple(args[2], "tensor size");
    const auto stride = int_tuple(args[3], "tensor stride");
    if (size.size() != stride.size()) fail("tensor size and stride have different ranks");
    (void)expect(args[4], Kind::boolean, "requires_grad");
    t.shape = Shape(std::span<const int64_t>(size.data(), size.size()));
    t.strides.rank = static_cast<int>(stride.size());
    for (size_t i = 0; i < stride.size(); ++i) t.strides.values[i] = stride[i];
    tensors_.push_back(t);
    return make(Obj{.kind = Kind::tensor, .value = static_cast<int64_t>(tensors_.size() - 1)});
  }

  void reduce() {
    const Id args_id = pop();
    const Id callable = pop();
    const Obj& g = expect(callable, Kind::global, "REDUCE callable");
    const std::vector<Id> args = expect(args_id, Kind::tuple, "REDUCE arguments").items;
    switch (kAllowed[static_cast<size_t>(g.value)].id) {
      case GlobalId::ordered_dict:
        if (!args.empty()) fail("collections.OrderedDict is only rebuilt empty (then filled by SETITEMS)");
        push(make_container(Kind::dict, {}));
        return;
      case GlobalId::rebuild_tensor_v2: push(rebuild_tensor(args)); return;
      case GlobalId::rebuild_parameter:
      case GlobalId::rebuild_parameter_with_state: {
        const size_t want = kAllowed[static_cast<size_t>(g.value)].id == GlobalId::rebuild_parameter ? 3 : 4;
        if (args.size() != want) {
          fail(global_name(g) + " takes " + std::to_string(want) + " arguments, got " + std::to_string(args.size()));
        }
        (void)expect(args[0], Kind::tensor, "parameter data");
        (void)expect(args[1], Kind::boolean, "requires_grad");
        push(args[0]);  // a Parameter is its tensor
        return;
      }
      case GlobalId::storage_class:
        fail("storage class " + global_name(g) + " may only appear in a persistent id");
    }
  }

  void build() {
    const Id state = pop();
    const Id target = top();
    // OrderedDict state dicts carry a `_metadata` attribute (module versions), set by
    // BUILD; it has no bearing on the weights and is ignored.
    const Kind k = obj(target).kind;
    if (k != Kind::dict && k != Kind::tensor) {
      fail("BUILD on a " + std::string(kind_name(k)) + " is not allowed");
    }
    const Kind s = obj(state).kind;
    if (s != Kind::dict && s != Kind::none && s != Kind::tuple) {
      fail("BUILD state must be a dict, found a " + std::string(kind_name(s)));
    }
  }

  TorchStateDict extract(Id root) {
    const Obj& dict = obj(root);
    if (dict.kind != Kind::dict) {
      fail("data.pkl holds a " + std::string(kind_name(dict.kind)) + ", not a state dict");
    }
    std::set<std::string_view> names;
    for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
      const Obj& key = obj(dict.items[i]);
      const Obj& value = obj(dict.items[i + 1]);
      if (key.kind != Kind::string) fail("state dict key is a " + std::string(kind_name(key.kind)) + ", not a str");
      if (value.kind != Kind::tensor) {
        throw Error(ErrorCode::format,
                    "data.pkl: state dict value is a " + std::string(kind_name(value.kind)) +
                        ", not a tensor (is this a training checkpoint rather than a state dict?)",
                    {.file = file_, .tensor = key.text});
      }
      if (!names.insert(key.text).second) {
        throw Error(ErrorCode::format, "data.pkl: duplicate state dict key", {.file = file_, .tensor = key.text});
      }
      const TensorObj& t = tensors_[static_cast<size_t>(value.value)];
      result_.tensors.push_back(
          TorchTensor{key.text, t.storage, t.storage_offset, t.shape, t.strides});
    }
    return std::move(result_);
  }

  std::span<const std::byte> data_;
  const std::string& file_;
  uint64_t base_;
  const UnpickleLimits& limits_;
  size_t pos_ = 0;
  size_t op_at_ = 0;
  std::vector<Obj> objects_;
  std::vector<Id> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Id> memo_;
  std::vector<TensorObj> tensors_;
  std::unordered_map<std::string, size_t> storage_by_key_;
  TorchStateDict result_;
};

}  // namespace

TorchStateDict unpickle_torch_state_dict(std::span<const std::byte> pickle, const std::string& file,
                                         uint64_t base_offset, const UnpickleLimits& limits) {
  return Unpickler(pickle, file, base_offset, limits).run();
}

}  // namespace loom::format

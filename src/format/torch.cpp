// torch.save zip archives: the zip directory plus the unpickled state dict.
#include "format/torch.hpp"

#include "format/crc32.hpp"
#include "format/zip.hpp"

namespace loom::format {

namespace {

// True when the strides are those of a contiguous row-major tensor. Like torch, the
// stride of a dimension of extent 1 does not matter.
bool is_contiguous(const Shape& shape, const Strides& strides) {
  int64_t expected = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

}  // namespace

bool looks_like_legacy_torch(std::span<const std::byte> head) noexcept {
  // The legacy format is a pickle stream: PROTO 2 (torch's default) and up.
  return head.size() >= 2 && head[0] == std::byte{0x80} && static_cast<uint8_t>(head[1]) >= 2 &&
         static_cast<uint8_t>(head[1]) <= 5;
}

ParsedWeights parse_torch(const ByteSource& source, const UnpickleLimits& limits) {
  const std::string& file = source.name();
  {
    std::array<std::byte, 2> head{};
    if (source.size() >= 2) source.read(0, head);
    if (looks_like_legacy_torch(head)) {
      throw Error(ErrorCode::unsupported,
                  "unsupported: legacy torch format, re-save with torch>=1.6 or convert to safetensors",
                  {.file = file, .offset = 0});
    }
  }
  const ZipDirectory zip = read_zip_directory(source);

  // The pickle is `<archive>/data.pkl`; every other entry the archive uses is named
  // relative to the same `<archive>/` folder (torch names it after the file, or
  // "archive" in newer versions).
  const ZipEntry* pkl = nullptr;
  for (const auto& e : zip.entries) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && slash > 0 && e.name.substr(slash) == "/data.pkl") {
      if (pkl != nullptr) {
        throw Error(ErrorCode::format, "zip archive holds more than one */data.pkl", {.file = file});
      }
      pkl = &e;
    }
  }
  if (pkl == nullptr) {
    throw Error(ErrorCode::format,
                "zip archive has no <archive>/data.pkl: not a torch.save file", {.file = file});
  }
  const std::string prefix = pkl->name.substr(0, pkl->name.size() - std::string_view("data.pkl").size());

  if (const ZipEntry* order = zip.find(prefix + "byteorder")) {
    if (order->is_stored() && order->uncompressed_size <= 16) {
      std::string text(static_cast<size_t>(order->uncompressed_size), '\0');
      source.read(order->data_offset, std::as_writable_bytes(std::span<char>(text.data(), text.size())));
      if (text != "little") {
        throw Error(ErrorCode::unsupported,
                    "torch archive byte order is '" + text + "'; only little-endian is supported",
                    {.file = file, .offset = order->data_offset});
      }
    }
  }

  if (!pkl->is_stored()) {
    throw Error(ErrorCode::unsupported,
                "data.pkl is compressed (zip method " + std::to_string(pkl->method) +
                    "); torch.save writes stored entries — was the archive re-zipped?",
                {.file = file, .offset = pkl->local_header_offset});
  }
  if (pkl->uncompressed_size > kTorchMaxPickleBytes) {
    throw Error(ErrorCode::format,
                "data.pkl of " + std::to_string(pkl->uncompressed_size) + " bytes exceeds the limit of " +
                    std::to_string(kTorchMaxPickleBytes),
                {.file = file, .offset = pkl->data_offset});
  }
  std::vector<std::byte> pickle(static_cast<size_t>(pkl->uncompressed_size));
  source.read(pkl->data_offset, pickle);
  if (crc32(pickle) != pkl->crc32) {
    throw Error(ErrorCode::format, "data.pkl fails its CRC-32 check (corrupt archive)",
                {.file = file, .offset = pkl->data_offset});
  }
  const TorchStateDict dict = unpickle_torch_state_dict(pickle, file, pkl->data_offset, limits);

  // Each storage is one stored entry holding exactly numel elements.
  std::vector<const ZipEntry*> storage_entries;
  for (const auto& s : dict.storages) {
    const std::string name = prefix + "data/" + s.key;
    const ZipEntry* e = zip.find(name);
    if (e == nullptr) {
      throw Error(ErrorCode::format, "storage '" + s.key + "' has no zip entry '" + name + "'",
                  {.file = file});
    }
    if (!e->is_stored()) {
      throw Error(ErrorCode::unsupported,
                  "storage entry '" + name + "' is compressed (zip method " + std::to_string(e->method) +
                      "); torch.save writes stored entries — was the archive re-zipped?",
                  {.file = file, .offset = e->local_header_offset});
    }
    const uint64_t need = mul_or_fail(s.numel, static_cast<uint64_t>(dtype_size(s.dtype)), file, {});
    if (e->uncompressed_size != need) {
      throw Error(ErrorCode::format,
                  "storage '" + s.key + "' of " + std::to_string(s.numel) + " " + s.type_name +
                      " elements needs " + std::to_string(need) + " bytes, its entry holds " +
                      std::to_string(e->uncompressed_size),
                  {.file = file, .offset = e->data_offset});
    }
    storage_entries.push_back(e);
  }

  ParsedWeights out;
  out.tensors.reserve(dict.tensors.size());
  for (const auto& t : dict.tensors) {
    const TorchStorage& s = dict.storages[t.storage];
    const ZipEntry& e = *storage_entries[t.storage];
    const auto esize = static_cast<uint64_t>(dtype_size(s.dtype));
    TensorRecord r;
    r.name = t.name;
    r.dtype = s.dtype;
    r.shape = t.shape;
    r.nbytes = tensor_bytes_or_fail(s.dtype, t.shape, file, t.name);
    // Elements reached: storage_offset + sum((size_i - 1) * stride_i), when non-empty.
    uint64_t last = t.storage_offset;
    const bool empty = numel_or_fail(t.shape, file, t.name) == 0;
    for (int i = 0; i < t.shape.rank() && !empty; ++i) {
      const uint64_t step = mul_or_fail(static_cast<uint64_t>(t.shape[i] - 1),
                                        static_cast<uint64_t>(t.strides[i]), file, t.name);
      last = add_or_fail(last, step, file, t.name);
    }
    if (!empty && last >= s.numel) {
      throw Error(ErrorCode::format,
                  "view of storage '" + s.key + "' (offset " + std::to_string(t.storage_offset) +
                      ", shape " + t.shape.to_string() + ") reaches element " + std::to_string(last) +
                      " of " + std::to_string(s.numel),
                  {.file = file, .tensor = t.name, .offset = e.data_offset});
    }
    r.offset = e.data_offset + (empty ? 0 : mul_or_fail(t.storage_offset, esize, file, t.name));
    if (empty || is_contiguous(t.shape, t.strides)) {
      r.span_bytes = r.nbytes;
    } else {
      r.strides = t.strides;
      r.span_bytes = (last - t.storage_offset + 1) * esize;
    }
    out.tensors.push_back(std::move(r));
  }
  return out;
}

}  // namespace loom::format

// WeightSource: the tensor records of opened files, handed out as Tensors.
#include <cstring>

#include "loom/convert.hpp"
#include "loom/error.hpp"
#include "loom/format.hpp"

namespace loom {

namespace {

// Copies a strided record's elements from `src` (the bytes starting at the record's
// first element) into a dense row-major `dst`.
void gather(const std::byte* src, std::byte* dst, const Shape& shape, const Strides& strides,
            size_t esize) {
  const int rank = shape.rank();
  if (shape.numel() == 0) return;
  std::array<int64_t, Shape::kMaxRank> index{};
  const int64_t inner = rank == 0 ? 1 : shape[rank - 1];
  const int64_t inner_stride = rank == 0 ? 1 : strides[rank - 1];
  const int64_t rows = rank <= 1 ? 1 : shape.numel() / inner;
  for (int64_t row = 0; row < rows; ++row) {
    int64_t base = 0;
    for (int d = 0; d + 1 < rank; ++d) base += index[static_cast<size_t>(d)] * strides[d];
    if (inner_stride == 1) {
      std::memcpy(dst, src + static_cast<size_t>(base) * esize, static_cast<size_t>(inner) * esize);
      dst += static_cast<size_t>(inner) * esize;
    } else {
      for (int64_t i = 0; i < inner; ++i) {
        std::memcpy(dst, src + static_cast<size_t>(base + i * inner_stride) * esize, esize);
        dst += esize;
      }
    }
    for (int d = rank - 2; d >= 0; --d) {  // odometer over the outer dimensions
      if (++index[static_cast<size_t>(d)] < shape[d]) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
}

void to_host_order(void* data, DType dtype, uint64_t nbytes, const std::string& name) {
  if (host_is_little_endian()) return;
  const auto& t = dtype_traits(dtype);
  if (t.block_elems != 1) {
    throw Error(ErrorCode::unsupported, "block-quantized tensors cannot be loaded on a big-endian host",
                {.tensor = name});
  }
  byteswap_inplace(data, static_cast<size_t>(nbytes) / static_cast<size_t>(t.block_bytes),
                   static_cast<size_t>(t.block_bytes));
}

}  // namespace

WeightSource::WeightSource(FormatKind kind, std::string root, std::vector<SourceFile> files,
                           std::vector<TensorRecord> tensors, Metadata metadata)
    : kind_(kind),
      root_(std::move(root)),
      files_(std::move(files)),
      tensors_(std::move(tensors)),
      metadata_(std::move(metadata)) {
  // The parsers have validated their records; these checks guard the invariants load()
  // relies on for records built by anyone else.
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TensorRecord& r = tensors_[i];
    if (r.is_contiguous() && r.span_bytes == 0) r.span_bytes = r.nbytes;
    if (r.file_index >= files_.size()) {
      throw Error(ErrorCode::internal, "tensor record names file " + std::to_string(r.file_index) +
                                           " of " + std::to_string(files_.size()),
                  {.tensor = r.name});
    }
    const uint64_t size = files_[r.file_index].size;
    if (r.offset > size || r.span_bytes > size - r.offset) {
      throw Error(ErrorCode::format, "tensor bytes run past the end of the file",
                  {.file = files_[r.file_index].path, .tensor = r.name, .offset = r.offset});
    }
    if (!by_name_.emplace(r.name, i).second) {
      throw Error(ErrorCode::format, "duplicate tensor name",
                  {.file = files_[r.file_index].path, .tensor = r.name});
    }
  }
}

const TensorRecord* WeightSource::find(std::string_view name) const noexcept {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const SourceFile& WeightSource::file_of(const TensorRecord& record) const {
  if (record.file_index >= files_.size()) {
    throw Error(ErrorCode::invalid_argument, "tensor record does not belong to this source",
                {.tensor = record.name});
  }
  return files_[record.file_index];
}

Tensor WeightSource::load(const TensorRecord& record) const {
  const SourceFile& sf = file_of(record);
  const auto& file = sf.file;
  try {
    // An empty tensor gets its own (non-null) allocation rather than a zero-length view.
    if (record.nbytes == 0) return Tensor::empty(record.shape, record.dtype);
    if (record.packing != Packing::none) {
      // Packed bytes are a kernel's, little-endian like the rows they came from; a
      // big-endian host would need its own shuffle.
      if (!host_is_little_endian()) {
        throw Error(ErrorCode::unsupported, "a packed tensor (" + std::string(packing_name(record.packing)) +
                                                ") needs a little-endian host");
      }
      if (file->is_mapped()) {
        return Tensor::packed(Storage::view(file, record.offset, record.nbytes), 0, record.shape, record.dtype,
                              record.packing);
      }
      auto storage = Storage::allocate(static_cast<size_t>(record.nbytes));
      file->read(record.offset, std::span<std::byte>(storage->mutable_data(),
                                                     static_cast<size_t>(record.nbytes)));
      return Tensor::packed(std::move(storage), 0, record.shape, record.dtype, record.packing);
    }
    if (record.is_contiguous()) {
      if (file->is_mapped() && host_is_little_endian()) {
        return Tensor(Storage::view(file, record.offset, record.nbytes), 0, record.shape, record.dtype);
      }
      Tensor t = Tensor::empty(record.shape, record.dtype);
      file->read(record.offset, std::span<std::byte>(static_cast<std::byte*>(t.mutable_raw_data()),
                                                     static_cast<size_t>(record.nbytes)));
      to_host_order(t.mutable_raw_data(), record.dtype, record.nbytes, record.name);
      return t;
    }
    // A strided view (PyTorch): gather its elements into a dense, owned tensor.
    const auto esize = static_cast<size_t>(dtype_size(record.dtype));
    Tensor t = Tensor::empty(record.shape, record.dtype);
    auto* dst = static_cast<std::byte*>(t.mutable_raw_data());
    if (file->is_mapped()) {
      gather(file->bytes(record.offset, record.span_bytes).data(), dst, record.shape, *record.strides, esize);
    } else {
      std::vector<std::byte> span(static_cast<size_t>(record.span_bytes));
      file->read(record.offset, span);
      gather(span.data(), dst, record.shape, *record.strides, esize);
    }
    to_host_order(dst, record.dtype, record.nbytes, record.name);
    return t;
  } catch (const Error& e) {
    throw e.with_context({.file = sf.path, .tensor = record.name});
  }
}

void WeightSource::read(const TensorRecord& record, uint64_t offset_in_tensor,
                        std::span<std::byte> dst) const {
  const SourceFile& sf = file_of(record);
  const ErrorContext ctx{.file = sf.path, .tensor = record.name};
  if (!record.is_contiguous()) {
    throw Error(ErrorCode::invalid_argument, "chunked reads need a contiguous record; load() gathers strided ones",
                ctx);
  }
  if (offset_in_tensor > record.nbytes || dst.size() > record.nbytes - offset_in_tensor) {
    throw Error(ErrorCode::invalid_argument,
                "read of " + std::to_string(dst.size()) + " bytes at " + std::to_string(offset_in_tensor) +
                    " is outside the tensor's " + std::to_string(record.nbytes) + " bytes",
                ctx);
  }
  if (!host_is_little_endian() && !is_quantized(record.dtype)) {
    const auto esize = static_cast<uint64_t>(dtype_size(record.dtype));
    if (offset_in_tensor % esize != 0 || dst.size() % esize != 0) {
      throw Error(ErrorCode::invalid_argument,
                  "on a big-endian host chunks must start and end on element boundaries", ctx);
    }
  }
  try {
    sf.file->read(record.offset + offset_in_tensor, dst);
  } catch (const Error& e) {
    throw e.with_context(ctx);
  }
  to_host_order(dst.data(), record.dtype, dst.size(), record.name);
}

}  // namespace loom

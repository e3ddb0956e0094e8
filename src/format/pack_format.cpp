#include "format/pack_format.hpp"

#include <map>

#include "common/read_file.hpp"
#include "common/sha256.hpp"
#include "loom/error.hpp"
#include "tensor/packing.hpp"

namespace fs = std::filesystem;

namespace loom::format::pack {

std::string shape_json(const Shape& s) {
  std::string out = "[";
  for (int i = 0; i < s.rank(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void write_tensor_entry(JsonWriter& w, const PackedTensor& t) {
  w.begin_object();
  w.field("name", t.name).field("dtype", dtype_name(t.dtype));
  w.key("shape").raw(shape_json(t.shape));
  w.field("layout", t.layout);
  if (t.packing != Packing::none) w.field("packing", packing_name(t.packing));
  if (!t.tied_to.empty()) {
    w.field("tied_to", t.tied_to);
  } else {
    w.field("file", t.file).field("offset", t.offset).field("length", t.length).field("sha256", t.sha256);
  }
  w.end_object();
}

simdjson::dom::element parse_json(simdjson::dom::parser& parser, const simdjson::padded_string& text,
                                  const fs::path& path) {
  simdjson::dom::element root;
  if (auto err = parser.parse(text).get(root); err) {
    throw Error(ErrorCode::format, std::string("not valid JSON: ") + simdjson::error_message(err),
                {.file = path.string()});
  }
  return root;
}

namespace {

template <typename T>
T field(simdjson::dom::element e, std::string_view key, const fs::path& path) {
  T value{};
  if (e[key].get(value) != simdjson::SUCCESS) {
    throw Error(ErrorCode::format, "field '" + std::string(key) + "' is missing or has the wrong type",
                {.file = path.string()});
  }
  return value;
}

}  // namespace

std::string string_field(simdjson::dom::element e, std::string_view key, const fs::path& path) {
  return std::string(field<std::string_view>(e, key, path));
}

std::vector<PackedTensor> read_tensor_entries(simdjson::dom::element root, const fs::path& path) {
  std::vector<PackedTensor> out;
  for (simdjson::dom::element t : field<simdjson::dom::array>(root, "tensors", path)) {
    PackedTensor p;
    p.name = std::string(field<std::string_view>(t, "name", path));
    const auto dtype = dtype_from_name(field<std::string_view>(t, "dtype", path));
    if (!dtype) throw Error(ErrorCode::format, "unknown dtype", {.file = path.string(), .tensor = p.name});
    p.dtype = *dtype;
    std::vector<int64_t> dims;
    for (simdjson::dom::element d : field<simdjson::dom::array>(t, "shape", path)) {
      int64_t v = 0;
      if (d.get(v) != simdjson::SUCCESS) throw Error(ErrorCode::format, "bad shape", {.file = path.string(), .tensor = p.name});
      dims.push_back(v);
    }
    p.shape = Shape(std::span<const int64_t>(dims));
    p.layout = std::string(field<std::string_view>(t, "layout", path));
    if (p.layout == "repacked") {
      const std::string_view name = field<std::string_view>(t, "packing", path);
      const auto packing = packing_from_name(name);
      if (!packing || *packing == Packing::none) {
        throw Error(ErrorCode::unsupported, "packing '" + std::string(name) + "' is unknown to this loom",
                    {.file = path.string(), .tensor = p.name});
      }
      if (!packing_fits(*packing, p.dtype, p.shape)) {
        throw Error(ErrorCode::format, "packing " + std::string(name) + " does not fit a " +
                                           std::string(dtype_name(p.dtype)) + p.shape.to_string() + " tensor",
                    {.file = path.string(), .tensor = p.name});
      }
      p.packing = *packing;
    } else if (p.layout != "row_major") {
      throw Error(ErrorCode::format, "unknown layout '" + p.layout + "'", {.file = path.string(), .tensor = p.name});
    }
    std::string_view tied;
    if (t["tied_to"].get(tied) == simdjson::SUCCESS) {
      p.tied_to = std::string(tied);
    } else {
      p.file = std::string(field<std::string_view>(t, "file", path));
      p.offset = field<uint64_t>(t, "offset", path);
      p.length = field<uint64_t>(t, "length", path);
      p.sha256 = std::string(field<std::string_view>(t, "sha256", path));
      if (p.file.find('/') != std::string::npos || p.file.find("..") != std::string::npos) {
        throw Error(ErrorCode::format, "data file name '" + p.file + "' leaves the pack",
                    {.file = path.string(), .tensor = p.name});
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

bool is_pack_dir(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec) || !fs::exists(path / "index.json", ec)) return false;
  try {
    simdjson::dom::parser parser;
    const simdjson::padded_string text(read_file(path / "index.json"));
    simdjson::dom::element root;
    if (parser.parse(text).get(root) != simdjson::SUCCESS) return false;
    std::string_view format;
    return root["format"].get(format) == simdjson::SUCCESS && format == "loom-pack";
  } catch (const Error&) {
    return false;
  }
}

std::unique_ptr<WeightSource> open(const fs::path& dir, const OpenOptions& options) {
  const fs::path index_path = dir / "index.json";
  simdjson::dom::parser parser;
  const simdjson::padded_string text(read_file(index_path));
  const auto root = parse_json(parser, text, index_path);
  const int64_t version = field<int64_t>(root, "version", index_path);
  if (version != kVersion) {
    throw Error(ErrorCode::unsupported, "pack version " + std::to_string(version) + " (this loom reads " +
                                            std::to_string(kVersion) + ")", {.file = index_path.string()});
  }
  const auto entries = read_tensor_entries(root, index_path);
  std::vector<SourceFile> files;
  std::map<std::string, uint32_t> file_index;
  std::vector<TensorRecord> records;
  for (const auto& e : entries) {
    if (!e.tied_to.empty()) continue;  // the manifest ties it
    auto [it, inserted] = file_index.emplace(e.file, static_cast<uint32_t>(files.size()));
    if (inserted) {
      const fs::path p = dir / e.file;
      auto mapped = MappedFile::open(p.string(), options.io_mode, options.fs_magic_override);
      files.push_back({p.string(), mapped->size(), mapped});
    }
    const SourceFile& f = files[it->second];
    const int64_t want = e.packing != Packing::none ? packed_nbytes(e.packing, e.shape)
                                                    : dtype_bytes(e.dtype, e.shape.numel(), e.shape.row_length());
    if (static_cast<uint64_t>(want) != e.length || e.offset > f.size || e.length > f.size - e.offset) {
      throw Error(ErrorCode::format, "tensor bytes do not fit its shape or its data file",
                  {.file = f.path, .tensor = e.name, .offset = e.offset});
    }
    TensorRecord r;
    r.name = e.name;
    r.dtype = e.dtype;
    r.shape = e.shape;
    r.file_index = it->second;
    r.offset = e.offset;
    r.nbytes = e.length;
    r.span_bytes = e.length;
    r.packing = e.packing;
    records.push_back(std::move(r));
  }
  Metadata md;
  bool interleaved = false;
  if (root["rope_interleaved"].get(interleaved) != simdjson::SUCCESS) interleaved = false;
  md.set("loom.rope_interleaved", MetaValue::of_bool(interleaved));
  std::string_view repacked_for;
  if (root["provenance"]["repack"]["isa"].get(repacked_for) == simdjson::SUCCESS) {
    md.set("loom.pack.repacked_for", MetaValue::of_string(std::string(repacked_for)));
  }
  return std::make_unique<WeightSource>(FormatKind::pack, dir.string(), std::move(files), std::move(records),
                                        std::move(md));
}

std::vector<Problem> verify(const fs::path& pack, ThreadPool& pool) {
  const fs::path index_path = pack / "index.json";
  simdjson::dom::parser parser;
  const simdjson::padded_string text(read_file(index_path));
  const auto root = parse_json(parser, text, index_path);
  std::vector<Problem> problems;
  for (simdjson::dom::element f : field<simdjson::dom::array>(root, "files", index_path)) {
    const std::string name(field<std::string_view>(f, "name", index_path));
    const uint64_t size = field<uint64_t>(f, "size", index_path);
    std::error_code ec;
    const fs::path p = pack / name;
    if (!fs::exists(p, ec)) {
      problems.push_back({"", p.string(), "data file is missing"});
    } else if (fs::file_size(p, ec) != size) {
      problems.push_back({"", p.string(), "data file is " + std::to_string(fs::file_size(p, ec)) +
                                              " bytes, the index says " + std::to_string(size)});
    }
  }
  std::vector<PackedTensor> stored;
  std::vector<FileRange> ranges;
  for (auto& t : read_tensor_entries(root, index_path)) {
    if (!t.tied_to.empty()) continue;
    ranges.push_back({pack / t.file, t.offset, t.length});
    stored.push_back(std::move(t));
  }
  const auto hashes = sha256_file_ranges(ranges, pool);
  for (size_t i = 0; i < stored.size(); ++i) {
    const PackedTensor& t = stored[i];
    const std::string p = ranges[i].file.string();
    if (!hashes[i]) {
      problems.push_back({t.name, p, "bytes " + std::to_string(t.offset) + ".." +
                                         std::to_string(t.offset + t.length) + " are not all in the file"});
    } else if (*hashes[i] != t.sha256) {
      problems.push_back({t.name, p, "sha256 is " + *hashes[i] + ", the index says " + t.sha256});
    }
  }
  return problems;
}

}  // namespace loom::format::pack

#include "loom/pack.hpp"

#include <fcntl.h>
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <future>
#include <map>

#include "common/json_writer.hpp"
#include "common/read_file.hpp"
#include "common/sha256.hpp"
#include "format/atomic_file.hpp"
#include "format/pack_format.hpp"
#include "loom/convert.hpp"
#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "loom/exporter.hpp"
#include "loom/format.hpp"
#include "loom/thread_pool.hpp"
#include "loom/tokenizer.hpp"
#include "model/quant_recipe.hpp"
#include "model/weight_slots.hpp"
#include "tensor/kernel_registry.hpp"
#include "tensor/mapped_pages.hpp"
#include "tensor/packing.hpp"
#include "tensor/quant/quant.hpp"

namespace fs = std::filesystem;

namespace loom {

namespace {

using format::pack::kAlignment;
using format::pack::PackedTensor;
using format::pack::parse_json;
using format::pack::read_tensor_entries;
using format::pack::string_field;
using format::pack::write_tensor_entry;
constexpr int kPackVersion = format::pack::kVersion;

std::string creation_time() {
  // SOURCE_DATE_EPOCH makes conversions reproducible (the reproducible-builds convention).
  std::time_t t = std::time(nullptr);
  if (const char* epoch = std::getenv("SOURCE_DATE_EPOCH"); epoch != nullptr && *epoch) {
    t = static_cast<std::time_t>(std::strtoll(epoch, nullptr, 10));
  }
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The revision a model directory came from: a Hugging Face cache snapshot name, or the
// commit a git checkout's HEAD points at.
std::string source_revision(const fs::path& src) {
  fs::path dir = fs::is_directory(src) ? src : src.parent_path();
  std::error_code ec;
  dir = fs::weakly_canonical(dir, ec);
  if (dir.parent_path().filename() == "snapshots") return "hf-snapshot:" + dir.filename().string();
  for (fs::path d = dir; !d.empty() && d != d.root_path(); d = d.parent_path()) {
    const fs::path head = d / ".git" / "HEAD";
    if (!fs::exists(head, ec)) continue;
    std::string ref = read_file(head);
    while (!ref.empty() && (ref.back() == '\n' || ref.back() == '\r')) ref.pop_back();
    if (ref.rfind("ref: ", 0) == 0) {
      const fs::path ref_file = d / ".git" / ref.substr(5);
      if (fs::exists(ref_file, ec)) {
        std::string commit = read_file(ref_file);
        while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r')) commit.pop_back();
        return "git:" + commit;
      }
      return "git:" + ref.substr(5);
    }
    return "git:" + ref;
  }
  return "";
}

// ---- reading index.json / checkpoint.json ----

// ---- conversion of one tensor into pack bytes ----

// `quantize_to`: the recipe's dtype for this matrix (nullopt: no quantization), which
// runs on `pool`.
Tensor pack_bytes_of(const Tensor& stored, bool is_vector, const PackOptions& o, std::optional<DType> quantize_to,
                     std::string& dtype_note, ThreadPool& pool) {
  // A matrix loaded in a kernel-native layout is written as rows (the pack's layout).
  const Tensor t = unpack(stored);
  if (is_vector) {
    return t.dtype() == DType::f32 ? t : [&] {
      Tensor out = Tensor::empty(t.shape(), DType::f32);
      convert(t.dtype(), t.raw_data(), DType::f32, out.mutable_raw_data(), static_cast<size_t>(t.numel()));
      return out;
    }();
  }
  if (quantize_to) {
    const DType q = *quantize_to;
    const std::string name(dtype_name(q));
    if (t.dtype() == q) return t;
    if (t.shape().row_length() % dtype_traits(q).block_elems != 0) {
      dtype_note = "rows of " + std::to_string(t.shape().row_length()) + " are not whole " + name +
                   " blocks of " + std::to_string(dtype_traits(q).block_elems) + "; kept " +
                   std::string(dtype_name(t.dtype()));
      return t;
    }
    Tensor out = Tensor::empty(t.shape(), q);
    const auto n = static_cast<size_t>(t.numel());
    if (is_quantized(t.dtype())) {  // re-quantizing: through f32
      std::vector<float> values(n);
      convert(t.dtype(), t.raw_data(), DType::f32, values.data(), n);
      quant::quantize_from(DType::f32, values.data(), q, out.mutable_raw_data(), n, &pool);
    } else {  // f32 / f16 / bf16 ...: widened in bounded chunks
      quant::quantize_from(t.dtype(), t.raw_data(), q, out.mutable_raw_data(), n, &pool);
    }
    return out;
  }
  if (o.dtype && *o.dtype != t.dtype()) {
    Tensor out = Tensor::empty(t.shape(), *o.dtype);
    convert(t.dtype(), t.raw_data(), *o.dtype, out.mutable_raw_data(), static_cast<size_t>(t.numel()));
    return out;
  }
  return t;
}

struct Checkpoint {
  std::string fingerprint;  // source + options; a different one means start over
  std::string created;
  std::vector<PackedTensor> tensors;
};

std::string checkpoint_json(const Checkpoint& c) {
  JsonWriter w;
  w.begin_object();
  w.field("version", kPackVersion).field("fingerprint", c.fingerprint).field("created", c.created);
  w.key("tensors").begin_array();
  for (const auto& t : c.tensors) write_tensor_entry(w, t);
  w.end_array();
  w.end_object();
  return w.str();
}

std::optional<Checkpoint> read_checkpoint(const fs::path& path) {
  if (!fs::exists(path)) return std::nullopt;
  try {
    simdjson::dom::parser parser;
    const simdjson::padded_string text(read_file(path));
    const auto root = parse_json(parser, text, path);
    Checkpoint c;
    c.fingerprint = string_field(root, "fingerprint", path);
    c.created = string_field(root, "created", path);
    c.tensors = read_tensor_entries(root, path);
    return c;
  } catch (const Error&) {
    return std::nullopt;  // a torn or foreign checkpoint: start over
  }
}

std::string options_fingerprint(const fs::path& src, const PackOptions& o) {
  std::string f = fs::absolute(src).lexically_normal().string();
  std::error_code ec;
  if (fs::is_directory(src)) {
    for (const auto& e : fs::directory_iterator(src, ec)) {
      if (e.is_regular_file()) f += "|" + e.path().filename().string() + ":" + std::to_string(e.file_size());
    }
  } else {
    f += ":" + std::to_string(fs::file_size(src, ec));
  }
  f += "|dtype=" + std::string(o.dtype ? dtype_name(*o.dtype) : "keep");
  f += "|quantize=" + o.quantize + "|group=" + std::to_string(o.group_size);
  f += "|max=" + std::to_string(o.max_data_file_bytes);
  // A packed layout depends on the CPU it was chosen for.
  if (o.repack == RepackMode::automatic) f += "|repack=" + isa_description();
  return sha256_hex(f.data(), f.size());
}

}  // namespace

bool is_pack(const fs::path& path) { return format::pack::is_pack_dir(path); }



PackResult write_pack(const fs::path& src, const fs::path& dst, const PackOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (fs::exists(dst)) throw Error(ErrorCode::invalid_argument, "destination already exists", {.file = dst.string()});
  const fs::path partial = dst.string() + ".partial";
  int crash_after = options.crash_after_tensors;
  if (const char* env = std::getenv("LOOM_TEST_CRASH_AFTER_TENSORS"); env != nullptr && crash_after == 0) {
    crash_after = std::atoi(env);
  }

  // A bad --quantize / --group fails here, before any work or any partial directory.
  std::optional<quant_recipe::Recipe> recipe;
  if (!options.quantize.empty()) {
    recipe = quant_recipe::resolve(options.quantize, options.group_size);
  } else if (options.group_size != 0) {
    throw Error(ErrorCode::invalid_argument, "--group needs --quantize gq8 or gq4 (or a preset using them)");
  }

  LoadOptions load = options.load;
  load.target_dtype.reset();  // convert tensor by tensor below, with bounded memory
  auto model = load_model(src, load);
  const ModelConfig& config = model->config();
  const ModelWeights& weights = model->weights();

  const std::string fingerprint = options_fingerprint(src, options);
  Checkpoint checkpoint;
  fs::create_directories(partial);
  if (auto previous = read_checkpoint(partial / "checkpoint.json"); previous && previous->fingerprint == fingerprint) {
    checkpoint = std::move(*previous);
  } else {
    for (const auto& e : fs::directory_iterator(partial)) fs::remove_all(e.path());
    checkpoint.fingerprint = fingerprint;
    checkpoint.created = creation_time();
  }

  // Re-verify what the interrupted run wrote; keep the longest intact prefix.
  // Hashing (at disk speed with libcrypto), quantizing and repacking run on the host's
  // pool when it gave one (LoadOptions::pool caps its threads), else on every hardware
  // thread.
  const std::shared_ptr<ThreadPool> pool_ptr = options.load.pool ? options.load.pool : std::make_shared<ThreadPool>(0);
  ThreadPool& work_pool = *pool_ptr;
  std::vector<FileRange> written;  // the checkpoint's tensors with bytes of their own
  for (const auto& t : checkpoint.tensors) {
    if (t.tied_to.empty()) written.push_back({partial / t.file, t.offset, t.length});
  }
  const auto written_hashes = sha256_file_ranges(written, work_pool);
  size_t verified = 0;
  for (size_t own = 0; verified < checkpoint.tensors.size(); ++verified) {
    const auto& t = checkpoint.tensors[verified];
    if (t.tied_to.empty() && written_hashes[own++] != t.sha256) break;
  }
  checkpoint.tensors.resize(verified);
  PackResult result;
  result.resumed_tensors = static_cast<int64_t>(verified);

  // Where the next tensor goes: after the last verified one (truncating anything beyond).
  int file_number = 0;
  uint64_t offset = 0;
  for (const auto& t : checkpoint.tensors) {
    if (t.tied_to.empty()) {
      file_number = std::stoi(t.file.substr(5, 5));
      offset = t.offset + t.length;
    }
  }
  auto data_name = [](int n) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "data-%05d.bin", n);
    return std::string(buf);
  };
  for (const auto& e : fs::directory_iterator(partial)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("data-", 0) == 0 && name > data_name(file_number)) fs::remove(e.path());
  }
  if (fs::exists(partial / data_name(file_number))) fs::resize_file(partial / data_name(file_number), offset);

  // The tensors, in slot order; a tied output shares token_embd's bytes.
  struct Item {
    std::string name;
    const Tensor* tensor;
    bool vector;
    bool tied;
    bool quantizable;  // slots::recipe_may_quantize
    bool product;      // a product's matrix (a projection, or a tied output's table): what may be packed
  };
  std::vector<Item> items;
  for (const auto& slot : slots::all_slots()) {
    if (!slot.needed(config)) continue;
    const int64_t layers = slot.per_layer ? config.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const Tensor& t = slots::tensor_of(weights, slot, l);
      const bool tied = slots::tied_in(config, slot) && slots::shares_tied_storage(weights, slot);
      items.push_back({slots::full_name(slot, l), &t, slots::is_vector(slot.role), tied, slots::recipe_may_quantize(slot),
                       slot.role == slots::Role::matrix || slots::is_tied_table(weights, slot)});
    }
  }

  // The recipe's dtype per item. A tied output has no storage of its own: token_embd's
  // storage is the output projection too, so it gets the output's (usually finer) dtype.
  const bool output_tied = std::any_of(items.begin(), items.end(), [](const Item& it) { return it.tied; });
  auto quantize_to = [&](const Item& item) -> std::optional<DType> {
    if (!recipe || !item.quantizable) return std::nullopt;
    return recipe->dtype_for(item.name == "token_embd" && output_tied ? "output" : item.name);
  };

  int fd = -1;
  auto close_fd = [&] {
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
      fd = -1;
    }
  };
  auto open_data = [&](int n) {
    close_fd();
    const fs::path p = partial / data_name(n);
    fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(ErrorCode::io, "cannot open for writing", {.file = p.string()});
  };
  auto write_all = [&](const void* data, size_t n, const fs::path& p) {
    const auto* b = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, b, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw Error(ErrorCode::io, std::string("write failed: ") + std::strerror(errno), {.file = p.string()});
      }
      b += w;
      n -= static_cast<size_t>(w);
    }
  };

  std::vector<std::string> notes;
  try {
    open_data(file_number);
    for (size_t i = checkpoint.tensors.size(); i < items.size(); ++i) {
      const Item& item = items[i];
      PackedTensor p;
      p.name = item.name;
      if (item.tied) {
        p.tied_to = "token_embd";
        const auto& embd = checkpoint.tensors.front();
        p.dtype = embd.dtype;
        p.shape = item.tensor->shape();
      } else {
        std::string note;
        Tensor bytes = pack_bytes_of(*item.tensor, item.vector, options, quantize_to(item), note, work_pool);
        if (!note.empty()) notes.push_back(item.name + ": " + note);
        if (options.repack == RepackMode::automatic && item.product) {
          const Packing packing = kernel_registry().preferred_packing(bytes.dtype());
          if (packing != Packing::none && can_pack(bytes, packing)) bytes = pack(bytes, packing, &work_pool);
        }
        p.dtype = bytes.dtype();
        p.shape = bytes.shape();
        p.packing = bytes.packing();
        if (p.packing != Packing::none) p.layout = "repacked";
        p.length = static_cast<uint64_t>(bytes.nbytes());
        uint64_t aligned = (offset + kAlignment - 1) / kAlignment * kAlignment;
        if (aligned > 0 && aligned + p.length > options.max_data_file_bytes) {
          open_data(++file_number);
          offset = aligned = 0;
        }
        const fs::path path = partial / data_name(file_number);
        static const char zeros[kAlignment] = {};
        // The tensor is hashed on a second thread while this one writes it: the two
        // only read `bytes`, and together take the longer of the two instead of the sum.
        auto hash = std::async(std::launch::async, [&bytes, n = p.length] { return sha256_hex(bytes.raw_data(), n); });
        try {
          write_all(zeros, aligned - offset, path);
          write_all(bytes.raw_data(), p.length, path);
        } catch (...) {
          hash.wait();
          throw;
        }
        p.file = data_name(file_number);
        p.offset = aligned;
        p.sha256 = hash.get();
        offset = aligned + p.length;
        result.bytes += static_cast<int64_t>(p.length);
        // The source rows are read once: their mapped pages go back (MappedPages).
        // Without this a conversion held the whole source resident by its end (1B f16
        // GGUF to a q8_0 pack: peak RSS 2.51 GB, docs/cli-and-packs.md).
        MappedPages::of(*item.tensor).release();
      }
      checkpoint.tensors.push_back(std::move(p));
      const bool last = i + 1 == items.size();
      if (last || checkpoint.tensors.size() % static_cast<size_t>(std::max(1, options.checkpoint_every)) == 0) {
        ::fsync(fd);
        format::write_file_atomically(partial / "checkpoint.json", checkpoint_json(checkpoint));
      }
      if (crash_after > 0 && static_cast<int>(i + 1 - static_cast<size_t>(result.resumed_tensors)) >= crash_after) {
        std::_Exit(86);  // test hook: die as a crash would, leaving the partial directory
      }
      if (options.progress &&
          !options.progress(static_cast<double>(i + 1) / static_cast<double>(items.size()), item.name)) {
        ::fsync(fd);
        format::write_file_atomically(partial / "checkpoint.json", checkpoint_json(checkpoint));
        throw Error(ErrorCode::cancelled, "conversion stopped; run it again to resume", {.file = partial.string()});
      }
    }
    close_fd();
  } catch (...) {
    close_fd();
    throw;
  }

  // Side files: config, tokenizer, index (last), then the atomic rename.
  format::write_file_atomically(partial / "config.json", hf_config_json(config));
  std::string tokenizer_file;
  const fs::path src_dir = fs::is_directory(src) ? src : src.parent_path();
  // The generation defaults travel with the pack (a GGUF source has no such file).
  if (model->load_report() && model->load_report()->format != "gguf" &&
      fs::is_regular_file(src_dir / "generation_config.json")) {
    fs::copy_file(src_dir / "generation_config.json", partial / "generation_config.json",
                  fs::copy_options::overwrite_existing);
  }
  if (model->tokenizer()) {
    if (fs::exists(src_dir / "tokenizer.json") && !is_pack(src)) {
      fs::copy_file(src_dir / "tokenizer.json", partial / "tokenizer.json", fs::copy_options::overwrite_existing);
      if (fs::exists(src_dir / "tokenizer_config.json")) {
        fs::copy_file(src_dir / "tokenizer_config.json", partial / "tokenizer_config.json",
                      fs::copy_options::overwrite_existing);
      }
      tokenizer_file = "tokenizer.json";
    } else if (is_pack(src)) {
      for (auto name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.gguf"}) {
        if (fs::exists(src / name)) fs::copy_file(src / name, partial / name, fs::copy_options::overwrite_existing);
      }
      tokenizer_file = fs::exists(src / "tokenizer.json") ? "tokenizer.json" : "tokenizer.gguf";
    } else if (model->tokenizer()->has_gguf_metadata()) {
      write_gguf(partial / "tokenizer.gguf", model->tokenizer()->to_gguf_metadata(), {});
      tokenizer_file = "tokenizer.gguf";
    }
  }

  JsonWriter w;
  w.begin_object();
  w.field("format", "loom-pack").field("version", kPackVersion);
  w.field("architecture", config.architecture);
  w.field("rope_interleaved", weights.rope_interleaved);
  w.key("tokenizer");
  if (tokenizer_file.empty()) {
    w.null();
  } else {
    w.value(tokenizer_file);
  }
  w.key("files").begin_array();
  for (int n = 0; n <= file_number; ++n) {
    w.begin_object().field("name", data_name(n)).field("size", static_cast<uint64_t>(fs::file_size(partial / data_name(n)))).end_object();
  }
  w.end_array();
  w.key("tensors").begin_array();
  for (const auto& t : checkpoint.tensors) write_tensor_entry(w, t);
  w.end_array();
  w.key("provenance").begin_object();
  w.key("sources").begin_array();
  const auto& sources = model->load_report()->files;
  std::vector<std::optional<std::string>> source_hashes(sources.size());
  if (options.hash_sources) {
    std::vector<FileRange> whole;
    for (const auto& f : sources) whole.push_back({f, 0, std::nullopt});
    source_hashes = sha256_file_ranges(whole, work_pool);
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto& f = sources[i];
    w.begin_object().field("path", fs::absolute(f).lexically_normal().string());
    w.field("size", static_cast<uint64_t>(fs::file_size(f)));
    if (options.hash_sources) {
      if (!source_hashes[i]) throw Error(ErrorCode::io, "cannot read", {.file = f});
      w.field("sha256", *source_hashes[i]);
    }
    w.end_object();
  }
  w.end_array();
  const std::string revision = source_revision(src);
  w.key("revision");
  if (revision.empty()) {
    w.null();
  } else {
    w.value(revision);
  }
  w.field("converter", std::string("loom ") + LOOM_VERSION_STRING);
  w.key("options").begin_object();
  w.field("dtype", options.dtype ? std::string(dtype_name(*options.dtype)) : std::string("keep"));
  w.field("quantize", options.quantize).field("group_size", options.group_size);
  w.field("repack", options.repack == RepackMode::automatic ? "auto" : "off");
  w.end_object();
  // Which kernel layouts the tensors were stored in, and for which CPU: a loader on
  // another one unpacks them and its report names this ISA.
  std::map<std::string, int64_t> packings;
  for (const auto& t : checkpoint.tensors) {
    if (t.packing != Packing::none && t.tied_to.empty()) ++packings[std::string(packing_name(t.packing))];
  }
  w.key("repack");
  if (packings.empty()) {
    w.null();
  } else {
    w.begin_object().field("isa", isa_description());
    w.key("packings").begin_object();
    for (const auto& [name, count] : packings) w.field(name, count);
    w.end_object().end_object();
  }
  // What the recipe chose for each matrix (vectors stay f32; a kept tensor shows its own
  // dtype and has a note).
  w.key("quantization");
  if (!recipe) {
    w.null();
  } else {
    w.begin_object().field("recipe", recipe->name).field("group_size", recipe->group_size);
    w.key("tensors").begin_object();
    for (const auto& t : checkpoint.tensors) {
      if (t.shape.rank() >= 2) w.field(t.name, std::string(dtype_name(t.dtype)));
    }
    w.end_object().end_object();
  }
  w.field("created", checkpoint.created);
  w.key("notes").begin_array();
  for (const auto& n : notes) w.value(n);
  w.end_array();
  w.end_object();
  w.end_object();
  format::write_file_atomically(partial / "index.json", w.str() + "\n");
  fs::remove(partial / "checkpoint.json");
  fs::rename(partial, dst);
  const int dfd = ::open(dst.parent_path().empty() ? "." : dst.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  result.path = dst;
  result.tensors = static_cast<int64_t>(checkpoint.tensors.size());
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::vector<VerifyProblem> verify_pack(const fs::path& pack, int threads) {
  std::vector<VerifyProblem> out;
  ThreadPool pool(threads);
  for (auto& p : format::pack::verify(pack, pool)) out.push_back({std::move(p.tensor), std::move(p.file), std::move(p.detail)});
  return out;
}

}  // namespace loom

// C API: loading models, their info and load report.
#include "capi_internal.hpp"
#include "loom/load_report.hpp"
#include "loom/loader.hpp"
#include "loom/log.hpp"

using loom::capi::guard;
using loom::capi::require;

namespace {

std::optional<loom::DType> dtype_from_c(int32_t v) {
  switch (v) {
    case LOOM_DTYPE_KEEP: return std::nullopt;
    case LOOM_DTYPE_F32: return loom::DType::f32;
    case LOOM_DTYPE_F16: return loom::DType::f16;
    case LOOM_DTYPE_BF16: return loom::DType::bf16;
    default: break;
  }
  throw loom::Error(loom::ErrorCode::invalid_argument, "unknown dtype " + std::to_string(v));
}

loom::IoMode io_mode_from_c(int32_t v) {
  switch (v) {
    case LOOM_IO_AUTO: return loom::IoMode::automatic;
    case LOOM_IO_MMAP: return loom::IoMode::mmap;
    case LOOM_IO_STREAM: return loom::IoMode::stream;
    default: break;
  }
  throw loom::Error(loom::ErrorCode::invalid_argument, "unknown io_mode " + std::to_string(v));
}

loom::LogLevel log_level_from_c(int32_t v) {
  if (v < LOOM_LOG_TRACE || v > LOOM_LOG_OFF) {
    throw loom::Error(loom::ErrorCode::invalid_argument, "unknown log level " + std::to_string(v));
  }
  return static_cast<loom::LogLevel>(v);
}

// Sets `s->*field` when the caller's struct_size covers the whole field (older callers
// pass smaller structs; the bytes beyond their struct_size are not theirs to lend).
template <typename S, typename F>
void set_within_size(S* s, F S::*field, F value) {
  const auto* base = reinterpret_cast<const char*>(s);
  const auto end = static_cast<size_t>(reinterpret_cast<const char*>(&(s->*field)) - base) + sizeof(F);
  if (s->struct_size >= end) s->*field = value;
}

}  // namespace

extern "C" {

static void fill_load_params(loom_load_params* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->io_mode = LOOM_IO_AUTO;
  p->target_dtype = LOOM_DTYPE_KEEP;
  p->strict = 0;
  p->n_threads = 0;
  p->load_tokenizer = 1;
  p->log_level = LOOM_LOG_INFO;
}
LOOM_CAPI_DEFINE_INIT(loom_load_params, loom_load_params_init, fill_load_params)

LOOM_API loom_status loom_model_load(const char* path, const loom_load_params* params, loom_model** out,
                                     loom_error** err) {
  if (out != nullptr) *out = nullptr;
  return guard(err, [&] {
    require(path, "path");
    require(out, "output model pointer");
    const auto p = loom::capi::read_params(params, loom_load_params_init_sized);
    loom::LoadOptions options;
    options.io_mode = io_mode_from_c(p.io_mode);
    options.target_dtype = dtype_from_c(p.target_dtype);
    options.strict = p.strict != 0;
    if (p.n_threads > 0) options.threads = p.n_threads;
    options.load_tokenizer = p.load_tokenizer != 0;
    if (p.repack != LOOM_REPACK_OFF && p.repack != LOOM_REPACK_AUTO) {
      throw loom::Error(loom::ErrorCode::invalid_argument, "unknown repack mode " + std::to_string(p.repack));
    }
    options.repack = p.repack == LOOM_REPACK_AUTO ? loom::RepackMode::automatic : loom::RepackMode::off;
    if (p.progress != nullptr) {
      options.progress = [fn = p.progress, user = p.progress_user](double f, std::string_view tensor) {
        const std::string name(tensor);
        return fn(user, static_cast<float>(f), name.c_str()) != 0;
      };
    }
    const auto level = log_level_from_c(p.log_level);
    if (p.log != nullptr) {
      options.logger = loom::Logger::to_sink(
          [fn = p.log, user = p.log_user](loom::LogLevel l, std::string_view message) {
            const std::string text(message);
            fn(user, static_cast<int32_t>(l), text.c_str());
          },
          level);
    } else if (level != loom::Logger::global().level()) {
      // The default stderr logger, at the level this load asked for.
      options.logger = loom::Logger::to_sink(
          [](loom::LogLevel l, std::string_view message) { loom::Logger::global().log(l, message); }, level);
    }
    auto handle = std::make_unique<loom_model>();
    handle->model = loom::load_model(path, options);
    handle->conversion_threads = options.threads;
    *out = handle.release();
  });
}

LOOM_API void loom_model_free(loom_model* model) { delete model; }

static void fill_model_info(loom_model_info* info) {
  if (info == nullptr) return;
  std::memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
  info->bos_id = info->eos_id = -1;
  info->architecture = "";
}
LOOM_CAPI_DEFINE_INIT(loom_model_info, loom_model_info_init, fill_model_info)

LOOM_API loom_status loom_model_get_info(const loom_model* model, loom_model_info* info) {
  return guard(nullptr, [&] {
    require(model, "model");
    require(info, "info");
    const auto& c = model->model->config();
    loom_model_info full;
    loom_model_info_init(&full);
    full.vocab_size = static_cast<int32_t>(c.vocab_size);
    full.context_length = static_cast<int32_t>(c.max_positions);
    full.hidden_size = static_cast<int32_t>(c.hidden_size);
    full.n_layers = static_cast<int32_t>(c.n_layers);
    full.n_heads = static_cast<int32_t>(c.n_heads);
    full.n_kv_heads = static_cast<int32_t>(c.n_kv_heads);
    full.head_dim = static_cast<int32_t>(c.head_dim);
    full.bos_id = c.bos_token_id.value_or(-1);
    full.eos_id = c.eos_token_ids.empty() ? -1 : c.eos_token_ids[0];
    full.has_tokenizer = model->model->tokenizer() != nullptr;
    full.architecture = c.architecture.c_str();
    full.weight_bytes = model->model->weight_bytes();
    loom::capi::write_result(info, full);
  });
}

LOOM_API loom_status loom_model_eos_ids(const loom_model* model, int32_t* ids, size_t cap, size_t* n) {
  return guard(nullptr, [&] {
    require(model, "model");
    loom::capi::copy_out_array(model->model->config().eos_token_ids, ids, cap, n);
  });
}

LOOM_API loom_status loom_model_load_report(const loom_model* model, int32_t trace, char* buf, size_t cap,
                                            size_t* len) {
  return guard(nullptr, [&] {
    require(model, "model");
    const auto& report = model->model->load_report();
    if (!report) throw loom::Error(loom::ErrorCode::unsupported, "this model has no load report");
    loom::capi::copy_out_string(report->to_json(trace != 0), buf, cap, len);
  });
}

LOOM_API loom_status loom_model_generation_defaults(const loom_model* model, loom_sampler_params* sampler,
                                                    loom_generate_params* gen) {
  return guard(nullptr, [&] {
    require(model, "model");
    const loom::GenerationDefaults& g = model->model->generation_defaults();
    if (sampler != nullptr) {
      if (g.temperature.from_file()) set_within_size(sampler, &loom_sampler_params::temperature, g.temperature.value);
      if (g.top_k.from_file()) set_within_size(sampler, &loom_sampler_params::top_k, g.top_k.value);
      if (g.top_p.from_file()) set_within_size(sampler, &loom_sampler_params::top_p, g.top_p.value);
      if (g.repetition_penalty.from_file()) {
        set_within_size(sampler, &loom_sampler_params::repeat_penalty, g.repetition_penalty.value);
      }
    }
    if (gen != nullptr && g.max_new_tokens.from_file()) {
      set_within_size(gen, &loom_generate_params::max_tokens, g.max_new_tokens.value);
    }
  });
}

}  // extern "C"

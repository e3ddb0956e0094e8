#include <algorithm>
#include <iterator>

#include "loom/error.hpp"
#include "loom/tokenizer.hpp"
#include "tokenizer/tokenizer_impl.hpp"

namespace loom {

namespace tok {

namespace {
// End-of-turn / end-of-generation token texts (from llama.cpp's EOG detection).
constexpr std::string_view kEndOfTurn[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|return|>", "<|call|>", "<end_of_utterance>",
    "<｜end▁of▁sentence｜>",
};
}  // namespace

bool is_end_of_turn_text(std::string_view text) noexcept {
  return std::find(std::begin(kEndOfTurn), std::end(kEndOfTurn), text) != std::end(kEndOfTurn);
}

}  // namespace tok

void Tokenizer::Impl::check_id(int32_t id) const {
  if (id < 0 || id >= size()) {
    throw Error(ErrorCode::invalid_argument,
                "token id " + std::to_string(id) + " is out of range [0, " + std::to_string(size()) + ")",
                {.file = name});
  }
}

void Tokenizer::Impl::finalize(const std::vector<int32_t>& extra_eog, bool eog_by_name_any_token) {
  int32_t n = std::max<int32_t>(vocab.max_id() + 1, static_cast<int32_t>(texts.size()));
  texts.resize(static_cast<size_t>(n));
  attrs.resize(static_cast<size_t>(n), 0);
  vocab.for_each([&](std::string_view text, int32_t id) {
    if (texts[static_cast<size_t>(id)].empty()) texts[static_cast<size_t>(id)] = text;
  });
  for (int32_t id = 0; id < n; ++id) {
    if (texts[static_cast<size_t>(id)].empty()) attrs[static_cast<size_t>(id)] |= tok::attr_empty;
  }
  auto valid = [&](std::optional<int32_t>& id) {
    if (id && (*id < 0 || *id >= n)) id.reset();
  };
  valid(bos), valid(eos), valid(unk), valid(pad);
  eos_ids.clear();
  if (eos) eos_ids.push_back(*eos);
  for (int32_t id : extra_eog) {
    if (id >= 0 && id < n) eos_ids.push_back(id);
  }
  for (int32_t id = 0; id < n; ++id) {
    const bool candidate = eog_by_name_any_token || (attrs[static_cast<size_t>(id)] & (tok::attr_special | tok::attr_added));
    if (candidate && tok::is_end_of_turn_text(texts[static_cast<size_t>(id)])) eos_ids.push_back(id);
  }
  // Texts may be cut before each run of '▁' when no token could span such a cut: every
  // '▁' in every token is part of its leading run, and '▁' itself is a token.
  split_at_metaspace = (spm != nullptr || (pre_tokenizer.empty() && bpe && !bpe->has_affixes())) &&
                       vocab.find(tok::kMetaspace).has_value();
  if (split_at_metaspace) {
    vocab.for_each([&](std::string_view text, int32_t) {
      size_t lead = 0;
      while (text.compare(lead, tok::kMetaspace.size(), tok::kMetaspace) == 0) lead += tok::kMetaspace.size();
      if (text.find(tok::kMetaspace, lead) != std::string_view::npos) split_at_metaspace = false;
    });
  }
  std::sort(eos_ids.begin(), eos_ids.end());
  eos_ids.erase(std::unique(eos_ids.begin(), eos_ids.end()), eos_ids.end());
}

void Tokenizer::Impl::pad_ids_to(int32_t n) {
  if (n <= size()) return;
  texts.resize(static_cast<size_t>(n));
  attrs.resize(static_cast<size_t>(n), tok::attr_empty);
}

namespace {
// Word cache limits: only worth it for long texts; short words repeat, long ones rarely.
constexpr size_t kWordCacheMinText = 4096;
constexpr size_t kWordCacheMaxWord = 64;
constexpr size_t kWordCacheMaxEntries = 1 << 16;
}  // namespace

void Tokenizer::Impl::encode(std::string_view text, bool add_special, bool parse_special,
                             std::vector<int32_t>& out) const {
  if (add_special) out.insert(out.end(), prefix_ids.begin(), prefix_ids.end());
  tok::ModelScratch scratch;
  auto model_encode = [&](std::string_view word, std::vector<int32_t>& ids, tok::ModelScratch& sc) {
    if (bpe) {
      bpe->encode(word, ids, sc);
    } else {
      spm->encode(word, ids, sc);
    }
  };
  // Long texts repeat their words: remember each short word's ids for this call (the
  // cache is per call, so concurrent encodes share nothing).
  const bool use_cache = text.size() >= kWordCacheMinText;
  tok::StringIdMap cache_index;  // word -> offset into cache_ids; its length is next
  std::vector<int32_t> cache_ids;
  auto encode_word = [&](std::string_view word) {
    if (!use_cache || word.size() > kWordCacheMaxWord) {
      model_encode(word, out, scratch);
      return;
    }
    if (const auto it = cache_index.find(word); it != cache_index.end()) {
      const auto begin = static_cast<size_t>(it->second);
      const auto n = static_cast<size_t>(cache_ids[begin]);
      out.insert(out.end(), cache_ids.begin() + static_cast<std::ptrdiff_t>(begin + 1),
                 cache_ids.begin() + static_cast<std::ptrdiff_t>(begin + 1 + n));
      return;
    }
    const size_t first = out.size();
    model_encode(word, out, scratch);
    if (cache_index.size() < kWordCacheMaxEntries) {
      cache_index.emplace(std::string(word), static_cast<int32_t>(cache_ids.size()));
      cache_ids.push_back(static_cast<int32_t>(out.size() - first));
      cache_ids.insert(cache_ids.end(), out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    }
  };
  auto encode_piece = [&](tok::Piece&& p) {
    if (!split_at_metaspace) {
      encode_word(p.text);
      return;
    }
    // Cut before every run of '▁' (exact: no token has a '▁' after another character).
    const std::string_view t = p.text;
    const std::string_view meta = tok::kMetaspace;
    size_t start = 0;
    for (size_t i = t.find(meta, 1); i != std::string_view::npos; i = t.find(meta, i + meta.size())) {
      const bool run_continues = i >= meta.size() && t.compare(i - meta.size(), meta.size(), meta) == 0;
      if (!run_continues && i > start) {
        encode_word(t.substr(start, i - start));
        start = i;
      }
    }
    encode_word(t.substr(start));
  };
  const tok::PieceSink sink = encode_piece;
  auto run_model = [&](std::string&& s, bool at_start) {
    pre_tokenizer.for_each(tok::Piece{std::move(s), at_start}, sink);
  };
  std::vector<tok::AddedTokenMatcher::Segment> segs;
  raw_matcher.split(text, parse_special, segs);
  std::vector<tok::AddedTokenMatcher::Segment> sub;
  for (const auto& seg : segs) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    std::string s(text.substr(seg.begin, seg.end - seg.begin));
    normalizer.apply(s);
    if (normalized_matcher.empty()) {
      run_model(std::move(s), seg.begin == 0);
      continue;
    }
    sub.clear();
    normalized_matcher.split(s, parse_special, sub);
    for (const auto& part : sub) {
      if (part.id >= 0) {
        out.push_back(part.id);
      } else {
        run_model(s.substr(part.begin, part.end - part.begin), seg.begin == 0 && part.begin == 0);
      }
    }
  }
  if (add_special) out.insert(out.end(), suffix_ids.begin(), suffix_ids.end());
}

std::string Tokenizer::Impl::decode_piece(int32_t id, bool first) const {
  const auto i = static_cast<size_t>(id);
  if (attrs[i] & tok::attr_silent) return {};
  return decoder.decode_token(texts[i], first);
}

// ---- Tokenizer ----

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::shared_ptr<const Tokenizer> Tokenizer::from_tokenizer_json(std::string_view json,
                                                                std::string_view display_name) {
  return from_tokenizer_json(json, {}, display_name);
}

std::shared_ptr<const Tokenizer> Tokenizer::from_tokenizer_json(std::string_view json,
                                                                std::string_view config_json,
                                                                std::string_view display_name) {
  return std::make_shared<const Tokenizer>(tok::build_from_tokenizer_json(json, config_json, display_name));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  impl_->encode(text, add_special, parse_special, out);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  for (int32_t id : ids) impl_->check_id(id);
  StreamDecoder stream(std::shared_ptr<const Tokenizer>(std::shared_ptr<const Tokenizer>{}, this),
                       skip_special);
  std::string out;
  for (int32_t id : ids) out += stream.feed(id);
  out += stream.finish();
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  impl_->check_id(id);
  return impl_->decode_piece(id, false);
}

const std::string& Tokenizer::token_text(int32_t id) const {
  impl_->check_id(id);
  return impl_->texts[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token_text) const {
  if (const auto it = impl_->added_ids.find(token_text); it != impl_->added_ids.end()) return it->second;
  return impl_->vocab.find(token_text);
}

int32_t Tokenizer::vocab_size() const noexcept { return impl_->size(); }
std::optional<int32_t> Tokenizer::bos_id() const noexcept { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const noexcept { return impl_->eos; }
std::optional<int32_t> Tokenizer::unk_id() const noexcept { return impl_->unk; }
std::optional<int32_t> Tokenizer::pad_id() const noexcept { return impl_->pad; }
const std::vector<int32_t>& Tokenizer::eos_ids() const noexcept { return impl_->eos_ids; }
bool Tokenizer::is_eos(int32_t id) const noexcept {
  return std::binary_search(impl_->eos_ids.begin(), impl_->eos_ids.end(), id);
}
bool Tokenizer::is_special(int32_t id) const noexcept {
  return id >= 0 && id < impl_->size() && (impl_->attrs[static_cast<size_t>(id)] & tok::attr_special);
}
bool Tokenizer::add_bos() const noexcept { return !impl_->prefix_ids.empty(); }
bool Tokenizer::add_eos() const noexcept { return !impl_->suffix_ids.empty(); }
const std::string& Tokenizer::chat_template() const noexcept { return impl_->chat_template; }
const std::vector<std::string>& Tokenizer::load_warnings() const noexcept { return impl_->load_warnings; }

std::string Tokenizer::bos_token() const {
  if (impl_->bos_text) return *impl_->bos_text;
  const auto id = impl_->bos;
  return id && *id >= 0 && static_cast<size_t>(*id) < impl_->texts.size() ? impl_->texts[static_cast<size_t>(*id)] : std::string();
}

std::string Tokenizer::eos_token() const {
  if (impl_->eos_text) return *impl_->eos_text;
  const auto id = impl_->eos;
  return id && *id >= 0 && static_cast<size_t>(*id) < impl_->texts.size() ? impl_->texts[static_cast<size_t>(*id)] : std::string();
}
const std::string& Tokenizer::name() const noexcept { return impl_->name; }

bool Tokenizer::has_gguf_metadata() const noexcept { return impl_->gguf_metadata != nullptr; }

Metadata Tokenizer::to_gguf_metadata() const {
  if (!impl_->gguf_metadata) {
    throw Error(ErrorCode::unsupported,
                "tokenizer '" + impl_->name +
                    "' comes from a tokenizer.json pipeline that GGUF metadata cannot express");
  }
  return *impl_->gguf_metadata;
}

// ---- StreamDecoder ----

struct Tokenizer::StreamDecoder::State {
  bool skip_special = false;
  tok::DecoderPlan::Stream stream;
};

Tokenizer::StreamDecoder::StreamDecoder(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special)
    : tokenizer_(std::move(tokenizer)), state_(std::make_unique<State>()) {
  if (!tokenizer_) throw Error(ErrorCode::invalid_argument, "StreamDecoder needs a tokenizer");
  state_->skip_special = skip_special;
  tokenizer_->impl().decoder.reset(state_->stream);
}

Tokenizer::StreamDecoder::~StreamDecoder() = default;
Tokenizer::StreamDecoder::StreamDecoder(StreamDecoder&&) noexcept = default;
Tokenizer::StreamDecoder& Tokenizer::StreamDecoder::operator=(StreamDecoder&&) noexcept = default;

std::string Tokenizer::StreamDecoder::feed(int32_t id) {
  const Impl& impl = tokenizer_->impl();
  impl.check_id(id);
  if (state_->skip_special && (impl.attrs[static_cast<size_t>(id)] & tok::attr_special)) return {};
  if (impl.attrs[static_cast<size_t>(id)] & tok::attr_silent) return {};
  std::string piece = impl.decode_piece(id, state_->stream.tokens == 0);
  return impl.decoder.push(state_->stream, std::move(piece));
}

std::string Tokenizer::StreamDecoder::finish() {
  const Impl& impl = tokenizer_->impl();
  std::string rest = impl.decoder.finish(state_->stream);
  impl.decoder.reset(state_->stream);
  return rest;
}

void Tokenizer::StreamDecoder::reset() { tokenizer_->impl().decoder.reset(state_->stream); }

}  // namespace loom

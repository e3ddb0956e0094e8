// Builds a tokenizer from GGUF tokenizer metadata, with llama.cpp's semantics
// (llama-vocab.cpp): "llama" = SentencePiece-style score merges over the whole text with
// '▁' for spaces; "gpt2" = byte-level BPE after the pre-tokenizer regexes that
// `tokenizer.ggml.pre` names.
#include <algorithm>
#include <cctype>
#include <string>

#include "loom/error.hpp"
#include "loom/format.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/str_cat.hpp"
#include "tokenizer/tokenizer_impl.hpp"

namespace loom::tok {

namespace {

// ---- Pre-tokenizer regex lists, by `tokenizer.ggml.pre` (llama.cpp's llm_tokenizer_bpe) ----
// Each list is applied in order; every regex splits each piece into its matches and the
// text between them (HF "Isolated"). The contraction alternatives are written out as
// [sS] classes, as llama.cpp writes them, instead of (?i:...).

constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kPoro = R"( ?[^(\s|.,!?…。，、।۔،)]+)";
constexpr std::string_view kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kDeepseekLlmLetters =
    R"(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)";

struct PreTokenizerSpec {
  std::vector<std::string_view> names;
  std::vector<std::string_view> regexes;
  bool ignore_merges = false;
  bool add_bos = false;  // llama.cpp's default before tokenizer.ggml.add_bos_token
};

const std::vector<PreTokenizerSpec>& pre_tokenizer_specs() {
  static const std::vector<PreTokenizerSpec> specs = {
      {{"default"},
       {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {kLlama3}, true, true},
      {{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, {kLlama3}},
      {{"deepseek-llm"},
       {"[\r\n]", kDeepseekLlmLetters, R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)", R"(\s+$)", "[一-龥ࠀ-一가-퟿]+", R"(\p{N}+)"}},
      {{"deepseek-coder"}, {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[一-龥ࠀ-一가-퟿]+", R"(\p{N})"}},
      {{"deepseek-v3"},
       {R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {R"(\p{N})", kGpt2}},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code",
        "roberta-bpe", "gigachat", "mpt", "olmo", "jais", "trillion", "exaone4", "mellum", "a.x-4.0"},
       {kGpt2}},
      {{"qwen2", "stablelm2", "deepseek-r1-qwen", "megrez", "hunyuan"}, {kQwen2}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kPoro}},
      {{"viking"}, {kPoro, R"(\p{N})"}},
      {{"tekken"}, {kTekken}, true, true},
      {{"gpt-4o", "llama4"}, {kGpt4o}},
      {{"seed-coder"},
       {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
  };
  return specs;
}

const PreTokenizerSpec* find_pre_tokenizer(std::string_view name) {
  for (const auto& spec : pre_tokenizer_specs()) {
    if (std::find(spec.names.begin(), spec.names.end(), name) != spec.names.end()) return &spec;
  }
  return nullptr;
}

class MetaReader {
 public:
  MetaReader(const Metadata& md, std::string_view name) : md_(md), name_(name) {}

  [[noreturn]] void fail(const std::string& what, ErrorCode code = ErrorCode::format) const {
    throw Error(code, what, {.file = name_});
  }
  const MetaValue* find(std::string_view key) const { return md_.find(key); }

  // Runs `fn`, turning a MetaValue type error into one that names the key.
  template <typename Fn>
  auto guarded(std::string_view key, Fn&& fn) const {
    try {
      return fn();
    } catch (const Error& e) {
      fail(str_cat(key, ": ", e.detail()));
    }
  }
  std::optional<std::string> opt_string(std::string_view key) const {
    if (!find(key)) return std::nullopt;
    return guarded(key, [&] { return find(key)->as_string(); });
  }
  std::optional<bool> opt_bool(std::string_view key) const {
    if (!find(key)) return std::nullopt;
    return guarded(key, [&] { return find(key)->as_bool(); });
  }
  std::optional<int64_t> opt_int(std::string_view key) const {
    if (!find(key)) return std::nullopt;
    return guarded(key, [&] { return find(key)->as_int(); });
  }
  enum class Items { strings, numbers, integers };
  // The array at `key`, or nullptr when absent; an array of other items fails, naming it.
  const MetaValue* opt_array(std::string_view key, Items items) const {
    const MetaValue* v = find(key);
    if (!v) return nullptr;
    if (v->type() != MetaValue::Type::array) fail(str_cat(key, " must be an array"));
    const MetaValue probe = v->array_size() > 0 ? v->array_item(0) : MetaValue();
    const bool fits = v->array_size() == 0 ||
                      (items == Items::strings ? v->element_type() == MetaValue::Type::string
                       : items == Items::numbers ? probe.is_number()
                                                 : probe.is_integer());
    if (!fits) {
      const std::string_view wanted = items == Items::strings ? "strings" : items == Items::numbers ? "numbers" : "integers";
      fail(str_cat(key, " must be an array of ", wanted, ", not of ", meta_type_name(v->element_type())));
    }
    return v;
  }

 private:
  const Metadata& md_;
  std::string name_;
};

std::string lowercase_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::vector<int32_t> gguf_end_of_turn_ids(const Metadata& md, std::string_view display_name) {
  MetaReader r(md, display_name);
  const MetaValue* tokens = r.opt_array("tokenizer.ggml.tokens", MetaReader::Items::strings);
  const MetaValue* types = r.opt_array("tokenizer.ggml.token_type", MetaReader::Items::integers);
  const size_t n = tokens ? tokens->array_size() : 0;
  std::vector<int32_t> out;
  for (std::string_view key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const auto id = r.opt_int(key);
    if (!id || *id < 0 || static_cast<size_t>(*id) >= n) continue;  // absent, or 0xFFFFFFFF ("none")
    if (types != nullptr) {
      if (static_cast<size_t>(*id) >= types->array_size()) continue;
      const int64_t type = r.guarded("tokenizer.ggml.token_type", [&] { return types->array_item(static_cast<size_t>(*id)).as_int(); });
      if (type != type_control && type != type_user_defined) continue;
    }
    if (std::find(out.begin(), out.end(), static_cast<int32_t>(*id)) == out.end()) out.push_back(static_cast<int32_t>(*id));
  }
  return out;
}

std::unique_ptr<Tokenizer::Impl> build_from_gguf(const Metadata& md, std::string_view display_name) {
  const MetaReader r(md, display_name);
  auto impl = std::make_unique<Tokenizer::Impl>();
  impl->name = std::string(display_name);
  auto kept = std::make_shared<Metadata>();
  for (const auto& [key, value] : md.entries()) {
    if (key.rfind("tokenizer.", 0) == 0) kept->set(key, value);
  }
  impl->gguf_metadata = std::move(kept);

  const auto model = r.opt_string("tokenizer.ggml.model");
  if (!model) r.fail("no tokenizer.ggml.model: this GGUF carries no tokenizer");
  const bool spm = *model == "llama";
  if (!spm && *model != "gpt2") {
    r.fail(str_cat("tokenizer.ggml.model '", *model, "' is not supported (llama and gpt2 are)"),
           ErrorCode::unsupported);
  }

  // ---- tokens, scores, types ----
  const MetaValue* tokens = r.opt_array("tokenizer.ggml.tokens", MetaReader::Items::strings);
  if (!tokens || tokens->array_size() == 0) r.fail("tokenizer.ggml.tokens is missing or empty");
  const size_t n = tokens->array_size();
  if (n > static_cast<size_t>(INT32_MAX)) r.fail("tokenizer.ggml.tokens is too large");
  const MetaValue* scores = r.opt_array("tokenizer.ggml.scores", MetaReader::Items::numbers);
  const MetaValue* types = r.opt_array("tokenizer.ggml.token_type", MetaReader::Items::integers);
  if (scores && scores->array_size() < n) r.fail("tokenizer.ggml.scores has fewer entries than tokens");
  if (types && types->array_size() < n) r.fail("tokenizer.ggml.token_type has fewer entries than tokens");

  impl->texts.resize(n);
  impl->attrs.assign(n, 0);
  std::vector<float> score_values(n, 0.0f);
  std::vector<int64_t> type_values(n, tok::type_normal);
  impl->vocab.reserve(n);
  // Each text kept, an empty one named as llama.cpp names it, and into the vocabulary.
  const size_t dup = impl->vocab.set_each(n, [&](size_t i) {
    impl->texts[i] = tokens->string_item(i);
    if (impl->texts[i].empty()) impl->texts[i] = str_cat("[EMPTY_", std::to_string(i), "]");
    return std::pair<std::string_view, int32_t>{impl->texts[i], static_cast<int32_t>(i)};
  });
  if (dup < n) {
    r.fail(str_cat("duplicate token '", impl->texts[dup], "' in tokenizer.ggml.tokens at ", std::to_string(dup)));
  }
  for (size_t i = 0; i < n; ++i) {
    if (scores) score_values[i] = static_cast<float>(r.guarded("tokenizer.ggml.scores", [&] { return scores->array_item(i).as_double(); }));
    if (types) type_values[i] = r.guarded("tokenizer.ggml.token_type", [&] { return types->array_item(i).as_int(); });
  }

  // ---- special ids (llama.cpp defaults for "llama") ----
  auto id_key = [&](std::string_view key, std::optional<int32_t> fallback) -> std::optional<int32_t> {
    const auto v = r.opt_int(key);
    if (v && *v >= 0 && static_cast<size_t>(*v) < n) return static_cast<int32_t>(*v);
    return fallback;
  };
  impl->bos = id_key("tokenizer.ggml.bos_token_id", spm ? std::optional<int32_t>(1) : std::nullopt);
  impl->eos = id_key("tokenizer.ggml.eos_token_id", spm ? std::optional<int32_t>(2) : std::nullopt);
  impl->unk = id_key("tokenizer.ggml.unknown_token_id", spm ? std::optional<int32_t>(0) : std::nullopt);
  impl->pad = id_key("tokenizer.ggml.padding_token_id", std::nullopt);
  const std::vector<int32_t> extra_eog = gguf_end_of_turn_ids(md, display_name);

  // ---- token attributes; control / unknown / user-defined tokens are matched first ----
  const std::string model_name = lowercase_ascii(r.opt_string("general.name").value_or(""));
  const bool phi3 = model_name.find("phi-3") != std::string::npos || model_name.find("phi3") != std::string::npos;
  std::vector<AddedToken> added;
  std::vector<std::string> added_texts;
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    const int64_t type = type_values[i];
    // llama.cpp promotes end-of-turn texts (<|im_end|>, </s>, ...) to control tokens.
    const bool control = type == tok::type_control || type == tok::type_unknown || is_end_of_turn_text(impl->texts[i]);
    if (type == tok::type_byte) impl->attrs[i] |= attr_byte;
    if (type == tok::type_unused) impl->attrs[i] |= attr_unused;
    if (control) impl->attrs[i] |= attr_special;
    if (type == tok::type_user_defined) impl->attrs[i] |= attr_added;
    if (!control && type != tok::type_user_defined) continue;
    AddedToken a;
    a.id = id;
    a.content = impl->texts[i];
    a.special = control;
    // llama.cpp's Phi-3 rule (by model name): special tokens swallow following spaces,
    // except <unk>, <s> and <|endoftext|>.
    if (phi3) {
      const std::string& t = impl->texts[i];
      a.rstrip = t != "<unk>" && t != "<s>" && t != "<|endoftext|>";
    }
    added_texts.push_back(a.content);
    impl->added_ids.emplace(a.content, a.id);
    added.push_back(std::move(a));
  }
  impl->raw_matcher = AddedTokenMatcher(std::move(added), std::move(added_texts),
                                        AddedTokenMatcher::Order::longest_first);

  bool add_bos = false;
  bool add_eos = false;
  std::vector<DecoderStep> dsteps;
  if (spm) {
    const bool add_space_prefix = r.opt_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    add_bos = true;
    const std::string space = "\xE2\x96\x81";
    if (add_space_prefix) impl->normalizer.add({.kind = NormalizerStep::Kind::prepend, .text = space});
    impl->normalizer.add({.kind = NormalizerStep::Kind::replace, .text = " ", .content = space});
    impl->spm = std::make_unique<SpmModel>(impl->vocab, std::move(score_values), impl->unk);
    dsteps.push_back({.kind = DecoderStep::Kind::replace, .text = space, .content = " "});
    dsteps.push_back({.kind = DecoderStep::Kind::byte_fallback});
    dsteps.push_back({.kind = DecoderStep::Kind::fuse});
    if (add_space_prefix) dsteps.push_back({.kind = DecoderStep::Kind::strip, .content = " ", .start = 1});
  } else {
    const std::string pre_name = r.opt_string("tokenizer.ggml.pre").value_or("default");
    const PreTokenizerSpec* spec = find_pre_tokenizer(pre_name.empty() ? "default" : pre_name);
    if (!spec) {
      r.fail(str_cat("tokenizer.ggml.pre '", pre_name, "' is not a pre-tokenizer loom knows"), ErrorCode::unsupported);
    }
    add_bos = spec->add_bos;
    for (std::string_view re : spec->regexes) {
      PreTokenizerStep step;
      step.kind = PreTokenizerStep::Kind::split_regex;
      step.regex = std::make_shared<const Regex>(re);
      step.behavior = SplitBehavior::isolated;
      impl->pre_tokenizer.add(std::move(step));
    }
    PreTokenizerStep bytes;
    bytes.kind = PreTokenizerStep::Kind::byte_level;
    bytes.add_prefix_space = false;
    bytes.use_regex = false;
    impl->pre_tokenizer.add(std::move(bytes));

    MergeTable merges;
    if (const MetaValue* list = r.opt_array("tokenizer.ggml.merges", MetaReader::Items::strings)) {
      auto texts = [&](size_t i) -> std::pair<std::string_view, std::string_view> {
        const std::string_view m = list->string_item(i);
        const auto parts = split_merge(m);
        if (!parts) r.fail(str_cat("merge '", m, "' is not \"a b\""));
        return *parts;
      };
      // A merge whose parts are not tokens can never fire on token symbols: left out.
      merges = build_merge_table(impl->vocab, list->array_size(), texts,
                                 [](size_t, std::string_view, std::string_view) {});
    } else {
      r.fail("tokenizer.ggml.merges is missing (needed by the gpt2 tokenizer model)");
    }
    BpeModel::Options opts;
    opts.ignore_merges = spec->ignore_merges;
    impl->bpe = std::make_unique<BpeModel>(impl->vocab, std::move(merges), std::move(opts));
    dsteps.push_back({.kind = DecoderStep::Kind::byte_level});
  }
  impl->decoder = DecoderPlan(std::move(dsteps));

  // A default that needs a missing BOS id is dropped; an explicit flag must be honoured.
  const auto add_bos_key = r.opt_bool("tokenizer.ggml.add_bos_token");
  const auto add_eos_key = r.opt_bool("tokenizer.ggml.add_eos_token");
  add_bos = add_bos_key.value_or(add_bos && impl->bos.has_value());
  add_eos = add_eos_key.value_or(add_eos);
  if (add_bos && !impl->bos) r.fail("tokenizer.ggml.add_bos_token is true but there is no BOS token id");
  if (add_eos && !impl->eos) r.fail("tokenizer.ggml.add_eos_token is true but there is no EOS token id");
  if (add_bos) impl->prefix_ids.push_back(*impl->bos);
  if (add_eos) impl->suffix_ids.push_back(*impl->eos);

  impl->chat_template = r.opt_string("tokenizer.chat_template").value_or("");
  impl->finalize(extra_eog, true);
  return impl;
}

}  // namespace loom::tok

// Builds a tokenizer from a Hugging Face tokenizer.json (+ tokenizer_config.json).
#include <simdjson.h>

#include <algorithm>
#include <string>

#include "format/lenient_json.hpp"
#include "loom/error.hpp"
#include "tokenizer/str_cat.hpp"
#include "tokenizer/tokenizer_impl.hpp"

namespace loom::tok {

namespace {

// Unused ids tolerated beyond twice the number of tokens a document defines.
constexpr int64_t kSparseIdSlack = 1024;
// Real normalizers grow text by a few times (NFKC, " " -> "▁", a prepended "▁"); this is
// far above them and far below what turns a short input into gigabytes.
constexpr double kMaxNormalizerGrowth = 4096.0;

// tokenizer_config.json beside `display_name` (a tokenizer.json path), or the bare name.
std::string config_name(std::string_view display_name) {
  constexpr std::string_view kJson = "tokenizer.json";
  if (!display_name.ends_with(kJson)) return "tokenizer_config.json";
  return str_cat(display_name.substr(0, display_name.size() - kJson.size()), "tokenizer_config.json");
}

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

class JsonReader {
 public:
  explicit JsonReader(std::string_view name) : name_(name) {}

  [[noreturn]] void fail(const std::string& what, ErrorCode code = ErrorCode::format) const {
    throw Error(code, what, {.file = name_});
  }

  // `storage` keeps the (padded) text alive as long as the returned document. The text
  // is read leniently (comments, trailing commas: format/lenient_json.hpp); integers
  // beyond 64 bits (transformers' model_max_length = int(1e30)) become doubles, which
  // loom never reads. `file` names the document in errors and warnings.
  element parse(simdjson::dom::parser& parser, simdjson::padded_string& storage, std::string_view text,
                const std::string& file, std::vector<std::string>& warnings, bool padded = false) const {
    return format::parse_lenient_json(parser, storage, text, file, &warnings,
                                      {.widen_huge_integers = true, .padded_input = padded});
  }

  std::optional<element> field(element obj, std::string_view key) const {
    if (!obj.is_object()) return std::nullopt;
    element v;
    if (obj.get_object().at_key(key).get(v)) return std::nullopt;
    if (v.is_null()) return std::nullopt;
    return v;
  }

  std::string_view string(element e, std::string_view what) const {
    std::string_view s;
    if (e.get_string().get(s)) fail(str_cat(what, " must be a string"));
    return s;
  }
  std::optional<std::string_view> opt_string(element obj, std::string_view key) const {
    const auto v = field(obj, key);
    if (!v) return std::nullopt;
    return string(*v, key);
  }
  std::string_view req_string(element obj, std::string_view key, std::string_view where) const {
    const auto v = field(obj, key);
    if (!v) fail(str_cat(where, ": missing \"", key, "\""));
    return string(*v, key);
  }
  bool opt_bool(element obj, std::string_view key, bool fallback) const {
    const auto v = field(obj, key);
    if (!v) return fallback;
    bool b = false;
    if (v->get_bool().get(b)) fail(str_cat("\"", key, "\" must be true or false"));
    return b;
  }
  int64_t integer(element e, std::string_view what) const {
    int64_t i = 0;
    if (e.get_int64().get(i)) {
      uint64_t u = 0;
      if (e.get_uint64().get(u) || u > static_cast<uint64_t>(INT32_MAX)) {
        fail(str_cat(what, " must be an integer"));
      }
      i = static_cast<int64_t>(u);
    }
    return i;
  }
  // Ids index dense per-token tables, so they are bounded well above any real vocabulary
  // (the largest have ~260k tokens) and far below what a hostile file could make us allocate.
  static constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
  int32_t token_id(element e, std::string_view what) const {
    const int64_t i = integer(e, what);
    if (i < 0 || i > kMaxTokenId) {
      fail(str_cat(what, " ", std::to_string(i), " is not a token id in [0, ", std::to_string(kMaxTokenId), "]"));
    }
    return static_cast<int32_t>(i);
  }
  array arr(element e, std::string_view what) const {
    array a;
    if (e.get_array().get(a)) fail(str_cat(what, " must be an array"));
    return a;
  }
  object obj(element e, std::string_view what) const {
    object o;
    if (e.get_object().get(o)) fail(str_cat(what, " must be an object"));
    return o;
  }

  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

// HF patterns: {"String": "..."} or {"Regex": "..."}.
struct Pattern {
  std::string literal;
  std::shared_ptr<const Regex> regex;
};

Pattern read_pattern(const JsonReader& r, element e, std::string_view where) {
  Pattern p;
  if (const auto s = r.opt_string(e, "String")) {
    p.literal = std::string(*s);
  } else if (const auto re = r.opt_string(e, "Regex")) {
    try {
      p.regex = std::make_shared<const Regex>(*re);
    } catch (const Error& err) {
      r.fail(str_cat(where, ": ", err.detail()));
    }
  } else {
    r.fail(str_cat(where, ": pattern must be {\"String\": ...} or {\"Regex\": ...}"));
  }
  return p;
}

SplitBehavior read_behavior(const JsonReader& r, element e, SplitBehavior fallback) {
  const auto s = r.opt_string(e, "behavior");
  if (!s) return fallback;
  static constexpr std::pair<std::string_view, SplitBehavior> kNames[] = {
      {"Removed", SplitBehavior::removed},
      {"Isolated", SplitBehavior::isolated},
      {"MergedWithPrevious", SplitBehavior::merged_with_previous},
      {"MergedWithNext", SplitBehavior::merged_with_next},
      {"Contiguous", SplitBehavior::contiguous},
  };
  for (const auto& [name, b] : kNames) {
    if (*s == name) return b;
  }
  r.fail(str_cat("unknown split behavior '", *s, "'"));
}

PreTokenizerStep::Prepend read_prepend_scheme(const JsonReader& r, element e) {
  if (const auto s = r.opt_string(e, "prepend_scheme")) {
    if (*s == "always") return PreTokenizerStep::Prepend::always;
    if (*s == "first") return PreTokenizerStep::Prepend::first;
    if (*s == "never") return PreTokenizerStep::Prepend::never;
    r.fail(str_cat("unknown Metaspace prepend_scheme '", *s, "'"));
  }
  // Files written before prepend_scheme existed carry add_prefix_space instead.
  return r.opt_bool(e, "add_prefix_space", true) ? PreTokenizerStep::Prepend::always
                                                 : PreTokenizerStep::Prepend::never;
}

std::string read_char(const JsonReader& r, element e, std::string_view key, std::string_view fallback) {
  const auto s = r.opt_string(e, key);
  return std::string(s ? *s : fallback);
}

[[noreturn]] void unsupported(const JsonReader& r, std::string_view stage, std::string_view type) {
  r.fail(str_cat(stage, " type '", type, "' is not supported"), ErrorCode::unsupported);
}

std::string_view type_of(const JsonReader& r, element e, std::string_view stage) {
  const auto t = r.opt_string(e, "type");
  if (!t) r.fail(str_cat(stage, " without \"type\""));
  return *t;
}

void read_normalizer(const JsonReader& r, element e, Normalizer& out) {
  using K = NormalizerStep::Kind;
  const std::string_view type = type_of(r, e, "normalizer");
  if (type == "Sequence") {
    const auto list = r.field(e, "normalizers");
    if (!list) r.fail("normalizer Sequence without \"normalizers\"");
    for (element child : r.arr(*list, "normalizers")) read_normalizer(r, child, out);
    return;
  }
  NormalizerStep step;
  if (type == "NFC") step.kind = K::nfc;
  else if (type == "NFD") step.kind = K::nfd;
  else if (type == "NFKC") step.kind = K::nfkc;
  else if (type == "NFKD") step.kind = K::nfkd;
  else if (type == "Lowercase") step.kind = K::lowercase;
  else if (type == "StripAccents") step.kind = K::strip_accents;
  else if (type == "Strip") {
    step.kind = K::strip;
    step.left = r.opt_bool(e, "strip_left", true);
    step.right = r.opt_bool(e, "strip_right", true);
  } else if (type == "Prepend") {
    step.kind = K::prepend;
    step.text = std::string(r.req_string(e, "prepend", "Prepend normalizer"));
  } else if (type == "Replace") {
    step.kind = K::replace;
    const auto pat = r.field(e, "pattern");
    if (!pat) r.fail("Replace normalizer without \"pattern\"");
    Pattern p = read_pattern(r, *pat, "Replace normalizer");
    step.text = std::move(p.literal);
    step.regex = std::move(p.regex);
    step.content = std::string(r.req_string(e, "content", "Replace normalizer"));
  } else {
    unsupported(r, "normalizer", type);
  }
  out.add(std::move(step));
}

void read_pre_tokenizer(const JsonReader& r, element e, PreTokenizer& out) {
  using K = PreTokenizerStep::Kind;
  const std::string_view type = type_of(r, e, "pre_tokenizer");
  if (type == "Sequence") {
    const auto list = r.field(e, "pretokenizers");
    if (!list) r.fail("pre_tokenizer Sequence without \"pretokenizers\"");
    for (element child : r.arr(*list, "pretokenizers")) read_pre_tokenizer(r, child, out);
    return;
  }
  PreTokenizerStep step;
  if (type == "Split") {
    const auto pat = r.field(e, "pattern");
    if (!pat) r.fail("Split pre-tokenizer without \"pattern\"");
    Pattern p = read_pattern(r, *pat, "Split pre-tokenizer");
    step.kind = p.regex ? K::split_regex : K::split_literal;
    step.regex = std::move(p.regex);
    step.text = std::move(p.literal);
    step.behavior = read_behavior(r, e, SplitBehavior::isolated);
    step.invert = r.opt_bool(e, "invert", false);
  } else if (type == "ByteLevel") {
    step.kind = K::byte_level;
    step.add_prefix_space = r.opt_bool(e, "add_prefix_space", true);
    step.use_regex = r.opt_bool(e, "use_regex", true);
  } else if (type == "Metaspace") {
    step.kind = K::metaspace;
    step.text = read_char(r, e, "replacement", "\xE2\x96\x81");
    step.prepend = read_prepend_scheme(r, e);
    step.split = r.opt_bool(e, "split", true);
  } else if (type == "Digits") {
    step.kind = K::digits;
    step.individual = r.opt_bool(e, "individual_digits", false);
  } else if (type == "Punctuation") {
    step.kind = K::punctuation;
    step.behavior = read_behavior(r, e, SplitBehavior::isolated);
  } else if (type == "Whitespace") {
    step.kind = K::whitespace;
  } else if (type == "WhitespaceSplit") {
    step.kind = K::whitespace_split;
  } else if (type == "CharDelimiterSplit") {
    step.kind = K::char_delimiter;
    step.text = std::string(r.req_string(e, "delimiter", "CharDelimiterSplit"));
  } else {
    unsupported(r, "pre_tokenizer", type);
  }
  out.add(std::move(step));
}

void read_decoder(const JsonReader& r, element e, std::vector<DecoderStep>& out) {
  using K = DecoderStep::Kind;
  const std::string_view type = type_of(r, e, "decoder");
  if (type == "Sequence") {
    const auto list = r.field(e, "decoders");
    if (!list) r.fail("decoder Sequence without \"decoders\"");
    for (element child : r.arr(*list, "decoders")) read_decoder(r, child, out);
    return;
  }
  DecoderStep step;
  if (type == "ByteLevel") {
    step.kind = K::byte_level;
  } else if (type == "ByteFallback") {
    step.kind = K::byte_fallback;
  } else if (type == "Fuse") {
    step.kind = K::fuse;
  } else if (type == "Metaspace") {
    step.kind = K::metaspace;
    step.text = read_char(r, e, "replacement", "\xE2\x96\x81");
    step.prepend = read_prepend_scheme(r, e) != PreTokenizerStep::Prepend::never;
  } else if (type == "Replace") {
    step.kind = K::replace;
    const auto pat = r.field(e, "pattern");
    if (!pat) r.fail("Replace decoder without \"pattern\"");
    Pattern p = read_pattern(r, *pat, "Replace decoder");
    step.text = std::move(p.literal);
    step.regex = std::move(p.regex);
    step.content = std::string(r.req_string(e, "content", "Replace decoder"));
  } else if (type == "Strip") {
    step.kind = K::strip;
    step.content = std::string(r.req_string(e, "content", "Strip decoder"));
    const auto start = r.field(e, "start");
    const auto stop = r.field(e, "stop");
    step.start = start ? static_cast<uint32_t>(std::clamp<int64_t>(r.integer(*start, "start"), 0, 1 << 20)) : 0;
    step.stop = stop ? static_cast<uint32_t>(std::clamp<int64_t>(r.integer(*stop, "stop"), 0, 1 << 20)) : 0;
  } else {
    unsupported(r, "decoder", type);
  }
  out.push_back(std::move(step));
}

// TemplateProcessing / Roberta / Bert / Sequence: the ids add_special puts around A.
void read_post_processor(const JsonReader& r, element e, std::vector<int32_t>& prefix,
                         std::vector<int32_t>& suffix) {
  const std::string_view type = type_of(r, e, "post_processor");
  if (type == "Sequence") {
    const auto list = r.field(e, "processors");
    if (!list) r.fail("post_processor Sequence without \"processors\"");
    for (element child : r.arr(*list, "processors")) read_post_processor(r, child, prefix, suffix);
    return;
  }
  if (type == "ByteLevel") return;  // offsets only
  if (type == "TemplateProcessing") {
    const auto single = r.field(e, "single");
    if (!single) r.fail("TemplateProcessing without \"single\"");
    const auto specials = r.field(e, "special_tokens");
    bool seen_sequence = false;
    for (element item : r.arr(*single, "single")) {
      if (r.field(item, "Sequence")) {
        seen_sequence = true;
        continue;
      }
      const auto st = r.field(item, "SpecialToken");
      if (!st) r.fail("TemplateProcessing item must be Sequence or SpecialToken");
      const std::string_view name = r.req_string(*st, "id", "TemplateProcessing SpecialToken");
      std::vector<int32_t> ids;
      const auto entry = specials ? r.field(*specials, name) : std::nullopt;
      if (!entry) r.fail(str_cat("TemplateProcessing names special token '", name, "' without ids"));
      const auto id_list = r.field(*entry, "ids");
      if (!id_list) r.fail(str_cat("TemplateProcessing special token '", name, "' without \"ids\""));
      for (element id : r.arr(*id_list, "ids")) ids.push_back(r.token_id(id, "special token id"));
      auto& dst = seen_sequence ? suffix : prefix;
      dst.insert(dst.end(), ids.begin(), ids.end());
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const auto& [key, dst] : {std::pair{"cls", &prefix}, std::pair{"sep", &suffix}}) {
      const auto pair = r.field(e, key);
      if (!pair) r.fail(str_cat(type, " without \"", key, "\""));
      auto a = r.arr(*pair, key);
      element id_el;
      if (a.at(1).get(id_el)) r.fail(str_cat(type, " \"", key, "\" must be [token, id]"));
      dst->push_back(r.token_id(id_el, key));
    }
    return;
  }
  unsupported(r, "post_processor", type);
}

// tokenizer_config.json values are a token string, an AddedToken object or null.
std::optional<std::string> config_token(const JsonReader& r, element cfg, std::string_view key) {
  const auto v = r.field(cfg, key);
  if (!v) return std::nullopt;
  if (v->is_string()) return std::string(r.string(*v, key));
  if (const auto c = r.opt_string(*v, "content")) return std::string(*c);
  return std::nullopt;
}

std::optional<int32_t> lookup(const Tokenizer::Impl& impl, const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  if (const auto it = impl.added_ids.find(*text); it != impl.added_ids.end()) return it->second;
  return impl.vocab.find(*text);
}

// Tokenizer classes whose add_bos_token/add_eos_token rebuild the post-processor
// (transformers' LlamaTokenizerFast.update_post_processor and its kin).
constexpr std::string_view kBosFlagClasses[] = {
    "LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer", "CodeLlamaTokenizerFast",
    "GemmaTokenizer", "GemmaTokenizerFast",
};

}  // namespace

std::unique_ptr<Tokenizer::Impl> build_from_tokenizer_json(std::string_view json,
                                                          std::string_view config_json,
                                                          std::string_view display_name, bool json_padded) {
  const JsonReader r(display_name);
  auto impl = std::make_unique<Tokenizer::Impl>();
  impl->name = std::string(display_name);
  simdjson::dom::parser parser;
  simdjson::padded_string padded;
  const element doc = r.parse(parser, padded, json, impl->name, impl->load_warnings, json_padded);
  if (!doc.is_object()) r.fail("tokenizer.json must be a JSON object");

  // ---- model ----
  const auto model = r.field(doc, "model");
  if (!model) r.fail("tokenizer.json has no \"model\"");
  const auto model_type = r.opt_string(*model, "type");
  if (model_type ? *model_type != "BPE" : !r.field(*model, "merges")) {
    unsupported(r, "model", model_type ? *model_type : "(untyped, no merges)");
  }
  const auto vocab_el = r.field(*model, "vocab");
  if (!vocab_el) r.fail("BPE model without \"vocab\"");
  const object vocab_obj = r.obj(*vocab_el, "model.vocab");
  impl->vocab.reserve(vocab_obj.size());
  auto next_token = vocab_obj.begin();  // keys are views into the parser's strings
  impl->vocab.set_each(vocab_obj.size(), [&](size_t) {
    const auto [key, value] = *next_token;
    ++next_token;
    return std::pair<std::string_view, int32_t>{key, r.token_id(value, "vocab id")};
  });

  MergeTable merges;
  if (const auto merges_el = r.field(*model, "merges")) {
    const array list = r.arr(*merges_el, "model.merges");
    // Merge i's two texts (views into the parser's strings); asked for in rank order.
    auto next = list.begin();
    auto texts = [&](size_t) -> std::pair<std::string_view, std::string_view> {
      const element m = *next;
      ++next;
      if (m.is_string()) {
        const std::string_view s = r.string(m, "merge");
        const auto parts = split_merge(s);
        if (!parts) r.fail(str_cat("merge '", s, "' is not \"a b\""));
        return *parts;
      }
      const array pair = r.arr(m, "merge");
      if (pair.size() != 2) r.fail("merge must be a pair of strings");
      return {r.string(pair.at(0).value_unsafe(), "merge"), r.string(pair.at(1).value_unsafe(), "merge")};
    };
    merges = build_merge_table(
        impl->vocab, list.size(), texts,
        [&](size_t rank, std::string_view a, std::string_view b) {
          r.fail(str_cat("merge '", a, " ", b, "' (rank ", std::to_string(rank),
                         ") uses a token missing from the vocabulary"));
        });
  }
  // "dropout" is a training-time regularizer: encoding here is always deterministic.
  BpeModel::Options opts;
  const auto unk_token = r.opt_string(*model, "unk_token");
  if (unk_token) {
    opts.unk_id = impl->vocab.find(*unk_token);
    impl->unk = opts.unk_id;
  }
  opts.fuse_unk = r.opt_bool(*model, "fuse_unk", false);
  opts.byte_fallback = r.opt_bool(*model, "byte_fallback", false);
  opts.ignore_merges = r.opt_bool(*model, "ignore_merges", false);
  opts.continuing_subword_prefix = std::string(r.opt_string(*model, "continuing_subword_prefix").value_or(""));
  opts.end_of_word_suffix = std::string(r.opt_string(*model, "end_of_word_suffix").value_or(""));

  // ---- added tokens ----
  std::vector<AddedToken> added;
  if (const auto list = r.field(doc, "added_tokens")) {
    for (element t : r.arr(*list, "added_tokens")) {
      AddedToken a;
      const auto id = r.field(t, "id");
      if (!id) r.fail("added token without \"id\"");
      a.id = r.token_id(*id, "added token id");
      a.content = std::string(r.req_string(t, "content", "added token"));
      a.special = r.opt_bool(t, "special", false);
      a.lstrip = r.opt_bool(t, "lstrip", false);
      a.rstrip = r.opt_bool(t, "rstrip", false);
      a.normalized = r.opt_bool(t, "normalized", !a.special);
      a.single_word = r.opt_bool(t, "single_word", false);
      added.push_back(std::move(a));
    }
  }
  int32_t max_id = impl->vocab.max_id();
  for (const auto& a : added) max_id = std::max(max_id, a.id);
  // Ids index dense tables (one text per id): a document whose ids leave most of the
  // range empty — a few entries, one with id 16 million — would cost hundreds of MB for
  // a few bytes of JSON. Real vocabularies are dense (padding is a few percent at most).
  const int64_t entries = static_cast<int64_t>(impl->vocab.size() + added.size());
  if (int64_t{max_id} + 1 > 2 * entries + kSparseIdSlack) {
    r.fail(str_cat("token id ", std::to_string(max_id), " is far beyond the ", std::to_string(entries),
                   " tokens defined: ids must be (nearly) dense"));
  }
  impl->texts.assign(static_cast<size_t>(max_id + 1), std::string());
  impl->attrs.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& a : added) {
    impl->texts[static_cast<size_t>(a.id)] = a.content;
    impl->attrs[static_cast<size_t>(a.id)] |= attr_added | (a.special ? attr_special : 0);
    impl->added_ids.emplace(a.content, a.id);
  }

  // ---- normalizer, pre-tokenizer ----
  if (const auto n = r.field(doc, "normalizer")) read_normalizer(r, *n, impl->normalizer);
  if (const double growth = impl->normalizer.growth_bound(); growth > kMaxNormalizerGrowth) {
    r.fail(str_cat("normalizer: its steps can make a text up to ", std::to_string(static_cast<int64_t>(std::min(growth, 1e18))),
                   " times longer (limit ", std::to_string(static_cast<int64_t>(kMaxNormalizerGrowth)),
                   "); refusing a normalizer that multiplies the input"));
  }
  if (const auto p = r.field(doc, "pre_tokenizer")) read_pre_tokenizer(r, *p, impl->pre_tokenizer);

  // Added tokens split the raw text unless they are `normalized`, in which case they are
  // found in the normalized text, spelled as the normalizer spells them.
  {
    std::vector<AddedToken> raw, norm;
    std::vector<std::string> raw_texts, norm_texts;
    for (const auto& a : added) {
      if (a.normalized) {
        std::string t = a.content;
        impl->normalizer.apply(t);
        norm_texts.push_back(std::move(t));
        norm.push_back(a);
      } else {
        raw_texts.push_back(a.content);
        raw.push_back(a);
      }
    }
    impl->raw_matcher = AddedTokenMatcher(std::move(raw), std::move(raw_texts),
                                          AddedTokenMatcher::Order::leftmost_longest);
    impl->normalized_matcher = AddedTokenMatcher(std::move(norm), std::move(norm_texts),
                                                 AddedTokenMatcher::Order::leftmost_longest);
  }

  // ---- decoder, post-processor ----
  std::vector<DecoderStep> dsteps;
  if (const auto d = r.field(doc, "decoder")) read_decoder(r, *d, dsteps);
  try {
    impl->decoder = DecoderPlan(std::move(dsteps));
  } catch (const Error& e) {
    throw e.with_context({.file = impl->name});
  }
  if (const auto p = r.field(doc, "post_processor")) {
    read_post_processor(r, *p, impl->prefix_ids, impl->suffix_ids);
  }
  for (int32_t id : impl->prefix_ids) {
    if (id > max_id) r.fail(str_cat("post_processor token id ", std::to_string(id), " is outside the vocabulary"));
  }
  for (int32_t id : impl->suffix_ids) {
    if (id > max_id) r.fail(str_cat("post_processor token id ", std::to_string(id), " is outside the vocabulary"));
  }

  impl->bpe = std::make_unique<BpeModel>(impl->vocab, std::move(merges), std::move(opts));

  // ---- special ids: tokenizer_config.json first, then what tokenizer.json implies ----
  if (!impl->prefix_ids.empty()) impl->bos = impl->prefix_ids.front();
  std::optional<element> cfg;
  simdjson::dom::parser cfg_parser;
  simdjson::padded_string cfg_padded;
  if (!config_json.empty()) {
    cfg = r.parse(cfg_parser, cfg_padded, config_json, config_name(display_name), impl->load_warnings);
    // "bos_token": null (Qwen2) or absent keeps what the post-processor template says.
    impl->bos_text = config_token(r, *cfg, "bos_token");
    impl->eos_text = config_token(r, *cfg, "eos_token");
    if (const auto id = lookup(*impl, impl->bos_text)) impl->bos = id;
    if (const auto id = lookup(*impl, impl->eos_text)) impl->eos = id;
    if (const auto id = lookup(*impl, config_token(r, *cfg, "unk_token"))) impl->unk = id;
    if (const auto id = lookup(*impl, config_token(r, *cfg, "pad_token"))) impl->pad = id;
    const auto cls = r.opt_string(*cfg, "tokenizer_class");
    const bool flag_class = cls && std::find(std::begin(kBosFlagClasses), std::end(kBosFlagClasses), *cls) !=
                                       std::end(kBosFlagClasses);
    if (flag_class) {
      if (r.field(*cfg, "add_bos_token")) {
        impl->prefix_ids.clear();
        if (r.opt_bool(*cfg, "add_bos_token", false) && impl->bos) impl->prefix_ids.push_back(*impl->bos);
      }
      if (r.field(*cfg, "add_eos_token")) {
        impl->suffix_ids.clear();
        if (r.opt_bool(*cfg, "add_eos_token", false) && impl->eos) impl->suffix_ids.push_back(*impl->eos);
      }
    }
    if (const auto tpl = r.field(*cfg, "chat_template")) {
      if (tpl->is_string()) {
        impl->chat_template = std::string(r.string(*tpl, "chat_template"));
      } else if (tpl->is_array()) {
        // [{"name": ..., "template": ...}, ...]: the "default" one, else the first.
        for (element t : r.arr(*tpl, "chat_template")) {
          const auto body = r.opt_string(t, "template");
          if (!body) continue;
          if (impl->chat_template.empty() || r.opt_string(t, "name") == std::string_view("default")) {
            impl->chat_template = std::string(*body);
          }
        }
      }
    }
  }
  if (!impl->eos) {
    // No config: the conventional end-of-sequence names, in order of preference.
    for (std::string_view name : {"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "<|im_end|>"}) {
      if (const auto it = impl->added_ids.find(name); it != impl->added_ids.end()) {
        impl->eos = it->second;
        break;
      }
    }
  }
  impl->finalize({}, false);
  return impl;
}

}  // namespace loom::tok

// Internal: the assembled tokenizer pipeline behind loom::Tokenizer, and the builders
// that fill it from tokenizer.json (hf_json.cpp) and GGUF metadata (gguf_vocab.cpp).
//
//   encode: added-token split (raw text) -> per text segment: normalizer -> added-token
//           split (normalized tokens) -> pre-tokenizer -> model -> ids; + template ids.
//   decode: per id: token text -> DecoderPlan per-token stage -> whole-text stage.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/format.hpp"
#include "loom/tokenizer.hpp"
#include "tokenizer/added_tokens.hpp"
#include "tokenizer/decoder.hpp"
#include "tokenizer/model.hpp"
#include "tokenizer/normalizer.hpp"
#include "tokenizer/pre_tokenizer.hpp"

namespace loom {

namespace tok {
inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // ▁ U+2581

// Token types as GGUF's tokenizer.ggml.token_type (llama.cpp's llama_token_type) and
// SentencePiece's model proto number them.
enum TokenType : int64_t {
  type_normal = 1,
  type_unknown = 2,
  type_control = 3,
  type_user_defined = 4,
  type_unused = 5,
  type_byte = 6,
};

enum TokenAttr : uint8_t {
  attr_special = 1,      // control / special added token
  attr_added = 2,        // an added token (matched before the model)
  attr_byte = 4,         // <0xNN> byte token
  attr_empty = 8,        // an id with no token (a hole in the id range)
  attr_unused = 16,      // an UNUSED (padding) token, e.g. [PAD50277]
  // Ids that decode to nothing: holes, and UNUSED tokens (llama.cpp's token_to_piece
  // gives them no text).
  attr_silent = attr_empty | attr_unused,
};
}  // namespace tok

struct Tokenizer::Impl {
  std::string name;

  // Model vocabulary; the models keep a reference, so an Impl never moves.
  tok::Vocab vocab;
  std::unique_ptr<tok::BpeModel> bpe;
  std::unique_ptr<tok::SpmModel> spm;

  std::vector<std::string> texts;  // id -> token text (model vocabulary and added tokens)
  std::vector<uint8_t> attrs;      // id -> TokenAttr bits
  tok::StringIdMap added_ids;      // added token content -> id

  tok::Normalizer normalizer;
  tok::PreTokenizer pre_tokenizer;
  tok::AddedTokenMatcher raw_matcher;         // matched in the raw text
  tok::AddedTokenMatcher normalized_matcher;  // matched in normalized text (HF normalized=true)
  std::vector<int32_t> prefix_ids;            // added by add_special
  std::vector<int32_t> suffix_ids;
  tok::DecoderPlan decoder;
  // SentencePiece-style vocabularies without a pre-tokenizer: encode the text word by word
  // (cut before each run of '▁'); set by finalize() only when that is exact.
  bool split_at_metaspace = false;

  // The tokenizer.ggml.* keys it was built from (GGUF sources only), so it can be written
  // back out (GGUF export, loom packs) exactly.
  std::shared_ptr<const Metadata> gguf_metadata;

  std::optional<int32_t> bos, eos, unk, pad;
  std::vector<int32_t> eos_ids;
  std::string chat_template;
  // What lenient JSON parsing forgave in its files ("<file>: 1 comment was ignored").
  std::vector<std::string> load_warnings;
  // tokenizer_config.json's bos_token / eos_token text, when it names one (chat templates
  // read these; without them the text of bos / eos is used).
  std::optional<std::string> bos_text, eos_text;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  int32_t size() const noexcept { return static_cast<int32_t>(texts.size()); }
  void check_id(int32_t id) const;  // throws Error(invalid_argument)
  void encode(std::string_view text, bool add_special, bool parse_special,
              std::vector<int32_t>& out) const;
  // The per-token decoder stage for one id (empty for holes).
  std::string decode_piece(int32_t id, bool first) const;

  // Shared finishing steps for the builders: sizes texts/attrs to cover every id,
  // computes eos_ids from `extra_eog` and the end-of-turn names, validates special ids.
  void finalize(const std::vector<int32_t>& extra_eog, bool eog_by_name_any_token);
  // Extends the id range to `n` with ids that have no token (they decode to nothing).
  void pad_ids_to(int32_t n);
};

namespace tok {

// Builders (throw loom::Error naming `display_name`). `json_padded`: the json text has
// simdjson's padding readable past its end (read_file's strings): parsed without a copy.
std::unique_ptr<Tokenizer::Impl> build_from_tokenizer_json(std::string_view json,
                                                          std::string_view config_json,
                                                          std::string_view display_name,
                                                          bool json_padded = false);
std::unique_ptr<Tokenizer::Impl> build_from_gguf(const Metadata& md, std::string_view display_name);

// Token texts that end a turn (llama.cpp's end-of-generation list), as data.
bool is_end_of_turn_text(std::string_view text) noexcept;

}  // namespace tok
}  // namespace loom

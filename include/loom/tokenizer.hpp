// loom::Tokenizer — text to token ids and back, exactly as the model's own tokenizer does.
//
// A Tokenizer is built from a Hugging Face `tokenizer.json` (byte-level BPE such as GPT-2,
// Llama 3, Qwen2, and SentencePiece-style BPE such as Llama 2) or from GGUF tokenizer
// metadata (`tokenizer.ggml.model` = "llama" or "gpt2"), and reproduces that tokenizer's
// ids: normalizers, pre-tokenizers, BPE merges, added/special tokens, BOS/EOS, decoders.
// docs/tokenizers.md lists what is supported and the few documented deviations.
//
// Text is bytes: encode() accepts any bytes. Invalid UTF-8 never throws: each invalid byte
// is kept as a raw byte (byte-level vocabularies give it its byte token, byte-fallback
// vocabularies its <0xNN> token, others their unknown token; a vocabulary without any of
// these drops it, as its reference implementation does), so decode(encode(x)) == x holds
// whenever the vocabulary has a token for every byte (SentencePiece vocabularies spell
// spaces as U+2581, so that character in x comes back as a space, and — as llama.cpp
// does — prefix a space to the text after a matched added token). decode() returns raw bytes too (no
// U+FFFD substitution); StreamDecoder never splits a UTF-8 character across two pieces.
//
// Ownership: a Tokenizer is immutable after construction and always held through
// std::shared_ptr<const Tokenizer>; a StreamDecoder keeps its Tokenizer alive.
// Thread-safety: every const method (encode, decode, token_to_piece, the getters) may be
// called from any number of threads at once. A StreamDecoder is one stream's state: use
// one per stream, from one thread at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/format.hpp"

namespace loom {

class Tokenizer {
 public:
  // Parses a tokenizer.json document. `display_name` names the source in error messages
  // (usually the file path). Throws loom::Error(format) for malformed JSON and
  // loom::Error(unsupported) naming the component (e.g. "model type 'Unigram'") that
  // loom does not implement.
  static std::shared_ptr<const Tokenizer> from_tokenizer_json(std::string_view json,
                                                              std::string_view display_name);
  // Same, plus a tokenizer_config.json document (chat template, bos/eos/pad token names,
  // add_bos_token/add_eos_token for Llama-style tokenizers). Either may be empty.
  static std::shared_ptr<const Tokenizer> from_tokenizer_json(std::string_view json,
                                                              std::string_view config_json,
                                                              std::string_view display_name);
  // Builds the tokenizer from GGUF metadata keys `tokenizer.ggml.*` (llama.cpp semantics).
  static std::shared_ptr<const Tokenizer> from_gguf_metadata(const Metadata& md,
                                                             std::string_view display_name);
  // A tokenizer.json file, a model directory (tokenizer.json [+ tokenizer_config.json
  // / chat_template.jinja], else tokenizer.model, else a single *.gguf), a .gguf file (vocab-only GGUFs
  // included), a llama2.c checkpoint (its tokenizer.bin / tok*.bin beside it), another
  // weights `.bin` (its directory's tokenizer) or a llama2.c tokenizer `.bin`. Throws
  // loom::Error(io) naming the path when nothing fits.
  static std::shared_ptr<const Tokenizer> load(const std::filesystem::path& path);
  // A model directory's SentencePiece `tokenizer.model` (BPE models), with its added
  // tokens from added_tokens.json / tokenizer_config.json and ids padded to config.json's
  // vocab_size, read the way llama.cpp's converter reads it.
  static std::shared_ptr<const Tokenizer> from_sentencepiece_model(const std::filesystem::path& dir);
  // A llama2.c `tokenizer.bin` (tok512.bin, ...): SentencePiece-style BPE by scores with
  // byte fallback, BOS added, '▁' restored from the stored ' '. Throws loom::Error(format)
  // naming the file and byte offset for a malformed one.
  static std::shared_ptr<const Tokenizer> from_llama2c(const std::filesystem::path& path);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: add the BOS/EOS (or template) tokens the tokenizer's post-processor adds.
  // parse_special: text that spells a special (control) token becomes that token; when
  // false it is ordinary text. Non-special added tokens (user-defined) always match.
  std::vector<int32_t> encode(std::string_view text, bool add_special = false,
                              bool parse_special = false) const;
  // Applies the tokenizer's decoder (e.g. Llama 2 drops the first leading space).
  // skip_special drops special tokens. Throws loom::Error(invalid_argument) for an id
  // outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The text one token stands for inside decoded text: SentencePiece '▁' becomes a space,
  // byte-level characters become their bytes, <0xNN> becomes that single byte (possibly
  // part of a UTF-8 character), special tokens give their own text. Throws like decode().
  std::string token_to_piece(int32_t id) const;
  // The stored vocabulary string of a token (e.g. "ĠHello", "▁Hello", "<0x0A>").
  const std::string& token_text(int32_t id) const;
  // The id of a vocabulary string (model vocabulary or added token), if any.
  std::optional<int32_t> token_id(std::string_view token_text) const;

  int32_t vocab_size() const noexcept;
  std::optional<int32_t> bos_id() const noexcept;
  std::optional<int32_t> eos_id() const noexcept;
  std::optional<int32_t> unk_id() const noexcept;
  std::optional<int32_t> pad_id() const noexcept;
  // Every id that ends generation: eos_id plus end-of-turn tokens such as <|eot_id|>,
  // <|im_end|>, <|end|>, <|endoftext|> (sorted, unique).
  const std::vector<int32_t>& eos_ids() const noexcept;
  bool is_eos(int32_t id) const noexcept;
  // True for special (control) tokens: BOS/EOS, <|im_start|>, ...; false for normal,
  // byte and user-defined tokens, and for ids out of range.
  bool is_special(int32_t id) const noexcept;
  // What encode(text, add_special=true) adds.
  bool add_bos() const noexcept;
  bool add_eos() const noexcept;
  // The chat template text (Jinja) from tokenizer_config.json / chat_template.jinja or
  // GGUF `tokenizer.chat_template`; empty when the source has none. Kept as data: loom
  // does not render it.
  const std::string& chat_template() const noexcept;
  // The BOS / EOS token text a chat template receives as `bos_token` / `eos_token`:
  // tokenizer_config.json's bos_token / eos_token (a string or {"content": ...}), else the
  // text of bos_id() / eos_id(), else empty.
  std::string bos_token() const;
  std::string eos_token() const;
  // The name given at construction (usually the file it came from).
  const std::string& name() const noexcept;
  // What was forgiven while reading its JSON files, one line per file: a byte-order
  // mark, `//` / `/* */` comments, trailing commas (e.g. "…/tokenizer_config.json: 2
  // comments were ignored"). Empty when the files were strict JSON.
  const std::vector<std::string>& load_warnings() const noexcept;
  // The tokenizer.ggml.* metadata that reproduces this tokenizer in a GGUF (or a loom
  // pack). Only tokenizers built from GGUF metadata (or SentencePiece models) have one;
  // a tokenizer.json pipeline GGUF cannot express throws Error(unsupported).
  bool has_gguf_metadata() const noexcept;
  Metadata to_gguf_metadata() const;

  // Incremental detokenization for generation: feed ids one at a time; the concatenation
  // of every piece returned by feed() and finish() equals decode(all ids, skip_special).
  // A piece never ends inside a UTF-8 character (its bytes are held until complete) and
  // decoder rules that depend on position (SentencePiece's leading-space strip) apply
  // exactly as in decode().
  class StreamDecoder {
   public:
    explicit StreamDecoder(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special = false);
    ~StreamDecoder();
    StreamDecoder(StreamDecoder&&) noexcept;
    StreamDecoder& operator=(StreamDecoder&&) noexcept;
    StreamDecoder(const StreamDecoder&) = delete;
    StreamDecoder& operator=(const StreamDecoder&) = delete;

    // Text that became final with this id (often empty while a character is incomplete).
    // Throws loom::Error(invalid_argument) for an id out of range; the state is unchanged.
    std::string feed(int32_t id);
    // Everything still held back; bytes of an incomplete UTF-8 character come out raw.
    // The decoder is then reset for a new sequence.
    std::string finish();
    // Drops held bytes and starts a new sequence.
    void reset();

   private:
    struct State;
    std::shared_ptr<const Tokenizer> tokenizer_;
    std::unique_ptr<State> state_;
  };

  struct Impl;  // internal (src/tokenizer/tokenizer_impl.hpp)
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  const Impl& impl() const noexcept { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom

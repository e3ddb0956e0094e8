// Internal: the decoder stage (HF `decoder`) compiled into a plan that decode() and
// StreamDecoder share, so streaming equals whole-sequence decoding by construction.
//
// HF decoders act on the list of token strings. Up to the first joining step (Fuse or
// ByteLevel, which turn the list into one string) every step works token by token, and
// only Metaspace looks at the position (index 0). After the join, the remaining steps see
// the whole text; those that can be applied incrementally are supported: Strip (leading
// and trailing) and literal Replace. Decoders that cannot be made exact incrementally
// (WordPiece, CTC, regex Replace after the join, ...) are rejected as unsupported.
//
// Deviation from HF, on purpose: bytes are never replaced by U+FFFD. ByteLevel and
// ByteFallback emit raw bytes, so decode() of an incomplete or invalid UTF-8 byte
// sequence returns those bytes; HF returns U+FFFD for them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.hpp"

namespace loom::tok {

struct DecoderStep {
  enum class Kind : uint8_t {
    replace,        // text -> content (literal, or `regex` when set)
    byte_fallback,  // "<0xNN>" -> that byte
    byte_level,     // byte-level characters -> bytes; joins
    metaspace,      // text (replacement char) -> ' '; dropped in token 0 when `prepend`
    strip,          // content char: up to `start` from the left, `stop` from the right
    fuse,           // joins
  };
  Kind kind = Kind::fuse;
  std::string text;
  std::string content;
  std::shared_ptr<const Regex> regex;
  bool prepend = false;
  uint32_t start = 0;
  uint32_t stop = 0;
};

class DecoderPlan {
 public:
  // Takes the HF decoder steps in order (a Sequence flattened). Throws
  // loom::Error(unsupported) for a step that cannot follow the join.
  explicit DecoderPlan(std::vector<DecoderStep> steps = {});

  // The per-token stage for one token string; `first` is true for the first token
  // handed to the decoder.
  std::string decode_token(std::string_view token, bool first) const;

  // Incremental whole-text stage plus UTF-8 hold-back.
  struct Stream {
    std::string held;         // bytes not yet released (incomplete UTF-8 / strip / replace)
    std::vector<uint32_t> stripped_left;  // per whole Strip step: leading chars removed so far
    std::vector<bool> left_done;          // per whole Strip step: a non-content char was seen
    std::vector<std::string> pending;     // per whole step: its own held text
    size_t tokens = 0;                    // tokens decoded so far
  };
  void reset(Stream& s) const;
  // Feeds one decoded token's bytes; returns the text that is now final.
  std::string push(Stream& s, std::string bytes) const;
  // Releases everything held; the stream must then be reset.
  std::string finish(Stream& s) const;

 private:
  std::string run_whole(Stream& s, size_t from_step, std::string text, bool final) const;

  std::vector<DecoderStep> per_token_;
  std::vector<DecoderStep> whole_;
};

}  // namespace loom::tok

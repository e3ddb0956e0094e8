// Internal: what the generation loops (plain generate, speculative_generate) do with each
// token they settle on — the end-of-generation check, the streaming decoder, the stop
// string matcher and the host's text callback — so both loops stop for the same reasons
// on the same token.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "loom/generate.hpp"
#include "loom/tokenizer.hpp"

namespace loom::runtime {

class TokenStream {
 public:
  // `tokenizer` may be null: tokens only (no text), end of generation at `eos_ids`.
  TokenStream(const Tokenizer* tokenizer, std::vector<int32_t> eos_ids, const GenerateOptions& options,
              GenerateResult& result);
  // Takes the next token. Returns false when generation stops at it (result.stop set:
  // end_of_sequence — the token is not kept —, stop_string or cancelled).
  bool push(int32_t token);
  // After the loop: releases the text held back (unless a stop string or the callback
  // ended it).
  void finish();

 private:
  bool emit(std::string_view text, int32_t token);

  const Tokenizer* tokenizer_;
  std::vector<int32_t> eos_ids_;
  const GenerateOptions& options_;
  GenerateResult& result_;
  std::optional<Tokenizer::StreamDecoder> decoder_;
  StopMatcher matcher_;
};

}  // namespace loom::runtime

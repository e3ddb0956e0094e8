#include "runtime/token_stream.hpp"

#include <algorithm>

namespace loom::runtime {

TokenStream::TokenStream(const Tokenizer* tokenizer, std::vector<int32_t> eos_ids, const GenerateOptions& options,
                         GenerateResult& result)
    : tokenizer_(tokenizer), eos_ids_(std::move(eos_ids)), options_(options), result_(result),
      matcher_(options.stop_strings) {
  if (tokenizer_ != nullptr) {
    // The decoder is a stream over the generated tokens only (the prompt is not echoed).
    // shared_ptr aliasing without ownership: the caller keeps the tokenizer alive.
    std::shared_ptr<const Tokenizer> tok(std::shared_ptr<const Tokenizer>(), tokenizer_);
    decoder_.emplace(tok, /*skip_special=*/true);
  }
}

bool TokenStream::emit(std::string_view text, int32_t token) {
  if (text.empty()) return true;
  result_.text.append(text);
  return !options_.on_text || options_.on_text(text, token);
}

bool TokenStream::push(int32_t token) {
  const bool eos = tokenizer_ != nullptr ? tokenizer_->is_eos(token)
                                         : std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
  if (options_.stop_at_eos && eos) {
    result_.stop = StopReason::end_of_sequence;
    return false;
  }
  result_.tokens.push_back(token);
  if (!decoder_) return true;
  bool stopped = false;
  const std::string safe = matcher_.push(decoder_->feed(token), stopped);
  if (!emit(safe, token)) {
    result_.stop = StopReason::cancelled;
    return false;
  }
  if (stopped) {
    result_.stop = StopReason::stop_string;
    return false;
  }
  return true;
}

void TokenStream::finish() {
  if (!decoder_ || result_.stop == StopReason::stop_string || result_.stop == StopReason::cancelled) return;
  bool stopped = false;
  std::string tail = matcher_.push(decoder_->finish(), stopped);
  if (stopped) {
    result_.stop = StopReason::stop_string;
  } else {
    tail += matcher_.flush();
  }
  emit(tail, -1);
}

}  // namespace loom::runtime

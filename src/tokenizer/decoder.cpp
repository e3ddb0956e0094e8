#include "tokenizer/decoder.hpp"

#include "loom/error.hpp"
#include "tokenizer/normalizer.hpp"
#include "tokenizer/unicode.hpp"

namespace loom::tok {

namespace {

const char* step_name(DecoderStep::Kind k) {
  switch (k) {
    case DecoderStep::Kind::replace: return "Replace";
    case DecoderStep::Kind::byte_fallback: return "ByteFallback";
    case DecoderStep::Kind::byte_level: return "ByteLevel";
    case DecoderStep::Kind::metaspace: return "Metaspace";
    case DecoderStep::Kind::strip: return "Strip";
    case DecoderStep::Kind::fuse: return "Fuse";
  }
  return "?";
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Strips up to `start` leading and `stop` trailing copies of `content` (a character).
std::string strip_chars(std::string_view s, std::string_view content, uint32_t start, uint32_t stop) {
  size_t b = 0;
  size_t e = s.size();
  if (!content.empty()) {
    for (uint32_t n = 0; n < start && s.substr(b).starts_with(content); ++n) b += content.size();
    for (uint32_t n = 0; n < stop && e - b >= content.size() && s.substr(b, e - b).ends_with(content); ++n) {
      e -= content.size();
    }
  }
  return std::string(s.substr(b, e - b));
}

}  // namespace

DecoderPlan::DecoderPlan(std::vector<DecoderStep> steps) {
  bool joined = false;
  for (auto& step : steps) {
    using K = DecoderStep::Kind;
    if (!joined) {
      const bool joins = step.kind == K::fuse || step.kind == K::byte_level;
      if (step.kind != K::fuse) per_token_.push_back(step);
      joined = joins;
      continue;
    }
    const bool ok = step.kind == K::fuse || step.kind == K::strip ||
                    (step.kind == K::replace && !step.regex);
    if (!ok) {
      throw Error(ErrorCode::unsupported,
                  std::string("decoder step '") + step_name(step.kind) +
                      (step.kind == K::replace ? " (regex)" : "") +
                      "' after Fuse/ByteLevel cannot be decoded incrementally");
    }
    if (step.kind != K::fuse) whole_.push_back(std::move(step));
  }
}

std::string DecoderPlan::decode_token(std::string_view token, bool first) const {
  std::string s(token);
  using K = DecoderStep::Kind;
  for (const auto& step : per_token_) {
    switch (step.kind) {
      case K::replace:
        s = step.regex ? step.regex->replace_all(s, step.content) : replace_literal(s, step.text, step.content);
        break;
      case K::byte_fallback:
        if (s.size() == 6 && s.starts_with("<0x") && s[5] == '>') {
          const int hi = hex_value(s[3]);
          const int lo = hex_value(s[4]);
          if (hi >= 0 && lo >= 0) s.assign(1, static_cast<char>(hi * 16 + lo));
        }
        break;
      case K::byte_level: {
        // Every character must be a byte-level character; otherwise (an added token such
        // as "<|im_end|>" spelled with plain spaces) the token's own bytes are kept.
        std::string bytes;
        bytes.reserve(s.size());
        bool all = true;
        for (size_t i = 0; i < s.size();) {
          const Utf8Char c = utf8_next(s, i);
          const int b = c.valid ? byte_from_level_cp(c.cp) : -1;
          if (b < 0) {
            all = false;
            break;
          }
          bytes.push_back(static_cast<char>(b));
          i += c.len;
        }
        if (all) s.swap(bytes);
        break;
      }
      case K::metaspace:
        s = replace_literal(s, step.text, (first && step.prepend) ? "" : " ");
        break;
      case K::strip:
        s = strip_chars(s, step.content, step.start, step.stop);
        break;
      case K::fuse:
        break;
    }
  }
  return s;
}

void DecoderPlan::reset(Stream& s) const {
  s.held.clear();
  s.stripped_left.assign(whole_.size(), 0);
  s.left_done.assign(whole_.size(), false);
  s.pending.assign(whole_.size(), std::string());
  s.tokens = 0;
}

std::string DecoderPlan::run_whole(Stream& s, size_t from_step, std::string text, bool final) const {
  for (size_t k = from_step; k < whole_.size(); ++k) {
    const DecoderStep& step = whole_[k];
    std::string& pending = s.pending[k];
    if (step.kind == DecoderStep::Kind::strip) {
      const std::string& c = step.content;
      // Leading: remove up to `start` copies while they are the first characters.
      size_t b = 0;
      while (!s.left_done[k] && s.stripped_left[k] < step.start && b < text.size()) {
        if (!c.empty() && std::string_view(text).substr(b).starts_with(c)) {
          b += c.size();
          ++s.stripped_left[k];
        } else {
          s.left_done[k] = true;
        }
      }
      if (b < text.size()) s.left_done[k] = true;
      text.erase(0, b);
      if (step.stop == 0 || c.empty()) continue;
      // Trailing: hold back the last `stop` copies of the trailing run; at the end they
      // are exactly what HF's right strip removes.
      pending += text;
      text.clear();
      size_t run = 0;
      size_t e = pending.size();
      while (e >= c.size() && std::string_view(pending).substr(e - c.size(), c.size()) == c) {
        e -= c.size();
        ++run;
      }
      const size_t keep = std::min<size_t>(run, step.stop);
      const size_t release = pending.size() - keep * c.size();
      text = pending.substr(0, release);
      pending.erase(0, release);
      if (final) pending.clear();  // the trailing copies are stripped
    } else {  // literal Replace
      std::string buf = std::move(pending);
      buf += text;
      pending.clear();
      text.clear();
      const std::string& pat = step.text;
      size_t last = 0;
      if (!pat.empty()) {
        for (size_t pos = buf.find(pat); pos != std::string::npos; pos = buf.find(pat, last)) {
          text.append(buf, last, pos - last);
          text += step.content;
          last = pos + pat.size();
        }
      }
      // Hold back the longest tail that could still grow into the pattern.
      size_t hold = 0;
      if (!final && !pat.empty()) {
        for (size_t n = std::min(pat.size() - 1, buf.size() - last); n > 0; --n) {
          if (std::string_view(buf).substr(buf.size() - n) == std::string_view(pat).substr(0, n)) {
            hold = n;
            break;
          }
        }
      }
      text.append(buf, last, buf.size() - last - hold);
      pending = buf.substr(buf.size() - hold);
    }
  }
  return text;
}

std::string DecoderPlan::push(Stream& s, std::string bytes) const {
  ++s.tokens;
  s.held += bytes;
  const size_t tail = utf8_incomplete_tail(s.held);
  std::string ready = s.held.substr(0, s.held.size() - tail);
  s.held.erase(0, s.held.size() - tail);
  return run_whole(s, 0, std::move(ready), false);
}

std::string DecoderPlan::finish(Stream& s) const {
  std::string rest = std::move(s.held);
  s.held.clear();
  return run_whole(s, 0, std::move(rest), true);
}

}  // namespace loom::tok

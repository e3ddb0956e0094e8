#include "tokenizer/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "loom/error.hpp"
#include "tokenizer/unicode.hpp"

namespace loom::tok {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf));
}

// One match-data block per thread, sized for the whole match only: the tokenizer never
// needs capture groups, and PCRE2 fills ovector[0..1] even when groups do not fit.
struct ThreadMatchData {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  ~ThreadMatchData() { pcre2_match_data_free(data); }
};

pcre2_match_data* thread_match_data() {
  thread_local ThreadMatchData tmd;
  if (tmd.data == nullptr) throw Error(ErrorCode::out_of_memory, "PCRE2 match data");
  return tmd.data;
}

// Returns the match at or after `start` as [begin, end), or false when there is none.
bool match_at(const pcre2_code* code, std::string_view text, size_t start, size_t& begin,
              size_t& end) {
  pcre2_match_data* md = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = pcre2_match(code, subject, text.size(), start, 0, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    // The interpreter keeps its backtracking frames on the heap: slower, never short.
    rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_JIT, md, nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    throw Error(ErrorCode::invalid_argument,
                "pre-tokenizer regex failed on the input (" + pcre2_message(rc) + ")");
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  begin = ov[0];
  end = ov[1];
  return true;
}

}  // namespace

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err,
                                   &err_offset, nullptr);
  if (code == nullptr) {
    throw Error(ErrorCode::format, "cannot compile regex '" + pattern_ + "' at offset " +
                                       std::to_string(err_offset) + ": " + pcre2_message(err));
  }
  // JIT is an optimization only: without it pcre2_match interprets the same pattern.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  const auto* code = static_cast<const pcre2_code*>(code_);
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t b = 0;
    size_t e = 0;
    if (!match_at(code, text, pos, b, e)) break;
    out.emplace_back(b, e);
    if (e > b) {
      pos = e;
    } else {
      if (b >= text.size()) break;
      pos = b + utf8_len_at(text, b);
    }
  }
}

std::string Regex::replace_all(std::string_view text, std::string_view with) const {
  std::vector<std::pair<size_t, size_t>> matches;
  find_all(text, matches);
  std::string out;
  out.reserve(text.size());
  size_t last = 0;
  for (const auto& [b, e] : matches) {
    out.append(text.substr(last, b - last));
    out.append(with);
    last = e;
  }
  out.append(text.substr(last));
  return out;
}

}  // namespace loom::tok

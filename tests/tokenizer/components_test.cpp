// The tokenizer stages one by one: normalizers, pre-tokenizers, decoders and added-token
// splitting, with the examples Hugging Face's own tests use where there is one.
#include <catch2/catch.hpp>

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include <string>
#include <vector>

#include "loom/error.hpp"
#include "tokenizer/added_tokens.hpp"
#include "tokenizer/decoder.hpp"
#include "tokenizer/model.hpp"
#include "tokenizer/normalizer.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/unicode.hpp"

using namespace loom::tok;

namespace {

using K = PreTokenizerStep::Kind;

std::vector<std::string> pre_tokenize(const PreTokenizer& pt, std::string text) {
  std::vector<Piece> pieces{{std::move(text), true}};
  pt.apply(pieces);
  std::vector<std::string> out;
  for (auto& p : pieces) out.push_back(p.text);
  return out;
}

PreTokenizer one_step(PreTokenizerStep step) {
  PreTokenizer pt;
  pt.add(std::move(step));
  return pt;
}

PreTokenizerStep literal_split(std::string delim, SplitBehavior b, bool invert = false) {
  PreTokenizerStep s;
  s.kind = K::split_literal;
  s.text = std::move(delim);
  s.behavior = b;
  s.invert = invert;
  return s;
}

std::string normalize(const Normalizer& n, std::string s) {
  n.apply(s);
  return s;
}

Normalizer one_norm(NormalizerStep step) {
  Normalizer n;
  n.add(std::move(step));
  return n;
}

// Decodes a token list the way decode() does (per token, then the whole-text stage).
std::string run_decoder(const DecoderPlan& plan, const std::vector<std::string>& tokens) {
  DecoderPlan::Stream s;
  plan.reset(s);
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) out += plan.push(s, plan.decode_token(tokens[i], i == 0));
  out += plan.finish(s);
  return out;
}

const std::string kSpace = "\xE2\x96\x81";  // ▁

}  // namespace

// ---------------- UTF-8 helpers ----------------

TEST_CASE("Vocab finds every text it holds, replaces ids in place and walks in insertion order") {
  Vocab v;
  CHECK_FALSE(v.find("a").has_value());  // empty table
  // Enough entries to grow the table several times, with texts that share prefixes,
  // embed NULs, and one empty text.
  std::vector<std::string> texts = {"", std::string("a\0b", 3), std::string("a\0c", 3)};
  for (int i = 0; i < 5000; ++i) texts.push_back("tok" + std::to_string(i));
  for (size_t i = 0; i < texts.size(); ++i) CHECK(v.set(texts[i], static_cast<int32_t>(2 * i)));  // each new
  REQUIRE(v.size() == texts.size());
  for (size_t i = 0; i < texts.size(); ++i) CHECK(v.find(texts[i]) == static_cast<int32_t>(2 * i));
  CHECK_FALSE(v.find("tok5000").has_value());
  CHECK_FALSE(v.find(std::string("a\0", 2)).has_value());
  CHECK(v.max_id() == static_cast<int32_t>(2 * (texts.size() - 1)));

  CHECK_FALSE(v.set("tok7", 1));  // replaces: same entry, new id; max_id keeps the largest seen
  CHECK(v.size() == texts.size());
  CHECK(v.find("tok7") == 1);
  CHECK(v.max_id() == static_cast<int32_t>(2 * (texts.size() - 1)));

  std::vector<std::string> walked;
  v.for_each([&](std::string_view text, int32_t id) {
    if (walked.size() == 10) CHECK(id == 1);  // "tok7", where it was first added
    walked.emplace_back(text);
  });
  CHECK(walked == texts);

  Vocab reserved;
  reserved.reserve(3);
  reserved.set("x", 5);
  CHECK(reserved.find("x") == 5);
  CHECK(reserved.size() == 1);
}

TEST_CASE("Vocab::set_batch sets in order as set() does and names the first text it already had") {
  // 250 texts (more than two batches) into an empty table that must grow on the way,
  // with two repeats: the first is reported, both replace the id as set() does.
  std::vector<std::string> texts;
  std::vector<int32_t> ids;
  for (int i = 0; i < 250; ++i) {
    texts.push_back("w" + std::to_string(i));
    ids.push_back(1000 + i);
  }
  texts[150] = "w7";
  texts[200] = "w120";
  std::vector<std::string_view> views(texts.begin(), texts.end());
  Vocab v;
  CHECK(v.set_batch(views, ids) == 150);
  CHECK(v.size() == 248);
  CHECK(v.find("w7") == 1150);    // replaced by the later id
  CHECK(v.find("w120") == 1200);
  CHECK(v.find("w249") == 1249);
  CHECK_FALSE(v.find("w150").has_value());
  CHECK(v.max_id() == 1249);
  std::vector<std::string> order;
  v.for_each([&](std::string_view text, int32_t) { order.emplace_back(text); });
  REQUIRE(order.size() == 248);
  CHECK(order[7] == "w7");
  CHECK(order[149] == "w149");
  CHECK(order[150] == "w151");  // the repeat added no entry
  Vocab fresh;
  CHECK(fresh.set_batch(std::span(views).first(100), std::span(ids).first(100)) == 100);  // all new

  // set_each: the same entries through a callback asked once each, in order.
  Vocab each;
  size_t asked = 0;
  CHECK(each.set_each(views.size(), [&](size_t i) {
    CHECK(i == asked++);
    return std::pair<std::string_view, int32_t>{views[i], ids[i]};
  }) == 150);
  CHECK(asked == views.size());
  CHECK(each.size() == 248);
  CHECK(each.find("w7") == 1150);
  CHECK(each.find("w249") == 1249);
}

TEST_CASE("split_merge splits at the first space after the first byte") {
  CHECK(split_merge("\xC4\xA0 \xC4\xA0") == std::pair<std::string_view, std::string_view>{"\xC4\xA0", "\xC4\xA0"});
  CHECK(split_merge("  a") == std::pair<std::string_view, std::string_view>{" ", "a"});  // a space on the left
  CHECK(split_merge("a b c") == std::pair<std::string_view, std::string_view>{"a", "b c"});
  CHECK_FALSE(split_merge("ab").has_value());
  CHECK_FALSE(split_merge(" ").has_value());
  CHECK_FALSE(split_merge("").has_value());
}

TEST_CASE("Vocab::find_batch gives find's ids, -1 for texts it lacks") {
  Vocab empty;
  std::vector<std::string_view> one = {"a"};
  std::vector<int32_t> got(1, 7);
  empty.find_batch(one, got);
  CHECK(got[0] == -1);

  Vocab v;
  for (int i = 0; i < 3000; ++i) v.set("t" + std::to_string(i), 3 * i + 1);
  v.set("", 0);
  // Two and a half batches: present, absent, empty, repeated, and texts that share a prefix.
  std::vector<std::string> texts;
  for (size_t k = 0; k < 5 * Vocab::kFindBatch / 2; ++k) {
    texts.push_back(k % 3 == 0 ? "t" + std::to_string(k * 31 % 3000) : k % 3 == 1 ? "u" + std::to_string(k) : "t");
  }
  texts[5] = "";
  texts[8] = texts[0];
  std::vector<std::string_view> views(texts.begin(), texts.end());
  std::vector<int32_t> ids(views.size(), 99);
  v.find_batch(views, ids);
  for (size_t k = 0; k < views.size(); ++k) CHECK(ids[k] == v.find(views[k]).value_or(-1));
  CHECK(ids[0] == 1);   // "t0"
  CHECK(ids[5] == 0);   // ""
  CHECK(ids[1] == -1);  // "u1"
  CHECK(ids[8] == 1);
}

TEST_CASE("build_merge_table ranks merges by position, keeps a repeated pair's first, hands back those it cannot map") {
  Vocab v;
  const std::vector<std::string> tokens = {"a", "b", "c", "ab", "bc", "abc", "ca", "cab"};
  for (size_t i = 0; i < tokens.size(); ++i) v.set(tokens[i], static_cast<int32_t>(10 + i));
  // 100 merges, so they span several batches: the pairs below at fixed ranks, fillers of
  // a missing token elsewhere, and a repeat of "a b" at rank 90.
  std::vector<std::pair<std::string, std::string>> merges(100);
  for (size_t i = 0; i < merges.size(); ++i) merges[i] = {"x" + std::to_string(i), "a"};
  merges[3] = {"a", "b"};
  merges[40] = {"b", "c"};
  merges[41] = {"ab", "c"};
  merges[63] = {"c", "ab"};
  merges[90] = {"a", "b"};
  merges[99] = {"c", "a"};
  size_t asked = 0;
  std::vector<size_t> missing_ranks;
  const MergeTable table = build_merge_table(
      v, merges.size(),
      [&](size_t i) -> std::pair<std::string_view, std::string_view> {
        CHECK(i == asked++);  // once each, in order
        return {merges[i].first, merges[i].second};
      },
      [&](size_t rank, std::string_view left, std::string_view right) {
        CHECK(left == merges[rank].first);
        CHECK(right == merges[rank].second);
        missing_ranks.push_back(rank);
      });
  CHECK(asked == merges.size());
  CHECK(missing_ranks.size() == 94);  // every filler
  CHECK(std::is_sorted(missing_ranks.begin(), missing_ranks.end()));
  CHECK(table.size() == 5);
  const auto* ab = table.find(10, 11);
  REQUIRE(ab != nullptr);
  CHECK(ab->rank == 3);  // not 90
  CHECK(ab->id == 13);
  REQUIRE(table.find(13, 12) != nullptr);
  CHECK(table.find(13, 12)->rank == 41);
  CHECK(table.find(13, 12)->id == 15);
  CHECK(table.find(12, 13)->id == 17);  // "c" + "ab" = "cab"
  CHECK(table.find(12, 10)->id == 16);  // "c" + "a" = "ca", rank 99
  CHECK(table.find(12, 10)->rank == 99);
  CHECK(table.find(10, 12) == nullptr);
}

TEST_CASE("utf8_next decodes valid characters and flags every kind of invalid byte") {
  CHECK(utf8_next("A", 0).cp == 'A');
  const auto e_acute = utf8_next("\xC3\xA9", 0);
  CHECK(e_acute.valid);
  CHECK(e_acute.cp == 0xE9);
  CHECK(e_acute.len == 2);
  CHECK(utf8_next("\xF0\x9F\xA6\x99", 0).cp == 0x1F999);  // 🦙
  for (std::string bad : {std::string("\xFF"), std::string("\xC0\xAF"), std::string("\xED\xA0\x80"),
                          std::string("\xE4\xB8"), std::string("\x80"), std::string("\xF5\x80\x80\x80")}) {
    const auto c = utf8_next(bad, 0);
    CHECK_FALSE(c.valid);
    CHECK(c.len == 1);
  }
  CHECK(utf8_incomplete_tail("ab\xE4\xB8") == 2);
  CHECK(utf8_incomplete_tail("ab\xE4") == 1);
  CHECK(utf8_incomplete_tail("ab\xE4\xB8\xAD") == 0);
  CHECK(utf8_incomplete_tail("ab\xFF") == 0);      // never completes: release it
  CHECK(utf8_incomplete_tail("\xE0\x80") == 0);   // overlong prefix can never complete
}

TEST_CASE("the byte-level alphabet is GPT-2's") {
  const auto& t = byte_level_table();
  CHECK(t.byte_to_utf8[' '] == "\xC4\xA0");   // Ġ
  CHECK(t.byte_to_utf8['\n'] == "\xC4\x8A");  // Ċ
  CHECK(t.byte_to_utf8['A'] == "A");
  CHECK(t.byte_to_utf8[0xAD] == "\xC5\x83");  // the soft hyphen is remapped too
  for (int b = 0; b < 256; ++b) CHECK(byte_from_level_cp(t.byte_to_cp[b]) == b);
}

// ---------------- normalizers ----------------

TEST_CASE("Unicode normal forms compose, decompose and pass invalid bytes through") {
  const std::string decomposed = "e\xCC\x81";  // e + COMBINING ACUTE
  CHECK(normalize(one_norm({.kind = NormalizerStep::Kind::nfc}), decomposed) == "\xC3\xA9");
  CHECK(normalize(one_norm({.kind = NormalizerStep::Kind::nfd}), "\xC3\xA9") == decomposed);
  CHECK(normalize(one_norm({.kind = NormalizerStep::Kind::nfkc}), "\xEF\xAC\x81") == "fi");  // ligature ﬁ
  CHECK(normalize(one_norm({.kind = NormalizerStep::Kind::nfkd}), "\xC2\xB2") == "2");
  CHECK(normalize(one_norm({.kind = NormalizerStep::Kind::nfc}), "plain ascii") == "plain ascii");
  // Hangul jamo compose into a syllable.
  CHECK(normalize(one_norm({.kind = NormalizerStep::Kind::nfc}), "\xE1\x84\x80\xE1\x85\xA1") == "\xEA\xB0\x80");
  CHECK(normalize(one_norm({.kind = NormalizerStep::Kind::nfc}), "a\xFF" + decomposed + "\xFE") ==
        "a\xFF\xC3\xA9\xFE");
}

TEST_CASE("NFC that copies stable stretches equals utf8proc's NFC of the whole text") {
  // Characters around the edges of the stable ranges, combining marks, jamo, kana marks.
  const uint32_t pool[] = {'a', 'e', 'A', 'o', 0xE9, 0x2FF, 0x300, 0x301, 0x308, 0x327, 0x340, 0x345,
                           0x3B1, 0x1100, 0x1161, 0x11A8, 0xAC00, 0xAC01, 0x304B, 0x3099, 0x309A,
                           0x30AB, 0x4E2D, 0x302A, 0x2126, 0x212B, 0xFB01, 0x1F600, 0x0958, ' '};
  std::mt19937 rng(5);
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const size_t n = 1 + rng() % 12;
    for (size_t i = 0; i < n; ++i) utf8_append(text, pool[rng() % std::size(pool)]);
    utf8proc_uint8_t* expected = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(text.c_str()));
    REQUIRE(expected != nullptr);
    const std::string want(reinterpret_cast<const char*>(expected));
    std::free(expected);
    INFO("round " << round);
    CHECK(normalize_unicode(text, NormalForm::nfc) == want);
  }
}

TEST_CASE("Lowercase, Strip, StripAccents, Replace and Prepend normalizers") {
  CHECK(normalize(one_norm({.kind = NormalizerStep::Kind::lowercase}), "HeLLo \xC3\x80\xC3\x89") == "hello \xC3\xA0\xC3\xA9");
  NormalizerStep strip{.kind = NormalizerStep::Kind::strip};
  CHECK(normalize(one_norm(strip), " \t hi there \xE3\x80\x80\n") == "hi there");
  strip.right = false;
  CHECK(normalize(one_norm(strip), "  hi  ") == "hi  ");
  strip.left = false;
  strip.right = true;
  CHECK(normalize(one_norm(strip), "  hi  ") == "  hi");
  CHECK(normalize(one_norm(strip), "   ").empty());

  Normalizer accents;
  accents.add({.kind = NormalizerStep::Kind::nfd});
  accents.add({.kind = NormalizerStep::Kind::strip_accents});
  CHECK(normalize(accents, "caf\xC3\xA9 na\xC3\xAFve") == "cafe naive");

  CHECK(normalize(one_norm({.kind = NormalizerStep::Kind::replace, .text = " ", .content = kSpace}), "a b  c") ==
        "a" + kSpace + "b" + kSpace + kSpace + "c");
  NormalizerStep re{.kind = NormalizerStep::Kind::replace, .content = " "};
  re.regex = std::make_shared<const Regex>(R"(\s+)");
  CHECK(normalize(one_norm(re), "a \t\n b") == "a b");

  const Normalizer prepend = one_norm({.kind = NormalizerStep::Kind::prepend, .text = kSpace});
  CHECK(normalize(prepend, "Hey") == kSpace + "Hey");
  CHECK(normalize(prepend, "").empty());  // nothing to prepend to
}

TEST_CASE("a normalizer Sequence applies its steps in order") {
  Normalizer n;
  n.add({.kind = NormalizerStep::Kind::prepend, .text = kSpace});
  n.add({.kind = NormalizerStep::Kind::replace, .text = " ", .content = kSpace});
  CHECK(normalize(n, "Hello world") == kSpace + "Hello" + kSpace + "world");
}

// ---------------- pre-tokenizers ----------------

TEST_CASE("Split behaviours follow HF's the-final--countdown example") {
  using V = std::vector<std::string>;
  const std::string text = "the-final--countdown";
  CHECK(pre_tokenize(one_step(literal_split("-", SplitBehavior::removed)), text) == V{"the", "final", "countdown"});
  CHECK(pre_tokenize(one_step(literal_split("-", SplitBehavior::isolated)), text) ==
        V{"the", "-", "final", "-", "-", "countdown"});
  CHECK(pre_tokenize(one_step(literal_split("-", SplitBehavior::merged_with_previous)), text) ==
        V{"the-", "final-", "-", "countdown"});
  CHECK(pre_tokenize(one_step(literal_split("-", SplitBehavior::merged_with_next)), text) ==
        V{"the", "-final", "-", "-countdown"});
  CHECK(pre_tokenize(one_step(literal_split("-", SplitBehavior::contiguous)), text) ==
        V{"the", "-", "final", "--", "countdown"});
  // Inverted: the words are the delimiters (each "-" stays its own piece).
  CHECK(pre_tokenize(one_step(literal_split("-", SplitBehavior::removed, true)), text) == V{"-", "-", "-"});
}

TEST_CASE("a regex Split isolates GPT-2 style pieces") {
  PreTokenizerStep s;
  s.kind = K::split_regex;
  s.regex = gpt2_regex();
  s.behavior = SplitBehavior::isolated;
  using V = std::vector<std::string>;
  CHECK(pre_tokenize(one_step(s), "Hello world's  3.14!") == V{"Hello", " world", "'s", " ", " 3", ".", "14", "!"});
  // Invalid bytes match nothing and end up between the matches.
  CHECK(pre_tokenize(one_step(s), "ab\xFF" "cd") == V{"ab", "\xFF", "cd"});
}

TEST_CASE("ByteLevel splits with the GPT-2 regex and maps bytes to characters") {
  PreTokenizerStep s;
  s.kind = K::byte_level;
  s.add_prefix_space = false;
  using V = std::vector<std::string>;
  CHECK(pre_tokenize(one_step(s), "Hello my friend, how is your day going?") ==
        V{"Hello", "Ġmy", "Ġfriend", ",", "Ġhow", "Ġis", "Ġyour", "Ġday", "Ġgoing", "?"});
  CHECK(pre_tokenize(one_step(s), "Hello there\nHello there") == V{"Hello", "Ġthere", "Ċ", "Hello", "Ġthere"});
  CHECK(pre_tokenize(one_step(s), "Hello there       dear") == V{"Hello", "Ġthere", "ĠĠĠĠĠĠ", "Ġdear"});
  s.add_prefix_space = true;
  CHECK(pre_tokenize(one_step(s), "Hello my")[0] == "ĠHello");
  CHECK(pre_tokenize(one_step(s), " Hello my")[0] == "ĠHello");
  s.use_regex = false;
  CHECK(pre_tokenize(one_step(s), "Hi you") == V{"ĠHiĠyou"});
}

TEST_CASE("Metaspace replaces spaces, prepends by scheme and splits before each ▁") {
  PreTokenizerStep s;
  s.kind = K::metaspace;
  s.text = kSpace;
  using V = std::vector<std::string>;
  CHECK(pre_tokenize(one_step(s), "Hey friend!") == V{kSpace + "Hey", kSpace + "friend!"});
  CHECK(pre_tokenize(one_step(s), "Hey   friend!") == V{kSpace + "Hey", kSpace, kSpace, kSpace + "friend!"});
  s.split = false;
  CHECK(pre_tokenize(one_step(s), "Hey friend!") == V{kSpace + "Hey" + kSpace + "friend!"});
  s.prepend = PreTokenizerStep::Prepend::never;
  CHECK(pre_tokenize(one_step(s), "Hey") == V{"Hey"});
  s.prepend = PreTokenizerStep::Prepend::first;
  std::vector<Piece> pieces{{"Hey", true}, {"how", false}};
  one_step(s).apply(pieces);
  CHECK(pieces[0].text == kSpace + "Hey");
  CHECK(pieces[1].text == "how");
}

TEST_CASE("Digits, Punctuation, Whitespace, WhitespaceSplit and CharDelimiterSplit") {
  using V = std::vector<std::string>;
  PreTokenizerStep d;
  d.kind = K::digits;
  CHECK(pre_tokenize(one_step(d), "Hey 123 friend!") == V{"Hey ", "123", " friend!"});
  d.individual = true;
  CHECK(pre_tokenize(one_step(d), "Hey 123 friend!") == V{"Hey ", "1", "2", "3", " friend!"});

  PreTokenizerStep p;
  p.kind = K::punctuation;
  CHECK(pre_tokenize(one_step(p), "Hey friend!     How are you?!?") ==
        V{"Hey friend", "!", "     How are you", "?", "!", "?"});
  p.behavior = SplitBehavior::contiguous;
  CHECK(pre_tokenize(one_step(p), "you?!?") == V{"you", "?!?"});

  PreTokenizerStep w;
  w.kind = K::whitespace;
  CHECK(pre_tokenize(one_step(w), "Hey man!") == V{"Hey", "man", "!"});
  CHECK(pre_tokenize(one_step(w), "How are you doing?") == V{"How", "are", "you", "doing", "?"});
  w.kind = K::whitespace_split;
  CHECK(pre_tokenize(one_step(w), "Hey man!") == V{"Hey", "man!"});
  PreTokenizerStep c;
  c.kind = K::char_delimiter;
  c.text = "x";
  CHECK(pre_tokenize(one_step(c), "axbxxc") == V{"a", "b", "c"});
}

TEST_CASE("Punctuation and Digits split as HF's pre-tokenizers do: every behavior, HF's punctuation table") {
  // Expected pieces: HF tokenizers 0.23.2 (punctuationPreTokenizer / digitsPreTokenizer).
  using V = std::vector<std::string>;
  PreTokenizerStep p;
  p.kind = K::punctuation;
  const std::pair<SplitBehavior, V> behaviors[] = {
      {SplitBehavior::removed, V{"a", "b", "c"}},
      {SplitBehavior::isolated, V{"a", ".", ".", "b", "!", "c"}},
      {SplitBehavior::merged_with_previous, V{"a.", ".", "b!", "c"}},
      {SplitBehavior::merged_with_next, V{"a", ".", ".b", "!c"}},
      {SplitBehavior::contiguous, V{"a", "..", "b", "!", "c"}},
  };
  for (const auto& [behavior, pieces] : behaviors) {
    p.behavior = behavior;
    CHECK(pre_tokenize(one_step(p), "a..b!c") == pieces);
  }
  // ASCII symbols are punctuation (Rust's is_ascii_punctuation); other symbols are not.
  p.behavior = SplitBehavior::contiguous;
  CHECK(pre_tokenize(one_step(p), "x$+<=>^`|~y") == V{"x", "$+<=>^`|~", "y"});
  p.behavior = SplitBehavior::isolated;
  CHECK(pre_tokenize(one_step(p), "a\u00B1b\u2192c\u20ACd") == V{"a\u00B1b\u2192c\u20ACd"});
  // HF's table is Unicode 8.0's: U+166D is still punctuation (So since Unicode 12), and
  // U+2E43 (Po since Unicode 10) is not yet.
  CHECK(pre_tokenize(one_step(p), "a\u166Db\u2E43c") == V{"a", "\u166D", "b\u2E43c"});
  CHECK(is_hf_punctuation(0x166D));
  CHECK_FALSE(is_hf_punctuation(0x2E43));
  CHECK(is_hf_punctuation(0x3002));  // 。
  CHECK_FALSE(is_hf_punctuation(0x20AC));  // €

  // Digits: Rust's char::is_numeric (Nd, Nl, No), in runs or one by one.
  PreTokenizerStep d;
  d.kind = K::digits;
  CHECK(pre_tokenize(one_step(d), "x\u00B2\u0663\u216By") == V{"x", "\u00B2\u0663\u216B", "y"});
  d.individual = true;
  CHECK(pre_tokenize(one_step(d), "x\u00B2\u0663\u216By") == V{"x", "\u00B2", "\u0663", "\u216B", "y"});
}

TEST_CASE("a pre-tokenizer Sequence feeds each step the pieces of the previous one") {
  PreTokenizer pt;
  PreTokenizerStep split;
  split.kind = K::split_regex;
  split.regex = std::make_shared<const Regex>(R"(\p{N}{1,3})");
  pt.add(split);
  PreTokenizerStep bytes;
  bytes.kind = K::byte_level;
  bytes.add_prefix_space = false;
  bytes.use_regex = false;
  pt.add(bytes);
  using V = std::vector<std::string>;
  CHECK(pre_tokenize(pt, "a 12345") == V{"aĠ", "123", "45"});
}

// ---------------- decoders ----------------

TEST_CASE("ByteLevel decoder maps characters back to bytes, keeping foreign tokens as they are") {
  const DecoderPlan plan({{.kind = DecoderStep::Kind::byte_level}});
  CHECK(run_decoder(plan, {"Hello", "Ġmy", "Ġfriend", ",", "Ġhow"}) == "Hello my friend, how");
  CHECK(run_decoder(plan, {"Hi", "<|im_end|>"}) == "Hi<|im_end|>");
  CHECK(run_decoder(plan, {"  "}) == "  ");  // plain spaces are not byte-level characters
  // "ä¸Ń" is the byte-level spelling of the three bytes of 中.
  CHECK(run_decoder(plan, {"ä¸Ń"}) == "中");
}

TEST_CASE("ByteFallback, Replace, Fuse and Strip make the Llama 2 decoder") {
  const DecoderPlan plan({{.kind = DecoderStep::Kind::replace, .text = kSpace, .content = " "},
                          {.kind = DecoderStep::Kind::byte_fallback},
                          {.kind = DecoderStep::Kind::fuse},
                          {.kind = DecoderStep::Kind::strip, .content = " ", .start = 1}});
  CHECK(run_decoder(plan, {kSpace + "Hello", kSpace + "world"}) == "Hello world");
  CHECK(run_decoder(plan, {kSpace + kSpace + "x"}) == " x");  // only one space is stripped
  CHECK(run_decoder(plan, {"<0xE4>", "<0xB8>", "<0xAD>"}) == "中");
  CHECK(run_decoder(plan, {"<0x0A>"}) == "\n");
  CHECK(run_decoder(plan, {"<0x4g>"}) == "<0x4g>");  // not a byte token
}

TEST_CASE("Metaspace decoder drops the replacement in the first token only when it prepends") {
  const DecoderPlan plan({{.kind = DecoderStep::Kind::metaspace, .text = kSpace, .prepend = true}});
  CHECK(run_decoder(plan, {kSpace + "Hey", kSpace + "friend!"}) == "Hey friend!");
  const DecoderPlan never({{.kind = DecoderStep::Kind::metaspace, .text = kSpace, .prepend = false}});
  CHECK(run_decoder(never, {kSpace + "Hey", kSpace + "friend!"}) == " Hey friend!");
}

TEST_CASE("Strip works per token before the join and on the whole text after it") {
  const DecoderPlan per_token({{.kind = DecoderStep::Kind::strip, .content = "x", .start = 1, .stop = 2}});
  CHECK(run_decoder(per_token, {"xxaxxx", "xb"}) == "xaxb");
  const DecoderPlan whole({{.kind = DecoderStep::Kind::fuse},
                           {.kind = DecoderStep::Kind::strip, .content = "x", .start = 2, .stop = 2}});
  CHECK(run_decoder(whole, {"x", "x", "xa", "x", "b", "x", "x", "x"}) == "xaxbx");
  CHECK(run_decoder(whole, {"a", "x"}) == "a");
}

TEST_CASE("a literal Replace after Fuse matches across token boundaries") {
  const DecoderPlan plan({{.kind = DecoderStep::Kind::fuse},
                          {.kind = DecoderStep::Kind::replace, .text = "abc", .content = "-"}});
  CHECK(run_decoder(plan, {"xa", "b", "cab", "ca", "b"}) == "x--ab");
}

TEST_CASE("decoders that cannot be streamed exactly are rejected") {
  DecoderStep regex_replace{.kind = DecoderStep::Kind::replace, .content = " "};
  regex_replace.regex = std::make_shared<const Regex>("a+");
  CHECK_THROWS_AS(DecoderPlan({{.kind = DecoderStep::Kind::fuse}, regex_replace}), loom::Error);
  CHECK_THROWS_AS(DecoderPlan({{.kind = DecoderStep::Kind::fuse}, {.kind = DecoderStep::Kind::byte_fallback}}),
                  loom::Error);
}

TEST_CASE("the stream never releases part of a UTF-8 character") {
  const DecoderPlan plan({{.kind = DecoderStep::Kind::byte_fallback}, {.kind = DecoderStep::Kind::fuse}});
  DecoderPlan::Stream s;
  plan.reset(s);
  CHECK(plan.push(s, plan.decode_token("<0xE4>", true)).empty());
  CHECK(plan.push(s, plan.decode_token("<0xB8>", false)).empty());
  CHECK(plan.push(s, plan.decode_token("<0xAD>", false)) == "中");
  CHECK(plan.push(s, plan.decode_token("<0xFF>", false)) == "\xFF");  // can never be a character
  CHECK(plan.push(s, plan.decode_token("<0xF0>", false)).empty());
  CHECK(plan.finish(s) == "\xF0");  // an unfinished character comes out raw at the end
}

// ---------------- added-token splitting ----------------

namespace {

std::vector<std::string> split_desc(const AddedTokenMatcher& m, std::string_view text, bool parse_special) {
  std::vector<AddedTokenMatcher::Segment> segs;
  m.split(text, parse_special, segs);
  std::vector<std::string> out;
  for (const auto& s : segs) {
    std::string d = "#";
    d += std::to_string(s.id);
    out.push_back(s.id >= 0 ? d : std::string(text.substr(s.begin, s.end - s.begin)));
  }
  return out;
}

AddedTokenMatcher matcher(std::vector<AddedToken> toks, AddedTokenMatcher::Order order) {
  std::vector<std::string> texts;
  for (const auto& t : toks) texts.push_back(t.content);
  return AddedTokenMatcher(std::move(toks), std::move(texts), order);
}

}  // namespace

TEST_CASE("HF and llama.cpp split overlapping added tokens differently, each as its reference does") {
  using V = std::vector<std::string>;
  const std::vector<AddedToken> toks{{.id = 1, .content = "ab"}, {.id = 2, .content = "bcd"}};
  // HF: leftmost match first, then the longest at that position.
  CHECK(split_desc(matcher(toks, AddedTokenMatcher::Order::leftmost_longest), "xabcd", true) == V{"x", "#1", "cd"});
  // llama.cpp: the longest token first, wherever it is.
  CHECK(split_desc(matcher(toks, AddedTokenMatcher::Order::longest_first), "xabcd", true) == V{"xa", "#2"});
}

TEST_CASE("special tokens match only with parse_special, user-defined tokens always") {
  using V = std::vector<std::string>;
  for (auto order : {AddedTokenMatcher::Order::leftmost_longest, AddedTokenMatcher::Order::longest_first}) {
    const auto m = matcher({{.id = 7, .content = "<s>", .special = true}, {.id = 9, .content = "<user>"}}, order);
    CHECK(split_desc(m, "a<s>b<user>c", true) == V{"a", "#7", "b", "#9", "c"});
    CHECK(split_desc(m, "a<s>b<user>c", false) == V{"a<s>b", "#9", "c"});
    CHECK(split_desc(m, "<s>", true) == V{"#7"});
    CHECK(split_desc(m, "<s><s>", true) == V{"#7", "#7"});
    CHECK(split_desc(m, "", true).empty());
  }
}

TEST_CASE("lstrip and rstrip swallow neighbouring whitespace and single_word needs word boundaries") {
  using V = std::vector<std::string>;
  const auto lr = matcher({{.id = 5, .content = "<m>", .lstrip = true, .rstrip = true}},
                          AddedTokenMatcher::Order::leftmost_longest);
  CHECK(split_desc(lr, "a  <m>  b", false) == V{"a", "#5", "b"});
  const auto llama = matcher({{.id = 5, .content = "<m>", .rstrip = true}}, AddedTokenMatcher::Order::longest_first);
  CHECK(split_desc(llama, "a <m> \n b", false) == V{"a ", "#5", "b"});
  const auto word = matcher({{.id = 3, .content = "yes", .single_word = true}},
                            AddedTokenMatcher::Order::leftmost_longest);
  CHECK(split_desc(word, "yes yesterday, eyes yes", false) == V{"#3", " yesterday, eyes ", "#3"});
}

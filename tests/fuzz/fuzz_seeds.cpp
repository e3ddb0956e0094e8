// Writes the fuzzers' seed corpora with loom's own writers, plus a few hand-made nasty
// cases: `loom_fuzz_seeds OUT_DIR` creates OUT_DIR/<harness>/<seed files>.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "format/byte_source.hpp"
#include "format/zip.hpp"
#include "model/architectures.hpp"
#include "fuzz/fuzz_tokenizers.hpp"
#include "support/llama2c_writer.hpp"
#include "loom/loader.hpp"
#include "loom/format.hpp"

namespace fs = std::filesystem;
using loom::DType;
using loom::MetaValue;
using MT = loom::MetaValue::Type;

namespace {

loom::Tensor filled(const loom::Shape& shape, DType dtype, uint8_t seed) {
  loom::Tensor t = loom::Tensor::empty(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.mutable_raw_data());
  for (int64_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(seed + i * 31);
  return t;
}

std::vector<loom::NamedTensor> model() {
  return {{"embed", filled({4, 8}, DType::f32, 1)},
          {"norm", filled({8}, DType::f16, 2)},
          {"proj", filled({2, 3}, DType::i32, 3)},
          {"s", filled({}, DType::f64, 4)}};
}

std::vector<char> read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write(const fs::path& p, const std::vector<char>& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_text_file(const fs::path& p) { return loom::fuzz::read_text(p); }

void write(const fs::path& p, std::string_view text) { write(p, std::vector<char>(text.begin(), text.end())); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* h : {"safetensors", "shard_index", "gguf", "zip", "unpickler", "npy", "config_json",
                        "tokenizer_json", "tokenizer_encode", "gguf_tokenizer", "pack_index", "generation_config", "llama2c", "chat_template", "batch", "server_request",
                        "sentencepiece_model"}) {
    fs::create_directories(out / h);
  }
  const fs::path tmp = out / "tmp";
  fs::create_directories(tmp);

  // safetensors
  loom::write_safetensors(out / "safetensors" / "model", model(), {{"format", "pt"}});
  loom::write_safetensors(out / "safetensors" / "empty", {});
  loom::write_safetensors(out / "safetensors" / "u8", std::vector<loom::NamedTensor>{{"b", filled({3}, DType::u8, 9)}});

  // shard index
  loom::write_safetensors_sharded(tmp, "model", model(), 2);
  write(out / "shard_index" / "index", read(tmp / "model.safetensors.index.json"));
  write(out / "shard_index" / "metadata", "{\"metadata\": {\"total_size\": 12, \"x\": [1], \"f\": 0.5}, "
                                          "\"weight_map\": {\"a\": \"s-1.safetensors\", \"b\": \"sub/s-2.safetensors\"}}");
  write(out / "shard_index" / "lenient", "\xEF\xBB\xBF{ /* edited */ \"weight_map\": {\"a\": \"s-1.safetensors\", // a\n"
                                         "\"b\": \"s-2.safetensors\",},}");

  // GGUF: tensors of several types, metadata of every type, a vocab-only file.
  loom::Metadata md;
  md.set("general.architecture", MetaValue::of_string("llama"));
  md.set("u8", MetaValue::of_uint(1, MT::u8));
  md.set("i16", MetaValue::of_int(-2, MT::i16));
  md.set("u32", MetaValue::of_uint(3, MT::u32));
  md.set("f32", MetaValue::of_float(0.5, MT::f32));
  md.set("b", MetaValue::of_bool(true));
  md.set("i64", MetaValue::of_int(-5, MT::i64));
  md.set("f64", MetaValue::of_float(0.25));
  md.set("tokens", MetaValue::of_array({MetaValue::of_string("a"), MetaValue::of_string("b")}, MT::string));
  md.set("nested", MetaValue::of_array({MetaValue::of_array({MetaValue::of_uint(1, MT::u16)}, MT::u16)}, MT::array));
  auto gguf_tensors = model();
  gguf_tensors.push_back({"q", filled({1, 32}, DType::q8_0, 5)});
  gguf_tensors.push_back({"k", filled({1, 256}, DType::q4_k, 6)});
  loom::write_gguf(out / "gguf" / "model", md, gguf_tensors);
  loom::write_gguf(out / "gguf" / "vocab", md, {});
  loom::write_gguf(out / "gguf" / "aligned64", {}, model(), 64);

  // torch .bin: plain, ZIP64, views sharing a storage.
  loom::write_torch(out / "zip" / "model", model());
  loom::write_torch(out / "zip" / "zip64", model(), {.archive_name = "pytorch_model", .force_zip64 = true});
  const loom::Tensor base = filled({3, 4}, DType::f32, 7);
  loom::write_torch(out / "zip" / "views",
                    std::vector<loom::NamedTensor>{{"a", base}, {"t", base.transpose2d()}, {"r", base.slice(0, 1, 2)}});

  // The pickles inside those archives.
  for (const char* name : {"model", "views"}) {
    const auto archive = read(out / "zip" / name);
    loom::format::SpanSource src(std::as_bytes(std::span<const char>(archive)), name);
    for (const auto& e : loom::format::read_zip_directory(src).entries) {
      if (e.name.ends_with("/data.pkl")) {
        write(out / "unpickler" / name,
              std::vector<char>(archive.begin() + static_cast<std::ptrdiff_t>(e.data_offset),
                                archive.begin() + static_cast<std::ptrdiff_t>(e.data_offset + e.uncompressed_size)));
      }
    }
  }
  // Hand-made: a disallowed global with a REDUCE payload, and a deep nest.
  write(out / "unpickler" / "evil", std::string_view("\x80\x02\x63os\nsystem\n(X\x04\0\0\0truetR.", 24));
  write(out / "unpickler" / "nest", std::string("\x80\x02]") + std::string(40, '\x85') + ".");

  // .npy
  loom::write_npy(out / "npy" / "f32", filled({2, 3}, DType::f32, 1));
  loom::write_npy(out / "npy" / "scalar", filled({}, DType::i64, 2));
  loom::write_npy(out / "npy" / "bool", filled({5}, DType::boolean, 3));

  // config.json: the demo's, every family loom knows, and hand-made oddities.
  const fs::path demo = loom::fuzz::demo_model();
  write(out / "config_json" / "demo", read(demo / "config.json"));
  loom::LoadOptions quiet;
  quiet.logger = loom::Logger::silent();
  const loom::ModelConfig demo_config = loom::load_config(demo, quiet);
  for (const auto& spec : loom::arch::all_architectures()) {
    loom::ModelConfig c = demo_config;
    c.architecture = std::string(spec.name);
    c.activation = spec.activation;
    write(out / "config_json" / std::string(spec.name), loom::hf_config_json(c));
  }
  {
    // The variants a family's config hook reads: Falcon's 40B layout, Gemma 2's caps.
    loom::ModelConfig falcon = demo_config;
    falcon.architecture = "falcon";
    falcon.norm = loom::NormKind::layer_norm;
    falcon.parallel_residual = true;
    falcon.shared_attn_ffn_norm = false;
    write(out / "config_json" / "falcon_newdec", loom::hf_config_json(falcon));
    loom::ModelConfig gemma2 = demo_config;
    gemma2.architecture = "gemma2";
    gemma2.attn_logit_softcap = 50;
    gemma2.final_logit_softcap = 30;
    gemma2.query_pre_attn_scalar = 144;
    gemma2.sliding_window = 4096;
    write(out / "config_json" / "gemma2_caps", loom::hf_config_json(gemma2));
  }
  write(out / "config_json" / "rope_llama3",
        R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"intermediate_size":128,)"
        R"("num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":300,)"
        R"("max_position_embeddings":131072,"rms_norm_eps":1e-5,"rope_theta":500000.0,"tie_word_embeddings":true,)"
        R"("rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,)"
        R"("original_max_position_embeddings":8192},"eos_token_id":[1,2,3],"bos_token_id":0})");
  write(out / "config_json" / "rope_yarn",
        R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","hidden_size":64,"intermediate_size":128,)"
        R"("num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":4,"vocab_size":300,)"
        R"("max_position_embeddings":32768,"rms_norm_eps":1e-6,"rope_scaling":{"type":"yarn","factor":4.0,)"
        R"("original_max_position_embeddings":32768},"sliding_window":4096,"use_sliding_window":false})");
  write(out / "config_json" / "huge",
        R"({"architectures":["LlamaForCausalLM"],"hidden_size":9223372036854775807,"intermediate_size":-1,)"
        R"("num_hidden_layers":4294967296,"num_attention_heads":0,"vocab_size":1e300,"head_dim":3,)"
        R"("max_position_embeddings":-5,"rope_theta":"x","eos_token_id":null})");
  write(out / "config_json" / "nested", std::string(200, '[') + std::string(200, ']'));
  // Hand-edited: a byte-order mark, both comment kinds, trailing commas, markers in strings.
  write(out / "config_json" / "lenient",
        "\xEF\xBB\xBF{ // edited\n"
        R"("architectures":["LlamaForCausalLM",],"model_type":"llama /* not a comment */",)"
        "\n/* block\n comment */ "
        R"("hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,)"
        R"("vocab_size":300,"max_position_embeddings":128,"torch_dtype":"a\"//b\\",})");
  write(out / "config_json" / "open_comment", R"({"hidden_size": 64, /* never closed)");

  // tokenizer.json: the demo's trained byte-level BPE, and hand-made Llama-style ones.
  write(out / "tokenizer_json" / "demo", read(demo / "tokenizer.json"));
  write(out / "tokenizer_json" / "llama_style",
        R"({"added_tokens":[{"id":0,"content":"<unk>","special":true},{"id":1,"content":"<s>","special":true},)"
        R"({"id":2,"content":"</s>","special":true}],)"
        R"("normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},)"
        R"({"type":"Replace","pattern":{"String":" "},"content":"▁"}]},"pre_tokenizer":null,)"
        R"("post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},)"
        R"({"Sequence":{"id":"A","type_id":0}}],"pair":[],"special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}},)"
        R"("decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},)"
        R"({"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]},)"
        R"("model":{"type":"BPE","unk_token":"<unk>","byte_fallback":true,"fuse_unk":true,)"
        R"("vocab":{"<unk>":0,"<s>":1,"</s>":2,"<0x41>":3,"▁":4,"a":5,"b":6,"ab":7,"▁ab":8},)"
        R"("merges":["a b","▁ ab"]}})");
  write(out / "tokenizer_json" / "split_regex",
        R"({"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":)"
        R"("(?i:'s|'t|'re)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s+(?!\\S)|\\s+"},)"
        R"("behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]},)"
        R"("normalizer":{"type":"NFC"},"decoder":{"type":"ByteLevel"},)"
        R"("model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"Ġ":3},"merges":[["a","b"]],"ignore_merges":true}})");
  // Falcon's pre-tokenizer Sequence (HF punctuation table, digit runs, 3-digit split) and
  // GPT-NeoX's normalized whitespace-run added tokens.
  write(out / "tokenizer_json" / "falcon_style",
        R"({"added_tokens":[{"id":0,"content":"<|endoftext|>","special":true,"normalized":false}],)"
        R"("pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Punctuation","behavior":"Contiguous"},)"
        R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},)"
        R"({"type":"Digits","individual_digits":false},)"
        R"({"type":"Split","pattern":{"Regex":"[0-9][0-9][0-9]"},"behavior":"Isolated","invert":false}]},)"
        R"("decoder":{"type":"ByteLevel"},)"
        R"("model":{"type":"BPE","vocab":{"<|endoftext|>":0,"a":1,"b":2,"ab":3,"Ġ":4,"1":5,"!":6,"Ġa":7},)"
        R"("merges":["a b","Ġ a"]}})");
  write(out / "tokenizer_json" / "neox_style",
        R"({"added_tokens":[{"id":0,"content":"<|endoftext|>","special":true,"normalized":false},)"
        R"({"id":5,"content":"   ","special":false,"normalized":true},{"id":6,"content":"  ","special":false,"normalized":true}],)"
        R"("normalizer":{"type":"NFC"},"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},)"
        R"("decoder":{"type":"ByteLevel"},)"
        R"("model":{"type":"BPE","vocab":{"<|endoftext|>":0,"a":1,"b":2,"ab":3,"Ġ":4},"merges":["a b"]}})");
  write(out / "tokenizer_json" / "sparse_ids", R"({"model":{"type":"BPE","vocab":{"a":0,"b":16000000},"merges":[]}})");
  write(out / "tokenizer_json" / "lenient",
        "// hand-edited\n"
        R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"//":3,},/* merges */"merges":["a b",],},})");

  // generation_config.json: typical files and the odd ones.
  write(out / "generation_config" / "llama3",
        R"({"bos_token_id":128000,"do_sample":true,"eos_token_id":[128001,128008,128009],"temperature":0.6,)"
        R"("top_p":0.9,"transformers_version":"4.45.0"})");
  write(out / "generation_config" / "greedy",
        "{\n  \"do_sample\": false, // greedy\n  \"max_length\": 256,\n  \"eos_token_id\": 2,\n}");
  write(out / "generation_config" / "bad_types",
        R"({"temperature":"hot","top_k":2.5,"max_new_tokens":-1,"eos_token_id":[1,[2]],"top_p":1e400})");

  // encode(): a mode byte (tokenizer, flags) then text, some of it not UTF-8.
  const std::vector<std::string> texts = {
      std::string("\x00Hello world, the cat sat.", 25), "\x01the abab ab a\xE2\x96\x81 b",
      "\x06<s>x</s><|endoftext|><tool>", std::string("\x00\xFF\xFE\xC3\x28\xF0\x9F\x98", 8),
      "\x02\xF0\x9F\x98\x80 \xE6\x97\xA5\xE6\x9C\xAC 123456 \t\n\r  end", std::string(300, 'a')};
  for (size_t i = 0; i < texts.size(); ++i) write(out / "tokenizer_encode" / std::to_string(i), texts[i]);

  // GGUF tokenizer metadata: the SentencePiece-style vocabulary, and oddities.
  loom::write_gguf(out / "gguf_tokenizer" / "spm", loom::fuzz::spm_gguf_metadata(), {});
  {
    loom::Metadata odd = loom::fuzz::spm_gguf_metadata();
    odd.set("tokenizer.ggml.bos_token_id", MetaValue::of_uint(99999, MT::u32));
    odd.set("tokenizer.ggml.scores", MetaValue::of_array({MetaValue::of_float(1.0, MT::f32)}, MT::f32));
    loom::write_gguf(out / "gguf_tokenizer" / "odd", odd, {});
    loom::Metadata bpe;
    bpe.set("tokenizer.ggml.model", MetaValue::of_string("gpt2"));
    bpe.set("tokenizer.ggml.pre", MetaValue::of_string("llama-bpe"));
    bpe.set("tokenizer.ggml.tokens", MetaValue::of_array({MetaValue::of_string("a"), MetaValue::of_string("b"),
                                                          MetaValue::of_string("ab"), MetaValue::of_string("Ġ")},
                                                         MT::string));
    bpe.set("tokenizer.ggml.merges", MetaValue::of_array({MetaValue::of_string("a b")}, MT::string));
    loom::write_gguf(out / "gguf_tokenizer" / "gpt2", bpe, {});
  }

  // SentencePiece tokenizer.model: the GGUF vocabulary above as a ModelProto, with Gemma's
  // add_dummy_prefix false, each refused setting, and a truncated one.
  {
    using loom::fuzz::SpmProtoSettings;
    const fs::path spm_dir = out / "sentencepiece_model";
    auto with = [](auto&& set) {
      SpmProtoSettings settings;
      set(settings);
      return loom::fuzz::spm_model_proto(settings);
    };
    write(spm_dir / "llama", loom::fuzz::spm_model_proto());
    write(spm_dir / "gemma", with([](SpmProtoSettings& p) { p.add_dummy_prefix = false; }));
    write(spm_dir / "unigram", with([](SpmProtoSettings& p) { p.model_type = 1; }));
    write(spm_dir / "nfkc", with([](SpmProtoSettings& p) {
            p.normalizer_name = "nmt_nfkc";
            p.charsmap = std::string("\x04\x00\x00\x00" "abcd", 8);
          }));
    write(spm_dir / "extra_ws", with([](SpmProtoSettings& p) { p.remove_extra_whitespaces = true; }));
    write(spm_dir / "no_escape", with([](SpmProtoSettings& p) { p.escape_whitespaces = false; }));
    write(spm_dir / "suffix", with([](SpmProtoSettings& p) { p.treat_whitespace_as_suffix = true; }));
    const std::string whole = loom::fuzz::spm_model_proto();
    write(spm_dir / "truncated", std::string_view(whole).substr(0, whole.size() / 2));
  }

  // pack index.json: the scratch pack's own, and ones that point elsewhere.
  const std::string index = read_text_file(loom::fuzz::scratch_pack() / "index.json");
  write(out / "pack_index" / "index", index);
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = index;
    const auto at = s.find(from);
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
  };
  write(out / "pack_index" / "escape", replaced("data-00000.bin", "../../../etc/passwd"));
  write(out / "pack_index" / "offset", replaced("\"offset\":", "\"offset\":18446744073709551000"));
  write(out / "pack_index" / "version", replaced("\"version\":", "\"version\":9"));
  // blk.0.attn_q (q8_0 [32, 32], two whole panels: the same length) marked packed, and a
  // packing nobody knows.
  auto packed = [&](const std::string& packing) {
    std::string s = index;
    const auto at = s.find("\"layout\": \"row_major\"", s.find("\"blk.0.attn_q\""));
    if (at != std::string::npos) s.replace(at, 21, "\"layout\": \"repacked\", \"packing\": \"" + packing + "\"");
    return s;
  };
  write(out / "pack_index" / "packed", packed("q8_0_x16"));
  write(out / "pack_index" / "packing", packed("q4_0_x8"));

  // llama2.c: checkpoints in both layouts, tied and not, a truncated one, a version-2
  // header, and a tokenizer.bin (the harness tries every input as both).
  auto bytes_of = [](const std::vector<uint8_t>& v) { return std::vector<char>(v.begin(), v.end()); };
  for (const int32_t version : {0, 1}) {
    for (const bool shared : {true, false}) {
      loom::test::Llama2cSpec spec;
      spec.version = version;
      spec.shared_classifier = shared;
      write(out / "llama2c" / ("v" + std::to_string(version) + (shared ? "-tied" : "-untied")),
            bytes_of(loom::test::llama2c_checkpoint(spec)));
    }
  }
  {
    auto cut = loom::test::llama2c_checkpoint({});
    cut.erase(cut.end() - 3, cut.end());
    write(out / "llama2c" / "truncated", bytes_of(cut));
    loom::test::Llama2cSpec v2;
    v2.version = 2;
    write(out / "llama2c" / "v2", bytes_of(loom::test::llama2c_checkpoint(v2)));
    write(out / "llama2c" / "tokenizer",
          bytes_of(loom::test::llama2c_tokenizer_file(loom::test::llama2c_small_vocab())));
  }

  // chat templates: small ones in the styles real models ship (ChatML, Llama 3, tool calls,
  // macros, namespaces, whitespace control), and a few broken ones.
  {
    const std::pair<const char*, std::string_view> templates[] = {
        {"chatml", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                   "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"},
        {"llama3", "{{- bos_token }}\n{%- for message in messages %}\n    {{- '<|start_header_id|>' + message['role'] + "
                   "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}\n{%- endfor %}\n"
                   "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}\n"},
        {"tools", "{%- if tools is defined and tools %}{{ tools | tojson(indent=4) }}{% endif %}\n{%- for m in messages %}"
                  "{%- if m.tool_calls is defined %}{%- for tc in m.tool_calls %}{{ tc.function.name }}"
                  "{{ tc.function.arguments | tojson }}{%- endfor %}{%- elif m.role == 'tool' %}[{{ m.content }}]"
                  "{%- else %}{{ m.content }}{%- endif %}{%- endfor %}"},
        {"macro_ns", "{%- macro render(m, depth=0) -%}{{ m.role | upper }}:{{ m.content if m.content is string else '' }}"
                     "{%- endmacro -%}{%- set ns = namespace(count=0, seen=[]) -%}{%- for m in messages if m.role != 'system' -%}"
                     "{%- set ns.count = ns.count + 1 -%}{{ render(m) }}{{ loop.index }}/{{ loop.length }}{% if not loop.last %}, "
                     "{% endif %}{%- endfor -%}{{ ns.count }}{{ strftime_now('%d %b %Y') }}"},
        {"raise", "{%- if messages[0]['role'] == 'system' -%}{{ raise_exception('System role not supported') }}{%- endif -%}"},
        {"filters", "{{ messages | map(attribute='role') | unique | join(', ') }}|{{ messages | selectattr('role', 'equalto', "
                    "'user') | list | length }}|{{ (messages | last).content[::-1] }}|{{ {'b': 1, 'a': [1.5, none]} | dictsort }}"
                    "|{{ '  x  ' | trim | replace('x', 'y') | indent(2, true) }}|{{ 7 // 2 }}{{ 2 ** 8 }}{{ 'a' ~ 1 }}"},
        {"whitespace", "  {%- if true -%}  a  {%+ if 1 %}b{% endif +%}\n{#- c -#}\n  {% raw %}{{ x }}{% endraw %}\n{{- ' y ' -}}"},
        {"broken_tag", "{% if messages %}{{ messages[0].content "},
        {"broken_end", "{% for m in messages %}{% endif %}"},
        {"deep", "{{ ((((((((((1)))))))))) }}{% if 1 %}{% if 1 %}{% if 1 %}x{% endif %}{% endif %}{% endif %}"},
    };
    for (const auto& [name, text] : templates) write(out / "chat_template" / name, text);
  }

  // batch: programs for fuzz_batch (3 option bytes: block size, pool size, token
  // budget; then ops: 0 add, 1-2 feed id n tokens.. marker, 3 fork, 4 rollback id pos,
  // 5 trim id begin end, 6 remove, 7 decode cancel).
  {
    const std::pair<const char*, std::vector<uint8_t>> programs[] = {
        // two sequences, prompts in chunks, a decode step each
        {"two_prompts", {3, 24, 4, 0, 0, 1, 0, 5, 1, 2, 3, 4, 5, 6, 0, 1, 1, 2, 9, 8, 7, 0, 7, 1, 7, 1, 7, 1,
                         1, 0, 0, 42, 0, 1, 1, 0, 43, 0, 7, 1}},
        // fork after decode, both continue; rollback the parent into the shared block
        {"fork_rollback", {3, 40, 8, 0, 1, 0, 7, 10, 11, 12, 13, 14, 15, 16, 17, 0, 7, 1, 3, 0, 1, 1, 2, 50, 51, 0,
                           4, 0, 3, 1, 0, 1, 60, 0, 7, 1, 7, 1}},
        // a small pool: the third prompt does not fit until one is removed
        {"pool_full", {1, 8, 16, 0, 0, 0, 1, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 1, 7, 9, 9, 9, 9, 9, 9, 9, 9, 0,
                       1, 2, 3, 1, 2, 3, 0, 6, 0, 1, 2, 3, 1, 2, 3, 0, 7, 1}},
        // trim the middle, then feed and decode; a cancelled decode
        {"trim_cancel", {1, 40, 16, 0, 1, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8, 0, 7, 1, 5, 0, 2, 5, 1, 0, 0, 33, 0, 7, 0,
                         7, 1}},
        // bad ids and tokens outside the vocabulary
        {"errors", {0, 0, 0, 1, 255, 0, 1, 0, 1, 0, 0, 5, 7, 6, 255, 4, 0, 99, 0, 0, 0, 0, 0, 7, 1}},
    };
    for (const auto& [name, bytes] : programs) write(out / "batch" / name, std::vector<char>(bytes.begin(), bytes.end()));
  }

  // server_request: endpoint byte (0 completions, 1 chat, 2 embeddings), the
  // Authorization header, '\n', the body.
  {
    const std::pair<const char*, std::string> requests[] = {
        {"completion", std::string("\0", 1) + "Bearer sk-fuzz\n" +
                           R"({"model": "m", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.7,)"
                           R"( "top_p": 0.9, "n": 2, "stop": ["\n", "The end"], "seed": 42, "logprobs": 2,)"
                           R"( "presence_penalty": 0.5, "frequency_penalty": 0.1, "logit_bias": {"2": -100},)"
                           R"( "stream": true, "stream_options": {"include_usage": true}, "user": "x"})"},
        {"completion_tokens", std::string("\0", 1) + "\n" + R"({"prompt": [[1, 403, 407], [1, 2]], "max_tokens": 4.0})"},
        {"chat", "\x01" "Bearer wrong\n" +
                     std::string(R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."},)"
                                 R"( {"role": "user", "content": [{"type": "text", "text": "Hi \u00e9"}]},)"
                                 R"( {"role": "assistant", "content": null}, {"role": "developer", "content": "x"}],)"
                                 R"( "max_completion_tokens": 8, "logprobs": true, "top_logprobs": 3, "tools": []})")},
        {"chat_errors", "\x01\n" + std::string(R"({"messages": [{"role": "robot", "content": 5}], "n": -1, "top_p": "x"})")},
        {"embeddings", "\x02" "Bearer sk-fuzz\n" + std::string(R"({"input": ["a", "b"], "encoding_format": "base64"})")},
        {"embedding_tokens", "\x02\n" + std::string(R"({"input": [1, 2, 3], "model": null})")},
        {"not_json", std::string("\0", 1) + "\n{\"prompt\": \"\xff\", "},
    };
    for (const auto& [name, bytes] : requests) write(out / "server_request" / name, std::string_view(bytes));
  }

  fs::remove_all(tmp);
  return 0;
}

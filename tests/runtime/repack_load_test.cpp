// LoadOptions::repack on a real GGUF (llama.cpp's q8_0 small-quant): which matrices are
// packed and what the report says, logits against llama.cpp's, batch invariance, and
// that the exporter, the pack writer and a draft copy see the rows, not the panels.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "loom/batch.hpp"
#include "loom/cpu.hpp"
#include "loom/exporter.hpp"
#include "loom/loader.hpp"
#include "loom/pack.hpp"
#include "loom/session.hpp"
#include "loom/speculative.hpp"
#include "loom/thread_pool.hpp"
#include "model/weight_slots.hpp"
#include "runtime/kernels/linear.hpp"
#include "support/reference_data.hpp"
#include "support/model_compare.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"
#include "tensor/packing.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;

namespace {

loom::LoadOptions repack_options(loom::RepackMode mode) {
  loom::LoadOptions o = t::quiet_load_options();
  o.repack = mode;
  return o;
}

bool native() { return loom::kernels::preferred_packing(loom::DType::q8_0) == loom::Packing::q8_0_x16; }

// Sessions that keep every position's logits, for the 30-odd ids of story.ids.txt.
loom::SessionOptions all_logits_options() {
  loom::SessionOptions so;
  so.all_logits = true;
  so.context_length = 64;
  return so;
}

// A pack of `src` written by loom with `quantize` (a type or preset) or, when empty,
// its matrices converted to `dtype`.
fs::path write_converted_pack(const fs::path& src, const fs::path& out, const std::string& quantize,
                              loom::DType dtype = loom::DType::f32) {
  loom::PackOptions po;
  po.load.logger = loom::Logger::silent();
  if (quantize.empty()) {
    po.dtype = dtype;
  } else {
    po.quantize = quantize;
  }
  loom::write_pack(src, out, po);
  return out;
}

}  // namespace

namespace {

// A llama.cpp small-quant GGUF of `dtype` loaded with and without repacking: which
// matrices are packed, the report, logits against llama.cpp's, and prefill equal to
// step-by-step decode bit for bit. Returns the worst relative L2 (-1 when skipped).
double check_repacked_gguf(const fs::path& ref, loom::DType dtype, loom::Packing packing) {
  const fs::path dir = ref / "models" / "small-quant";
  const std::string name(loom::dtype_name(dtype));
  const auto plain = loom::load_model(dir / ("small-quant-" + name + ".gguf"), repack_options(loom::RepackMode::off));
  const auto packed =
      loom::load_model(dir / ("small-quant-" + name + ".gguf"), repack_options(loom::RepackMode::automatic));
  const loom::LoadReport& report = *packed->load_report();
  CHECK(plain->load_report()->repacked_tensors == 0);
  if (loom::kernels::preferred_packing(dtype) != packing) {
    WARN("SKIPPED: this CPU's kernels do not read " << loom::packing_name(packing) << ", so nothing is packed");
    CHECK(report.repacked_tensors == 0);
    return -1.0;
  }
  // 4 layers x 7 projections and the untied output; the embedding stays rows.
  CHECK(report.repacked_tensors == 29);
  CHECK(packed->weights().token_embd.packing() == loom::Packing::none);
  CHECK(packed->weights().output.packing() == packing);
  CHECK(packed->weights().layers[0].ffn_down.packing() == packing);
  const std::string packing_text(loom::packing_name(packing));
  for (const auto& rec : report.tensors) {
    if (rec.internal_name != "blk.0.ffn_down") continue;
    CHECK(rec.packing == packing);
    CHECK_FALSE(rec.zero_copy);
    CHECK(rec.layout_change == "repacked " + packing_text);
  }
  CHECK(report.memory.owned_weight_bytes > plain->load_report()->memory.owned_weight_bytes);
  CHECK(report.to_text().find("(29 repacked)") != std::string::npos);
  CHECK(report.to_json(true).find("\"packing\": \"" + packing_text + "\"") != std::string::npos);
  t::check_same_rows(*plain, *packed);

  // Logits: within the bound every kernel family meets (reference_models_test.cpp).
  const auto ids = t::read_ids(dir / "logits" / "story.ids.txt");
  const auto expected = t::read_logits(dir / "logits" / ("story." + name + ".logits.txt"));
  const loom::SessionOptions so = all_logits_options();
  loom::Session s(packed, so);
  s.prefill(ids);
  double worst = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto got = s.logits_at(static_cast<int64_t>(i));
    const double err = t::relative_l2(got, expected[i]);
    worst = std::max(worst, err);
    CHECK(err < 3e-2);
  }

  // Prefill and one-token decode give the same bits for a position (batch invariance).
  loom::Session step(packed, so);
  for (size_t i = 0; i < ids.size(); ++i) {
    step.prefill(std::span<const int32_t>(&ids[i], 1));
    const auto a = step.logits_at(0);  // the one row of this pass
    const auto b = s.logits_at(static_cast<int64_t>(i));
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
  return worst;
}

}  // namespace

TEST_CASE("repack: llama.cpp's f32, f16, bf16, q8_0, q4_0, q4_k and q6_k GGUFs load their projections packed, reported, matching llama.cpp") {
  LOOM_REQUIRE_REFERENCE(ref);
  // The packed q8_0 and q4_0 sums follow ggml's generic order: measured 0 for both.
  for (const auto& [dtype, packing] : {std::pair{loom::DType::f32, loom::Packing::f32_x64},
                                       std::pair{loom::DType::f16, loom::Packing::f16_x64},
                                       std::pair{loom::DType::bf16, loom::Packing::bf16_x64},
                                       std::pair{loom::DType::q8_0, loom::Packing::q8_0_x16},
                                       std::pair{loom::DType::q4_0, loom::Packing::q4_0_x16},
                                       std::pair{loom::DType::q4_k, loom::Packing::q4_k_x16},
                                       std::pair{loom::DType::q6_k, loom::Packing::q6_k_x16}}) {
    INFO(loom::dtype_name(dtype));
    const double worst = check_repacked_gguf(ref, dtype, packing);
    if (worst >= 0) WARN("small-quant " << loom::dtype_name(dtype) << " packed: worst relative L2 against llama.cpp " << worst);
  }
}

TEST_CASE("repack: packs written from a packed load hold rows, and draft copies of a packed or plain target are the same (and packed)") {
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path src = ref / "models" / "small-quant" / "small-quant-q8_0.gguf";
  t::TempDir tmp;
  loom::PackOptions off, on;
  off.load = repack_options(loom::RepackMode::off);
  on.load = repack_options(loom::RepackMode::automatic);
  loom::write_pack(src, tmp / "off", off);
  loom::write_pack(src, tmp / "on", on);
  const auto a = loom::load_model(tmp / "off", repack_options(loom::RepackMode::off));
  const auto b = loom::load_model(tmp / "on", repack_options(loom::RepackMode::off));
  t::check_same_rows(*a, *b);

  const auto plain = loom::load_model(src, repack_options(loom::RepackMode::off));
  const auto packed = loom::load_model(src, repack_options(loom::RepackMode::automatic));
  for (const auto dtype : {loom::DType::q4_k, loom::DType::q8_0, loom::DType::f16}) {
    INFO(loom::dtype_name(dtype));
    const auto d1 = loom::make_draft_copy(*plain, dtype);
    const auto d2 = loom::make_draft_copy(*packed, dtype);
    t::check_same_rows(*d1, *d2);
    // Converted on a pool's threads: the same copy.
    loom::ThreadPool two(2);
    t::check_same_rows(*d1, *loom::make_draft_copy(*packed, dtype, &two));
    // A converted copy's matrices live in one buffer (huge pages: tensor/gather.hpp);
    // a copy in the target's own dtype shares the target's.
    const auto& target_q = plain->weights().layers.front().attn_q;
    for (const auto& d : {d1, d2}) {
      const auto& wt = d->weights();
      const bool converted = target_q.dtype() != dtype;
      CHECK(wt.layers.front().attn_q.shares_storage_with(wt.layers.back().ffn_down) == converted);
      if (converted) CHECK_FALSE(wt.layers.front().attn_q.shares_storage_with(target_q));
    }
    if (native() && dtype == loom::DType::q8_0) CHECK(d2->weights().layers[1].attn_q.packing() == loom::Packing::q8_0_x16);
    // A converted copy is owned memory, so it takes the kernel-native layout whatever the
    // target's load options said.
    if (native() && dtype == loom::DType::q4_k) {
      CHECK(d1->weights().layers[1].attn_q.packing() == loom::Packing::q4_k_x16);
      CHECK(d2->weights().layers[1].attn_q.packing() == loom::Packing::q4_k_x16);
    }
  }
}

TEST_CASE("repack: packs quantized by loom in q4_1, q5_0, q5_1, q2_k, q3_k load packed, as accurate as the rows") {
  // No llama.cpp file of these types in the reference set: loom quantizes the f32
  // small-quant GGUF, and the packed and row-major loads are checked against the same
  // weights dequantized to f32.
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path dir = ref / "models" / "small-quant";
  const auto ids = t::read_ids(dir / "logits" / "story.ids.txt");
  t::TempDir tmp;
  for (const auto& [type, packing] : {std::pair{loom::DType::q4_1, loom::Packing::q4_1_x16},
                                      std::pair{loom::DType::q5_0, loom::Packing::q5_0_x16},
                                      std::pair{loom::DType::q5_1, loom::Packing::q5_1_x16},
                                      std::pair{loom::DType::q2_k, loom::Packing::q2_k_x16},
                                      std::pair{loom::DType::q3_k, loom::Packing::q3_k_x16}}) {
    const std::string name(loom::dtype_name(type));
    INFO(name);
    const fs::path pack = write_converted_pack(dir / "small-quant-f32.gguf", tmp / name, name);
    const auto plain = loom::load_model(pack, repack_options(loom::RepackMode::off));
    const auto packed = loom::load_model(pack, repack_options(loom::RepackMode::automatic));
    REQUIRE(plain->weights().layers[0].attn_q.dtype() == type);
    if (loom::kernels::preferred_packing(type) != packing) {
      WARN("SKIPPED: this CPU's kernels do not read " << loom::packing_name(packing) << ", so nothing is packed");
      continue;
    }
    CHECK(packed->load_report()->repacked_tensors == 29);
    CHECK(packed->weights().layers[2].ffn_gate.packing() == packing);
    t::check_same_rows(*plain, *packed);
    const auto exact =
        loom::load_model(write_converted_pack(pack, tmp / (name + "-f32"), ""), repack_options(loom::RepackMode::off));
    const loom::SessionOptions so = all_logits_options();
    loom::Session a(plain, so), b(packed, so), c(exact, so);
    a.prefill(ids);
    b.prefill(ids);
    c.prefill(ids);
    // The packed and row-major kernels sum the same exact block integers in different
    // orders; on this random 4-layer model that alone moved some positions' logits by up
    // to 1.6% relative L2 (q4_1; an activation rounding flipped, then amplified), while
    // both stayed ~2% from the dequantized f32 model's. So the check is the accuracy that
    // matters: packed as close to the f32 model as the rows are.
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto ii = static_cast<int64_t>(i);
      const double rows_error = t::relative_l2(a.logits_at(ii), c.logits_at(ii));
      const double packed_error = t::relative_l2(b.logits_at(ii), c.logits_at(ii));
      CHECK(rows_error < 0.05);
      CHECK(packed_error < 1.25 * rows_error + 1e-3);
    }
  }
}

TEST_CASE("repack: a q5_k_m pack quantized by loom loads its q5_k and q6_k projections packed, logits as the rows'") {
  // No llama.cpp q5_k file in the reference set: loom quantizes the f32 small-quant GGUF
  // with the q5_k_m recipe (q5_k projections, q6_k for ffn_down, attn_v and the output)
  // and the packed load is checked against the row-major one.
  LOOM_REQUIRE_REFERENCE(ref);
  const fs::path dir = ref / "models" / "small-quant";
  t::TempDir tmp;
  const fs::path pack = write_converted_pack(dir / "small-quant-f32.gguf", tmp / "q5_k_m", "q5_k_m");
  const auto plain = loom::load_model(pack, repack_options(loom::RepackMode::off));
  const auto packed = loom::load_model(pack, repack_options(loom::RepackMode::automatic));
  REQUIRE(plain->weights().layers[0].attn_q.dtype() == loom::DType::q5_k);
  REQUIRE(plain->weights().layers[0].ffn_down.dtype() == loom::DType::q6_k);
  if (loom::kernels::preferred_packing(loom::DType::q5_k) != loom::Packing::q5_k_x16) {
    WARN("SKIPPED: this CPU has no AVX2, so nothing is packed");
    CHECK(packed->load_report()->repacked_tensors == 0);
    return;
  }
  // Per layer 5 q5_k (q, k, o, gate, up) and 2 q6_k (v, down) projections, and the output.
  CHECK(packed->load_report()->repacked_tensors == 29);
  CHECK(packed->weights().layers[0].attn_q.packing() == loom::Packing::q5_k_x16);
  CHECK(packed->weights().layers[3].ffn_up.packing() == loom::Packing::q5_k_x16);
  CHECK(packed->weights().layers[0].ffn_down.packing() == loom::Packing::q6_k_x16);
  CHECK(packed->weights().output.packing() == loom::Packing::q6_k_x16);
  t::check_same_rows(*plain, *packed);

  // The packed and row-major kernels sum in different orders over the same q8_k
  // activations: the logits agree to rounding, and the packed prefill equals its own
  // step-by-step decode bit for bit.
  const auto ids = t::read_ids(dir / "logits" / "story.ids.txt");
  const loom::SessionOptions so = all_logits_options();
  loom::Session a(plain, so), b(packed, so), step(packed, so);
  a.prefill(ids);
  b.prefill(ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    CHECK(t::relative_l2(b.logits_at(static_cast<int64_t>(i)), a.logits_at(static_cast<int64_t>(i))) < 1e-4);
    step.prefill(std::span<const int32_t>(&ids[i], 1));
    const auto x = step.logits_at(0);
    const auto y = b.logits_at(static_cast<int64_t>(i));
    REQUIRE(x.size() == y.size());
    CHECK(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
  }
}


TEST_CASE("repack: a load that repacks a mapped file's matrices lets go of their mapped rows") {
  // Once packed, nothing reads a matrix's rows in the file: their pages leave the process
  // (MappedFile::advise, dont_need), so the weights are held once. Before, every packed
  // matrix stayed resident twice, its rows read by the packing and its panels. A tied
  // output's table goes too: the embedding then reads its rows from the packed table.
  if (loom::kernels::preferred_packing(loom::DType::f16) == loom::Packing::none) {
    WARN("SKIPPED: no packed f16 kernels on this CPU: the matrices stay mapped");
    return;
  }
  for (const bool tied : {false, true}) {
    INFO((tied ? "tied" : "untied") << " output");
    loom::ModelConfig c = t::mid_llama_config();
    c.vocab_size = tied ? 8192 : 512;
    c.tie_word_embeddings = tied;
    t::TempDir dir;
    const fs::path file = dir / "m.gguf";
    loom::export_model(c, t::random_weights(c, 17, loom::DType::f16), file, loom::ExportFormat::gguf);
    const auto packed = loom::load_model(file, repack_options(loom::RepackMode::automatic));
    // 4 layers x 7 projections and the output (the table, when tied)
    REQUIRE(packed->load_report()->repacked_tensors == 29);
    CHECK((packed->weights().token_embd.packing() != loom::Packing::none) == tied);
    const int64_t resident = t::mapped_resident_bytes(file);  // the one mapping of the file so far
    const int64_t H = c.hidden_size;  // f16: 2 bytes an element
    const int64_t packed_rows = c.n_layers * (2 * c.q_dim() * H + 2 * c.kv_dim() * H + 3 * c.intermediate_size * H) * 2 +
                                (tied ? c.vocab_size * H * 2 : 0);
    if (resident < 0) {
      WARN("SKIPPED: /proc/self/smaps cannot be read here");
    } else {
      // What stays mapped: the header, the norms (and an untied embedding's rows, not
      // read yet) and whatever the kernel maps around the pages read: under 1 MiB here,
      // against the 25-33 MiB of packed rows that all stayed before.
      INFO("resident " << resident << " of " << packed_rows << " bytes of packed rows");
      CHECK(resident < packed_rows / 8);
    }
    // The packed load still runs (an untied embedding's rows read from the mapping on
    // demand, a tied one's unpacked from the table) and gives the plain load's logits.
    const auto plain = loom::load_model(file, repack_options(loom::RepackMode::off));
    const std::vector<int32_t> ids{1, 5, 9, 300};
    loom::Session s(packed, all_logits_options()), r(plain, all_logits_options());
    s.prefill(ids);
    r.prefill(ids);
    for (int64_t i = 0; i < 4; ++i) CHECK(t::relative_l2(s.logits_at(i), r.logits_at(i)) < 1e-4);
  }
}

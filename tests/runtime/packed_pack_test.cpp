// Packs that store kernel-native layouts (PackOptions::repack, `loom convert --repack`),
// q8_0 panels (a tied output's table too) and f16 panels:
// what the index and provenance say, a load that maps the panels as stored, a load on a
// CPU whose kernels do not read them (unpacked, with a note), a load that asks for
// another dtype, conversion back to rows, and index entries the loader must refuse.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "loom/cpu.hpp"
#include "loom/error.hpp"
#include "loom/exporter.hpp"
#include "loom/loader.hpp"
#include "loom/pack.hpp"
#include "loom/session.hpp"
#include "loom/speculative.hpp"
#include "model/weight_slots.hpp"
#include "runtime/kernels/linear.hpp"
#include "support/model_compare.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"
#include "tensor/packing.hpp"

namespace fs = std::filesystem;
namespace t = loom::test;
using loom::DType;
using loom::Packing;

namespace {

bool native() { return loom::kernels::preferred_packing(DType::q8_0) == Packing::q8_0_x16; }

// The tiny Llama with a vocabulary of 120: the output projection's last panel of 16 rows
// is half padding.
loom::ModelConfig config() {
  loom::ModelConfig c = t::tiny_llama_config();
  c.vocab_size = 120;
  return c;
}

loom::PackOptions q8_pack(loom::RepackMode repack) {
  loom::PackOptions o;
  o.load = t::quiet_load_options();
  o.quantize = "q8_0";
  o.repack = repack;
  return o;
}

loom::LoadOptions load_options(std::optional<DType> dtype = std::nullopt,
                               loom::RepackMode repack = loom::RepackMode::off) {
  loom::LoadOptions o = t::quiet_load_options();
  o.target_dtype = dtype;
  o.repack = repack;
  return o;
}

const std::vector<int32_t> kPrompt{1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 3, 7};

// Prefill logits of every position, then decode logits token by token.
std::vector<float> logits_of(const std::shared_ptr<const loom::Model>& model) {
  loom::SessionOptions o;
  o.all_logits = true;
  o.context_length = 32;
  std::vector<float> out;
  loom::Session s(model, o);
  s.prefill(kPrompt);
  for (size_t i = 0; i < kPrompt.size(); ++i) {
    const auto row = s.logits_at(static_cast<int64_t>(i));
    out.insert(out.end(), row.begin(), row.end());
  }
  loom::Session d(model, o);
  for (int32_t token : kPrompt) {
    d.step(token);
    const auto row = d.logits();
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// Matrices the writer packs: every projection, the untied output; not the embedding.
int64_t projection_count(const loom::ModelConfig& c) {
  int64_t n = c.tie_word_embeddings ? 0 : 1;
  for (const auto& slot : loom::slots::all_slots()) {
    if (slot.role == loom::slots::Role::matrix && slot.per_layer && slot.needed(c)) n += c.n_layers;
  }
  return n;
}

const loom::TensorLoadRecord& record(const loom::LoadReport& r, const std::string& name) {
  for (const auto& rec : r.tensors) {
    if (rec.internal_name == name) return rec;
  }
  FAIL("no record " << name);
  return r.tensors.front();
}

bool has_note(const loom::LoadReport& r, const std::string& text) {
  for (const auto& n : r.notes) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

// The pack's index.json with the entry of `tensor` changed: `from` (its first occurrence
// after the entry's name) replaced by `to`.
void edit_entry(const fs::path& pack, const std::string& tensor, const std::string& from, const std::string& to) {
  std::string text = t::read_file_text(pack / "index.json");
  const size_t entry = text.find("\"name\": \"" + tensor + "\"");
  REQUIRE(entry != std::string::npos);
  const size_t at = text.find(from, entry);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  t::write_file_bytes(pack / "index.json", std::vector<uint8_t>(text.begin(), text.end()));
}

}  // namespace

TEST_CASE("packed packs: --repack stores the kernel layout, a load maps it as stored, elsewhere it is unpacked") {
  const loom::ModelConfig c = config();
  t::TempDir dir;
  loom::export_model(c, t::random_weights(c, 71), dir / "src", loom::ExportFormat::safetensors);
  loom::write_pack(dir / "src", dir / "rows", q8_pack(loom::RepackMode::off));
  loom::write_pack(dir / "src", dir / "packed", q8_pack(loom::RepackMode::automatic));
  const std::string index = t::read_file_text(dir / "packed" / "index.json");
  CHECK(loom::verify_pack(dir / "packed").empty());
  if (!native()) {
    WARN("SKIPPED: this CPU's kernels have no packed q8_0 layout (no AVX-512 VNNI): the pack holds rows");
    CHECK(index.find("\"repacked\"") == std::string::npos);
    CHECK(index.find("\"repack\": null") != std::string::npos);
    return;
  }
  const int64_t projections = projection_count(c);
  // The index names each packed tensor's kernel layout; the provenance, the ISA.
  CHECK(index.find("\"layout\": \"repacked\",\n      \"packing\": \"q8_0_x16\"") != std::string::npos);
  CHECK(index.find("\"isa\": \"" + loom::isa_description() + "\"") != std::string::npos);
  CHECK(index.find("\"q8_0_x16\": " + std::to_string(projections)) != std::string::npos);
  CHECK(index.find("\"repack\": \"auto\"") != std::string::npos);
  CHECK(t::read_file_text(dir / "rows" / "index.json").find("\"repacked\"") == std::string::npos);

  const auto rows = loom::load_model(dir / "rows", load_options());
  const auto repacked = loom::load_model(dir / "rows", load_options(std::nullopt, loom::RepackMode::automatic));
  const std::vector<float> rows_logits = logits_of(rows);
  const std::vector<float> packed_logits = logits_of(repacked);

  SECTION("where the kernels read the layout: mapped as stored, zero-copy, the logits of a repacking load") {
    const auto model = loom::load_model(dir / "packed", load_options());
    const loom::LoadReport& r = *model->load_report();
    CHECK(r.stored_packed_tensors == projections);
    CHECK(r.repacked_tensors == 0);
    CHECK(r.converted_tensors == 0);
    CHECK(r.memory.owned_weight_bytes == 0);
    CHECK(model->weights().output.packing() == Packing::q8_0_x16);
    CHECK(model->weights().layers[1].ffn_down.packing() == Packing::q8_0_x16);
    CHECK(model->weights().token_embd.packing() == Packing::none);
    const auto& rec = record(r, "output");
    CHECK(rec.zero_copy);
    CHECK(rec.stored_packing == Packing::q8_0_x16);
    CHECK(rec.packing == Packing::q8_0_x16);
    CHECK(rec.layout_change == "q8_0_x16 as stored");
    // 120 rows stored as 8 panels of 16.
    CHECK(rec.stored_bytes == static_cast<uint64_t>(loom::packed_nbytes(Packing::q8_0_x16, loom::Shape{120, 64})));
    CHECK(rec.stored_bytes == 8 * 16 * 2 * 34);
    CHECK(r.to_text().find(std::to_string(projections) + " packed as stored") != std::string::npos);
    t::check_same_rows(*rows, *model);
    CHECK(t::same_bits(logits_of(model), packed_logits));
    // A repacking load keeps what is already packed.
    const auto again = loom::load_model(dir / "packed", load_options(std::nullopt, loom::RepackMode::automatic));
    CHECK(again->load_report()->stored_packed_tensors == projections);
    CHECK(again->load_report()->repacked_tensors == 0);
  }

  SECTION("on a CPU whose kernels read rows: unpacked, with a note naming the layout and both ISAs") {
    const std::string packed_for = loom::isa_description();
    t::IsaScope rows_only(loom::Isa::scalar);  // the scalar family reads q8_0 as rows
    const auto model = loom::load_model(dir / "packed", load_options());
    const loom::LoadReport& r = *model->load_report();
    CHECK(r.stored_packed_tensors == 0);
    CHECK(r.converted_tensors == projections);
    CHECK(model->weights().output.packing() == Packing::none);
    CHECK(model->weights().output.dtype() == DType::q8_0);
    const auto& rec = record(r, "blk.0.attn_q");
    CHECK_FALSE(rec.zero_copy);
    CHECK(rec.stored_packing == Packing::q8_0_x16);
    CHECK(rec.packing == Packing::none);
    CHECK(rec.layout_change.find("unpacked from q8_0_x16") != std::string::npos);
    CHECK(has_note(r, std::to_string(projections) + " matrices stored as q8_0_x16 (packed for " + packed_for +
                          ") were unpacked to rows: this CPU's kernels (" + loom::isa_description() +
                          ") do not read that layout"));
    t::check_same_rows(*rows, *model);
    const auto rows_here = loom::load_model(dir / "rows", load_options());
    CHECK(t::same_bits(logits_of(model), logits_of(rows_here)));
  }

  SECTION("a load that asks for another dtype unpacks and converts") {
    const auto model = loom::load_model(dir / "packed", load_options(DType::f32));
    const loom::LoadReport& r = *model->load_report();
    CHECK(r.stored_packed_tensors == 0);
    CHECK(model->weights().layers[0].attn_v.dtype() == DType::f32);
    CHECK(model->weights().layers[0].attn_v.packing() == Packing::none);
    CHECK(has_note(r, "were unpacked to rows: the load asked for f32"));
    const auto wide = loom::load_model(dir / "rows", load_options(DType::f32));
    CHECK(t::same_bits(logits_of(model), logits_of(wide)));
  }

  SECTION("converting a packed pack without --repack gives rows again, the same bytes") {
    loom::write_pack(dir / "packed", dir / "back", q8_pack(loom::RepackMode::off));
    const std::string back = t::read_file_text(dir / "back" / "index.json");
    CHECK(back.find("\"repacked\"") == std::string::npos);
    const auto model = loom::load_model(dir / "back", load_options());
    CHECK(model->load_report()->stored_packed_tensors == 0);
    t::check_same_rows(*rows, *model);
    CHECK(t::same_bits(logits_of(model), rows_logits));
  }
}

TEST_CASE("packed packs: index entries whose packing the loader cannot use are refused by name") {
  const loom::ModelConfig c = config();
  t::TempDir dir;
  loom::export_model(c, t::random_weights(c, 72), dir / "src", loom::ExportFormat::safetensors);
  loom::write_pack(dir / "src", dir / "base", q8_pack(loom::RepackMode::off));
  auto broken = [&](const std::string& name) {
    fs::copy(dir / "base", dir / name, fs::copy_options::recursive);
    return dir / name;
  };
  auto load_error = [&](const fs::path& pack) -> std::string {
    try {
      loom::load_model(pack, load_options());
    } catch (const loom::Error& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string repacked = "\"layout\": \"repacked\", \"packing\": ";

  const fs::path unknown = broken("unknown");
  edit_entry(unknown, "blk.0.attn_q", "\"layout\": \"row_major\"", repacked + "\"q9_x99\"");
  std::string what = load_error(unknown);
  CHECK(what.find("packing 'q9_x99' is unknown to this loom") != std::string::npos);
  CHECK(what.find("blk.0.attn_q") != std::string::npos);
  CHECK(what.find("index.json") != std::string::npos);

  const fs::path layout = broken("layout");
  edit_entry(layout, "blk.0.attn_k", "\"layout\": \"row_major\"", "\"layout\": \"sideways\"");
  what = load_error(layout);
  CHECK(what.find("unknown layout 'sideways'") != std::string::npos);
  CHECK(what.find("blk.0.attn_k") != std::string::npos);

  const fs::path norm = broken("norm");  // an f32 vector cannot be q8_0 panels
  edit_entry(norm, "blk.1.ffn_norm", "\"layout\": \"row_major\"", repacked + "\"q8_0_x16\"");
  what = load_error(norm);
  CHECK(what.find("packing q8_0_x16 does not fit a f32[64] tensor") != std::string::npos);
  CHECK(what.find("blk.1.ffn_norm") != std::string::npos);

  // The embedding is read a row at a time: a packing there is refused, not misread. Its
  // 120 rows as panels take 128 rows' bytes, so the length is fixed up to match.
  const fs::path embd = broken("embd");
  edit_entry(embd, "token_embd", "\"layout\": \"row_major\"", repacked + "\"q8_0_x16\"");
  what = load_error(embd);
  CHECK(what.find("tensor bytes do not fit its shape or its data file") != std::string::npos);
  edit_entry(embd, "token_embd", "\"length\": " + std::to_string(120 * 2 * 34),
             "\"length\": " + std::to_string(128 * 2 * 34));
  what = load_error(embd);
  CHECK(what.find("in a slot that does not read it as one whole projection matrix") != std::string::npos);
  CHECK(what.find("token_embd") != std::string::npos);
}

TEST_CASE("packed packs: an f16 pack written with --repack stores f16_x64 panels, maps them, and unpacks them at the scalar level") {
  const loom::ModelConfig c = config();
  t::TempDir dir;
  loom::export_model(c, t::random_weights(c, 72), dir / "src", loom::ExportFormat::safetensors);
  auto f16_pack = [](loom::RepackMode repack) {
    loom::PackOptions o;
    o.load = t::quiet_load_options();
    o.dtype = DType::f16;
    o.repack = repack;
    return o;
  };
  loom::write_pack(dir / "src", dir / "rows", f16_pack(loom::RepackMode::off));
  loom::write_pack(dir / "src", dir / "packed", f16_pack(loom::RepackMode::automatic));
  CHECK(loom::verify_pack(dir / "packed").empty());
  const std::string index = t::read_file_text(dir / "packed" / "index.json");
  if (loom::kernels::preferred_packing(DType::f16) != Packing::f16_x64) {
    WARN("SKIPPED: this CPU's kernels have no f16 panel layout (no AVX2): the pack holds rows");
    CHECK(index.find("\"repacked\"") == std::string::npos);
    return;
  }
  const int64_t projections = projection_count(c);
  CHECK(index.find("\"layout\": \"repacked\",\n      \"packing\": \"f16_x64\"") != std::string::npos);
  CHECK(index.find("\"f16_x64\": " + std::to_string(projections)) != std::string::npos);

  const auto model = loom::load_model(dir / "packed", load_options());
  const loom::LoadReport& r = *model->load_report();
  CHECK(r.stored_packed_tensors == projections);
  CHECK(r.memory.owned_weight_bytes == 0);
  CHECK(model->weights().output.packing() == Packing::f16_x64);
  CHECK(model->weights().token_embd.packing() == Packing::none);
  const auto& rec = record(r, "output");
  CHECK(rec.zero_copy);
  CHECK(rec.layout_change == "f16_x64 as stored");
  // 120 rows stored as 2 panels of 64, every column of each.
  const int64_t hidden = c.hidden_size;
  CHECK(rec.stored_bytes == static_cast<uint64_t>(2 * 64 * hidden * 2));
  const auto rows = loom::load_model(dir / "rows", load_options());
  t::check_same_rows(*rows, *model);
  const auto repacking = loom::load_model(dir / "rows", load_options(std::nullopt, loom::RepackMode::automatic));
  CHECK(repacking->load_report()->repacked_tensors == projections);
  CHECK(t::same_bits(logits_of(model), logits_of(repacking)));

  // At the scalar level no kernel reads panels: unpacked to rows, with the note.
  t::IsaScope scalar(loom::Isa::scalar);
  const auto unpacked = loom::load_model(dir / "packed", load_options());
  CHECK(unpacked->load_report()->stored_packed_tensors == 0);
  CHECK(unpacked->weights().output.packing() == Packing::none);
  CHECK(has_note(*unpacked->load_report(), std::to_string(projections) + " matrices stored as f16_x64"));
  const auto rows_here = loom::load_model(dir / "rows", load_options());
  CHECK(t::same_bits(logits_of(unpacked), logits_of(rows_here)));
}

TEST_CASE("packed packs: a tied output's table takes the output's panels, in a load, a pack and a draft copy") {
  loom::ModelConfig c = config();
  c.tie_word_embeddings = true;
  t::TempDir dir;
  loom::export_model(c, t::random_weights(c, 73), dir / "src", loom::ExportFormat::safetensors);
  loom::write_pack(dir / "src", dir / "rows", q8_pack(loom::RepackMode::off));
  loom::write_pack(dir / "src", dir / "packed", q8_pack(loom::RepackMode::automatic));
  CHECK(loom::verify_pack(dir / "packed").empty());
  if (!native()) {
    WARN("SKIPPED: this CPU's kernels have no packed q8_0 layout (no AVX-512 VNNI): the pack holds rows");
    return;
  }
  // The projections (no output of its own) and the table the output shares.
  const int64_t packed_count = projection_count(c) + 1;
  const std::string index = t::read_file_text(dir / "packed" / "index.json");
  CHECK(index.find("\"q8_0_x16\": " + std::to_string(packed_count)) != std::string::npos);
  const size_t embd = index.find("\"name\": \"token_embd\"");
  REQUIRE(embd != std::string::npos);
  CHECK(index.find("\"packing\": \"q8_0_x16\"", embd) < index.find("\"name\"", embd + 1));

  const auto rows = loom::load_model(dir / "rows", load_options());
  CHECK(rows->weights().token_embd.packing() == Packing::none);
  CHECK(rows->weights().output.raw_data() == rows->weights().token_embd.raw_data());

  // A repacking load packs the table once; the output still shares it.
  const auto repacked = loom::load_model(dir / "rows", load_options(std::nullopt, loom::RepackMode::automatic));
  const loom::ModelWeights& w = repacked->weights();
  CHECK(w.token_embd.packing() == Packing::q8_0_x16);
  CHECK(w.output.raw_data() == w.token_embd.raw_data());
  CHECK(repacked->load_report()->repacked_tensors == packed_count);
  const auto& rec = record(*repacked->load_report(), "token_embd");
  CHECK(rec.layout_change == "repacked q8_0_x16");
  CHECK(rec.packing == Packing::q8_0_x16);
  CHECK_FALSE(rec.zero_copy);
  t::check_same_rows(*rows, *repacked);
  const std::vector<float> repacked_logits = logits_of(repacked);
  // The packed and the row-major q8_0 kernels sum in different orders: f32 rounding.
  const std::vector<float> rows_logits = logits_of(rows);
  REQUIRE(rows_logits.size() == repacked_logits.size());
  double worst = 0.0;
  for (size_t i = 0; i < rows_logits.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(rows_logits[i] - repacked_logits[i])));
  }
  CHECK(worst < 1e-4);

  // The pack stores the table packed and a load maps it as stored.
  const auto stored = loom::load_model(dir / "packed", load_options());
  CHECK(stored->load_report()->stored_packed_tensors == packed_count);
  CHECK(stored->load_report()->memory.owned_weight_bytes == 0);
  CHECK(stored->weights().token_embd.packing() == Packing::q8_0_x16);
  CHECK(stored->weights().output.raw_data() == stored->weights().token_embd.raw_data());
  CHECK(record(*stored->load_report(), "token_embd").layout_change == "q8_0_x16 as stored");
  CHECK(t::same_bits(logits_of(stored), repacked_logits));

  // A q8_0 draft copy of the f32 target packs its table as the loader does: the same
  // bytes and logits as the repacking load of the q8_0 pack.
  const auto target = loom::load_model(dir / "src", load_options());
  const auto draft = loom::make_draft_copy(*target, DType::q8_0);
  CHECK(draft->weights().token_embd.packing() == Packing::q8_0_x16);
  CHECK(draft->weights().output.raw_data() == draft->weights().token_embd.raw_data());
  t::check_same_rows(*rows, *draft);
  CHECK(t::same_bits(logits_of(draft), repacked_logits));

  // Where the kernels read rows, the stored table is unpacked with the projections.
  t::IsaScope rows_only(loom::Isa::scalar);
  const auto unpacked = loom::load_model(dir / "packed", load_options());
  CHECK(unpacked->weights().token_embd.packing() == Packing::none);
  CHECK(unpacked->weights().output.raw_data() == unpacked->weights().token_embd.raw_data());
  CHECK(has_note(*unpacked->load_report(), std::to_string(packed_count) + " matrices stored as q8_0_x16"));
  t::check_same_rows(*rows, *unpacked);
  CHECK(t::same_bits(logits_of(unpacked), logits_of(loom::load_model(dir / "rows", load_options()))));
}

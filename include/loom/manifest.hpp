// loom::Manifest — the third weight representation: the tensors an architecture
// expects (derived from its ModelConfig), matched against what a WeightSource holds.
//
// Building a manifest never reads tensor data. It walks the architecture's weight slots
// (token_embd, blk.N.attn_q, ..., output), maps every external name in the source onto
// a slot (stripping `model.` / `transformer.` prefixes, reading GGUF `blk.N.*` names,
// splitting fused q|k|v and gate|up tensors (whole, per head or per KV group), noting
// Conv1D weights stored transposed and norms stored as w for 1 + w),
// and records every problem by full name: missing tensors (with the names looked for
// and the files searched), unexpected tensors, shape mismatches (with the config fields
// behind the expected shape), duplicates. Tied embeddings are explicit entries that
// alias token_embd. A value type; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/config.hpp"
#include "loom/format.hpp"

namespace loom {

enum class ProblemKind : uint8_t {
  missing = 0,         // a required tensor is not in the source
  unexpected = 1,      // the source holds a tensor no slot takes
  shape_mismatch = 2,  // found, with a shape the config contradicts
  dtype_mismatch = 3,  // found, with a dtype loom cannot use for this slot
  tied_differs = 4,    // config says tied, but the output and embedding differ (warning)
  duplicate = 5,       // two source tensors claim the same slot
  suspicious_data = 6, // values that look wrong, e.g. byte-swapped (warning)
};
std::string_view problem_kind_name(ProblemKind kind) noexcept;

struct ManifestProblem {
  ProblemKind kind = ProblemKind::missing;
  std::string internal_name;  // "blk.3.attn_k" (empty for unexpected tensors)
  std::string external_name;  // as stored in the file (empty for missing tensors)
  Shape expected;
  Shape found;
  std::string detail;  // the human-readable explanation, complete on its own
  bool fatal = true;   // false: reported as a warning (lenient extras, tied_differs)
};

struct ManifestEntry {
  std::string internal_name;  // "token_embd", "blk.3.attn_q"
  std::string slot;           // "attn_q"
  int64_t layer = -1;
  Shape shape;                // expected logical shape [out, in] / [n]
  std::string shape_fields;   // config fields the shape derives from
  bool required = true;
  bool is_vector = false;     // norm weight or bias: always f32 in memory
  // Source (null record: missing, or tied to token_embd).
  const TensorRecord* record = nullptr;
  // Which stored rows are this entry's (elements for 1-D tensors): `runs` runs of
  // `run_rows` rows, the first at row_begin, `run_stride` rows apart. One run of
  // shape[0] rows unless the record fuses slots per head or per KV group (GPT-NeoX's
  // and Falcon's query_key_value).
  int64_t row_begin = 0;
  int64_t run_rows = 0;
  int64_t run_stride = 0;
  int64_t runs = 1;
  bool split = false;         // the record fuses several slots
  bool add_one = false;       // stored w for a norm that scales by 1 + w (HF Gemma)
  bool transposed = false;    // the record is stored [in, out]
  bool tied = false;          // aliases token_embd (no record of its own)
  bool rope_interleaved = false;  // GGUF llama q/k row order (kept as is)
};

class Manifest {
 public:
  // Matches `source` against what `config` needs. Never throws for mismatches (they
  // become problems); throws for an unknown architecture.
  static Manifest build(const ModelConfig& config, const WeightSource& source);

  const std::vector<ManifestEntry>& entries() const noexcept { return entries_; }
  const std::vector<ManifestProblem>& problems() const noexcept { return problems_; }
  // External names recognised as non-weight buffers (e.g. rotary inv_freq).
  const std::vector<std::string>& ignored() const noexcept { return ignored_; }
  bool rope_interleaved() const noexcept { return rope_interleaved_; }
  // Problems that stop a load: always the fatal ones; in strict mode, every problem.
  std::vector<ManifestProblem> blocking_problems(bool strict) const;
  // One line per problem, for error messages and logs.
  std::string describe_problems() const;

 private:
  std::vector<ManifestEntry> entries_;
  std::vector<ManifestProblem> problems_;
  std::vector<std::string> ignored_;
  bool rope_interleaved_ = false;
};

// The error a load throws when the manifest has blocking problems: the message lists
// every problem; problems() gives them one by one.
class ManifestError : public Error {
 public:
  ManifestError(std::string file, std::vector<ManifestProblem> problems);
  const std::vector<ManifestProblem>& problems() const noexcept { return problems_; }

 private:
  std::vector<ManifestProblem> problems_;
};

}  // namespace loom

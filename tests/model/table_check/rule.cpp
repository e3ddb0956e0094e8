// Compiled by tests/model/table_check/check.cmake, once as is and once with
// LOOM_TABLE_TYPO defined: a name rule naming a slot that does not exist must not
// compile (slots are an enum class, not strings).
#include "model/architectures.hpp"

namespace {
#ifdef LOOM_TABLE_TYPO
constexpr loom::arch::NameRule kRule{"layers.{N}.self_attn.q_proj.weight", {loom::slots::Slot::attn_qq}};
#else
constexpr loom::arch::NameRule kRule{"layers.{N}.self_attn.q_proj.weight", {loom::slots::Slot::attn_q}};
#endif
static_assert(loom::arch::slot_count(kRule) == 1);
}  // namespace

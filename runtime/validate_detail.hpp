// Pieces of embedding-bag validation shared by its translation units (validate.cpp: dtypes,
// sizes, indices and the plan; validate_offsets.cpp: spans and lengths; validate_buffers.cpp:
// alignment and overlap). Not for use outside runtime/validate*.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/embag_call_plan.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt::validate_detail {

[[noreturn]] inline void invalid(const std::string& message) {
  throw Error(Status::kInvalidArgument, "embedding_bag: " + message);
}
[[noreturn]] inline void unsupported(const std::string& message) {
  throw Error(Status::kUnsupported, "embedding_bag: " + message);
}

/// "float32", "q8", ... or "unknown".
const char* dtype_name(int64_t t);

/// Fills plan.offsets, plan.covered_end and plan.partial_final_offset (and, for lengths, the
/// plan's span storage) after checking the offsets of plan.args against their rules.
void check_offsets(EmbagCallPlan& plan);

/// The first offset value of a call's offsets (caller's dtype) at k.
int64_t offset_at(const shapejit_embedding_bag_args& a, int64_t k);

/// Alignment of the input buffers of a planned call (before its offsets and indices are read).
void check_input_alignment(const EmbagCallPlan& plan);

}  // namespace shapejit::rt::validate_detail

// Pieces of embedding-bag validation shared by its translation units (validate.cpp: dtypes,
// sizes, indices and the plan; validate_offsets.cpp: spans and lengths; validate_buffers.cpp:
// alignment and overlap). Not for use outside runtime/validate*.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/engine/dtype_name.hpp"
#include "runtime/embag/embag_call_plan.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt::validate_detail {

[[noreturn]] inline void invalid(const std::string& message) {
  throw Error(Status::kInvalidArgument, "embedding_bag: " + message);
}
[[noreturn]] inline void unsupported(const std::string& message) {
  throw Error(Status::kUnsupported, "embedding_bag: " + message);
}

// A failing check's message is built in an out-of-line cold frame (the lambda's body is
// instantiated there), so a passing check costs its compare, not a frame sized for strings.
template <class MakeMessage>
[[noreturn, gnu::cold, gnu::noinline]] void invalid_with(MakeMessage make) {
  invalid(make());
}
template <class MakeMessage>
[[noreturn, gnu::cold, gnu::noinline]] void unsupported_with(MakeMessage make) {
  unsupported(make());
}

using rt::dtype_name;

// The passes over offsets and indices run on every call before the kernel, so they are
// vectorised for the host (x86 gets AVX-512/AVX2 clones picked at load time; the baseline
// has no 64-bit vector compare). Not under sanitizers: the clones' ifunc resolver runs during
// relocation, before the sanitizer runtime is initialised, and its instrumented code crashes
// there (seen with -fsanitize=thread).
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define SHAPEJIT_HAS_VECTOR_CLONES 1
#define SHAPEJIT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SHAPEJIT_HAS_VECTOR_CLONES 0
#define SHAPEJIT_VECTOR_CLONES
#endif

/// Fills plan.offsets, plan.covered_end and plan.partial_final_offset (and, for lengths, the
/// plan's span storage) after checking the offsets of plan.args against their rules.
void check_offsets(EmbagCallPlan& plan);

/// The first offset value of a call's offsets (caller's dtype) at k.
int64_t offset_at(const shapejit_embedding_bag_args& a, int64_t k);

/// Alignment of the input buffers of a planned call (before any of them is read); records the
/// bytes each spans in plan.input_ranges for the output checks. The form's (the table and the
/// mapping) are checked once per form, the batch's (indices, offsets, per_sample_weights) per batch.
void check_form_input_buffers(EmbagCallPlan& plan);
void check_batch_input_buffers(EmbagCallPlan& plan);

}  // namespace shapejit::rt::validate_detail

// The offsets rules: ATen's spans (offsets[0] == 0, non-decreasing, within N, a full final
// offset unless the opt-in quirk) and the lengths form of ATen's quantized rowwise ops
// (quantized-tables-semantics.md B3), which the plan turns into spans before anything is written.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "ref/int_access.hpp"
#include "runtime/embag/validate_detail.hpp"

namespace shapejit::rt::validate_detail {
namespace {

using std::to_string;

// The pass over the offsets is vectorised for the host (SHAPEJIT_VECTOR_CLONES, validate_detail.hpp).

// An integer OR of lane-wide compare results vectorises (GCC 12 leaves `bool &=` scalar).
template <class U, class T>
inline __attribute__((always_inline)) bool non_decreasing_body(const T* v, int64_t len) {
  U decreases = 0;
  for (int64_t k = 1; k < len; ++k) decreases |= U(v[k] < v[k - 1]);
  return decreases == 0;
}
SHAPEJIT_VECTOR_CLONES bool non_decreasing(const int32_t* v, int64_t len) {
  return non_decreasing_body<uint32_t>(v, len);
}
SHAPEJIT_VECTOR_CLONES bool non_decreasing(const int64_t* v, int64_t len) {
  return non_decreasing_body<uint64_t>(v, len);
}

// A few offsets (the fixed cost of a call) skip the vector clone's set-up.
template <class T>
inline bool sorted_offsets(const T* v, int64_t len) {
  constexpr int64_t kInline = 16;
  return len <= kInline ? non_decreasing_body<std::make_unsigned_t<T>>(v, len) : non_decreasing(v, len);
}

// Names the first offset that decreases or exceeds N (the caller knows one does).
[[noreturn, gnu::cold, gnu::noinline]] void report_bad_offset(const shapejit_embedding_bag_args& a) {
  const int64_t n = a.num_indices, len = a.num_offsets;
  int64_t prev = 0;
  for (int64_t k = 1; k < len; ++k) {
    const int64_t v = offset_at(a, k);
    if (v < prev)
      invalid("offsets must be non-decreasing, but offsets[" + to_string(k) + "] = " + to_string(v) +
              " < offsets[" + to_string(k - 1) + "] = " + to_string(prev));
    if (v > n) {
      if (k == len - 1)
        invalid("offsets[-1] can not be greater than input's length " + to_string(n) + " but got " + to_string(v));
      invalid("offsets[" + to_string(k) + "] = " + to_string(v) + " can not be greater than input's length " +
              to_string(n));
    }
    prev = v;
  }
  throw Error(Status::kInternalError, "embedding_bag: offsets rejected but no offending offset found");
}

// embedding-bag-semantics.md: the caller's offsets are the spans.
// Without SLP vectorisation: GCC paired the batch's fields (num_indices with offsets, the offsets'
// dtype with their count) into 16-byte loads, and put_batch has just stored them 8 bytes at a
// time, so each paired load stalled on store forwarding (45 % of this function's time in a
// 1 x 1 call; that call 45.6 -> 42.8 ns through the C ABI on the Intel host).
#if defined(__GNUC__) && !defined(__clang__)
#define SHAPEJIT_NO_SLP __attribute__((optimize("no-tree-slp-vectorize")))
#else
#define SHAPEJIT_NO_SLP  // clang has no per-function form; its builds are the sanitizers'
#endif
SHAPEJIT_NO_SLP void check_span_offsets(EmbagCallPlan& p) {
  const shapejit_embedding_bag_args& a = p.args.call;
  const int64_t n = a.num_indices, len = a.num_offsets;
  p.offsets = {a.offsets, p.offset, len};
  p.covered_end = n;
  if (a.include_last_offset && len < 1)
    invalid_with([&] { return "include_last_offset requires at least one offset, but offsets is empty"; });
  if (len == 0) {
    if (n > 0)
      invalid_with([&] {
        return "offsets is empty but indices has " + to_string(n) + " elements (they would belong to no bag)";
      });
    return;
  }
  if (a.include_last_offset && len < 2 && n > 0)
    invalid_with([&] {
      return "include_last_offset with a single offset describes no bag, but indices has " + to_string(n) + " elements";
    });
  if (offset_at(a, 0) != 0)
    invalid_with([&] {
      return "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from position 0. "
             "However, got " +
             to_string(offset_at(a, 0));
    });
  // One vectorisable pass: non-decreasing with the last one within N puts every offset in [0, N].
  // Only a failing call walks them again to name the first culprit.
  const bool sorted = a.offset_dtype == SHAPEJIT_I32 ? sorted_offsets(static_cast<const int32_t*>(a.offsets), len)
                                                     : sorted_offsets(static_cast<const int64_t*>(a.offsets), len);
  const int64_t last = offset_at(a, len - 1);
  if (!sorted || last > n) report_bad_offset(a);
  if (!a.include_last_offset || last == n) return;
  if (!a.aten_partial_final_offset)
    invalid_with([&] {
      return "with include_last_offset, offsets[-1] must equal input's length " + to_string(n) + ", but got " +
             to_string(last) +
             " (positions after it would belong to no bag; set aten_partial_final_offset "
             "to reproduce ATen 1.13)";
    });
  if (a.mode == SHAPEJIT_MAX)
    invalid_with([&] {
      return "aten_partial_final_offset (offsets[-1] = " + to_string(last) + " < input's length " + to_string(n) +
             ") is only reproduced for mode sum and mean, but got mode='max'";
    });
  if (a.has_padding_idx)
    invalid_with([&] {
      return "aten_partial_final_offset (offsets[-1] = " + to_string(last) + " < input's length " + to_string(n) +
             ") cannot be combined with padding_idx";
    });
  p.partial_final_offset = true;
  p.covered_end = last;
}

// B3: bag b takes the next len_b = offsets[b + 1] - offsets[b] positions (the last bag without
// include_last_offset: N - offsets[B - 1]); a negative length is an empty bag. The spans are
// written to the plan's own storage in the caller's offsets dtype, so the kernels, the schedule
// and the integer outputs keep the dtypes of the call.
void check_length_offsets(EmbagCallPlan& p) {
  const shapejit_embedding_bag_args& a = p.args.call;
  const int64_t n = a.num_indices, len = a.num_offsets, bags = p.num_bags;
  if (len == 0) invalid_with([&] { return "offsets_as_lengths requires at least one offset, but offsets is empty"; });
  if (a.aten_partial_final_offset)
    invalid_with([&] {
      return "aten_partial_final_offset cannot be combined with offsets_as_lengths (lengths that stop before "
             "input's length already leave the remaining positions out of every bag)";
    });
  const bool i32 = p.offset == DType::kI32;
  if (i32)
    p.span_storage32.resize(size_t(bags) + 1);
  else p.span_storage64.resize(size_t(bags) + 1);
  int64_t consumed = 0;
  for (int64_t b = 0; b <= bags; ++b) {
    if (i32) p.span_storage32[size_t(b)] = static_cast<int32_t>(consumed);
    else p.span_storage64[size_t(b)] = consumed;
    if (b == bags) break;
    const int64_t start = offset_at(a, b);
    const int64_t next = b + 1 < len ? offset_at(a, b + 1) : n;
    if (next <= start) continue;  // an empty bag: consumes nothing
    // The unsigned difference is exact even when next - start overflows int64.
    const uint64_t length = static_cast<uint64_t>(next) - static_cast<uint64_t>(start);
    if (length > static_cast<uint64_t>(n - consumed))
      invalid_with([&] {
        return "offsets_as_lengths: bag " + to_string(b) + " takes " +
               (b + 1 < len
                    ? "offsets[" + to_string(b + 1) + "] - offsets[" + to_string(b) + "] = " + to_string(next) + " - " +
                          to_string(start)
                    : "input's length - offsets[" + to_string(b) + "] = " + to_string(n) + " - " + to_string(start)) +
               " positions after the " + to_string(consumed) + " taken by earlier bags, but indices has only " +
               to_string(n) + " (the lengths must fit in input's length)";
      });
    consumed += static_cast<int64_t>(length);
    if (i32 && consumed > std::numeric_limits<int32_t>::max())
      unsupported_with([&] {
        return "offsets_as_lengths with int32 offsets: the bags take " + to_string(consumed) +
               " positions, more than int32 offsets can address (pass int64 offsets)";
      });
  }
  p.offsets = {
      i32 ? static_cast<const void*>(p.span_storage32.data()) : static_cast<const void*>(p.span_storage64.data()),
      p.offset, bags + 1};
  p.covered_end = consumed;
}

}  // namespace

int64_t offset_at(const shapejit_embedding_bag_args& a, int64_t k) {
  return ref::load_int(a.offsets, a.offset_dtype, k);
}

void check_offsets(EmbagCallPlan& plan) {
  if (plan.args.offsets_as_lengths)
    check_length_offsets(plan);
  else check_span_offsets(plan);
}

}  // namespace shapejit::rt::validate_detail

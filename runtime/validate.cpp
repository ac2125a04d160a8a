// Each check names the argument, the offending value and the rule. Messages follow ATen's
// wording where ATen has a check; the rest are shapejit's own (ATen crashes there).
#include "runtime/validate.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <string>

#include "ref/embedding_bag.hpp"
#include "ref/int_access.hpp"
#include "runtime/byte_ranges.hpp"
#include "runtime/c_enum.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

using std::to_string;

[[noreturn]] void invalid(const std::string& message) {
  throw Error(Status::kInvalidArgument, "embedding_bag: " + message);
}

const char* dtype_name(int64_t t) {
  switch (t) {
    case SHAPEJIT_F32: return "float32";
    case SHAPEJIT_F16: return "float16";
    case SHAPEJIT_BF16: return "bfloat16";
    case SHAPEJIT_I32: return "int32";
    case SHAPEJIT_I64: return "int64";
  }
  return "unknown";
}

// The size of one element, which is also the alignment its buffer must have (validated dtypes).
int64_t element_bytes(shapejit_dtype t) {
  switch (t) {
    case SHAPEJIT_F16:
    case SHAPEJIT_BF16: return 2;
    case SHAPEJIT_F32:
    case SHAPEJIT_I32: return 4;
    case SHAPEJIT_I64: return 8;
  }
  return 8;
}

// a * b * c bytes must fit in int64 (and so in the address space checks that follow).
void check_bytes(const char* what, int64_t a, int64_t b, int64_t elem_bytes) {
  int64_t n = 0, bytes = 0;
  if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, elem_bytes, &bytes))
    invalid(std::string(what) + " has " + to_string(a) + " x " + to_string(b) +
            " elements, whose byte count overflows int64");
}

void check_non_negative(const char* name, int64_t v) {
  if (v < 0) invalid(std::string(name) + " must be >= 0, but got " + to_string(v));
}

void check_index_dtype(const char* name, int64_t t) {
  if (t != SHAPEJIT_I32 && t != SHAPEJIT_I64)
    invalid(std::string(name) + " must be int32 or int64, but got dtype " + dtype_name(t) +
            " (" + to_string(t) + ")");
}

void check_sizes(const shapejit_embedding_bag_args& a) {
  const int64_t weight_dtype = c_enum_value(a.weight_dtype), mode = c_enum_value(a.mode);
  if (weight_dtype == SHAPEJIT_F16 || weight_dtype == SHAPEJIT_BF16)
    throw Error(Status::kUnsupported, std::string("embedding_bag: weight dtype ") +
                                          dtype_name(weight_dtype) + " is not supported yet (float32 only)");
  if (weight_dtype != SHAPEJIT_F32)
    invalid(std::string("weight must be a floating-point table, but got dtype ") + dtype_name(weight_dtype) +
            " (" + to_string(weight_dtype) + ")");
  check_index_dtype("indices", c_enum_value(a.index_dtype));
  check_index_dtype("offsets", c_enum_value(a.offset_dtype));
  if (mode != SHAPEJIT_SUM && mode != SHAPEJIT_MEAN && mode != SHAPEJIT_MAX)
    invalid("mode must be 0 (sum), 1 (mean) or 2 (max), but got " + to_string(mode));
  check_non_negative("weight.num_rows", a.num_rows);
  check_non_negative("weight.dim", a.dim);
  check_non_negative("indices.numel", a.num_indices);
  check_non_negative("offsets.numel", a.num_offsets);
  if (a.row_stride < a.dim)
    invalid("weight.row_stride must be >= dim (" + to_string(a.dim) + "), but got " + to_string(a.row_stride));
  check_bytes("weight", a.num_rows, a.row_stride, 4);
  check_bytes("output", a.num_offsets, a.dim, 8);  // also bounds max_indices [B, D] of int64
  check_bytes("indices", a.num_indices, 1, 8);
  check_bytes("offsets", a.num_offsets, 1, 8);
  if (!a.weight && a.num_rows > 0 && a.dim > 0) invalid("weight is null but has " + to_string(a.num_rows) + " rows");
  if (!a.indices && a.num_indices > 0) invalid("indices is null but has " + to_string(a.num_indices) + " elements");
  if (!a.offsets && a.num_offsets > 0) invalid("offsets is null but has " + to_string(a.num_offsets) + " elements");
}

void check_options(const shapejit_embedding_bag_args& a) {
  if (a.has_padding_idx && (a.padding_idx < -a.num_rows || a.padding_idx >= a.num_rows))
    invalid("padding_idx must be within the number of embeddings, -" + to_string(a.num_rows) + " through " +
            to_string(a.num_rows - 1) + ", but got " + to_string(a.padding_idx));
  if (a.per_sample_weights && a.mode != SHAPEJIT_SUM)
    invalid(std::string("per_sample_weights is only supported for mode='sum', but got mode='") +
            (a.mode == SHAPEJIT_MEAN ? "mean" : "max") + "'");
}

int64_t offset_at(const shapejit_embedding_bag_args& a, int64_t k) { return ref::load_int(a.offsets, a.offset_dtype, k); }

// The passes over indices and offsets run on every call before the kernel, so they are
// vectorised for the host (x86 gets AVX-512/AVX2 clones picked at load time; the baseline
// has no 64-bit vector compare).
// Not under sanitizers: the clones' ifunc resolver runs during relocation, before the sanitizer
// runtime is initialised, and its instrumented code crashes there (seen with -fsanitize=thread).
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define SHAPEJIT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SHAPEJIT_VECTOR_CLONES
#endif

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

// Names the first offset that decreases or exceeds N (the caller knows one does).
[[noreturn]] void report_bad_offset(const shapejit_embedding_bag_args& a) {
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
      invalid("offsets[" + to_string(k) + "] = " + to_string(v) + " can not be greater than input's length " + to_string(n));
    }
    prev = v;
  }
  throw Error(Status::kInternalError, "embedding_bag: offsets rejected but no offending offset found");
}

void check_offsets(const shapejit_embedding_bag_args& a) {
  const int64_t n = a.num_indices, len = a.num_offsets;
  if (a.include_last_offset && len < 1)
    invalid("include_last_offset requires at least one offset, but offsets is empty");
  if (len == 0) {
    if (n > 0) invalid("offsets is empty but indices has " + to_string(n) + " elements (they would belong to no bag)");
    return;
  }
  if (a.include_last_offset && len < 2 && n > 0)
    invalid("include_last_offset with a single offset describes no bag, but indices has " + to_string(n) + " elements");
  if (offset_at(a, 0) != 0)
    invalid("offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from position 0. "
            "However, got " + to_string(offset_at(a, 0)));
  // One vectorisable pass: non-decreasing with the last one within N puts every offset in [0, N].
  // Only a failing call walks them again to name the first culprit.
  const bool sorted = a.offset_dtype == SHAPEJIT_I32 ? non_decreasing(static_cast<const int32_t*>(a.offsets), len)
                                                     : non_decreasing(static_cast<const int64_t*>(a.offsets), len);
  const int64_t last = offset_at(a, len - 1);
  if (!sorted || last > n) report_bad_offset(a);
  const int64_t prev = last;
  if (a.include_last_offset && prev < n) {
    if (!a.aten_partial_final_offset)
      invalid("with include_last_offset, offsets[-1] must equal input's length " + to_string(n) + ", but got " +
              to_string(prev) + " (positions after it would belong to no bag; set aten_partial_final_offset "
              "to reproduce ATen 1.13)");
    if (a.mode == SHAPEJIT_MAX)
      invalid("aten_partial_final_offset (offsets[-1] = " + to_string(prev) + " < input's length " + to_string(n) +
              ") is only reproduced for mode sum and mean, but got mode='max'");
    if (a.has_padding_idx)
      invalid("aten_partial_final_offset (offsets[-1] = " + to_string(prev) + " < input's length " + to_string(n) +
              ") cannot be combined with padding_idx");
  }
}

// The largest index read as unsigned, so a negative index counts as huge and one compare
// against the row count checks both bounds.
// Four vectors' worth of independent running maxima: one chain of vpmaxuq is latency bound
// (~500 ns for 8192 int64 indices on Zen 5), four keep the loads busy (~280 ns, L2 speed).
template <class U, class T>
inline __attribute__((always_inline)) U max_unsigned_body(const T* idx, int64_t n) {
  constexpr int64_t kLanes = 4 * 64 / int64_t(sizeof(U));
  U lane_max[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) lane_max[k] = std::max(lane_max[k], static_cast<U>(idx[i + k]));
  U hi = 0;
  for (; i < n; ++i) hi = std::max(hi, static_cast<U>(idx[i]));
  for (int64_t k = 0; k < kLanes; ++k) hi = std::max(hi, lane_max[k]);
  return hi;
}
SHAPEJIT_VECTOR_CLONES uint64_t max_unsigned(const int64_t* idx, int64_t n) {
  return max_unsigned_body<uint64_t>(idx, n);
}
// A negative int32 reads as >= 2^31 (an int64 one as >= 2^63).
SHAPEJIT_VECTOR_CLONES uint64_t max_unsigned(const int32_t* idx, int64_t n) {
  return max_unsigned_body<uint32_t>(idx, n);
}

template <class T>
void check_indices_typed(const T* idx, int64_t n, int64_t rows) {
  // No valid index of type T reaches 2^(bits - 1), where the negative ones start when read as
  // unsigned; so the bound is capped there. Without the cap a table of more than 2^32 rows let
  // int32 index -1 (0xFFFFFFFF) through, and the kernel read before the table (found by fuzz/).
  const uint64_t limit =
      std::min(static_cast<uint64_t>(rows), static_cast<uint64_t>(std::numeric_limits<T>::max()) + 1);
  if (n == 0 || max_unsigned(idx, n) < limit) return;
  for (int64_t i = 0; i < n; ++i)  // only on the error path: locate the first bad position
    if (idx[i] < 0 || int64_t(idx[i]) >= rows)
      invalid("indices[" + to_string(i) + "] = " + to_string(int64_t(idx[i])) + " is out of range for a table of " +
              to_string(rows) + " rows (valid: 0 <= index < " + to_string(rows) + ")");
}

void check_indices(const shapejit_embedding_bag_args& a) {
  if (a.index_dtype == SHAPEJIT_I32)
    check_indices_typed(static_cast<const int32_t*>(a.indices), a.num_indices, a.num_rows);
  else
    check_indices_typed(static_cast<const int64_t*>(a.indices), a.num_indices, a.num_rows);
}

// ---- Buffer rules: alignment and overlap --------------------------------------------------

// The eight buffers of a call, inputs first, in argument order.
enum BufferId : int {
  kWeight, kIndices, kOffsets, kPerSampleWeights,       // inputs
  kOutput, kOffset2bag, kBagSize, kMaxIndices,          // outputs
  kNumBuffers,
};
constexpr const char* kBufferNames[kNumBuffers] = {"weight", "indices",    "offsets",  "per_sample_weights",
                                                   "output", "offset2bag", "bag_size", "max_indices"};

// A buffer as the buffer rules see it: where it starts, the bytes the call may touch (0 when
// it touches none: a zero-length buffer may be NULL, anywhere, and overlaps nothing) and its
// element type, whose size its address must be a multiple of.
struct Buffer {
  const void* data;
  int64_t bytes;
  shapejit_dtype dtype;
  ByteRange range;
};
using CallBuffers = std::array<Buffer, kNumBuffers>;

Buffer make_buffer(const void* data, int64_t elements, shapejit_dtype dtype) {
  const int64_t bytes = elements * element_bytes(dtype);
  return {data, bytes, dtype, byte_range(data, bytes)};
}

// For a call whose sizes passed check_sizes (so every byte count fits in int64). The table
// counts from its first row to the end of its last, the gaps between rows included: an output
// placed among the rows is rejected, which no real caller needs.
void set_inputs(CallBuffers& c, const shapejit_embedding_bag_args& a) {
  const int64_t table = a.num_rows > 0 && a.dim > 0 ? (a.num_rows - 1) * a.row_stride + a.dim : 0;
  c[kWeight] = make_buffer(a.weight, table, a.weight_dtype);
  c[kIndices] = make_buffer(a.indices, a.num_indices, a.index_dtype);
  c[kOffsets] = make_buffer(a.offsets, a.num_offsets, a.offset_dtype);
  c[kPerSampleWeights] =
      make_buffer(a.per_sample_weights, a.per_sample_weights ? a.num_indices : 0, a.weight_dtype);
}

void set_outputs(CallBuffers& c, const shapejit_embedding_bag_args& a, const shapejit_embedding_bag_shapes& s,
                 const void* output, const void* offset2bag, const void* bag_size, const void* max_indices) {
  c[kOutput] = make_buffer(output, s.output_rows * s.output_cols, a.weight_dtype);
  c[kOffset2bag] = make_buffer(offset2bag, s.offset2bag_len, s.index_out_dtype);
  c[kBagSize] = make_buffer(bag_size, s.bag_size_len, s.index_out_dtype);
  c[kMaxIndices] = make_buffer(max_indices, s.max_indices_rows * s.max_indices_cols, s.index_out_dtype);
}

// Every buffer the call touches is aligned to its element size: the reference and the runtime
// load and store them as typed elements, which a misaligned address makes undefined behaviour.
void check_alignment(const CallBuffers& c, int first, int end) {
  for (int id = first; id < end; ++id) {
    const Buffer& b = c[size_t(id)];
    const int64_t alignment = element_bytes(b.dtype);
    if (b.bytes != 0 && !is_aligned(b.data, alignment))
      invalid(misaligned_message(kBufferNames[id], b.data, alignment, dtype_name(b.dtype)));
  }
}

// Does output `o` share a byte with buffer `other` (an input, or an output before it)?
bool overlap(const CallBuffers& c, int o, int other) {
  return byte_ranges_overlap(c[size_t(o)].range, c[size_t(other)].range);
}

[[noreturn, gnu::cold, gnu::noinline]] void report_first_overlap(const CallBuffers& c) {
  for (int o = kOutput; o < kNumBuffers; ++o)
    for (int other = 0; other < o; ++other)
      if (overlap(c, o, other))
        invalid(describe_buffer(kBufferNames[o], c[size_t(o)].data, c[size_t(o)].bytes) + " overlaps " +
                describe_buffer(kBufferNames[other], c[size_t(other)].data, c[size_t(other)].bytes) +
                (other < kOutput ? " (an output must not overlap an input)"
                                 : " (outputs must not overlap each other)"));
  throw Error(Status::kInternalError, "embedding_bag: an overlap was found but no overlapping pair");
}

// Outputs are written while inputs are still being read (a bag's results are stored before the
// next bag's offsets and indices are loaded), so a shared byte corrupts the results or, once an
// index is overwritten, sends the reads outside the table. Every output is tested against every
// input and every earlier output (22 pairs); only a call with an overlap walks them again, in
// argument order, to name the first.
void check_no_overlap(const CallBuffers& c) {
  bool any = false;
  for (int o = kOutput; o < kNumBuffers; ++o)
    for (int other = 0; other < o; ++other) any |= overlap(c, o, other);
  if (any) [[unlikely]]
    report_first_overlap(c);
}

}  // namespace

shapejit_embedding_bag_shapes validate_embedding_bag(const shapejit_embedding_bag_args& a) {
  check_sizes(a);
  CallBuffers inputs;
  set_inputs(inputs, a);
  check_alignment(inputs, 0, kOutput);  // before the offsets and indices are read below
  check_options(a);
  check_offsets(a);
  check_indices(a);
  return ref::embedding_bag_shapes(a);
}

void validate_embedding_bag_outputs(const shapejit_embedding_bag_args& a, const shapejit_embedding_bag_shapes& s,
                                    const void* output, const void* offset2bag, const void* bag_size,
                                    const void* max_indices) {
  CallBuffers c;
  set_inputs(c, a);
  set_outputs(c, a, s, output, offset2bag, bag_size, max_indices);
  for (int id = kOutput; id < kNumBuffers; ++id) {
    const Buffer& b = c[size_t(id)];
    if (!b.data && b.bytes != 0)
      invalid(std::string(kBufferNames[id]) + " is null but must hold " + to_string(b.bytes / element_bytes(b.dtype)) +
              " elements");
  }
  check_alignment(c, kOutput, kNumBuffers);
  check_no_overlap(c);
}

bool uses_partial_final_offset(const shapejit_embedding_bag_args& a) {
  return a.include_last_offset && a.num_offsets > 0 && offset_at(a, a.num_offsets - 1) < a.num_indices;
}

}  // namespace shapejit::rt

// Each check names the argument, the offending value and the rule. Messages follow ATen's
// wording where ATen has a check; the rest are shapejit's own (ATen crashes there). The order:
// the form's rules (dtypes, the table's sizes, the extended options, options, the table's and
// the mapping's alignment: validate_form), then the batch's (counts and sizes, the alignment of
// indices, offsets and weights before any input is read, offsets
// (validate_offsets.cpp), indices and the mapping entries they read, the shapes: validate_batch).
#include "runtime/embag/validate.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "ref/embedding_bag.hpp"
#include "jit/dtype_traits.hpp"
#include "runtime/engine/c_enum.hpp"
#include "runtime/embag/validate_detail.hpp"
#include "runtime/embag/widen_weights.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace validate_detail {

namespace {

using std::to_string;

std::string dtype_text(int64_t t) { return std::string(dtype_name(t)) + " (" + to_string(t) + ")"; }

// The checks every call runs many times are inlined; their messages are built out of line
// (a passing check then costs its compare, not a stack frame sized for the message).
[[noreturn, gnu::cold, gnu::noinline]] void report_byte_overflow(const char* what, int64_t a, int64_t b) {
  invalid(std::string(what) + " has " + to_string(a) + " x " + to_string(b) +
          " elements, whose byte count overflows int64");
}
[[noreturn, gnu::cold, gnu::noinline]] void report_negative(const char* name, int64_t v) {
  invalid(std::string(name) + " must be >= 0, but got " + to_string(v));
}

// a * b * c bytes must fit in int64 (and so in the address space checks that follow).
inline void check_bytes(const char* what, int64_t a, int64_t b, int64_t elem_bytes) {
  int64_t n = 0, bytes = 0;
  if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, elem_bytes, &bytes)) [[unlikely]]
    report_byte_overflow(what, a, b);
}

inline void check_non_negative(const char* name, int64_t v) {
  if (v < 0) [[unlikely]] report_negative(name, v);
}

void check_index_dtype(const char* name, int64_t t) {
  if (t != SHAPEJIT_I32 && t != SHAPEJIT_I64)
    invalid_with([&] { return std::string(name) + " must be int32 or int64, but got dtype " + dtype_text(t); });
}

// The table half of the dtype-combination rule (jit::table_dtype_rule): a table dtype, and Q4
// and Q2 rows, which pack 2 and 4 codes per byte, of a D that fills whole bytes (B1).
void check_table(const shapejit_embedding_bag_args& a, int64_t table) {
  switch (jit::table_dtype_rule(table, a.dim)) {
    case jit::DtypeRule::kUnknownTable:
      invalid_with([&] {
        return "weight must be a " + jit::dtype_set_text(jit::kFloatDtypes) + " table or rowwise-quantized " +
               jit::dtype_set_text({DType::kQ8, DType::kQ4, DType::kQ2}) + " rows, but got dtype " + dtype_text(table);
      });
    case jit::DtypeRule::kRowBytes:
      invalid_with([&] {
        const jit::DtypeTraits& d = jit::dtype_traits(DType(table));
        const int64_t n = d.codes_per_byte();
        static constexpr const char* kWords[] = {"", "one", "two", "three", "four"};
        return "weight.dim must be " + (n == 2 ? std::string("even") : "a multiple of " + to_string(n)) + " for " +
               d.name + " rows (" + kWords[n] + " " + to_string(d.bits) + "-bit codes per byte), but got " +
               to_string(a.dim);
      });
    default: return;
  }
}

// The table and the call's form: dtypes, mode, the table's sizes and its pointer.
void check_form_sizes(EmbagCallPlan& p) {
  const shapejit_embedding_bag_args& a = p.args.call;
  const int64_t table = c_enum_value(a.weight_dtype), mode = c_enum_value(a.mode);
  check_index_dtype("indices", c_enum_value(a.index_dtype));
  check_index_dtype("offsets", c_enum_value(a.offset_dtype));
  if (mode != SHAPEJIT_SUM && mode != SHAPEJIT_MEAN && mode != SHAPEJIT_MAX)
    invalid_with([&] { return "mode must be 0 (sum), 1 (mean) or 2 (max), but got " + to_string(mode); });
  check_non_negative("weight.num_rows", a.num_rows);
  check_non_negative("weight.dim", a.dim);
  check_table(a, table);
  check_bytes("weight row", 1, a.dim, 8);  // so the row's byte count below cannot overflow
  const jit::DtypeTraits& traits = jit::dtype_traits(DType(table));
  const bool quantized = traits.quantized;
  const int64_t row_bytes = jit::table_row_bytes(DType(table), a.dim);
  if (quantized && a.row_stride < row_bytes)
    invalid_with([&] {
      return "weight.row_stride counts bytes for " + std::string(dtype_name(table)) +
             " rows and must be >= the packed row's " + to_string(row_bytes) + " bytes (dim " + to_string(a.dim) +
             "), but got " + to_string(a.row_stride);
    });
  if (!quantized && a.row_stride < a.dim)
    invalid_with([&] {
      return "weight.row_stride must be >= dim (" + to_string(a.dim) + "), but got " + to_string(a.row_stride);
    });
  const int64_t stride_unit = traits.element_bytes;  // quantized rows count bytes
  check_bytes("weight", a.num_rows, a.row_stride, stride_unit);
  if (!a.weight && a.num_rows > 0 && a.dim > 0)
    invalid_with([&] { return "weight is null but has " + to_string(a.num_rows) + " rows"; });

  p.table = static_cast<DType>(table);
  p.mode = static_cast<Mode>(mode);
  p.index = static_cast<DType>(a.index_dtype);
  p.offset = static_cast<DType>(a.offset_dtype);
  p.index_out = p.index == p.offset ? p.index : DType::kI64;
  p.num_rows = a.num_rows;
  p.dim = a.dim;
  p.row_bytes = row_bytes;
  // With no rows nothing is read and the stride may be anything up to INT64_MAX.
  p.row_stride_bytes = a.num_rows > 0 ? a.row_stride * stride_unit : 0;
}

// The batch's sizes and pointers: indices and offsets, and the output rows they make.
void check_batch_sizes(EmbagCallPlan& p) {
  const shapejit_embedding_bag_args& a = p.args.call;
  check_non_negative("indices.numel", a.num_indices);
  check_non_negative("offsets.numel", a.num_offsets);
  check_bytes("output", a.num_offsets, a.dim, 8);  // also bounds max_indices [B, D] of int64
  // B rows of a strided output fit in int64 bytes too (so its extent and the kernels' row offsets do).
  if (p.args.output_row_stride != 0) check_bytes("output", a.num_offsets, p.args.output_row_stride, 8);
  check_bytes("indices", a.num_indices, 1, 8);
  check_bytes("offsets", a.num_offsets, 1, 8);
  if (!a.indices && a.num_indices > 0)
    invalid_with([&] { return "indices is null but has " + to_string(a.num_indices) + " elements"; });
  if (!a.offsets && a.num_offsets > 0)
    invalid_with([&] { return "offsets is null but has " + to_string(a.num_offsets) + " elements"; });
  p.num_indices = a.num_indices;
  p.num_bags = std::max<int64_t>(0, a.num_offsets - (a.include_last_offset ? 1 : 0));
}

// Output and per-sample-weight dtypes, the value half of the dtype-combination rule
// (jit::value_dtype_rule, the header's table): float tables keep their dtype; quantized tables
// produce f32, f16 or bf16 and take f32 weights (Q4/Q2 also f16, B3).
void check_output_and_weight_dtypes(EmbagCallPlan& p) {
  const shapejit_embedding_bag_ex_args& e = p.args;
  const int64_t table = int64_t(p.table), out = c_enum_value(e.output_dtype);
  p.weighted = e.call.per_sample_weights != nullptr;
  // The weights' dtype describes a buffer only when there are weights.
  const int64_t psw = p.weighted ? c_enum_value(e.per_sample_weights_dtype) : table;
  const jit::DtypeRule rule = jit::value_dtype_rule(p.table, out, p.weighted, psw);
  if (rule != jit::DtypeRule::kOk) [[unlikely]]
    invalid_with([&] {  // built only for a message: a passing call makes no string
      const jit::DtypeTraits& d = jit::dtype_traits(p.table);
      const bool output = rule == jit::DtypeRule::kOutput;
      const jit::DtypeSet allowed = output ? d.outputs : d.weights;
      const std::string must = allowed == jit::DtypeSet{p.table}
                                   ? "the table's dtype " + std::string(d.name)
                                   : jit::dtype_set_text(allowed);
      return std::string(output ? "output_dtype" : "per_sample_weights_dtype") + " must be " + must + " for a " +
             d.name + " table, but got " + dtype_text(output ? out : psw);
    });
  p.out = static_cast<DType>(out);
  if (p.weighted) p.psw = static_cast<DType>(psw);
  p.kernel_psw = p.weighted ? kernel_weight_dtype(p.psw) : DType::kF32;
}

void check_mapping(EmbagCallPlan& p) {
  const shapejit_embedding_bag_ex_args& e = p.args;
  if (!e.compressed_indices_mapping) {
    if (e.mapping_len != 0)
      invalid_with([&] {
        return "compressed_indices_mapping is null but mapping_len is " + to_string(e.mapping_len) +
               " (pass mapping_len 0 for a table that is not pruned)";
      });
    return;
  }
  if (!jit::is_quantized_table(p.table))
    invalid_with([&] {
      return std::string(
                 "compressed_indices_mapping (pruning) is only supported for quantized tables (q8, q4, q2), "
                 "but the table is ") +
             dtype_name(int64_t(p.table));
    });
  check_non_negative("mapping_len", e.mapping_len);
  check_bytes("compressed_indices_mapping", e.mapping_len, 1, 4);
  p.pruned = true;
  p.mapping = e.compressed_indices_mapping;
  p.mapping_len = e.mapping_len;
}

// The output's row stride: dense (0) or at least a row (its extent: check_batch_sizes).
void check_output_layout(EmbagCallPlan& p) {
  const int64_t stride = p.args.output_row_stride;
  if (stride != 0 && stride < p.dim)
    invalid_with([&] {
      return "output_row_stride must be 0 (dense rows) or >= dim (" + to_string(p.dim) + "), but got " +
             to_string(stride);
    });
  p.out_row_stride = stride != 0 ? stride : p.dim;
}

// The index space: the mapping's entries for a pruned table, else the rows.
int64_t index_space(const EmbagCallPlan& p) { return p.pruned ? p.mapping_len : p.num_rows; }
std::string index_space_text(const EmbagCallPlan& p) {
  return p.pruned ? "compressed_indices_mapping of " + to_string(p.mapping_len) + " entries"
                  : "a table of " + to_string(p.num_rows) + " rows";
}

void check_options(EmbagCallPlan& p) {
  const shapejit_embedding_bag_args& a = p.args.call;
  const int64_t space = index_space(p);
  if (a.has_padding_idx && (a.padding_idx < -space || a.padding_idx >= space))
    invalid_with([&] {
      return "padding_idx must be within the number of embeddings" +
             (p.pruned ? " (the mapping's " + to_string(space) + " entries for a pruned table)" : std::string()) +
             ", -" + to_string(space) + " through " + to_string(space - 1) + ", but got " + to_string(a.padding_idx);
    });
  if (a.per_sample_weights && a.mode != SHAPEJIT_SUM)
    invalid_with([&] {
      return std::string("per_sample_weights is only supported for mode='sum', but got mode='") +
             (a.mode == SHAPEJIT_MEAN ? "mean" : "max") + "'";
    });
  p.padding = a.has_padding_idx != 0;
  p.padding_index = p.padding ? (a.padding_idx < 0 ? a.padding_idx + space : a.padding_idx) : -1;
  p.aten_loop = ref::aten_loop_arithmetic(p.args);
}

// An index is valid iff 0 <= idx < limit, i.e. iff both idx and limit - 1 - idx are >= 0: the
// OR of the two has its sign bit clear. Over all indices that is one subtract and two ORs per
// index in any vector ISA (AVX2 has no unsigned 64-bit max, which the earlier max-as-unsigned
// scan needed: compare and blend). Computed as unsigned, so that limit - 1 - idx wraps instead
// of overflowing for a negative idx (whose own sign bit is set). `last` is limit - 1.
template <class U, class T>
inline __attribute__((always_inline)) U index_sign_bits(T idx, U last) {
  return static_cast<U>(idx) | (last - static_cast<U>(idx));
}
template <class U>
inline bool sign_clear(U bits) {
  return (bits >> (8 * sizeof(U) - 1)) == 0;
}

// One OR chain: OR's one-cycle latency keeps up with the loads, and the compiler vectorises the
// reduction itself (per-lane accumulators in an array were kept in memory and zeroed with
// `rep stos` on every call).
template <class U, class T>
inline __attribute__((always_inline)) bool indices_in_range_body(const T* idx, int64_t n, U limit) {
  const U last = limit - 1;  // wraps to all ones for limit 0: every index fails
  U any = 0;
  for (int64_t i = 0; i < n; ++i) any |= index_sign_bits(idx[i], last);
  return sign_clear(any);
}

// A few indices (the fixed cost of a call): a scalar loop, whose early exit also keeps the
// compiler from vectorising it (vector code there only made the call's path longer: +15 ns a
// call measured through the C ABI, 1 index).
template <class U, class T>
inline bool few_indices_in_range(const T* idx, int64_t n, U limit) {
  const U last = limit - 1;
  for (int64_t i = 0; i < n; ++i)
    if (!sign_clear(index_sign_bits(idx[i], last))) return false;
  return true;
}
// Where the ISA has an unsigned max of the index width (AVX-512 for 64 bits, AVX2 for 32), a
// max reduction: one instruction per vector with its load folded in, where the OR form needs a
// load, a subtract and an OR. A negative index is a huge unsigned value, so it fails as well.
// On the Zen 4 host, 8192 int64 indices from L2: 0.75 us against the OR form's 1.03 us (alone);
// through the C ABI, 256 bags x 32 at D = 32..64, 1-2 % at 1 thread and 2-3 % at 2 (interleaved).
template <class U, class T>
inline __attribute__((always_inline)) bool indices_below_by_max(const T* idx, int64_t n, U limit) {
  U high = 0;
  for (int64_t i = 0; i < n; ++i) high = std::max(high, static_cast<U>(idx[i]));
  return n == 0 || high < limit;
}

// limit <= 2^63 (int64) and <= 2^31 (int32), so limit - 1 is a non-negative T but for limit 0.
#if SHAPEJIT_HAS_VECTOR_CLONES
// AVX-512: the unsigned max over four accumulators. The compiler's reduction kept one, and
// vpmaxuq's 3-cycle latency on Intel paced the scan at a vector per 3 cycles: on the Intel host
// 8,192 int64 indices took 0.8 us of a 14.7 us call (256 x 32, D = 64); four chains took 0.5 us
// off the whole call (A/B, 3 alternations: 2-5 % at D = 32..128). The tail is a masked load
// whose zeroed lanes cannot raise the max.
#define SJ_AVX512 __attribute__((target("avx512f")))
// (The all-lanes mask forms: GCC 12's plain _mm512_max_epu* warn of an undefined operand.)
SJ_AVX512 inline __m512i max_lanes(__m512i a, __m512i b, int64_t) { return _mm512_mask_max_epu64(a, 0xFF, a, b); }
SJ_AVX512 inline __m512i max_lanes(__m512i a, __m512i b, int32_t) { return _mm512_mask_max_epu32(a, 0xFFFF, a, b); }
SJ_AVX512 inline __m512i load_tail(const int64_t* p, int64_t left) {
  return _mm512_maskz_loadu_epi64(__mmask8((1u << left) - 1), p);
}
SJ_AVX512 inline __m512i load_tail(const int32_t* p, int64_t left) {
  return _mm512_maskz_loadu_epi32(__mmask16((1u << left) - 1), p);
}
// Through memory: GCC 12's _mm512_reduce_max_* warn as the plain max does.
template <class T>
SJ_AVX512 inline uint64_t max_of(__m512i m, T) {
  alignas(64) std::make_unsigned_t<T> lanes[64 / sizeof(T)];
  _mm512_store_si512(lanes, m);
  return *std::max_element(lanes, lanes + 64 / sizeof(T));
}

template <class T>
SJ_AVX512 bool below_by_max4(const T* idx, int64_t n, uint64_t limit) {
  constexpr int64_t kLanes = 64 / sizeof(T);
  const T tag{};  // picks the lane width of the helpers
  __m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    m0 = max_lanes(m0, _mm512_loadu_si512(idx + i), tag);
    m1 = max_lanes(m1, _mm512_loadu_si512(idx + i + kLanes), tag);
    m2 = max_lanes(m2, _mm512_loadu_si512(idx + i + 2 * kLanes), tag);
    m3 = max_lanes(m3, _mm512_loadu_si512(idx + i + 3 * kLanes), tag);
  }
  for (; i + kLanes <= n; i += kLanes) m0 = max_lanes(m0, _mm512_loadu_si512(idx + i), tag);
  if (i < n) m1 = max_lanes(m1, load_tail(idx + i, n - i), tag);
  return n == 0 || max_of(max_lanes(max_lanes(m0, m1, tag), max_lanes(m2, m3, tag), tag), tag) < limit;
}
SJ_AVX512 bool indices_in_range(const int64_t* idx, int64_t n, uint64_t limit) {
  return below_by_max4(idx, n, limit);
}
SJ_AVX512 bool indices_in_range(const int32_t* idx, int64_t n, uint64_t limit) {
  return below_by_max4(idx, n, limit);
}
#undef SJ_AVX512
// AVX2 has an unsigned max of 32-bit words only. Read as two words, an int64 index is below a
// limit <= 2^32 iff its high word is 0 and its low word is below the limit; so the word-wise max
// over all indices, read back as 64-bit lanes, is below the limit iff every index is (the high
// words' max is 0 and the low words' max below the limit). One max per 4 indices with its load
// folded in, where the OR form takes a subtract and two ORs: 8,192 indices from L2 on the Zen 1
// host 1.66 -> 0.91 us (a probe, both alone). Four accumulators keep two loads a cycle going.
__attribute__((target("avx2"))) bool indices_in_range(const int64_t* idx, int64_t n, uint64_t limit) {
  if (limit > (uint64_t{1} << 32)) return indices_in_range_body<uint64_t>(idx, n, limit);
  __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_epu32(m0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + i)));
    m1 = _mm256_max_epu32(m1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + i + 4)));
    m2 = _mm256_max_epu32(m2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + i + 8)));
    m3 = _mm256_max_epu32(m3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + i + 12)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3)));
  uint64_t high = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
  for (; i < n; ++i) high = std::max(high, static_cast<uint64_t>(idx[i]));  // negative: huge
  return n == 0 || high < limit;
}
__attribute__((target("default"))) bool indices_in_range(const int64_t* idx, int64_t n, uint64_t limit) {
  return indices_in_range_body<uint64_t>(idx, n, limit);
}
#else
bool indices_in_range(const int64_t* idx, int64_t n, uint64_t limit) {
  return indices_in_range_body<uint64_t>(idx, n, limit);
}
#endif
#if SHAPEJIT_HAS_VECTOR_CLONES
__attribute__((target("avx2"))) bool indices_in_range(const int32_t* idx, int64_t n, uint64_t limit) {
  return indices_below_by_max<uint32_t>(idx, n, static_cast<uint32_t>(limit));
}
__attribute__((target("default"))) bool indices_in_range(const int32_t* idx, int64_t n, uint64_t limit) {
  return indices_below_by_max<uint32_t>(idx, n, static_cast<uint32_t>(limit));
}
#else
bool indices_in_range(const int32_t* idx, int64_t n, uint64_t limit) {
  return indices_below_by_max<uint32_t>(idx, n, static_cast<uint32_t>(limit));
}
#endif

// Only the error path: names the first index out of range (one is).
template <class T>
[[noreturn, gnu::cold, gnu::noinline]] void report_first_bad_index(const EmbagCallPlan& p, const T* idx, int64_t n);
// Every mapping entry an index of a pruned table reads.
template <class T>
[[gnu::noinline]] void check_mapping_entries(const EmbagCallPlan& p, const T* idx, int64_t n);

// Calls of a few indices (the fixed cost of a call) skip the vector clone's set-up.
constexpr int64_t kInlineIndexCheck = 16;

// Positions [0, n) of idx lie in the plan's index space.
template <class T>
bool typed_indices_in_range(const EmbagCallPlan& p, const T* idx, int64_t n) {
  // No valid index of type T reaches 2^(bits - 1): the bound is capped there, so that limit - 1
  // is a non-negative T. (Without the cap a table of more than 2^32 rows let int32 index -1
  // through, and the kernel read before the table: found by fuzz/.)
  const uint64_t limit = std::min(static_cast<uint64_t>(index_space(p)),
                                  static_cast<uint64_t>(std::numeric_limits<T>::max()) + 1);
  using U = std::make_unsigned_t<T>;
  return n <= kInlineIndexCheck ? few_indices_in_range<U>(idx, n, static_cast<U>(limit))
                                : indices_in_range(idx, n, limit);
}

template <class T>
void check_indices_typed(const EmbagCallPlan& p, const T* idx) {
  const int64_t n = index_check_end(p);
  if (!typed_indices_in_range(p, idx, n)) [[unlikely]]
    report_first_bad_index(p, idx, n);
  if (p.pruned) check_mapping_entries(p, idx, n);
}

template <class T>
[[noreturn, gnu::cold, gnu::noinline]] void report_first_bad_index(const EmbagCallPlan& p, const T* idx, int64_t n) {
  const int64_t space = index_space(p);
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || int64_t(idx[i]) >= space)
      invalid("indices[" + to_string(i) + "] = " + to_string(int64_t(idx[i])) + " is out of range for " +
              index_space_text(p) + " (valid: 0 <= index < " + to_string(space) + ")");
  throw Error(Status::kInternalError, "embedding_bag: indices rejected but no index out of range found");
}

template <class T>
[[gnu::noinline]] void check_mapping_entries(const EmbagCallPlan& p, const T* idx, int64_t n) {
  // Every mapping entry an index reads is -1 (pruned) or a row: the kernels read that row.
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = p.mapping[idx[i]];
    if (row < -1 || row >= p.num_rows)
      invalid_with([&] {
        return "compressed_indices_mapping[" + to_string(int64_t(idx[i])) + "] = " + to_string(row) +
               " (read by indices[" + to_string(i) + "]) is out of range for a table of " + to_string(p.num_rows) +
               " rows (valid: -1 to skip the position, or 0 <= row < " + to_string(p.num_rows) + ")";
      });
  }
}

// ATen's output shapes, derived here from the plan on their own (the reference derives them
// from the call in ref::embedding_bag_shapes; a test compares the two).
// Written into the plan field by field: a struct built on the stack and copied in whole would
// be read back before its last stores retire (a store-forwarding stall per field pair).
void set_plan_shapes(EmbagCallPlan& p) {
  shapejit_embedding_bag_shapes& s = p.shapes;
  const int64_t len = p.args.call.num_offsets;
  s.output_rows = p.num_bags;
  s.output_cols = p.dim;
  s.index_out_dtype = static_cast<shapejit_dtype>(p.index_out);
  const bool sum = p.mode == Mode::kSum;
  s.offset2bag_len = sum && !p.padding ? 0 : p.num_indices;  // sum needs the map only to skip padding
  s.bag_size_len = sum ? len : p.num_bags;                     // sum: zeros shaped like offsets
  s.max_indices_rows = p.mode == Mode::kMax ? p.num_bags : s.bag_size_len;
  s.max_indices_cols = p.mode == Mode::kMax ? p.dim : 1;
  if (!p.index_outputs) s.offset2bag_len = s.bag_size_len = s.max_indices_rows = 0;
}

}  // namespace
}  // namespace validate_detail

shapejit_embedding_bag_ex_args complete_ex_args(const shapejit_embedding_bag_ex_args& caller) {
  using validate_detail::invalid;
  constexpr size_t kCallEnd = offsetof(shapejit_embedding_bag_ex_args, call) + sizeof(shapejit_embedding_bag_args);
  const size_t size = caller.struct_size;
  if (size < kCallEnd || size > sizeof(shapejit_embedding_bag_ex_args))
    invalid("ex args struct_size must be sizeof(shapejit_embedding_bag_ex_args) of this or an older shapejit (" +
            std::to_string(kCallEnd) + " to " + std::to_string(sizeof(shapejit_embedding_bag_ex_args)) +
            " bytes), but got " + std::to_string(size));
  shapejit_embedding_bag_ex_args e = ref::embedding_bag_ex_defaults(caller.call);
  // Fields appended later are read only when the caller's struct covers them whole.
  auto covers = [&](size_t offset, size_t bytes) { return offset + bytes <= size; };
  // Copied as bytes: enum fields may hold any int, which must not be loaded as the enum.
#define SHAPEJIT_TAKE_FIELD(f) \
  if (covers(offsetof(shapejit_embedding_bag_ex_args, f), sizeof e.f)) std::memcpy(&e.f, &caller.f, sizeof e.f)
  SHAPEJIT_TAKE_FIELD(output_dtype);
  SHAPEJIT_TAKE_FIELD(per_sample_weights_dtype);
  SHAPEJIT_TAKE_FIELD(compressed_indices_mapping);
  SHAPEJIT_TAKE_FIELD(mapping_len);
  SHAPEJIT_TAKE_FIELD(offsets_as_lengths);
  SHAPEJIT_TAKE_FIELD(skip_index_outputs);
  SHAPEJIT_TAKE_FIELD(output_row_stride);
  SHAPEJIT_TAKE_FIELD(aten_loop_arithmetic);
#undef SHAPEJIT_TAKE_FIELD
  e.struct_size = sizeof e;
  return e;
}

namespace validate_detail {
namespace {

// The batch's weights in the kernels' dtype, once every rule passed (the last step that
// allocates before the outputs are written).
void widen_batch_weights(EmbagCallPlan& p) {
  if (!p.weighted || p.kernel_psw == p.psw) return;
  p.wide_weights.resize(size_t(p.num_indices));
  widen_f16_weights(p.args.call.per_sample_weights, p.num_indices, p.wide_weights.data());
}

// The rules of the call's form: everything but the batch (indices, offsets, their counts and
// the per-sample weights' pointer; whether there are weights is the form's). A prepared call
// (runtime/embag/embag_prepared.cpp) checks these once.
void validate_form(EmbagCallPlan& p) {
  check_form_sizes(p);
  check_output_and_weight_dtypes(p);
  check_output_layout(p);
  check_mapping(p);
  check_options(p);
  p.index_outputs = p.args.skip_index_outputs == 0;
  check_form_input_buffers(p);
}

// The rules of the batch, on a plan whose form passed validate_form (its batch fields as another
// batch may have left them: every one is rewritten here). `passed_ranges`: the input buffers'
// rules passed with these pointers and counts before (plan_embedding_bag_batch_into).
void validate_batch(EmbagCallPlan& p, IndexRangeCheck when, const InputRanges* passed_ranges = nullptr) {
  p.partial_final_offset = false;  // the only batch fields the steps below set on some paths only
  p.index_range_deferred = false;
  check_batch_sizes(p);
  if (passed_ranges) p.input_ranges = *passed_ranges;
  else check_batch_input_buffers(p);  // before the offsets, indices and mapping are read below
  check_offsets(p);
  // A pruned table's mapping entries are read through the indices, so those stay here; a few
  // indices cost less here than any hand-over.
  if (when == IndexRangeCheck::kByRunner && !p.pruned && index_check_end(p) > kInlineIndexCheck)
    p.index_range_deferred = true;
  else
    check_indices(p);
  set_plan_shapes(p);
  widen_batch_weights(p);
}

void validate_into(EmbagCallPlan& p, IndexRangeCheck when) {
  validate_form(p);
  validate_batch(p, when);
}

}  // namespace
}  // namespace validate_detail

EmbagCallPlan::EmbagCallPlan(const shapejit_embedding_bag_args& call) : args(ref::embedding_bag_ex_defaults(call)) {}

EmbagCallPlan plan_embedding_bag(const shapejit_embedding_bag_ex_args& args, IndexRangeCheck when) {
  EmbagCallPlan p(args);
  validate_detail::validate_into(p, when);
  return p;
}

EmbagCallPlan plan_embedding_bag(const shapejit_embedding_bag_args& args, IndexRangeCheck when) {
  // The defaults are written straight into the plan: copying a just-built struct in 16-byte
  // pieces over its 4-byte dtype stores would stall on store forwarding.
  EmbagCallPlan p(args);
  validate_detail::validate_into(p, when);
  return p;
}

shapejit_embedding_bag_batch batch_of(const shapejit_embedding_bag_args& call) {
  return {call.indices, call.num_indices, call.offsets, call.num_offsets, call.per_sample_weights};
}

void put_batch(shapejit_embedding_bag_args& call, const shapejit_embedding_bag_batch& batch) {
  call.indices = batch.indices;
  call.num_indices = batch.num_indices;
  call.offsets = batch.offsets;
  call.num_offsets = batch.num_offsets;
  call.per_sample_weights = batch.per_sample_weights;
}

EmbagCallPlan plan_embedding_bag_form(const shapejit_embedding_bag_ex_args& args) {
  EmbagCallPlan p(args);
  // The batch's fields are not the form's: cleared, so nothing of them is validated or kept
  // (the weights' pointer stays: whether there are weights is the form's).
  put_batch(p.args.call, {nullptr, 0, nullptr, 0, p.args.call.per_sample_weights});
  validate_detail::validate_form(p);
  static std::atomic<uint64_t> forms_made{0};
  p.form_id = forms_made.fetch_add(1, std::memory_order_relaxed) + 1;
  return p;
}

EmbagCallPlan plan_embedding_bag_batch(const EmbagCallPlan& form, const shapejit_embedding_bag_batch& batch,
                                       IndexRangeCheck when) {
  EmbagCallPlan p = form.copy_of_form();
  plan_embedding_bag_batch_into(p, batch, when);
  return p;
}

void plan_embedding_bag_batch_into(EmbagCallPlan& p, const shapejit_embedding_bag_batch& batch, IndexRangeCheck when,
                                   const InputRanges* passed_ranges) {
  using validate_detail::invalid_with;
  const EmbagCallPlan& form = p;  // the form's fields, which no batch changes
  if (form.weighted && !batch.per_sample_weights && batch.num_indices > 0)
    invalid_with([&] {
      return "per_sample_weights is null but the call was prepared with weights (" +
             std::to_string(batch.num_indices) + " indices need as many)";
    });
  if (!form.weighted && batch.per_sample_weights)
    invalid_with([] { return std::string("per_sample_weights is given but the call was prepared without weights"); });
  put_batch(p.args.call, batch);
  validate_detail::validate_batch(p, when, passed_ranges);
}

int64_t index_check_end(const EmbagCallPlan& p) {
  // Read as lengths (torch's quantized ops), positions past the last bag are never read, and
  // torch accepts any value there; as spans every position is read (offset2bag, counts).
  return p.args.offsets_as_lengths ? p.covered_end : p.num_indices;
}

bool indices_in_range(const EmbagCallPlan& p, int64_t begin, int64_t end) {
  using validate_detail::typed_indices_in_range;
  const void* idx = p.args.call.indices;
  if (p.index == DType::kI32) return typed_indices_in_range(p, static_cast<const int32_t*>(idx) + begin, end - begin);
  return typed_indices_in_range(p, static_cast<const int64_t*>(idx) + begin, end - begin);
}

void check_indices(const EmbagCallPlan& p) {
  using validate_detail::check_indices_typed;
  const void* idx = p.args.call.indices;
  if (p.index == DType::kI32) check_indices_typed(p, static_cast<const int32_t*>(idx));
  else check_indices_typed(p, static_cast<const int64_t*>(idx));
}

shapejit_embedding_bag_shapes validate_embedding_bag(const shapejit_embedding_bag_args& args) {
  return plan_embedding_bag(args).shapes;
}

EmbeddingBagShapes to_cpp_shapes(const shapejit_embedding_bag_shapes& s) {
  return {s.output_rows, s.output_cols, static_cast<DType>(s.index_out_dtype), s.offset2bag_len,
          s.bag_size_len, s.max_indices_rows, s.max_indices_cols};
}

}  // namespace shapejit::rt

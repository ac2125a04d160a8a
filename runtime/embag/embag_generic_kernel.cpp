// The generic embedding-bag kernel. Every float operation is the reference's, in the
// reference's order, for every table dtype:
//   f32:      sums from +0.0f in index order, weighted sums with std::fma, mean divides once;
//            (w * x rounded, then one add, in ATen's loop: ref::weighted_terms_fused);
//   f16/bf16: the same in f32 with w * x then one add (bf16 on the FBGEMM path: std::fma and
//             sums rounded half up, rule H6); mean rounds the sum and the count to the table
//             dtype, then divides; the output is rounded once;
//   Q8/Q4/Q2: per position s = w * scale, b = w * bias; per column acc = fmaf(s, q, acc + b)
//             (ref::quantized_step, torch 2.13's FBGEMM order);
//   max:      copies the first contributing row, then replaces on strict `>`.
// Columns are independent, so each bag runs in column blocks of a stack accumulator (no
// allocation in a kernel) that are rounded to the output dtype once finished. Vectorising the
// column loops is fine; reassociation or a*b+c contraction is not: the source writes no a*b+c
// in float, the build passes -ffp-contract=off, and fast-math is refused.
#include "runtime/embag/embag_generic_kernel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "ref/table_rows.hpp"
#include "runtime/engine/kernel_cache.hpp"

#if defined(__FAST_MATH__)
#error "the generic kernel must be bitwise equal to the reference: do not build with -ffast-math"
#endif
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace shapejit::rt {
namespace {

using jit::EmbagKernelArgs;

constexpr int64_t kBlock = 256;  // columns per accumulator block (1 KiB of stack)

// The kernels are instantiated per C dtype value; the rule is jit::is_quantized_table's.
constexpr bool is_quantized(int64_t t) { return jit::is_quantized_table(static_cast<DType>(t)); }

// What a kernel is specialised on besides the integer types, table dtype and mode.
struct Flags {
  bool weighted = false, padding = false, pruned = false;
  int64_t out = SHAPEJIT_F32;  // output dtype
  int64_t psw = SHAPEJIT_F32;  // per-sample-weight dtype
  bool aten_loop = false;      // ATen's own loop's arithmetic (padding, or the key's aten_loop)
};
constexpr Flags with_out(Flags f, int64_t out) { return f.out = out, f; }
constexpr Flags with_psw(Flags f, int64_t psw) { return f.psw = psw, f; }

// Problem-wide constants of one kernel call, decoded once.
template <class Index, class Offset>
struct Problem {
  const unsigned char* table;
  int64_t row_stride_bytes, dim;
  const Index* indices;
  const Offset* offsets;
  int64_t num_offsets, num_indices;
  const void* psw;
  int64_t padding_idx;
  const int32_t* mapping;
  Flags flags;

  Problem(const EmbagKernelArgs& a, const Flags& f)
      : table(static_cast<const unsigned char*>(a.weight)), row_stride_bytes(a.row_stride_bytes), dim(a.dim),
        indices(static_cast<const Index*>(a.indices)), offsets(static_cast<const Offset*>(a.offsets)),
        num_offsets(a.num_offsets), num_indices(a.num_indices), psw(a.per_sample_weights),
        padding_idx(a.padding_idx), mapping(a.mapping), flags(f) {}

  // Only called with dim > 0 (a table of dim 0 may be NULL: offsetting NULL is undefined).
  const unsigned char* row(int64_t r) const { return table + r * row_stride_bytes; }
  int64_t bag_begin(int64_t b) const { return static_cast<int64_t>(offsets[b]); }
  int64_t bag_end(int64_t b) const {
    return b + 1 < num_offsets ? static_cast<int64_t>(offsets[b + 1]) : num_indices;
  }
  float weight(int64_t i) const { return flags.weighted ? ref::load_weight(psw, flags.psw, i) : 1.0f; }

  // Calls f(position, index as given, row) for each contributing position of [begin, end):
  // padding (the index as given) and pruned positions (mapping -1) are skipped.
  template <class F>
  void for_each_row(int64_t begin, int64_t end, F&& f) const {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t idx = static_cast<int64_t>(indices[i]);
      if (flags.padding && idx == padding_idx) continue;
      const int64_t r = flags.pruned ? mapping[idx] : idx;
      if (r < 0) continue;
      f(i, idx, r);
    }
  }
};

// ---- Row readers: columns [c0, c0 + n) of one row, as the values each rule combines ----------

// Sum step of one row into acc for a float table (weight w when weighted).
// `fused`: f32, and bf16 on rule H6's FBGEMM path; otherwise w * x rounded to f32, then added
// (exact for f16; for bf16 with padding_idx what ATen's loop does).
template <int64_t kTable>
void sum_float_row(float* __restrict acc, const unsigned char* row, int64_t c0, int64_t n, bool weighted, bool fused,
                   float w) {
  if (!weighted) {
    for (int64_t d = 0; d < n; ++d) acc[d] = acc[d] + ref::float_element<kTable>(row, c0 + d);
  } else if (fused) {
    for (int64_t d = 0; d < n; ++d) acc[d] = std::fma(w, ref::float_element<kTable>(row, c0 + d), acc[d]);
  } else {
    for (int64_t d = 0; d < n; ++d) {
      const float product = w * ref::float_element<kTable>(row, c0 + d);
      acc[d] = acc[d] + product;
    }
  }
}

template <int kBits>
void sum_quantized_row(float* __restrict acc, const unsigned char* row, int64_t dim, int64_t c0, int64_t n, float w) {
  const ref::QuantizedRow<kBits> q = ref::quantized_row<kBits>(row, dim);
  const float s = w * q.scale, b = w * q.bias;
  for (int64_t d = 0; d < n; ++d) acc[d] = ref::quantized_step(acc[d], s, b, q.code(c0 + d));
}

// Columns [c0, c0 + n) of a row as max mode compares them (beyond-ATen 3 for quantized rows).
template <int64_t kTable>
void row_values(float* __restrict x, const unsigned char* row, int64_t dim, int64_t c0, int64_t n) {
  if constexpr (!is_quantized(kTable)) {
    for (int64_t d = 0; d < n; ++d) x[d] = ref::float_element<kTable>(row, c0 + d);
  } else {
    constexpr int kBits = kTable == SHAPEJIT_Q8 ? 8 : kTable == SHAPEJIT_Q4 ? 4 : 2;
    const ref::QuantizedRow<kBits> q = ref::quantized_row<kBits>(row, dim);
    for (int64_t d = 0; d < n; ++d) x[d] = ref::dequantized_value(q.scale, q.bias, q.code(c0 + d));
  }
}

// ---- One column block of one bag -------------------------------------------------------------

template <int64_t kTable, class P>
void sum_block(const P& p, int64_t begin, int64_t end, int64_t c0, int64_t n, float* acc) {
  std::fill(acc, acc + n, 0.0f);
  p.for_each_row(begin, end, [&](int64_t i, int64_t, int64_t r) {
    if constexpr (is_quantized(kTable)) {
      constexpr int kBits = kTable == SHAPEJIT_Q8 ? 8 : kTable == SHAPEJIT_Q4 ? 4 : 2;
      sum_quantized_row<kBits>(acc, p.row(r), p.dim, c0, n, p.weight(i));
    } else {
      sum_float_row<kTable>(acc, p.row(r), c0, n, p.flags.weighted, ref::weighted_terms_fused(kTable, p.flags.aten_loop),
                            p.weight(i));
    }
  });
}

// Mean: f32 and quantized results divide once by max(count, 1); f16/bf16 round the sum (bf16 by
// rule H6) and the count to the table dtype first (the store rounds the quotient).
template <int64_t kTable>
void divide_block(float* acc, int64_t n, int64_t count, bool aten_loop) {
  const float c = static_cast<float>(count > 1 ? count : 1);
  if constexpr (kTable == SHAPEJIT_BF16) {
    const float divisor = ref::round_to_output(kTable, c);
    const bool fbgemm = ref::bf16_fbgemm_path(kTable, aten_loop);
    for (int64_t d = 0; d < n; ++d) acc[d] = ref::round_bf16_sum(fbgemm, acc[d]) / divisor;
  } else if constexpr (kTable == SHAPEJIT_F16) {
    const float divisor = ref::round_to_output(kTable, c);
    for (int64_t d = 0; d < n; ++d) acc[d] = ref::round_to_output(kTable, acc[d]) / divisor;
  } else {
    for (int64_t d = 0; d < n; ++d) acc[d] = acc[d] / c;
  }
}

// Max of one column block; winners receive the index as given of each column's winner.
template <int64_t kTable, class P, class Out>
void max_block(const P& p, int64_t begin, int64_t end, int64_t c0, int64_t n, float* __restrict acc,
               Out* __restrict winners) {
  float x[kBlock];
  bool first = true;
  p.for_each_row(begin, end, [&](int64_t, int64_t idx, int64_t r) {
    row_values<kTable>(x, p.row(r), p.dim, c0, n);
    const Out id = static_cast<Out>(idx);
    if (first) {  // the first row is copied, so -0.0 and NaN survive as they are
      for (int64_t d = 0; d < n; ++d) {
        acc[d] = x[d];
        winners[d] = id;
      }
      first = false;
      return;
    }
    // strict >: ties keep the earliest, a later NaN never wins. Branch-free (a select and an
    // all-ones mask), so g++ vectorises it: `x > cur ? x : cur` keeps cur on ties and NaN.
    for (int64_t d = 0; d < n; ++d) {
      const float xv = x[d], cur = acc[d];
      const Out mask = -static_cast<Out>(xv > cur);
      acc[d] = xv > cur ? xv : cur;
      winners[d] = static_cast<Out>((id & mask) | (winners[d] & ~mask));
    }
  });
  if (first) {
    std::fill(acc, acc + n, 0.0f);
    std::fill(winners, winners + n, Out{0});
  }
}

// Stores a finished block rounded once to the output dtype (bf16 half up when `half_up`, H6).
void store_block(void* output, int64_t out_dtype, int64_t at, const float* acc, int64_t n, bool half_up) {
  if (out_dtype == SHAPEJIT_F32) {
    std::copy(acc, acc + n, static_cast<float*>(output) + at);
    return;
  }
  uint16_t* out = static_cast<uint16_t*>(output) + at;
  if (out_dtype == SHAPEJIT_F16)
    for (int64_t d = 0; d < n; ++d) out[d] = ref::f32_to_f16(acc[d]);
  else if (half_up)
    for (int64_t d = 0; d < n; ++d) out[d] = ref::f32_to_bf16_half_up(acc[d]);
  else
    for (int64_t d = 0; d < n; ++d) out[d] = ref::f32_to_bf16(acc[d]);
}

// ---- The kernel ----------------------------------------------------------------------------

template <class Index, class Offset, int64_t kTable, Mode kMode>
[[gnu::noinline]] void run_bags(const EmbagKernelArgs& args, const Flags& flags) {
  using Out = std::conditional_t<std::is_same_v<Index, Offset>, Index, int64_t>;
  const Problem<Index, Offset> p(args, flags);
  Out* offset2bag = static_cast<Out*>(args.offset2bag);
  Out* bag_size = static_cast<Out*>(args.bag_size);
  Out* max_indices = static_cast<Out*>(args.max_indices);
  // Without index outputs (key.index_outputs false) the runtime passes them as null.
  const bool index_outputs = bag_size != nullptr;
  const int64_t out_stride = args.output_row_stride != 0 ? args.output_row_stride : p.dim;  // 0: dense rows
  // H6: sums and maxima of a bf16 table on the FBGEMM path round half up, the mean's quotient not.
  const bool half_up = ref::bf16_fbgemm_path(kTable, flags.aten_loop) && kMode != Mode::kMean;
  float acc[kBlock];
  Out unused_ids[kMode == Mode::kMax ? kBlock : 1];  // max's winners when nobody wants them
  for (int64_t b = args.bag_begin; b < args.bag_end; ++b) {
    const int64_t begin = p.bag_begin(b), end = p.bag_end(b);
    int64_t count = 0;
    if (kMode == Mode::kMean || index_outputs) p.for_each_row(begin, end, [&](int64_t, int64_t, int64_t) { ++count; });
    for (int64_t c0 = 0; c0 < p.dim; c0 += kBlock) {
      const int64_t n = std::min(kBlock, p.dim - c0);
      if constexpr (kMode == Mode::kMax) {
        max_block<kTable>(p, begin, end, c0, n, acc, index_outputs ? max_indices + b * p.dim + c0 : unused_ids);
      } else {
        sum_block<kTable>(p, begin, end, c0, n, acc);
        if constexpr (kMode == Mode::kMean) divide_block<kTable>(acc, n, count, flags.aten_loop);
      }
      store_block(args.output, flags.out, b * out_stride + c0, acc, n, half_up);
    }
    if (!index_outputs) continue;
    if constexpr (kMode == Mode::kMean) max_indices[b] = static_cast<Out>(count);
    if constexpr (kMode != Mode::kSum) bag_size[b] = static_cast<Out>(count);
    if (kMode != Mode::kSum || flags.padding)
      for (int64_t i = begin; i < end; ++i) offset2bag[i] = static_cast<Out>(b);
  }
}

// One entry point per specialisation: the flags are constants here, so an EmbagKernelFn needs
// nothing but its arguments; the body above is shared by all flags of a table and mode.
template <class Index, class Offset, int64_t kTable, Mode kMode, Flags kFlags>
void entry(const EmbagKernelArgs* args) {
  run_bags<Index, Offset, kTable, kMode>(*args, kFlags);
}

// ---- Choosing the specialisation -------------------------------------------------------------

// The weights' dtype: a float table's own or a quantized table's f32 (Q4/Q2 also f16), and f32
// for every table (the runtime's widened f16 weights, jit::kernel_dtype_rule).
template <class Index, class Offset, int64_t kTable, Mode kMode, Flags kFlags>
jit::EmbagKernelFn pick_psw(const jit::EmbagKey& k) {
  constexpr int64_t kOwn = kFlags.weighted && !is_quantized(kTable) ? kTable : int64_t{SHAPEJIT_F32};
  if constexpr (kOwn != SHAPEJIT_F32) {
    if (k.psw == DType::kF32) return &entry<Index, Offset, kTable, kMode, with_psw(kFlags, SHAPEJIT_F32)>;
  }
  if constexpr (kFlags.weighted && (kTable == SHAPEJIT_Q4 || kTable == SHAPEJIT_Q2)) {
    if (k.psw == DType::kF16) return &entry<Index, Offset, kTable, kMode, with_psw(kFlags, SHAPEJIT_F16)>;
  }
  return &entry<Index, Offset, kTable, kMode, with_psw(kFlags, kOwn)>;
}

template <class Index, class Offset, int64_t kTable, Mode kMode, Flags kFlags>
jit::EmbagKernelFn pick_out(const jit::EmbagKey& k) {
  if constexpr (is_quantized(kTable)) {
    if (k.out == DType::kF16) return pick_psw<Index, Offset, kTable, kMode, with_out(kFlags, SHAPEJIT_F16)>(k);
    if (k.out == DType::kBF16) return pick_psw<Index, Offset, kTable, kMode, with_out(kFlags, SHAPEJIT_BF16)>(k);
    return pick_psw<Index, Offset, kTable, kMode, with_out(kFlags, SHAPEJIT_F32)>(k);
  } else {
    return pick_psw<Index, Offset, kTable, kMode, with_out(kFlags, kTable)>(k);
  }
}

template <class Index, class Offset, int64_t kTable, Mode kMode>
jit::EmbagKernelFn pick_flags(const jit::EmbagKey& k) {
  // The arithmetic of ATen's own loop differs only for weighted f32 sums and bf16 tables.
  auto with_aten_loop = [&]<bool kWeighted, bool kPadding, bool kPruned>() {
    constexpr bool kDiffers = jit::EmbagKey::aten_loop_changes(static_cast<DType>(kTable), kWeighted);
    if constexpr (kDiffers && !kPadding)
      if (k.aten_loop) return pick_out<Index, Offset, kTable, kMode, Flags{kWeighted, kPadding, kPruned, SHAPEJIT_F32, SHAPEJIT_F32, true}>(k);
    return pick_out<Index, Offset, kTable, kMode, Flags{kWeighted, kPadding, kPruned, SHAPEJIT_F32, SHAPEJIT_F32, kPadding}>(k);
  };
  auto with_pruned = [&]<bool kWeighted, bool kPadding>() {
    if (is_quantized(kTable) && k.pruned) return with_aten_loop.template operator()<kWeighted, kPadding, true>();
    return with_aten_loop.template operator()<kWeighted, kPadding, false>();
  };
  auto with_padding = [&]<bool kWeighted>() {
    return k.padding ? with_pruned.template operator()<kWeighted, true>()
                     : with_pruned.template operator()<kWeighted, false>();
  };
  if constexpr (kMode == Mode::kSum)
    if (k.weighted) return with_padding.template operator()<true>();
  return with_padding.template operator()<false>();
}

template <class Index, class Offset, int64_t kTable>
jit::EmbagKernelFn pick_mode(const jit::EmbagKey& k) {
  switch (k.mode) {
    case Mode::kSum: return pick_flags<Index, Offset, kTable, Mode::kSum>(k);
    case Mode::kMean: return pick_flags<Index, Offset, kTable, Mode::kMean>(k);
    case Mode::kMax: return pick_flags<Index, Offset, kTable, Mode::kMax>(k);
  }
  throw Error(Status::kInvalidArgument,
              "generic kernel: mode " + std::to_string(static_cast<int>(k.mode)) + " is not sum, mean or max");
}

template <class Index, class Offset>
jit::EmbagKernelFn pick_table(const jit::EmbagKey& k) {
  switch (k.table) {
    case DType::kF32: return pick_mode<Index, Offset, SHAPEJIT_F32>(k);
    case DType::kF16: return pick_mode<Index, Offset, SHAPEJIT_F16>(k);
    case DType::kBF16: return pick_mode<Index, Offset, SHAPEJIT_BF16>(k);
    case DType::kQ8: return pick_mode<Index, Offset, SHAPEJIT_Q8>(k);
    case DType::kQ4: return pick_mode<Index, Offset, SHAPEJIT_Q4>(k);
    case DType::kQ2: return pick_mode<Index, Offset, SHAPEJIT_Q2>(k);
    default: break;
  }
  throw Error(Status::kUnsupported, "generic kernel: table dtype " + std::to_string(static_cast<int>(k.table)) +
                                        " is not a table dtype (f32, f16, bf16, q8, q4, q2)");
}

bool is_index_type(DType t) { return t == DType::kI32 || t == DType::kI64; }

// The key's output and weight dtypes are the ones its table's kernels take (the plan guarantees
// it; a hand-made key is checked here rather than silently run with other dtypes).
void check_key_dtypes(const jit::EmbagKey& key) {
  const jit::DtypeRule rule = jit::kernel_dtype_rule(int64_t(key.table), key.dim, int64_t(key.out), key.weighted,
                                                     int64_t(key.psw));
  if (rule == jit::DtypeRule::kOutput || rule == jit::DtypeRule::kWeights)
    throw Error(Status::kInvalidArgument, "generic kernel: output dtype " + std::to_string(int(key.out)) +
                                              " or weight dtype " + std::to_string(int(key.psw)) +
                                              " does not go with table dtype " + std::to_string(int(key.table)));
}

}  // namespace

jit::EmbagKernelFn generic_embag_kernel(const jit::EmbagKey& key) {
  if (!is_index_type(key.index) || !is_index_type(key.offset))
    throw Error(Status::kInvalidArgument, "generic kernel: index and offset dtypes must be int32 or int64");
  switch (key.table) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kQ8: case DType::kQ4: case DType::kQ2: break;
    default: return pick_table<int64_t, int64_t>(key);  // throws: not a table dtype
  }
  check_key_dtypes(key);
  const bool i32 = key.index == DType::kI32, o32 = key.offset == DType::kI32;
  // Outputs take the common type; mixed index/offset types promote to int64 (key.index_out()).
  if (i32 && o32) return pick_table<int32_t, int32_t>(key);
  if (i32) return pick_table<int32_t, int64_t>(key);
  if (o32) return pick_table<int64_t, int32_t>(key);
  return pick_table<int64_t, int64_t>(key);
}

// The kernel cache's rule for embedding-bag keys (runtime/engine/kernel_cache.hpp).
bool KernelKind<jit::EmbagKey>::served_generic(const jit::EmbagKey& key) {
  return key.isa == jit::Isa::kScalar || key.dim == 0;
}

jit::EmbagKernelFn KernelKind<jit::EmbagKey>::generic(const jit::EmbagKey& key) { return generic_embag_kernel(key); }

}  // namespace shapejit::rt

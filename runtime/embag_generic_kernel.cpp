// The generic embedding-bag kernel. Every float operation is the reference's, in the
// reference's order: sums start from +0.0f and add rows in index order, weighted sums use
// std::fma, mean divides once, max copies the first row and then replaces on strict `>`.
// Vectorising the column loops is fine (columns are independent); what must never happen is
// reassociation or a*b+c contraction. The source writes no a*b+c, and the build passes
// -ffp-contract=off (g++ contracts by default even in ISO C++ mode); fast-math is refused.
#include "runtime/embag_generic_kernel.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#if defined(__FAST_MATH__)
#error "the generic kernel must be bitwise equal to the reference: do not build with -ffast-math"
#endif
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace shapejit::rt {
namespace {

using jit::EmbagKernelArgs;

// Problem-wide constants of one kernel call, decoded once.
template <class Index, class Offset, class Out>
struct Problem {
  const char* table;
  int64_t row_stride_bytes, dim;
  const Index* indices;
  const Offset* offsets;
  int64_t num_offsets, num_indices;
  const float* psw;
  int64_t padding_idx;

  explicit Problem(const EmbagKernelArgs& a)
      : table(static_cast<const char*>(a.weight)),
        row_stride_bytes(a.row_stride_bytes),
        dim(a.dim),
        indices(static_cast<const Index*>(a.indices)),
        offsets(static_cast<const Offset*>(a.offsets)),
        num_offsets(a.num_offsets),
        num_indices(a.num_indices),
        psw(static_cast<const float*>(a.per_sample_weights)),
        padding_idx(a.padding_idx) {}

  const float* row(int64_t r) const {
    // A NULL table is valid when dim == 0 (no column is read); offsetting NULL is undefined.
    if (table == nullptr) return nullptr;
    return reinterpret_cast<const float*>(table + r * row_stride_bytes);
  }
  int64_t bag_begin(int64_t b) const { return static_cast<int64_t>(offsets[b]); }
  int64_t bag_end(int64_t b) const {
    return b + 1 < num_offsets ? static_cast<int64_t>(offsets[b + 1]) : num_indices;
  }
};

void add_row(float* __restrict out, const float* __restrict x, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) out[d] = out[d] + x[d];
}

void fma_row(float* __restrict out, float w, const float* __restrict x, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) out[d] = std::fma(w, x[d], out[d]);
}

// Sum (plain or weighted) of one bag into out; returns the number of non-padding rows.
template <bool kWeighted, bool kPadding, class P>
int64_t sum_bag(const P& p, int64_t begin, int64_t end, float* out) {
  for (int64_t d = 0; d < p.dim; ++d) out[d] = 0.0f;
  int64_t count = 0;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t r = static_cast<int64_t>(p.indices[i]);
    if (kPadding && r == p.padding_idx) continue;
    if constexpr (kWeighted)
      fma_row(out, p.psw[i], p.row(r), p.dim);
    else
      add_row(out, p.row(r), p.dim);
    ++count;
  }
  return count;
}

// Max of one bag into out and its winning row ids into winners; returns the row count.
template <bool kPadding, class P, class Out>
int64_t max_bag(const P& p, int64_t begin, int64_t end, float* __restrict out,
                Out* __restrict winners) {
  int64_t count = 0;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t r = static_cast<int64_t>(p.indices[i]);
    if (kPadding && r == p.padding_idx) continue;
    const float* __restrict x = p.row(r);
    const Out id = static_cast<Out>(r);
    if (count == 0) {  // the first row is copied, so -0.0 and NaN survive as they are
      for (int64_t d = 0; d < p.dim; ++d) {
        out[d] = x[d];
        winners[d] = id;
      }
    } else {  // strict >: ties keep the earliest, a later NaN never wins
      // Branch-free (a select and an all-ones mask), so g++ vectorises it: `x > cur ? x : cur`
      // is exactly maxps(x, cur), which keeps cur on ties, -0/+0 and NaN.
      for (int64_t d = 0; d < p.dim; ++d) {
        const float xv = x[d], cur = out[d];
        const Out mask = -static_cast<Out>(xv > cur);
        out[d] = xv > cur ? xv : cur;
        winners[d] = static_cast<Out>((id & mask) | (winners[d] & ~mask));
      }
    }
    ++count;
  }
  if (count == 0) {
    for (int64_t d = 0; d < p.dim; ++d) {
      out[d] = 0.0f;
      winners[d] = 0;
    }
  }
  return count;
}

template <class Index, class Offset, class Out, Mode kMode, bool kWeighted, bool kPadding>
void generic_kernel(const EmbagKernelArgs* args) {
  const Problem<Index, Offset, Out> p(*args);
  Out* offset2bag = static_cast<Out*>(args->offset2bag);
  Out* bag_size = static_cast<Out*>(args->bag_size);
  Out* max_indices = static_cast<Out*>(args->max_indices);
  for (int64_t b = args->bag_begin; b < args->bag_end; ++b) {
    const int64_t begin = p.bag_begin(b), end = p.bag_end(b);
    float* out = static_cast<float*>(args->output) + b * p.dim;
    int64_t count;
    if constexpr (kMode == Mode::kMax)
      count = max_bag<kPadding>(p, begin, end, out, max_indices + b * p.dim);
    else
      count = sum_bag<kWeighted, kPadding>(p, begin, end, out);

    if constexpr (kMode == Mode::kMean) {
      const float divisor = static_cast<float>(count > 1 ? count : 1);
      for (int64_t d = 0; d < p.dim; ++d) out[d] = out[d] / divisor;
      max_indices[b] = static_cast<Out>(count);
    }
    if constexpr (kMode != Mode::kSum) bag_size[b] = static_cast<Out>(count);
    if constexpr (kMode != Mode::kSum || kPadding)
      for (int64_t i = begin; i < end; ++i) offset2bag[i] = static_cast<Out>(b);
  }
}

// Picks the instantiation: types first, then mode, weighting and padding.
template <class Index, class Offset, class Out>
jit::EmbagKernelFn pick(const jit::EmbagKey& k) {
  auto flags = [&]<Mode kMode>() -> jit::EmbagKernelFn {
    if (k.weighted)
      return k.padding ? &generic_kernel<Index, Offset, Out, kMode, true, true>
                       : &generic_kernel<Index, Offset, Out, kMode, true, false>;
    return k.padding ? &generic_kernel<Index, Offset, Out, kMode, false, true>
                     : &generic_kernel<Index, Offset, Out, kMode, false, false>;
  };
  switch (k.mode) {
    case Mode::kSum: return flags.template operator()<Mode::kSum>();
    case Mode::kMean: return flags.template operator()<Mode::kMean>();
    case Mode::kMax: return flags.template operator()<Mode::kMax>();
  }
  throw Error(Status::kInvalidArgument, "generic kernel: mode " +
                                            std::to_string(static_cast<int>(k.mode)) +
                                            " is not sum, mean or max");
}

bool is_index_type(DType t) { return t == DType::kI32 || t == DType::kI64; }

}  // namespace

jit::EmbagKernelFn generic_embag_kernel(const jit::EmbagKey& key) {
  if (key.table != DType::kF32)
    throw Error(Status::kUnsupported, "generic kernel: table dtype " +
                                          std::to_string(static_cast<int>(key.table)) +
                                          " is not supported (f32 only)");
  if (!is_index_type(key.index) || !is_index_type(key.offset))
    throw Error(Status::kInvalidArgument,
                "generic kernel: index and offset dtypes must be int32 or int64");
  const bool i32 = key.index == DType::kI32, o32 = key.offset == DType::kI32;
  // Outputs take the common type; mixed index/offset types promote to int64 (key.index_out()).
  if (i32 && o32) return pick<int32_t, int32_t, int32_t>(key);
  if (i32) return pick<int32_t, int64_t, int64_t>(key);
  if (o32) return pick<int64_t, int32_t, int64_t>(key);
  return pick<int64_t, int64_t, int64_t>(key);
}

}  // namespace shapejit::rt

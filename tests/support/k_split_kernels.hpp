// Swaps k-split kernels (GemmKey::k_split) into a packed linear group. The runtime picks them
// only for streamed f32 parts where the ISA measured a gain (jit::gemm_stream_split), but every
// x86 key may name one, so the tests run them on small groups this way.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "jit/gemm_kernel.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "runtime/linear_group/linear_group_pack.hpp"

namespace shapejit::test {

/// Gives each kernel of `g` `split` spans (0: the most it allows), where its registers hold that
/// many partial sums and K gives each span at least 16 k (at most 8 spans); the other kernels
/// stay. Returns the number of kernels swapped; throws when the cache has no room for one.
inline int64_t use_k_split(rt::PackedGroup& g, int split) {
  int64_t swapped = 0;
  for (rt::PackedPart& p : g.parts)
    for (int r = 1; r <= p.mr; ++r)
      for (const bool full : {true, false}) {
        if ((full ? p.full_panels : int64_t(p.edge_cols)) == 0) continue;
        jit::GemmKey key = (full ? p.full_keys : p.edge_keys)[size_t(r - 1)];
        const int budget = jit::gemm_accumulator_budget(key.isa, key.nv(), key.quant, key.dot);
        const int most = int(std::min<int64_t>({8, budget / (r * key.nv()), key.k / 16}));
        key.k_split = split == 0 ? most : split;
        if (key.k_split < 2 || key.k_split > most) continue;
        const auto kernel = rt::gemm_kernel_cache().get(key);
        if (!kernel) throw std::runtime_error("no kernel for " + key.name());
        (full ? p.full_keys : p.edge_keys)[size_t(r - 1)] = key;
        (full ? p.full : p.edge)[size_t(r - 1)] = kernel.fn();
        ++swapped;
      }
  return swapped;
}

}  // namespace shapejit::test

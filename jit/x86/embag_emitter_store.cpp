// X86EmbagEmitter: the offset2bag fill, the max_indices store and the AVX2 exact-width tail
// moves.
#include <algorithm>
#include <cstddef>

#include "jit/x86/embag_emitter.hpp"

namespace shapejit::jit {

using namespace asmjit;

// The offset2bag fill's primitives (EmbagSkeleton::emit_offset2bag_fill).
void X86EmbagEmitter::broadcast_bag(uint32_t vec_id) {
  const x86::Vec v = vec(vec_id);
  const x86::Gp bag = gp(G::kBag);
  if (t_.avx512) {
    if (out_size() == 4) a_.vpbroadcastd(v, bag.r32());
    else a_.vpbroadcastq(v, bag);
    return;
  }
  a_.vmovq(v.xmm(), bag);  // AVX2 broadcasts from a vector register only
  if (out_size() == 4) a_.vpbroadcastd(v, v.xmm());
  else a_.vpbroadcastq(v, v.xmm());
}

void X86EmbagEmitter::store_bag_vector(uint32_t vec_id, G pos) {
  const x86::Mem at = x86::ptr(o2b_, gp(pos), out_size() == 4 ? 2 : 3);
  if (t_.avx512) a_.vmovdqu64(at, vec(vec_id));
  else a_.vmovdqu(at, vec(vec_id));
}

// AVX2 tails read and write exactly the tail's bytes with 16/8/4-byte moves instead of
// vmaskmovps: fault suppression of masked lanes is architectural, but qemu 7.2 (our AVX2 test
// host) faults on them at a page end, and AMD runs masked stores slowly. Loads `count` (1..7)
// floats into dst, the other lanes 0.
void X86EmbagEmitter::load_tail_avx2(const x86::Vec& dst, const x86::Mem& src, int64_t count,
                                     const x86::Xmm& spare) {
  auto piece = [&](const x86::Xmm& r, x86::Mem m, int64_t n) {  // n floats (1..3) into r, rest 0
    m.setSize(n == 1 ? 4 : 8);
    if (n == 1) {
      a_.vmovss(r, m);
      return;
    }
    a_.vmovsd(r, m);
    if (n == 3) {
      x86::Mem third = m.cloneAdjusted(8);
      third.setSize(4);
      a_.vinsertps(r, r, third, 0x20);  // into lane 2
    }
  };
  if (count < 4) {
    piece(dst.xmm(), src, count);
    return;
  }
  x86::Mem m = src;
  m.setSize(16);
  a_.vmovups(dst.xmm(), m);  // the VEX form clears lanes 4-7
  if (count == 4) return;
  piece(spare, src.cloneAdjusted(16), count - 4);
  a_.vinsertf128(dst.ymm(), dst.ymm(), spare, 1);
}

// Stores the first `count` elements (4 or 8 bytes each) of `src`; `spare` may be clobbered.
void X86EmbagEmitter::store_tail_avx2(const x86::Mem& dst, const x86::Vec& src, int64_t count,
                                      int64_t elem_bytes, const x86::Xmm& spare) {
  int64_t bytes = count * elem_bytes, off = 0;
  x86::Xmm cur = src.xmm();
  auto at = [&](int64_t offset, uint32_t size) {
    x86::Mem m = dst.cloneAdjusted(offset);
    m.setSize(size);
    return m;
  };
  if (bytes >= 16) {
    a_.vmovups(at(0, 16), cur);
    bytes -= 16, off = 16;
    if (bytes == 0) return;
    a_.vextractf128(spare, src.ymm(), 1);
    cur = spare;
  }
  if (bytes >= 8) {
    a_.vmovsd(at(off, 8), cur);
    if (bytes == 12) a_.vextractps(at(off + 8, 4), cur, 2);
    return;
  }
  a_.vmovss(at(off, 4), cur);
}

// Stores n (1..half) 64-bit ids of `ids`, the h-th half of a vector's columns (h = n == half ?
// any : the tail's position decides the mask).
void X86EmbagEmitter::store_ids64(const x86::Mem& dst, const x86::Vec& ids, int64_t n, int64_t h) {
  const int64_t half = t_.lanes / 2;
  if (n == half) {
    a_.vmovups(dst, ids);
  } else if (t_.avx512) {  // k_tail holds `tail` low bits; the high half needs them shifted
    if (h == 1) a_.kshiftrw(k_hi_, k_tail_, 8);
    a_.k(h == 0 ? k_tail_ : k_hi_).vmovupd(dst, ids);
  } else {
    store_tail_avx2(dst, ids, n, 8, vec(vcmp_).xmm());
  }
}

// max_indices[bag][col] from the id registers: 32-bit lanes stored as int32, or zero-extended
// to int64 half a vector at a time, or 64-bit lanes (the wide path) stored as they are.
void X86EmbagEmitter::store_max_ids(const EmbagBlock& blk) {
  // The element offset of kOut (bag * dim + the block loop's column) locates the ids too, once
  // a strided output's gaps before the bag (bag * gap) are taken off: max_indices is dense.
  const x86::Gp s = gp(G::kScratch);
  if (out_row_gap_bytes() == 0) {
    a_.mov(s, gp(G::kOut));
  } else {
    a_.imul(s, gp(G::kBag), static_cast<int32_t>(out_row_gap_bytes()));
    a_.neg(s);
    a_.add(s, gp(G::kOut));
  }
  a_.sub(s, arg_mem(offsetof(EmbagKernelArgs, output)));
  const int64_t out_elem = embag_col_bytes(key().out, 1);
  if (out_size() == 2 * out_elem) a_.add(s, s);
  else if (out_size() > out_elem) a_.shl(s, out_size() == 4 * out_elem ? 2 : 3);
  a_.add(s, arg_mem(offsetof(EmbagKernelArgs, max_indices)));
  const int64_t half = t_.lanes / 2;
  const x86::Vec wide = vec(xtmp_);  // free at store time
  for (int64_t j = 0; j < blk.num_vecs; ++j)  // column groups: the ids' lanes follow the values'
    if (group_head(blk, j)) ops_->unpermute_group(group_regs(j, true), xtmp_, vcmp_);
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    const int64_t col = v * t_.lanes - base_col();
    const x86::Vec lo = vec(ids_lo(j));
    if (out_size() == 4) {
      const x86::Mem dst = x86::ptr(s, static_cast<int32_t>(col * 4));
      if (!is_tail(v)) a_.vmovups(dst, lo);
      else if (t_.avx512) a_.k(k_tail_).vmovups(dst, lo);
      else store_tail_avx2(dst, lo, tail(), 4, x86::xmm(xtmp_));
      continue;
    }
    for (int64_t h = 0; h * half < vec_cols(v); ++h) {
      const x86::Mem dst = x86::ptr(s, static_cast<int32_t>((col + h * half) * 8));
      const int64_t n = std::min(half, vec_cols(v) - h * half);
      if (wide_ids()) {
        store_ids64(dst, vec(h == 0 ? ids_lo(j) : ids_hi(j)), n, h);
        continue;
      }
      // Ids are below 2^31 here, so zero extension is exact.
      if (h == 0) {
        a_.vpmovzxdq(wide, lo.half());
      } else if (t_.avx512) {
        a_.vextracti64x4(wide.half(), lo, 1);
        a_.vpmovzxdq(wide, wide.half());
      } else {
        a_.vextracti128(wide.half(), lo, 1);
        a_.vpmovzxdq(wide, wide.half());
      }
      store_ids64(dst, wide, n, h);
    }
  }
}

}  // namespace shapejit::jit

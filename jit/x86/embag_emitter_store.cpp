// X86EmbagEmitter, second part: the store step (outputs, max_indices, counts) and the AVX2
// exact-width tail moves.
#include <algorithm>
#include <cstddef>

#include "jit/x86/embag_emitter.hpp"

namespace shapejit::jit {

using namespace asmjit;

#define SJ_ARG(field) x86::qword_ptr(args_, static_cast<int32_t>(offsetof(EmbagKernelArgs, field)))

// AVX2 tails read and write exactly the tail's bytes with 16/8/4-byte moves instead of
// vmaskmovps: fault suppression of masked lanes is architectural, but qemu 7.2 (our AVX2 test
// host) faults on them at a page end, and AMD runs masked stores slowly.
void X86EmbagEmitter::load_tail_avx2(const x86::Vec& dst, const x86::Mem& src, const x86::Xmm& spare) {
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
  if (tail_ < 4) {
    piece(dst.xmm(), src, tail_);
    return;
  }
  x86::Mem m = src;
  m.setSize(16);
  a_.vmovups(dst.xmm(), m);  // the VEX form clears lanes 4-7
  if (tail_ == 4) return;
  piece(spare, src.cloneAdjusted(16), tail_ - 4);
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

// Step: store --------------------------------------------------------------------------------------

void X86EmbagEmitter::emit_store(const Block& blk) {
  const x86::Vec div = vec(bcast_);
  if (key_.mode == Mode::kMean) {  // IEEE division by (float)max(count, 1)
    a_.mov(scratch_.r32(), 1);
    a_.cmp(count_, 1);
    a_.cmovg(scratch_, count_);
    a_.vcvtsi2ss(div.xmm(), div.xmm(), scratch_);
    a_.vbroadcastss(div, div.xmm());
  }
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    const x86::Vec acc = vec(acc_[size_t(j)]);
    if (key_.mode == Mode::kMean) a_.vdivps(acc, acc, div);
    const x86::Mem dst = x86::ptr(out_, vec_offset(v));
    if (!is_tail(v)) a_.vmovups(dst, acc);
    else if (t_.avx512) a_.k(k_tail_).vmovups(dst, acc);
    else store_tail_avx2(dst, acc, tail_, 4, x86::xmm(xtmp_));
  }
  if (key_.mode == Mode::kMax) emit_store_max_indices(blk);
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
void X86EmbagEmitter::emit_store_max_indices(const Block& blk) {
  // The element offset of out_ (bag * dim + the block loop's column) locates the ids too.
  a_.mov(scratch_, out_);
  a_.sub(scratch_, SJ_ARG(output));
  if (out_size_ == 8) a_.add(scratch_, scratch_);
  a_.add(scratch_, SJ_ARG(max_indices));
  const int64_t half = t_.lanes / 2;
  const x86::Vec wide = vec(xtmp_);  // free at store time
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    const int64_t col = (v - base_vec_) * t_.lanes;
    const x86::Vec lo = vec(idx_lo_[size_t(j)]);
    if (out_size_ == 4) {
      const x86::Mem dst = x86::ptr(scratch_, static_cast<int32_t>(col * 4));
      if (!is_tail(v)) a_.vmovups(dst, lo);
      else if (t_.avx512) a_.k(k_tail_).vmovups(dst, lo);
      else store_tail_avx2(dst, lo, tail_, 4, x86::xmm(xtmp_));
      continue;
    }
    for (int64_t h = 0; h * half < vec_cols(v); ++h) {
      const x86::Mem dst = x86::ptr(scratch_, static_cast<int32_t>((col + h * half) * 8));
      const int64_t n = std::min(half, vec_cols(v) - h * half);
      if (wide_ids_) {
        store_ids64(dst, vec(h == 0 ? idx_lo_[size_t(j)] : idx_hi_[size_t(j)]), n, h);
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

// bag_size[bag] (mean, max) and max_indices[bag] (mean) hold the count.
void X86EmbagEmitter::emit_bag_counts() {
  if (!counts()) return;
  const uint32_t shift = out_size_ == 4 ? 2 : 3;
  a_.mov(scratch_, SJ_ARG(bag_size));
  store_int(x86::ptr(scratch_, bag_, shift), count_);
  if (key_.mode == Mode::kMean) {
    a_.mov(scratch_, SJ_ARG(max_indices));
    store_int(x86::ptr(scratch_, bag_, shift), count_);
  }
}

}  // namespace shapejit::jit

// X86TableOps, column groups (AVX2; Q4 and Q2 in every mode, Q8 in all but max; AVX-512 BF16 in
// all but max; weighted or not): one load of codes feeds a group of full vectors. BF16: 32
// columns in 2 vectors, even columns then odd ones (accumulate_bf16_group). Q4 and Q2: 8 bytes, each vector holding
// one code position of every byte: Q4 16 columns in 2 vectors (low nibbles = even columns, high
// nibbles = odd ones), Q2 32 columns in 4 (crumb k of byte i = column 4i + k); only the lane
// order differs until unpermute_group puts the group back in column order, once per bag. Q8: 16
// bytes in both 128-bit halves, two vpshufb into 2 vectors in column order: on Zen 1 the
// zero-extending vpmovzxbd runs at half the rate of vpshufb, and the conversion and the FMAs
// share pipes (a hand loop of D = 64 rows: 2.0 -> 2.2 columns per cycle). The arithmetic per
// lane is accumulate's and load_value's, so bitwise the same.
//
// Per 8 columns (AVX2): Q4 4.5 instructions instead of 6, Q2 4 instead of 5 (the load and its
// shifts/masks shared by the group), plus unpermute_group per bag (Q4 4 per group, Q2 14).
#include "jit/x86/embag_table_ops.hpp"
#include "jit/x86/embag_table_ops_detail.hpp"

#include <string>

#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;
using table_ops_detail::at;
using table_ops_detail::internal;

void X86TableOps::accumulate_group(const std::vector<uint32_t>& accs, const x86::Mem& m) {
  if (group_vecs() < 2 || int64_t(accs.size()) != group_vecs()) internal("accumulate_group: not a group");
  if (key_.table == DType::kBF16) return accumulate_bf16_group(accs, m);
  const x86::Vec b = vec(bias_), s = vec(scale_), codes = temp(0), plane = temp(1);
  if (key_.table == DType::kQ8) {
    a_.vbroadcasti128(codes, at(m, 0, 16));
    a_.vpshufb(plane, codes, cnst(1));  // columns 8-15
    a_.vpshufb(codes, codes, cnst(0));  // columns 0-7
  } else {
    a_.vpmovzxbd(codes, at(m, 0, 8));
  }
  for (uint32_t acc : accs) a_.vaddps(vec(acc), vec(acc), b);  // t = f32(acc + b), as accumulate
  if (key_.table == DType::kQ8) {
    a_.vcvtdq2ps(codes, codes);  // codes 0..255: exact
    a_.vcvtdq2ps(plane, plane);
    a_.vfmadd231ps(vec(accs[0]), codes, s);
    a_.vfmadd231ps(vec(accs[1]), plane, s);
    return;
  }
  if (key_.table == DType::kQ4) {
    a_.vpsrld(plane, codes, 4);
    a_.vpand(codes, codes, cnst(0));
    a_.vcvtdq2ps(codes, codes);
    a_.vcvtdq2ps(plane, plane);
    a_.vfmadd231ps(vec(accs[0]), codes, s);
    a_.vfmadd231ps(vec(accs[1]), plane, s);
    return;
  }
  // Q2: vpermps reads the low 3 bits of a lane (a crumb and a bit of the next, which the table
  // ignores); the last crumb stands alone after its shift.
  a_.vpermps(plane, codes, q2_table());
  a_.vfmadd231ps(vec(accs[0]), plane, s);
  for (int k = 1; k < 3; ++k) {
    a_.vpsrld(plane, codes, uint32_t(2 * k));
    a_.vpermps(plane, plane, q2_table());
    a_.vfmadd231ps(vec(accs[size_t(k)]), plane, s);
  }
  a_.vpsrld(codes, codes, 6);
  a_.vcvtdq2ps(codes, codes);
  a_.vfmadd231ps(vec(accs[3]), codes, s);
}

// AVX-512 BF16: 32 columns in one load; dword lane i holds column 2i in its low half and 2i + 1
// in its high half, so a shift left by 16 is the even columns' f32 values and masking off the
// low half the odd ones', exactly as load_float_cols widens them. Then accumulate's arithmetic.
void X86TableOps::accumulate_bf16_group(const std::vector<uint32_t>& accs, const x86::Mem& m) {
  const x86::Vec odd = temp(0), even = temp(1);
  a_.vmovdqu32(odd, at(m, 0, 64));
  a_.vpslld(even, odd, 16);
  a_.vpandd(odd, odd, reg_const(kRcHighHalf));
  const bool weighted = key_.weighted && key_.mode == Mode::kSum;
  for (size_t k = 0; k < 2; ++k) {
    const x86::Vec acc = vec(accs[k]), x = k == 0 ? even : odd;
    if (!weighted) {
      add_term(acc, x);
    } else if (!key_.weighted_terms_fused()) {  // as accumulate: f32(acc + f32(w * x))
      a_.vmulps(x, x, vec(weight_));
      a_.vaddps(acc, acc, x);
    } else {
      a_.vfmadd231ps(acc, vec(weight_), x);
    }
  }
}

// Max: the codes (Q4: the odd ones) wait in temp(0) while the caller blends a member.
void X86TableOps::load_value_group(uint32_t dst_id, const x86::Mem& m, int64_t member) {
  if (group_vecs() < 2 || member < 0 || member >= group_vecs()) internal("load_value_group: not a group member");
  const x86::Vec dst = vec(dst_id), odd = temp(0), codes = temp(0);
  if (key_.table == DType::kQ2) {
    if (member == 0) {
      a_.vpmovzxbd(codes, at(m, 0, 8));
      a_.vpermps(dst, codes, q2_table());
    } else {
      a_.vpsrld(dst, codes, uint32_t(2 * member));
      a_.vpermps(dst, dst, q2_table());
    }
  } else if (member == 0) {
    a_.vpmovzxbd(dst, at(m, 0, 8));
    a_.vpsrld(odd, dst, 4);
    a_.vpand(dst, dst, cnst(0));
    a_.vcvtdq2ps(dst, dst);
  } else {
    a_.vcvtdq2ps(dst, odd);
  }
  a_.vfmadd213ps(dst, vec(scale_), vec(bias_));  // fmaf(scale, q, 0 + bias), as load_value
}

void X86TableOps::unpermute_group(const std::vector<uint32_t>& regs) {
  if (group_in_column_order()) return;
  if (temps_.size() < 2) internal("unpermute_group: needs two scratch registers");
  unpermute_group(regs, temps_[0], temps_[1]);
}

// Any 32-bit lanes (values or ids). Per 128-bit half, interleaving lanes and then lane pairs
// gives runs of 4 consecutive columns; vperm2f128 regroups the halves.
void X86TableOps::unpermute_group(const std::vector<uint32_t>& regs, uint32_t s0, uint32_t s1) {
  if (group_vecs() < 2 || int64_t(regs.size()) != group_vecs()) internal("unpermute_group: not a group");
  if (group_in_column_order()) return;
  const x86::Vec t0 = vec(s0), t1 = vec(s1), a0 = vec(regs[0]), a1 = vec(regs[1]);
  if (avx512_) {  // BF16: a0 = columns 0, 2, ..., 30, a1 = 1, 3, ..., 31
    a_.vmovaps(t0, a0);
    a_.vpermt2ps(t0, cnst(0), a1);  // columns 0-15
    a_.vpermt2ps(a0, cnst(1), a1);  // columns 16-31
    a_.vmovaps(a1, a0);
    a_.vmovaps(a0, t0);
    return;
  }
  a_.vunpcklps(t0, a0, a1);  // Q4: columns 0-3 | 8-11
  a_.vunpckhps(t1, a0, a1);  //     columns 4-7 | 12-15
  if (regs.size() == 2) {
    a_.vperm2f128(a0, t0, t1, 0x20);
    a_.vperm2f128(a1, t0, t1, 0x31);
    return;
  }
  const x86::Vec a2 = vec(regs[2]), a3 = vec(regs[3]);
  a_.vunpcklps(a0, a2, a3);
  a_.vunpckhps(a1, a2, a3);
  a_.vunpcklpd(a2, t0, a0);  // columns 0-3 | 16-19
  a_.vunpckhpd(a3, t0, a0);  // 4-7 | 20-23
  a_.vunpcklpd(t0, t1, a1);  // 8-11 | 24-27
  a_.vunpckhpd(a0, t1, a1);  // 12-15 | 28-31
  a_.vperm2f128(a1, t0, a0, 0x20);
  a_.vperm2f128(t1, t0, a0, 0x31);
  a_.vperm2f128(a0, a2, a3, 0x20);
  a_.vperm2f128(t0, a2, a3, 0x31);
  a_.vmovaps(a2, t0);
  a_.vmovaps(a3, t1);
}

// A Q2 vector outside a group (4 or 8 columns, with the groups' table only): the crumbs of code
// byte b go to the 4 bytes of a dword (b | b << 6 | b << 12 | b << 18: crumb k in the low bits
// of byte k), which widen to lanes in column order. Clobbers the temporary that is not dst.
void X86TableOps::load_q2_single(const x86::Vec& dst, const x86::Mem& m, int64_t cols) {
  const x86::Xmm d = dst.xmm(), t = (dst.id() == temps_[0] ? temp(1) : temp(0)).xmm();
  if (full(cols)) a_.vpbroadcastw(d, at(m, 0, 2));
  else a_.vpbroadcastb(d, at(m, 0, 1));  // 4 columns: one byte
  a_.vpmovzxbd(d, d);
  a_.vpslld(t, d, 6);
  a_.vpor(d, d, t);
  a_.vpslld(t, d, 12);
  a_.vpor(d, d, t);
  a_.vpmovzxbd(dst, d);
  a_.vpermps(dst, dst, q2_table());  // reads bit 2 of each byte too, which the table ignores
}

// A Q4 vector outside a group (up to 8 columns in column order, with the groups' nibble mask
// only): each code byte b or'ed with b << 12 and masked by 0x000F000F holds its two columns in
// its two words, which then widen in order. Clobbers the temporary that is not dst.
void X86TableOps::load_q4_single(const x86::Vec& dst, const x86::Mem& m, int64_t cols) {
  const int64_t bytes = col_bytes(DType::kQ4, cols);
  const x86::Xmm d = dst.xmm(), t = (dst.id() == temps_[0] ? temp(1) : temp(0)).xmm();
  if (full(cols)) {
    a_.vpmovzxbd(d, at(m, 0, 4));
  } else {
    if (bytes == 1) a_.vpbroadcastb(d, at(m, 0, 1));  // lanes >= cols read copies
    else if (bytes == 2) a_.vpbroadcastw(d, at(m, 0, 2));
    else load_exact(d, m, bytes);
    a_.vpmovzxbd(d, d);
  }
  a_.vpslld(t, d, 12);
  a_.vpor(d, d, t);
  a_.vpand(d, d, cnst(0).xmm());
  a_.vpmovzxwd(dst, d);
  a_.vcvtdq2ps(dst, dst);
}

}  // namespace shapejit::jit

// X86TableOps, first part: registers, constants, row setup, loads and the accumulate and
// dequantize arithmetic. The rules are quantized-tables-semantics.md's; the scalar forms they
// must equal bitwise are ref/table_rows.hpp's (quantized_step, dequantized_value).
//
// Instructions per vector of columns (AVX2: 8, AVX-512: 16), row setup excluded:
//   f32 1 (add/fma with a memory operand), f16 2 (vcvtph2ps), bf16 3 (AVX2: broadcast, shuffle;
//   AVX-512: zero-extend, shift; in column groups 2.5: a load, a shift or mask per 2 vectors;
//   4 weighted: multiply, then add),
//   Q4 6 (AVX2: broadcast, shift the nibble to the top and back, convert; AVX-512: gather the
//   code dwords, shift, table lookup vpermps), Q2 5 (broadcast, shift, vpermps), Q8 4 (zero-extend,
//   convert), each + add + fma (B4 is one f32 add and one f32 fma, weighted or not).
// AVX2 Q4/Q2 (and Q8 but in max) read whole groups of vectors per load instead (column groups,
// embag_table_ops_groups.cpp: Q4 4.5, Q2 4, Q8 4.5 per vector, Q8's shuffles twice as fast as its
// zero-extension); vectors outside a group take the counts above, or without the shift vector
// (single_shift()) Q4 8 and Q2 10.
#include "jit/x86/embag_table_ops.hpp"
#include "jit/x86/embag_table_ops_detail.hpp"

#include <algorithm>
#include <string>

#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;
using table_ops_detail::at;
using table_ops_detail::internal;

X86TableOps::X86TableOps(const EmbagKey& key, x86::Assembler& a)
    : key_(key),
      a_(a),
      avx512_(X86VecTraits::of(key.isa).avx512),
      lanes_(X86VecTraits::of(key.isa).lanes),
      tail_(key.dim % lanes_) {
  if (isa_traits(key.isa).family != IsaFamily::kX86) internal("not an x86 ISA");
  if (key.table == DType::kQ4 && key.dim % 2 != 0) internal("Q4 rows need an even dim");
  if (key.table == DType::kQ2 && key.dim % 4 != 0) internal("Q2 rows need a dim divisible by 4");
}

int64_t X86TableOps::col_bytes(DType dtype, int64_t cols) {
  switch (dtype) {
    case DType::kF32: return cols * 4;
    case DType::kF16:
    case DType::kBF16: return cols * 2;
    case DType::kQ8: return cols;
    case DType::kQ4: return (cols + 1) / 2;
    case DType::kQ2: return (cols + 3) / 4;
    default: internal("not a table or output dtype");
  }
}

// Temporaries: the most any op of this key uses at once.
int64_t X86TableOps::temps_needed() const {
  int64_t n = 0;
  switch (key_.table) {
    case DType::kF32:  // AVX2 tails: the loaded columns (accumulate) and the upper part
      n = avx512_ || tail_ == 0 ? 0 : (key_.mode == Mode::kMax ? 0 : 1) + (tail_ > 4 ? 1 : 0);
      break;
    case DType::kQ8:  // the codes (max: the zero of 0 + bias)
    case DType::kQ4:
    case DType::kQ2:  // column groups: the codes and one plane
    case DType::kBF16:
      n = group_vecs() > 1 && key_.mode != Mode::kMax ? 2 : 1;
      break;
    default: n = 1;
  }
  const int64_t bf16_round = avx512_ ? 1 : 3;  // AVX-512: constants in registers, the NaN mask in k_temp_
  if (quantized() && (key_.weighted || key_.mode == Mode::kMax)) n = std::max<int64_t>(n, 1);
  if (key_.rounds_products()) n = std::max<int64_t>(n, 1);  // w * x
  if (key_.out == DType::kF32 && !avx512_ && tail_ > 4) n = std::max<int64_t>(n, 1);
  if (key_.out == DType::kF16) n = std::max<int64_t>(n, 1);
  if (key_.out == DType::kBF16) n = std::max(n, bf16_round);
  if (key_.mode == Mode::kMean && key_.table == DType::kF16) n = std::max<int64_t>(n, 1);
  if (key_.mode == Mode::kMean && key_.table == DType::kBF16) n = std::max(n, bf16_round);
  return n;
}

// Q4: AVX-512 gather, shift and table vectors; AVX2 the shift vector, with column groups the
// nibble mask (+ the shift vector: single_shift()). Q2: the shift vector (not with groups
// unless single_shift()) and the table. Q8 with column groups: the two byte shuffles. AVX2 BF16:
// the byte shuffle that widens 8 elements to f32. AVX-512 BF16 with column groups:
// unpermute_group's two lane indices (the high-half mask is a register constant, kRcHighHalf).
uint32_t X86TableOps::consts_needed() const {
  if (key_.table == DType::kQ8) return group_vecs() > 1 ? 2 : 0;  // the two byte shuffles
  if (key_.table == DType::kBF16) return avx512_ ? (group_vecs() > 1 ? 2 : 0) : 1;
  const uint32_t shift = group_vecs() == 1 || single_shift() ? 1 : 0;
  if (key_.table == DType::kQ4) return avx512_ ? 3 : group_vecs() > 1 ? 1 + shift : 1;
  return key_.table == DType::kQ2 ? 1 + shift : 0;
}

// With column groups, vectors outside a group (the row's tail, a remainder of whole vectors)
// take the shift-vector path where the layout has them (cheaper: Q4 6 and Q2 5 instructions
// instead of 8 and 10), except in max of more than 3 vectors, where the register would cost a
// vector per column block. Others (the remainders of uneven column blocks) load without it.
bool X86TableOps::single_shift() const {
  const int64_t vecs = (key_.dim + lanes_ - 1) / lanes_;
  return key_.dim % (lanes_ * group_vecs()) != 0 && (key_.mode != Mode::kMax || vecs <= 3);
}

// Q8 groups only where they add up (sum, mean, weighted sum: 8-10 % faster on the Zen 1 AVX2
// host); in max their two shuffle registers cost more than the loads save (4096 x 128: 5 %).
// AVX-512 BF16 groups of 2 (sum, mean, weighted sum): one 64-byte load, a shift and a mask per
// 32 columns where widening takes a vpmovzxwd and a shift per 16 (Intel AVX-512 host, 4096-row
// tables, 3 alternations: D = 128 sum 33.9 -> 24.1 us, weighted 35.5 -> 27.4, mean 40.6 -> 32.6,
// D = 32 sum 9.3 -> 7.9; max keeps single vectors: its blends would need the lanes in order).
int64_t X86TableOps::group_vecs() const {
  if (avx512_) return key_.table == DType::kBF16 && key_.mode != Mode::kMax ? 2 : 1;
  if (key_.table == DType::kQ8) return key_.mode == Mode::kMax ? 1 : 2;
  if (key_.table == DType::kQ4) return 2;
  return key_.table == DType::kQ2 ? 4 : 1;
}

bool X86TableOps::group_in_column_order() const { return key_.table == DType::kQ8; }

// bf16 rounding on AVX-512 (bf16_round_bits): to nearest even takes the low-bit mask, 0x7FFF and
// the quiet bit; half up 0x8000; a mean of a bf16 table rounds in place (the sum and the count:
// the high-half mask, which bf16 column groups also take the odd columns with). 1.0f: adds_by_fma.
// Built per vector they cost 5 instructions each, 3 of them shifts: a bf16
// mean's epilogue was 205 instructions a bag at D = 128, 87 of them shifts, 130 after. On the
// Zen 5 host (4096 x 128, 256 bags x 32, 2 runs) bf16 mean 97.9 -> 130-134 GB/s (FBGEMM's
// 0.89x -> 1.16-1.18x), sum 144 -> 159-165, weighted 154 -> 160-167, sum D = 512 114 -> 120.
std::array<bool, X86TableOps::kRcCount> X86TableOps::reg_consts_used() const {
  std::array<bool, kRcCount> used{};
  if (!avx512_) return used;
  const bool mean_bf16 = key_.mode == Mode::kMean && key_.table == DType::kBF16;
  const bool nearest = (key_.out == DType::kBF16 && !key_.bf16_out_half_up()) || mean_bf16;
  used[kRcLowBit] = used[kRcNearest] = used[kRcQuiet] = nearest;
  used[kRcHalfUp] = (key_.out == DType::kBF16 && key_.bf16_out_half_up()) || (mean_bf16 && key_.bf16_fbgemm_path());
  used[kRcHighHalf] = mean_bf16 || (key_.table == DType::kBF16 && group_vecs() > 1);
  used[kRcOne] = adds_by_fma();
  return used;
}

// AMD's cores add on two pipes (FADD) and fma on two others; vcvtph2ps and the bf16 widening's
// bit ops share the adders' side, so a 16-bit table's sum ran out of add pipes while the fma pipes
// idled (FBGEMM's own f16 weighted sum ran 1.3x its plain sum on the Zen 5 host). fma(x, 1, acc)
// rounds x + acc once, as vaddps does (x * 1 is exact); only which NaN of two comes out may
// differ, which the semantics leave open. Intel's 512-bit adds and fmas share ports, so there
// nothing moves. Zen 5, 4096-row tables, 256 bags x 32, two interleaved runs, GB/s: f16 sum
// D = 32 104-106 -> 117-118, D = 128 110-111 -> 133-135, D = 512 110 -> 117-120, f16 mean
// D = 128 101-102 -> 123-126; bf16 sum D = 128 162-166 -> 167-174 and mean 133 -> 142-154, but
// bf16 D = 32 121-125 -> 118-120 (two chains of fma's latency per row, bags in pairs), so bf16
// from 8 vectors a row. AVX2 keeps vaddps: Intel's AVX2 adders also run on a third port.
bool X86TableOps::adds_by_fma() const {
  if (!avx512_ || key_.mode == Mode::kMax || (key_.weighted && key_.mode == Mode::kSum)) return false;
  const int64_t vecs = (key_.dim + lanes_ - 1) / lanes_;
  return (key_.table == DType::kF16 && vecs >= 2) || (key_.table == DType::kBF16 && vecs >= 8);
}

void X86TableOps::add_term(const x86::Vec& acc, const x86::Vec& x) {
  if (adds_by_fma()) a_.vfmadd231ps(acc, x, reg_const(kRcOne));
  else a_.vaddps(acc, acc, x);
}

x86::Vec X86TableOps::reg_const(RegConst c) const {
  if (!reg_consts_used()[c]) internal("register constant not reserved");
  return vec(reg_consts_[c]);
}

X86TableNeeds X86TableOps::needs() const {
  uint32_t consts = consts_needed();
  for (bool used : reg_consts_used()) consts += used ? 1 : 0;
  uint32_t row = quantized() ? 2 : key_.weighted ? 1 : 0;
  X86TableNeeds n;
  n.vecs = consts + row + static_cast<uint32_t>(temps_needed());
  if (avx512_) {
    const bool nbit = key_.table == DType::kQ4 || key_.table == DType::kQ2;
    n.kregs = (tail_ != 0 ? (nbit ? 2 : 1) : 0) +
              ((key_.out == DType::kBF16 || (key_.mode == Mode::kMean && key_.table == DType::kBF16)) ? 1 : 0);
  }
  return n;
}

void X86TableOps::bind(std::vector<uint32_t> vec_ids, std::vector<uint32_t> k_ids) {
  const X86TableNeeds n = needs();
  if (vec_ids.size() != n.vecs || k_ids.size() != n.kregs) internal("bind: wrong register count");
  size_t next = 0;
  const size_t consts = consts_needed();
  consts_.assign(vec_ids.begin(), vec_ids.begin() + long(consts));
  next = consts;
  const std::array<bool, kRcCount> rounding = reg_consts_used();
  for (size_t c = 0; c < kRcCount; ++c)
    if (rounding[c]) reg_consts_[c] = vec_ids[next++];
  if (quantized()) scale_ = vec_ids[next++], bias_ = vec_ids[next++];
  else if (key_.weighted) weight_ = vec_ids[next++];
  temps_.assign(vec_ids.begin() + long(next), vec_ids.end());
  size_t k = 0;
  if (avx512_ && tail_ != 0) {
    k_load_ = x86::k(k_ids[k++]);
    k_store_ = (key_.table == DType::kQ4 || key_.table == DType::kQ2) ? x86::k(k_ids[k++]) : k_load_;
  }
  if (k < k_ids.size()) k_temp_ = x86::k(k_ids[k++]);
}

x86::Vec X86TableOps::vec(uint32_t id) const {
  return avx512_ ? x86::Vec(x86::zmm(id)) : x86::Vec(x86::ymm(id));
}

bool X86TableOps::full(int64_t cols) const {
  if (cols == lanes_) return true;
  if (cols < 1 || cols > lanes_) internal("columns out of range");
  if (avx512_ && cols != tail_) internal("AVX-512 partial vectors must be the row's tail");
  if ((key_.table == DType::kQ4 && cols % 2) || (key_.table == DType::kQ2 && cols % 4))
    internal("Q4/Q2 blocks hold whole bytes of codes");
  return false;
}

x86::Mem X86TableOps::weight_mem(const x86::Gp& psw, const x86::Gp& pos) const {
  return x86::ptr(psw, pos, key_.psw == DType::kF32 ? 2 : 1);
}

// Setup -----------------------------------------------------------------------------------------

// A vector of `lanes_` small constants (bytes[i] in lane i) built from immediates, as int32 or
// converted to f32.
void X86TableOps::load_byte_constant(uint32_t id, const uint8_t* bytes, bool to_float, const x86::Gp& scratch) {
  auto qword = [&](int64_t first) {
    uint64_t q = 0;
    for (int64_t i = 7; i >= 0; --i) q = q << 8 | bytes[first + i];
    return q;
  };
  const x86::Vec v = vec(id);
  a_.mov(scratch, qword(0));
  a_.vmovq(v.xmm(), scratch);
  if (avx512_) {
    a_.mov(scratch, qword(8));
    a_.vpinsrq(v.xmm(), v.xmm(), scratch, 1);
  }
  a_.vpmovzxbd(v, v.xmm());
  if (to_float) a_.vcvtdq2ps(v, v);
}

// Every dword lane of v = value.
void X86TableOps::broadcast_dword(const x86::Vec& v, uint32_t value, const x86::Gp& scratch) {
  a_.mov(scratch.r32(), value);
  a_.vmovd(v.xmm(), scratch.r32());
  a_.vpbroadcastd(v, v.xmm());
}

void X86TableOps::setup(const x86::Gp& scratch) {
  uint8_t shift[16], table[16], perm[16];
  if (key_.table == DType::kQ4 && !avx512_) {
    // The nibble mask, also for a byte or'ed with a copy (load_q4_single).
    if (group_vecs() > 1) broadcast_dword(cnst(0), 0x000F000F, scratch);
    for (int j = 0; j < 8; ++j) shift[j] = uint8_t(28 - 4 * j);  // nibble j to the top bits
    if (group_vecs() == 1 || single_shift()) load_byte_constant(consts_.back(), shift, false, scratch);
  } else if (key_.table == DType::kQ4) {
    for (int j = 0; j < 16; ++j) perm[j] = uint8_t(j / 8), shift[j] = uint8_t(4 * (j % 8)), table[j] = uint8_t(j);
    load_byte_constant(consts_[0], perm, false, scratch);
    load_byte_constant(consts_[1], shift, false, scratch);
    load_byte_constant(consts_[2], table, true, scratch);
  } else if (key_.table == DType::kQ8 && group_vecs() > 1) {
    // vpshufb picks, per 128-bit half, byte j of the half into dword lane j's low byte and
    // zeroes the rest (0x80): with the group's 16 codes in both halves, dword lane j of the first
    // shuffle is column j, of the second column 8 + j.
    for (int j = 0; j < 8; ++j) perm[j] = uint8_t(j);
    load_byte_constant(consts_[0], perm, false, scratch);
    broadcast_dword(cnst(1), 0x80808000, scratch);
    a_.vpor(cnst(0), cnst(0), cnst(1));  // columns 0-7
    broadcast_dword(cnst(1), 8, scratch);
    a_.vpaddd(cnst(1), cnst(1), cnst(0));  // columns 8-15
  } else if (key_.table == DType::kBF16 && avx512_ && group_vecs() > 1) {
    // The lanes that interleave even and odd columns back into columns 0-15 and 16-31
    // (vpermt2ps: bit 4 picks the odd vector); the odd columns' mask is kRcHighHalf.
    uint8_t lo[16], hi[16];
    for (int j = 0; j < 16; ++j) lo[j] = uint8_t(j / 2 + (j % 2) * 16), hi[j] = uint8_t(8 + j / 2 + (j % 2) * 16);
    load_byte_constant(consts_[0], lo, false, scratch);
    load_byte_constant(consts_[1], hi, false, scratch);
  } else if (key_.table == DType::kBF16 && !avx512_) {
    // vpshufb, per 128-bit half: dword lane j = bytes 2j, 2j + 1 of the half (bf16 element j of
    // the 8 broadcast to both halves) in its top half, zeros (0x80) below:
    // 0x01008080 + j * 0x02020000.
    for (int j = 0; j < 8; ++j) perm[j] = uint8_t(j);
    load_byte_constant(consts_[0], perm, false, scratch);
    a_.vpslld(temp(0), cnst(0), 17);
    a_.vpslld(cnst(0), cnst(0), 25);
    a_.vpaddd(cnst(0), cnst(0), temp(0));
    broadcast_dword(temp(0), 0x01008080, scratch);
    a_.vpaddd(cnst(0), cnst(0), temp(0));
  } else if (key_.table == DType::kQ2) {
    // vpermps reads the low 3 (ymm) or 4 (zmm) bits of each lane: a crumb and bits of the next,
    // which the table ignores.
    for (int j = 0; j < 16; ++j) shift[j] = uint8_t(2 * j), table[j] = uint8_t(j & 3);
    if (consts_.size() == 2) load_byte_constant(consts_[0], shift, false, scratch);
    load_byte_constant(consts_.back(), table, true, scratch);
  }
  static constexpr uint32_t kRegConstValues[kRcCount] = {1, 0x7FFF, 0x00400000, 0x8000, 0xFFFF0000u, 0x3F800000u};
  const std::array<bool, kRcCount> rounding = reg_consts_used();
  for (size_t c = 0; c < kRcCount; ++c)
    if (rounding[c]) broadcast_dword(vec(reg_consts_[c]), kRegConstValues[c], scratch);
  if (avx512_ && tail_ != 0) {
    const int64_t load_bits = key_.table == DType::kQ4 ? tail_ / 2 : key_.table == DType::kQ2 ? tail_ / 4 : tail_;
    a_.mov(scratch.r32(), (1u << load_bits) - 1);
    a_.kmovw(k_load_, scratch.r32());
    if (k_store_ != k_load_) {
      a_.mov(scratch.r32(), (1u << tail_) - 1);
      a_.kmovw(k_store_, scratch.r32());
    }
  }
}

// Row setup --------------------------------------------------------------------------------------

// dst = the weight at m, widened to f32, in every lane.
void X86TableOps::broadcast_weight(const x86::Vec& dst, const x86::Mem& m) {
  switch (key_.psw) {
    case DType::kF32: a_.vbroadcastss(dst, at(m, 0, 4)); break;
    case DType::kF16:
      a_.vpbroadcastw(dst.half(), at(m, 0, 2));
      a_.vcvtph2ps(dst, dst.half());
      break;
    case DType::kBF16:
      a_.vpbroadcastw(dst, at(m, 0, 2));
      a_.vpslld(dst, dst, 16);
      break;
    default: internal("per-sample weights must be f32, f16 or bf16");
  }
}

// Quantized rows: s = f32(w * scale) and b = f32(w * bias) (B4); max keeps scale and 0 + bias,
// the dequantization's terms.
void X86TableOps::row_setup(const x86::Mem& trailer, const x86::Mem* weight) {
  const bool weighted = key_.weighted && key_.mode == Mode::kSum;
  if (weighted && weight == nullptr) internal("row_setup: weighted key without a weight");
  if (!quantized()) {
    if (weighted) broadcast_weight(vec(weight_), *weight);
    return;
  }
  const x86::Vec s = vec(scale_), b = vec(bias_);
  const bool max = key_.mode == Mode::kMax;
  if (weighted) broadcast_weight(temp(0), *weight);
  if (key_.table == DType::kQ8) {
    // Broadcasts from memory are load-port work only; the weighted products are then one
    // vector multiply each (the same f32 product in every lane), where a scalar multiply and a
    // register broadcast took a shuffle-port op more each: weighted q8 D = 128 on the Intel
    // host 42.2 -> 40.5 us (4 A/B alternations, min of 5 each).
    a_.vbroadcastss(s, at(trailer, 0, 4));
    if (weighted) a_.vmulps(s, temp(0), s);  // w first, as the reference multiplies
    if (max) {
      const x86::Xmm w = temp(0).xmm();
      a_.vxorps(w, w, w);
      a_.vaddss(b.xmm(), w, at(trailer, 4, 4));  // 0 + bias: -0.0 becomes +0.0
      a_.vbroadcastss(b, b.xmm());
      return;
    }
    a_.vbroadcastss(b, at(trailer, 4, 4));
    if (weighted) a_.vmulps(b, temp(0), b);
    return;
  }
  // Q4/Q2: f16 scale and bias, widened exactly.
  a_.vpbroadcastw(s.half(), at(trailer, 0, 2));
  a_.vcvtph2ps(s, s.half());
  a_.vpbroadcastw(b.half(), at(trailer, 2, 2));
  a_.vcvtph2ps(b, b.half());
  if (weighted) {
    a_.vmulps(s, s, temp(0));
    a_.vmulps(b, b, temp(0));
  }
  if (max) {
    a_.vxorps(temp(0), temp(0), temp(0));
    a_.vaddps(b, temp(0), b);
  }
}

// Loads -----------------------------------------------------------------------------------------

// dst = `cols` elements of a float table as f32. Full f32 vectors are left to the caller's
// memory operand where it can take one (accumulate).
void X86TableOps::load_float_cols(const x86::Vec& dst, const x86::Mem& m, int64_t cols) {
  const bool whole = full(cols);
  const int64_t bytes = col_bytes(key_.table, cols);
  const uint32_t vbytes = static_cast<uint32_t>(lanes_ * 4);
  switch (key_.table) {
    case DType::kF32:
      if (whole) a_.vmovups(dst, at(m, 0, vbytes));
      else if (avx512_) a_.k(k_load_).z().vmovups(dst, at(m, 0, vbytes));
      else load_exact_wide(dst, m, bytes, bytes <= 16 ? dst : dst.id() == temps_[0] ? temp(1) : temp(0));
      return;
    case DType::kF16:
      if (whole) {
        a_.vcvtph2ps(dst, at(m, 0, vbytes / 2));
        return;
      }
      masked_load(dst.half(), m, 2, bytes);
      a_.vcvtph2ps(dst, dst.half());
      return;
    case DType::kBF16:
      if (whole && !avx512_) {  // a shuffle: on Zen 1 the zero-extension and the shift each run at half its rate
        a_.vbroadcasti128(dst, at(m, 0, 16));
        a_.vpshufb(dst, dst, cnst(0));
        return;
      }
      if (whole) {
        a_.vpmovzxwd(dst, at(m, 0, vbytes / 2));
      } else {
        masked_load(dst.half(), m, 2, bytes);
        a_.vpmovzxwd(dst, dst.half());
      }
      a_.vpslld(dst, dst, 16);
      return;
    default: internal("not a float table");
  }
}

// dst = the codes of `cols` columns as f32 lanes.
void X86TableOps::load_codes(const x86::Vec& dst, const x86::Mem& m, int64_t cols) {
  const bool whole = full(cols);
  const int64_t bytes = col_bytes(key_.table, cols);
  switch (key_.table) {
    case DType::kQ8:
      if (whole) a_.vpmovzxbd(dst, at(m, 0, uint32_t(lanes_)));
      else {
        masked_load(dst.xmm(), m, 1, bytes);
        a_.vpmovzxbd(dst, dst.xmm());
      }
      a_.vcvtdq2ps(dst, dst);  // codes 0..255: exact
      return;
    case DType::kQ4:
      if (group_vecs() > 1 && !single_shift()) return load_q4_single(dst, m, cols);
      // Column j is nibble j of the little-endian dword of its 8 columns.
      if (!avx512_) {
        if (whole) a_.vpbroadcastd(dst, at(m, 0, 4));
        else if (bytes == 1) a_.vpbroadcastb(dst, at(m, 0, 1));  // lanes >= cols read copies
        else if (bytes == 2) a_.vpbroadcastw(dst, at(m, 0, 2));
        else {
          load_exact(dst.xmm(), m, bytes);
          a_.vpbroadcastd(dst, dst.xmm());
        }
        a_.vpsllvd(dst, dst, vec(consts_.back()));  // nibble j to bits 28-31
        a_.vpsrld(dst, dst, 28);
        a_.vcvtdq2ps(dst, dst);
        return;
      }
      if (whole) a_.vmovq(dst.xmm(), at(m, 0, 8));
      else masked_load(dst.xmm(), m, 1, bytes);
      a_.vpermd(dst, cnst(0), dst);     // lanes 0-7: dword 0, lanes 8-15: dword 1
      a_.vpsrlvd(dst, dst, cnst(1));    // nibble j % 8 to the low bits
      a_.vpermps(dst, dst, cnst(2));    // low 4 bits -> 0.0f .. 15.0f
      return;
    case DType::kQ2:
      // Column j is crumb j of the little-endian word (AVX2) or dword (AVX-512) of its columns.
      if (group_vecs() > 1 && !single_shift()) return load_q2_single(dst, m, cols);
      if (avx512_) {
        if (whole) a_.vpbroadcastd(dst, at(m, 0, 4));
        else {
          masked_load(dst.xmm(), m, 1, bytes);
          a_.vpbroadcastd(dst, dst.xmm());
        }
      } else {
        if (whole) a_.vpbroadcastw(dst, at(m, 0, 2));
        else a_.vpbroadcastb(dst, at(m, 0, 1));  // 4 columns: one byte
      }
      a_.vpsrlvd(dst, dst, cnst(0));
      a_.vpermps(dst, dst, q2_table());  // low bits -> crumb as f32
      return;
    default: internal("not a quantized table");
  }
}

// Accumulate and load_value ---------------------------------------------------------------------

void X86TableOps::accumulate(uint32_t acc_id, const x86::Mem& m, int64_t cols) {
  const x86::Vec acc = vec(acc_id);
  const bool whole = full(cols);
  const bool weighted = key_.weighted && key_.mode == Mode::kSum;
  switch (key_.table) {
    case DType::kF32:
      if (whole || avx512_) {  // AVX-512 tails: masked lanes keep acc and fault-suppress
        const x86::Mem x = at(m, 0, uint32_t(lanes_ * 4));
        if (!whole) a_.k(k_load_);
        if (!weighted) {
          a_.vaddps(acc, acc, x);
        } else if (key_.weighted_terms_fused()) {
          a_.vfmadd231ps(acc, vec(weight_), x);
        } else {  // ATen's loop (padding_idx or aten_loop): f32(acc + f32(w * x))
          a_.vmulps(temp(0), vec(weight_), x);
          if (!whole) a_.k(k_load_);
          a_.vaddps(acc, acc, temp(0));
        }
        return;
      }
      [[fallthrough]];
    case DType::kF16:
    case DType::kBF16:
      load_float_cols(temp(0), m, cols);
      if (!weighted) {
        add_term(acc, temp(0));
      } else if (!key_.weighted_terms_fused()) {
        // ATen's loop (padding_idx or aten_loop): f32(acc + f32(w * x)); torch's FBGEMM kernel
        // fuses (the branch below). A bf16 product is exact only inside f32's range (bf16
        // has its exponents), so there an fma differs only where w * x overflows or underflows.
        a_.vmulps(temp(0), temp(0), vec(weight_));
        a_.vaddps(acc, acc, temp(0));
      } else {
        a_.vfmadd231ps(acc, vec(weight_), temp(0));  // f16 x f16 is exact in f32: fma == mul + add
      }
      return;
    case DType::kQ8:
    case DType::kQ4:
    case DType::kQ2:
      load_codes(temp(0), m, cols);
      a_.vaddps(acc, acc, vec(bias_));            // t = f32(acc + b)
      a_.vfmadd231ps(acc, temp(0), vec(scale_));  // fmaf(s, q, t): B4, FBGEMM's order
      return;
    default: internal("unknown table dtype");
  }
}

void X86TableOps::load_value(uint32_t dst_id, const x86::Mem& m, int64_t cols) {
  const x86::Vec dst = vec(dst_id);
  switch (key_.table) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: load_float_cols(dst, m, cols); return;
    case DType::kQ8:
    case DType::kQ4:
    case DType::kQ2:
      load_codes(dst, m, cols);
      a_.vfmadd213ps(dst, vec(scale_), vec(bias_));  // fmaf(scale, q, 0 + bias)
      return;
    default: internal("unknown table dtype");
  }
}

}  // namespace shapejit::jit

// The table-dtype part of the x86 embedding-bag kernels, for AVX-512 (zmm, k-mask tails) and
// AVX2 (ymm, exact-width tail moves): reading a column block of a row of any table dtype as f32
// lanes, the accumulate and dequantize arithmetic of quantized-tables-semantics.md (A1/A2, B4,
// beyond-ATen 3 and 5), and storing f32 lanes as the output dtype. The kernel's control flow
// (loops, padding, counts, max blend) stays with the caller; these ops only see registers and
// memory operands.
//
// Registers: the caller reserves needs().vecs vector and needs().kregs mask registers for the
// whole kernel and hands them over with bind(). Some hold constants from setup() (once per
// call), some the current row's scale and bias from row_setup(), the rest are clobbered by any
// op. The caller's own registers are only read or written as each op states.
//
// Memory: every `cols` operand is the address of the block's first column (base + index +
// displacement, e.g. [table + row + col_bytes(first_col)]); an op reads exactly the bytes of
// those `cols` columns, never a byte after them (AVX-512 through fault-suppressing masked moves,
// AVX2 through 1/2/4/8/16-byte moves: qemu faults on masked AVX2 lanes at a page end).
#pragma once

#include <asmjit/x86.h>

#include <array>
#include <cstdint>
#include <vector>

#include "jit/embag_kernel.hpp"
#include "jit/x86/vec_traits.hpp"

namespace shapejit::jit {

/// Registers X86TableOps needs, besides the caller's accumulators.
struct X86TableNeeds {
  uint32_t vecs = 0;   ///< vector registers (any ids; AVX-512 may use zmm16-31)
  uint32_t kregs = 0;  ///< AVX-512 mask registers (k1-k7)
};

/// Emits the dtype-specific steps for one EmbagKey (key.isa kAvx512 or kAvx2; table, out, psw,
/// weighted, mode and dim are read). Columns per vector: 16 (AVX-512) or 8 (AVX2); a block of
/// fewer columns is the row's last (dim % lanes columns): its masks are set up by setup().
/// Q4 blocks hold an even number of columns and Q2 blocks a multiple of 4 (the formats' D).
class X86TableOps {
 public:
  X86TableOps(const EmbagKey& key, asmjit::x86::Assembler& a);

  bool avx512() const { return avx512_; }
  int64_t lanes() const { return lanes_; }
  X86TableNeeds needs() const;
  /// Hands over exactly needs().vecs vector ids and needs().kregs mask ids (1..7).
  void bind(std::vector<uint32_t> vec_ids, std::vector<uint32_t> k_ids);

  /// Bytes of `cols` columns of a row or output of `dtype` (f32 4, f16/bf16 2, Q8 1, Q4 1/2,
  /// Q2 1/4 per column; Q4/Q2 rounded up, so col_bytes(t, D) is where the row's scale starts).
  static int64_t col_bytes(DType dtype, int64_t cols);
  /// Bytes from a row's column 0 to its scale (quantized tables).
  int64_t trailer_offset() const { return col_bytes(key_.table, key_.dim); }
  /// The per-sample weight of position `pos` in the array at `psw` (key.psw elements).
  asmjit::x86::Mem weight_mem(const asmjit::x86::Gp& psw, const asmjit::x86::Gp& pos) const;

  /// Once per kernel call, before any other op: constants and tail masks. Clobbers `scratch`.
  void setup(const asmjit::x86::Gp& scratch);
  /// Once per row (and column block) before accumulate/load_value of that row: quantized
  /// tables read scale and bias at `trailer` (the row's byte trailer_offset()); weighted sums
  /// read the weight at `*weight` (weight_mem). Float tables without weights emit nothing.
  void row_setup(const asmjit::x86::Mem& trailer, const asmjit::x86::Mem* weight);
  /// acc (f32 lanes, register id) += the row's `cols` columns at `cols_mem`, by the table's
  /// rule: f32(acc + x), fma(w, x, acc), or the quantized step acc = fmaf(s, q, f32(acc + b)).
  /// Lanes >= cols of acc get unspecified finite-or-not values (never stored).
  void accumulate(uint32_t acc, const asmjit::x86::Mem& cols_mem, int64_t cols);
  /// dst = the row's `cols` columns as f32 (quantized: the dequantized value of beyond-ATen 3).
  /// Lanes >= cols are unspecified.
  void load_value(uint32_t dst, const asmjit::x86::Mem& cols_mem, int64_t cols);

  /// Column groups (embag_table_ops_groups.cpp; AVX2 Q4 and Q2 in every mode, Q8 but in max;
  /// AVX-512 BF16 but in max: 64 bytes, even columns then odd ones):
  /// group_vecs() full vectors read as one load (1 = no groups): Q4 and Q2 8 bytes, each vector
  /// of a group holding one code position of each byte (Q4: even, odd columns; Q2: column
  /// 4i + k in lane i of vector k), so the caller's registers of a group (accumulators, running
  /// max and its ids) stay in that lane order until unpermute_group, once per bag; Q8 16 bytes
  /// shuffled into two vectors in column order (group_in_column_order).
  int64_t group_vecs() const;
  /// The group's registers are in column order already (unpermute_group does nothing).
  bool group_in_column_order() const;
  /// accs[k] += vector k of the group at `cols_mem`, by accumulate's rule.
  void accumulate_group(const std::vector<uint32_t>& accs, const asmjit::x86::Mem& cols_mem);
  void accumulate_bf16_group(const std::vector<uint32_t>& accs, const asmjit::x86::Mem& cols_mem);
  /// dst = load_value of vector `member` of the group at `cols_mem`; members must come in
  /// order with no other op of this class between them (the codes wait in a temporary).
  void load_value_group(uint32_t dst, const asmjit::x86::Mem& cols_mem, int64_t member);
  /// The group's registers back to column order (regs[k] = the group's columns 8k to 8k + 7).
  /// The 1-argument form uses the temporaries (sum, mean), the other the given scratch ids.
  void unpermute_group(const std::vector<uint32_t>& regs);
  void unpermute_group(const std::vector<uint32_t>& regs, uint32_t scratch0, uint32_t scratch1);
  /// Mean: div = (float)max(count, 1) broadcast, rounded to the table dtype for f16/bf16
  /// tables (A1 3). Clobbers `scratch`.
  void mean_divisor(uint32_t div, const asmjit::x86::Gp& count, const asmjit::x86::Gp& scratch);
  /// Mean: acc = acc / div, f16/bf16 tables rounding acc to the table dtype first; the store's
  /// own rounding then gives rnd(rnd(acc) / rnd(count)).
  void mean_finish(uint32_t acc, uint32_t div);
  /// Stores the first `cols` lanes of `src` (f32) at `dst` as key.out, rounded to nearest even
  /// (bf16 NaN -> a quiet NaN of the same sign, as ref/float16.hpp). `src` is left unchanged.
  void store_output(const asmjit::x86::Mem& dst, uint32_t src, int64_t cols);

 private:
  asmjit::x86::Vec vec(uint32_t id) const;
  asmjit::x86::Vec temp(size_t i) const { return vec(temps_.at(i)); }
  asmjit::x86::Vec cnst(size_t i) const { return vec(consts_.at(i)); }
  asmjit::x86::Vec q2_table() const { return vec(consts_.back()); }  // crumb -> f32 (Q2)
  bool quantized() const { return is_quantized_table(key_.table); }
  bool full(int64_t cols) const;  // checks cols: lanes, or the row's tail
  int64_t temps_needed() const;
  uint32_t consts_needed() const;
  bool single_shift() const;  // column groups: vectors outside groups use the shift vector
  void load_q4_single(const asmjit::x86::Vec& dst, const asmjit::x86::Mem& m, int64_t cols);
  void load_q2_single(const asmjit::x86::Vec& dst, const asmjit::x86::Mem& m, int64_t cols);

  // Loads (embag_table_ops.cpp).
  void load_byte_constant(uint32_t id, const uint8_t* bytes, bool to_float, const asmjit::x86::Gp& scratch);
  void broadcast_dword(const asmjit::x86::Vec& v, uint32_t value, const asmjit::x86::Gp& scratch);
  void broadcast_weight(const asmjit::x86::Vec& dst, const asmjit::x86::Mem& m);
  void load_float_cols(const asmjit::x86::Vec& dst, const asmjit::x86::Mem& m, int64_t cols);
  void load_codes(const asmjit::x86::Vec& dst, const asmjit::x86::Mem& m, int64_t cols);

  // Stores, rounding, exact-width moves (embag_table_ops_store.cpp).
  void load_exact(const asmjit::x86::Xmm& dst, const asmjit::x86::Mem& m, int64_t bytes);
  void load_exact_wide(const asmjit::x86::Vec& dst, const asmjit::x86::Mem& m, int64_t bytes,
                       const asmjit::x86::Vec& spare);
  void store_exact(const asmjit::x86::Mem& m, const asmjit::x86::Xmm& src, int64_t bytes);
  void masked_load(const asmjit::x86::Vec& dst, const asmjit::x86::Mem& m, int64_t elem_bytes, int64_t bytes);
  // temp(0) = rounded bits (bf16 in the high half); half_up: rule H6's FBGEMM rounding.
  void bf16_round_bits(const asmjit::x86::Vec& src, bool half_up);
  void round_in_place(const asmjit::x86::Vec& v, DType to, bool half_up = false);

  // Dword constants held in registers on AVX-512, set up once per call: bf16 rounding's (the
  // high-half mask also serves bf16 column groups), and 1.0f for sums added by fma (adds_by_fma).
  // AVX2, short of registers, builds the rounding constants where they are used.
  enum RegConst : size_t { kRcLowBit, kRcNearest, kRcQuiet, kRcHalfUp, kRcHighHalf, kRcOne, kRcCount };
  /// Which of them this key reads (none on AVX2).
  std::array<bool, kRcCount> reg_consts_used() const;
  asmjit::x86::Vec reg_const(RegConst c) const;
  /// Unweighted f16 / bf16 terms are added as fma(x, 1.0f, acc), the same f32 sum.
  bool adds_by_fma() const;
  /// acc += x (f32 lanes), an unweighted term: vaddps, or the fma of adds_by_fma.
  void add_term(const asmjit::x86::Vec& acc, const asmjit::x86::Vec& x);

  EmbagKey key_;
  asmjit::x86::Assembler& a_;
  bool avx512_;
  int64_t lanes_, tail_;
  std::vector<uint32_t> consts_, temps_;
  std::array<uint32_t, kRcCount> reg_consts_{};  // register ids of the used ones
  uint32_t scale_ = 0, bias_ = 0, weight_ = 0;  // row registers (scale_/bias_ quantized, weight_ float tables)
  asmjit::x86::KReg k_load_, k_store_, k_temp_;
};

}  // namespace shapejit::jit

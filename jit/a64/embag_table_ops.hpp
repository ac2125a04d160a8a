// NEON code for the table dtypes of the embedding-bag kernels (f32, f16, bf16 and the rowwise-
// quantized Q8/Q4/Q2 rows): how a run of a row's columns becomes f32 lanes, how those lanes
// join an accumulator, and how f32 results become the output dtype. The kernel skeleton owns the
// control flow (bags, rows, blocks, max compare/blend); this class owns every dtype-specific
// instruction, so a new dtype is one more case here. Arithmetic is the spec's, bitwise:
// docs/quantized-tables-semantics.md (A1/A2 f16/bf16, B1 row formats, B4 quantized sums,
// "Beyond ATen" 3 and 5 for quantized max/mean and f16/bf16 outputs).
//
// Conventions shared by every operation:
// - A vector holds 4 f32 lanes (columns); a call covers `cols` columns starting at a column
//   that is a multiple of 4, in ceil(cols / 4) vectors whose ids the caller passes. Lanes past
//   `cols` hold unspecified values and are never stored.
// - Memory is `base + offset` with a constant byte offset (base may be shifted by the caller;
//   offsets may be negative or large: the address goes through the gp scratch then).
// - Loads and stores touch exactly the bytes of their columns: never a byte past a row's last
//   byte (a 4-bit row of D = 2 is 5 bytes), never an output byte past `cols`.
// - FPCR is assumed at its Linux default: round to nearest even, no flush-to-zero, no
//   default-NaN. bf16 rounding is integer arithmetic (no BF16 extension needed).
#pragma once

#include <asmjit/core.h>
#include <asmjit/arm/a64assembler.h>

#include <cstdint>
#include <span>
#include <vector>

#include "jit/embag_kernel.hpp"

namespace shapejit::jit {

class A64TableOps {
 public:
  /// Registers the operations use beyond the caller's: vector and gp ids, all clobbered or held
  /// by the operations from bind() to the end of the kernel (constants and per-row scale, bias
  /// and weight live in some of them). The caller should give caller-saved registers first
  /// (v0-v7, v16-v31; AAPCS64 makes d8-d15 callee-saved).
  struct Needs {
    int vecs = 0;
    int gps = 0;
  };

  /// `key` supplies table, out, psw, weighted, mode and dim (dim fixes the quantized trailer's
  /// place: row_setup reads scale/bias at code_bytes(dim)).
  A64TableOps(const EmbagKey& key, asmjit::a64::Assembler& a);

  Needs needs() const;
  /// Hands over exactly needs().vecs vector ids and needs().gps gp ids.
  void bind(std::span<const uint32_t> vecs, std::span<const uint32_t> gps);
  /// Once, after bind() and before any loop: loads the constants some dtypes need (nibble and
  /// crumb masks, bf16 rounding constants). Emits nothing when none are needed.
  void emit_constants();

  /// Byte offset of column `col` (a multiple of 4) from the row start.
  int64_t col_offset(int64_t col) const;
  /// Bytes of `cols` columns starting at a multiple of 4 (Q4: ceil(cols/2), Q2: ceil(cols/4)).
  int64_t code_bytes(int64_t cols) const;
  /// Bytes of one row of key.dim columns, trailer included.
  int64_t row_bytes() const;
  /// Columns one load covers best (f32 8 through ldp, f16/bf16 8, quantized 16); accumulate and
  /// load_value take any count and split it themselves, this is a hint for block widths.
  int64_t group_cols() const;

  /// Weighted sums: the per-sample weight psw[pos] (key.psw: f32, f16 or bf16) as f32 in lane 0
  /// of the weight register. Call per position, before row_setup.
  void load_weight(const asmjit::a64::Gp& psw, const asmjit::a64::Gp& pos);
  /// Per row, before accumulate / load_value on it: quantized rows read scale and bias from the
  /// trailer of the row starting at base + row_offset (weighted: times the weight). Sum and mean
  /// prepare the accumulate step, max the dequantize step. Nothing for float tables.
  void row_setup(const asmjit::a64::Gp& base, int64_t row_offset);
  /// acc[k] (4 f32 lanes each) += the columns at base + offset, per the dtype's step:
  /// f32/f16/bf16 fadd (weighted: fma(w, x, acc) for f32 and f16, acc + f32(w * x) for bf16,
  /// whose products may overflow or underflow); quantized
  /// acc = fmaf(s, q, f32(acc + b)) for every bit width (B4): fadd, then fmla.
  void accumulate(std::span<const uint32_t> acc, const asmjit::a64::Gp& base, int64_t offset, int64_t cols);
  /// dst[k] = the columns as f32 values: widened f16/bf16, dequantized codes
  /// (fmaf(scale, q, 0 + bias)). For max.
  void load_value(std::span<const uint32_t> dst, const asmjit::a64::Gp& base, int64_t offset, int64_t cols);
  /// Mean, before store_output: divisor = (float)max(count, 1) (count: gp, a non-negative
  /// int64); f16/bf16 tables round the sum and the divisor to the table dtype first
  /// (q = rnd(acc), c = rnd(count), acc = q / c). The final rounding is store_output's.
  void mean_finish(std::span<const uint32_t> acc, const asmjit::a64::Gp& count);
  /// mean_finish in two steps, for callers that divide and store one vector at a time: the
  /// (rounded) divisor into every lane of the caller's vector `div` (kept by every operation
  /// until the caller reuses it), then acc = rnd(acc) / div per accumulator.
  void mean_divisor(uint32_t div, const asmjit::a64::Gp& count);
  void mean_divide(uint32_t acc, uint32_t div);
  /// The first `cols` lanes of src[k] to base + offset as key.out (f32, f16 RNE via fcvtn,
  /// bf16 RNE in integer arithmetic with NaN -> quiet NaN of the same sign).
  void store_output(std::span<const uint32_t> src, const asmjit::a64::Gp& base, int64_t offset, int64_t cols);

  /// Exact-width byte moves (n = 1..16) between lane 0.. of vector `v` and base + offset; the
  /// rest of a loaded vector is zero. Power-of-two sizes are one instruction, others add lane
  /// moves through the gp scratch. Public for the tests and the skeleton's own f32 moves.
  void load_bytes(uint32_t v, const asmjit::a64::Gp& base, int64_t offset, int64_t n);
  void store_bytes(uint32_t v, const asmjit::a64::Gp& base, int64_t offset, int64_t n);

 private:
  bool quantized() const;
  int temp_count() const;      // temporaries of this key (see the .cpp's register plan)
  bool half_table() const;     // f16 or bf16 table: mean rounds the sum and the count
  bool bf16_rounding() const;  // bf16 output or bf16 mean: the rounding constants exist
  asmjit::a64::Mem mem(const asmjit::a64::Gp& base, int64_t offset, int64_t size);
  void add_address(const asmjit::a64::Gp& dst, const asmjit::a64::Gp& base, int64_t offset);
  // One load group: `cols` (<= group_cols()) columns into f32 vectors, handed one by one to
  // `use(k, reg)`; `dst` (may be empty) names where vector k should land when the dtype can
  // widen straight into it.
  template <class Use>
  void load_group(const asmjit::a64::Gp& base, int64_t offset, int64_t cols, std::span<const uint32_t> dst, Use use);
  void codes_to_f32(uint32_t dst, int64_t k);  // vector k of the widened codes as f32
  void unpack_nibbles();
  void unpack_crumbs();
  void round_in_place(uint32_t v, bool half_up = false);  // rnd16 / rndbf (half_up: H6's) as f32 -> f32
  void narrow_bf16(uint32_t out, uint32_t src, bool upper, bool half_up);  // 4 lanes -> 4 bf16 (shrn / shrn2)

  EmbagKey key_;
  asmjit::a64::Assembler& a_;
  // Temporaries (t_[0..]), per-row values, constants; see needs() for which exist per dtype.
  std::vector<uint32_t> t_;
  uint32_t w_ = 0, s_ = 0, b_ = 0;          // weight lane 0; scale lane 0; bias broadcast
  uint32_t mask_ = 0, mask2_ = 0;           // nibble mask 0x0F (Q4, Q2), crumb mask 0x03 (Q2)
  uint32_t one_ = 0, half_ = 0;             // bf16 rounding: 1 and 0x7FFF per lane
  asmjit::a64::Gp g_;                       // address scratch
  bool bound_ = false;
};

}  // namespace shapejit::jit

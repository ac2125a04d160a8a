// X86EmbagEmitter: every primitive that depends on the table dtype (key.table), the output
// dtype (key.out) or the per-sample-weight dtype (key.psw). This is the one place a dtype plugs
// in: f32 tables are emitted here inline (memory operands of vaddps / vfmadd231ps); f16, bf16
// and the rowwise-quantized Q8/Q4/Q2 go through X86TableOps (jit/x86/embag_table_ops.hpp),
// which holds their loads, arithmetic (quantized-tables-semantics.md) and output rounding.
//
// Registers: the dtype's extra vector / k registers are taken in plan_table_scratch (called
// before the accumulator slots are assigned); X86TableOps needs no general-purpose register
// beyond kScratch (its setup runs once per call in load_args). Rows: form_row_address has made
// kRow the row's byte offset, so column `col` is row_mem(col) = [kWeight + kRow + row_disp(col)]
// and the row's trailer (quantized scale and bias) is row_mem(key().dim).
#include <cstddef>

#include "jit/x86/embag_emitter.hpp"

namespace shapejit::jit {

using namespace asmjit;

// f32: AVX2 tails of sum and mean are loaded into xtmp_ (and the part beyond 4 columns into
// xtmp2_); max loads into xtmp_ anyway (taken by plan_registers); a weighted sum that rounds
// its products (rounded_products) computes them in xtmp_. Other dtypes: what X86TableOps asks
// for.
void X86EmbagEmitter::plan_table_scratch() {
  if (key().table != DType::kF32) {
    ops_.emplace(key(), a_);
    const X86TableNeeds n = ops_->needs();
    std::vector<uint32_t> vec_ids, k_ids;
    for (uint32_t i = 0; i < n.vecs; ++i) vec_ids.push_back(vecs_.take());
    for (uint32_t i = 0; i < n.kregs; ++i) k_ids.push_back(kregs_.take());
    ops_->bind(std::move(vec_ids), std::move(k_ids));
    return;
  }
  const bool avx2_tail = !t_.avx512 && tail() != 0;
  if (key().mode == Mode::kMax || !(avx2_tail || rounded_products())) return;
  xtmp_ = vecs_.take();
  if (avx2_tail && tail() > 4) xtmp2_ = vecs_.take();
}

// A weighted f32 sum in ATen's loop's arithmetic (padding_idx, or the key's aten_loop):
// f32(acc + f32(w * x)) (ref::weighted_terms_fused); otherwise a term is one fma.
bool X86EmbagEmitter::rounded_products() const {
  return key().table == DType::kF32 && key().rounds_products();
}

// Weighted sum: the row's weight in every lane of bcast_ (f32), or X86TableOps' row registers
// (the weight; a quantized row's scale and bias, weighted).
// A quantized row's trailer is row_mem(dim), except inside a run-time block loop (kWeight has
// moved by the iterations done): there it is addressed from the table base, reloaded into
// kScratch (free here; no spare GPR in the worst keys), one load per row and block.
void X86EmbagEmitter::row_setup() {
  if (ops_) {
    const x86::Mem weight = ops_->weight_mem(psw_, gp(G::kPos));
    x86::Mem trailer = row_mem(key().dim);
    if (in_block_loop() && embag_row_trailer_bytes(key().table) > 0) {
      a_.mov(gp(G::kScratch), arg_mem(offsetof(EmbagKernelArgs, weight)));
      trailer = x86::ptr(gp(G::kScratch), gp(G::kRow), 0, static_cast<int32_t>(embag_col_bytes(key().table, key().dim)));
    }
    ops_->row_setup(trailer, key().weighted ? &weight : nullptr);
    return;
  }
  if (!key().weighted) return;
  a_.vbroadcastss(vec(bcast_), x86::dword_ptr(psw_, gp(G::kPos), 2));
}

// Column groups: aligned runs of group_vecs() full vectors of the block; their registers hold
// the group's lane order until the store (sum, max) or mean_finish (mean) of the group's head.
bool X86EmbagEmitter::group_head(const EmbagBlock& blk, int64_t j) const {
  const int64_t n = ops_ ? ops_->group_vecs() : 1;
  return n > 1 && !wide_ids() && j % n == 0 && j + n <= blk.num_vecs && !is_tail(blk.first_vec + j + n - 1);
}

// Emitted vectors are first_vec + j of their block (a block loop emits its first iteration).
int64_t X86EmbagEmitter::group_member(int64_t v, int64_t* j_out) const {
  for (const EmbagBlock& b : blocks()) {
    const int64_t j = v - b.first_vec;
    if (j < 0 || j >= b.num_vecs) continue;
    if (j_out) *j_out = j;
    const int64_t n = ops_ ? ops_->group_vecs() : 1;
    return n > 1 && group_head(b, j - j % n) ? j % n : -1;
  }
  return -1;
}

std::vector<uint32_t> X86EmbagEmitter::group_regs(int64_t j, bool ids) const {
  std::vector<uint32_t> regs;
  for (int64_t k = 0; k < ops_->group_vecs(); ++k) regs.push_back(ids ? ids_lo(j + k) : acc(j + k));
  return regs;
}

// acc += x (sum, mean) or acc = fma(w, x, acc) (weighted; rounded_products: the product in
// xtmp_, then an add), per vector of the block, with x a memory operand (AVX-512 tails: masked
// lanes keep +0.0 and fault-suppress); other dtypes by their rule (X86TableOps::accumulate).
// Column groups: one op per group (X86TableOps::accumulate_group).
void X86EmbagEmitter::accumulate(const EmbagBlock& blk) {
  if (ops_) {
    group_blk_ = blk;
    for (int64_t j = 0; j < blk.num_vecs; ++j) {
      const int64_t v = blk.first_vec + j;
      if (group_head(blk, j)) {
        ops_->accumulate_group(group_regs(j, false), row_mem(v * t_.lanes));
        j += ops_->group_vecs() - 1;
        continue;
      }
      ops_->accumulate(acc(j), row_mem(v * t_.lanes), vec_cols(v));
    }
    return;
  }
  group_blk_ = blk;  // the store's borrowed mean divisor (mean_divisor)
  const x86::Vec w = vec(bcast_);
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    const x86::Vec a = vec(acc(j));
    const x86::Mem x = row_mem(v * t_.lanes);
    if (is_tail(v) && !t_.avx512) {
      const x86::Vec tmp = vec(xtmp_);
      load_tail_avx2(tmp, x, tail(), x86::xmm(xtmp2_));
      if (rounded_products()) {
        a_.vmulps(tmp, tmp, w);
        a_.vaddps(a, a, tmp);
      } else if (key().weighted) {
        a_.vfmadd231ps(a, w, tmp);
      } else {
        a_.vaddps(a, a, tmp);
      }
      continue;
    }
    if (rounded_products()) {
      const x86::Vec product = vec(xtmp_);
      if (is_tail(v)) a_.k(k_tail_).z();
      a_.vmulps(product, w, x);
      if (is_tail(v)) a_.k(k_tail_);
      a_.vaddps(a, a, product);
      continue;
    }
    if (is_tail(v)) a_.k(k_tail_);
    if (key().weighted) a_.vfmadd231ps(a, w, x);
    else a_.vaddps(a, a, x);
  }
}

// Max: `cols` columns as f32 into dst (tails: the other lanes 0 for f32, unspecified for other
// dtypes; never stored). An AVX2 f32 tail needs a spare register: vcmp_ while loading
// max_input() (free until the compare), else xtmp_.
void X86EmbagEmitter::load_value(uint32_t dst, int64_t first_col, int64_t cols) {
  const x86::Mem x = row_mem(first_col);
  if (ops_) {
    const int64_t member = group_member(first_col / t_.lanes);
    if (member >= 0) return ops_->load_value_group(dst, x, member);
    return ops_->load_value(dst, x, cols);
  }
  const x86::Vec d = vec(dst);
  if (cols == t_.lanes) a_.vmovups(d, x);
  else if (t_.avx512) a_.k(k_tail_).z().vmovups(d, x);
  else load_tail_avx2(d, x, cols, vec(dst == xtmp_ ? vcmp_ : xtmp_).xmm());
}

// Mean: IEEE division by (float)max(count, 1), broadcast into bcast_ once per block (f16/bf16
// tables round the count and the sum to the table dtype first: X86TableOps). A borrowed divisor
// (borrow_divisor_: f32, no tail, every register an accumulator) lives in the block's last
// accumulator, whose sum is parked meanwhile in its own output columns (mean_finish).
void X86EmbagEmitter::mean_divisor() {
  if (ops_) return ops_->mean_divisor(bcast_, gp(G::kCount), gp(G::kScratch));
  const x86::Gp s = gp(G::kScratch), count = gp(G::kCount);
  const x86::Vec div = vec(borrow_divisor_ ? divisor_owner() : bcast_);
  if (borrow_divisor_) a_.vmovups(parked_sum(), div);
  a_.mov(s.r32(), 1);
  a_.cmp(count, 1);
  a_.cmovg(s, count);
  a_.vcvtsi2ss(div.xmm(), div.xmm(), s);
  a_.vbroadcastss(div, div.xmm());
}

// Mean with column groups: the group goes back to column order before its head is divided
// (the skeleton divides and stores one vector at a time).
void X86EmbagEmitter::mean_finish(uint32_t acc_id) {
  if (ops_) {
    for (int64_t j = 0; j < group_blk_.num_vecs; ++j)
      if (acc(j) == acc_id && group_head(group_blk_, j)) ops_->unpermute_group(group_regs(j, false));
    return ops_->mean_finish(acc_id, bcast_);
  }
  const uint32_t div = borrow_divisor_ ? divisor_owner() : bcast_;
  if (acc_id != div) {
    a_.vdivps(vec(acc_id), vec(acc_id), vec(div));
    return;
  }
  // The owner comes last: its sum back into the block's first accumulator (stored by now; a
  // one-vector block, e.g. the last of a block loop, has slot 1 unused), the quotient into the
  // owner, which the skeleton then stores.
  const x86::Vec sum = vec(acc(group_blk_.num_vecs > 1 ? 0 : 1));
  a_.vmovups(sum, parked_sum());
  a_.vdivps(vec(div), sum, vec(div));
}

uint32_t X86EmbagEmitter::divisor_owner() const { return acc(group_blk_.num_vecs - 1); }

x86::Mem X86EmbagEmitter::parked_sum() const {
  const int64_t col = (group_blk_.first_vec + group_blk_.num_vecs - 1) * t_.lanes;
  return x86::ptr(gp(G::kOut), static_cast<int32_t>(out_disp(col)));
}

// f32 output of an f32 table: the vector as is; tails store exactly their columns. Other
// tables: converted to key.out (rounded to nearest even) by X86TableOps.
void X86EmbagEmitter::store_output(uint32_t src, int64_t first_col, int64_t cols) {
  const x86::Mem dst = x86::ptr(gp(G::kOut), static_cast<int32_t>(out_disp(first_col)));
  if (ops_) {
    int64_t j = 0;
    if (key().mode != Mode::kMean && group_member(first_col / t_.lanes, &j) == 0) {
      if (key().mode == Mode::kMax) ops_->unpermute_group(group_regs(j, false), xtmp_, vcmp_);  // free here
      else ops_->unpermute_group(group_regs(j, false));
    }
    return ops_->store_output(dst, src, cols);
  }
  const x86::Vec s = vec(src);
  if (cols == t_.lanes) a_.vmovups(dst, s);
  else if (t_.avx512) a_.k(k_tail_).vmovups(dst, s);
  else store_tail_avx2(dst, s, cols, 4, x86::xmm(xtmp_));
}

}  // namespace shapejit::jit

// A64EmbagEmitter: every primitive that depends on the table dtype (key.table), the output
// dtype (key.out) or the per-sample-weight dtype (key.psw). f32 tables keep the code below
// (ldp pairs, fadd / fmla by element); f16, bf16 and the rowwise-quantized Q8/Q4/Q2 rows go
// through A64TableOps (jit/a64/embag_table_ops.hpp), which owns their loads, widening,
// dequantize steps, mean rounding and output conversions (docs: quantized-tables-semantics.md).
//
// Registers: the dtype's extra vector / gp scratch is taken in plan_table_scratch (called
// before the accumulator slots are assigned). Rows: form_row_address has put the row's address
// in rowp_, so column `col` is at rowp_ + row_disp(col) and the row's trailer (quantized scale
// and bias) at rowp_ + row_disp(key().dim).
//
// Max over a non-f32 table loads a group of vectors at once (16 columns of codes from one 8-byte
// load, 8 halves from one 16-byte load): the call for the group's first vector loads all of them,
// straight into the running-max registers for the bag's first row, else into stage_, where
// max_blend finds them; calls for the group's other vectors emit nothing.
#include <algorithm>
#include <cstddef>
#include <string>

#include "jit/a64/embag_emitter.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {
a64::Vec vq(uint32_t id) { return a64::v(id); }

[[noreturn]] void internal(const std::string& what) {
  throw Error(Status::kInternalError, "a64 embag: " + what);
}
}  // namespace

// f32 sum and mean load full vectors in pairs (ldp) into load0_ and load1_. Other dtypes:
// the operations' registers, and for max the staging registers of one group (load0_ first).
void A64EmbagEmitter::plan_table_scratch() {
  if (f32_table()) {
    if (key().mode != Mode::kMax) load1_ = vecs_.take();
    return;
  }
  ops_.emplace(key(), a_);
  const A64TableOps::Needs need = ops_->needs();
  std::vector<uint32_t> vecs, gps;
  for (int i = 0; i < need.vecs; ++i) vecs.push_back(vecs_.take());
  for (int i = 0; i < need.gps; ++i) gps.push_back(gp_.take());
  ops_->bind(vecs, gps);
  if (key().mode != Mode::kMax) return;
  stage_ = {load0_};
  for (int64_t k = 1; k < group_vecs(); ++k) stage_.push_back(vecs_.take());
}

// After the prologue: masks and rounding constants of the dtype (nothing for f32).
void A64EmbagEmitter::emit_table_constants() {
  if (ops_) ops_->emit_constants();
}

int64_t A64EmbagEmitter::group_vecs() const { return ops_ ? ops_->group_cols() / kLanes : 1; }

// The skeleton rebases kWeight to each block's first column, so base_col() names the block; the
// 64-bit-id path has its own block plan (mirrored in plan_registers).
const EmbagBlock& A64EmbagEmitter::block_at(int64_t first_vec) const {
  for (const EmbagBlock& b : wide_ids() ? wide_blocks_ : blocks())
    if (b.first_vec == first_vec) return b;
  internal("no column block starts at vector " + std::to_string(first_vec));
}

uint32_t A64EmbagEmitter::max_x(int64_t j) const {
  return stage_.empty() ? load0_ : stage_[size_t(j % group_vecs())];
}

// Weighted sum: the row's weight in lane 0 of bcast_ (f32) or of the operations' weight
// register; quantized rows: scale and bias from the trailer. Inside a run-time block loop
// kWeight (and so rowp_) moves right each time while the trailer stays, so the row's start
// comes from the unshifted base there.
void A64EmbagEmitter::row_setup() {
  if (!f32_table()) {
    if (key().weighted) ops_->load_weight(psw_, gp(G::kPos));
    if (!table_.isValid() || block_at(base_col() / kLanes).repeat == 1)
      return ops_->row_setup(rowp_, row_disp(0));
    a_.madd(gp(G::kScratch), gp(G::kRow), gp(G::kStride), table_);
    return ops_->row_setup(gp(G::kScratch), 0);
  }
  if (!key().weighted) return;
  a_.ldr(a64::s(bcast_), a64::ptr(psw_, gp(G::kPos), a64::lsl(2)));
}

// acc += x (fadd acc, acc, x) or acc = fmaf(w, x, acc) (fmla acc, x, w[0]) per vector of the
// block; in ATen's loop's arithmetic (padding_idx, or the key's aten_loop) a weighted term rounds
// its product first (fmul x, x, w[0], then fadd: ref::weighted_terms_fused). f32: full vectors load in pairs (ldp) into the two load registers;
// the tail loads exactly its columns. Other dtypes: the operations load the block's columns in
// groups.
void A64EmbagEmitter::accumulate(const EmbagBlock& blk) {
  if (!f32_table()) {
    std::vector<uint32_t> accs;
    for (int64_t j = 0; j < blk.num_vecs; ++j) accs.push_back(acc(j));
    const int64_t first_col = blk.first_vec * kLanes;
    const int64_t cols = std::min(key().dim, first_col + blk.num_vecs * kLanes) - first_col;
    ops_->accumulate(accs, rowp_, row_disp(first_col), cols);
    return;
  }
  const a64::Vec w = vq(bcast_);
  const bool fused = key().weighted_terms_fused();
  auto add = [&](int64_t j, uint32_t x) {
    const a64::Vec a = vq(acc(j)).s4();
    if (!key().weighted) {
      a_.fadd(a, a, vq(x).s4());
    } else if (fused) {
      a_.fmla(a, vq(x).s4(), w.s(0));
    } else {
      a_.fmul(vq(x).s4(), vq(x).s4(), w.s(0));
      a_.fadd(a, a, vq(x).s4());
    }
  };
  for (int64_t j = 0; j < blk.num_vecs;) {
    const int64_t v = blk.first_vec + j;
    const int64_t off = row_disp(v * kLanes);
    if (is_tail(v)) {
      load_cols(load0_, rowp_, off, tail());
      add(j, load0_);
      ++j;
    } else if (j + 1 < blk.num_vecs && !is_tail(v + 1) && off <= 1008) {
      a_.ldp(vq(load0_), vq(load1_), a64::ptr(rowp_, static_cast<int32_t>(off)));
      add(j, load0_);
      add(j + 1, load1_);
      j += 2;
    } else {
      a_.ldr(vq(load0_), a64::ptr(rowp_, static_cast<int32_t>(off)));
      add(j, load0_);
      ++j;
    }
  }
}

// Max: `cols` columns as f32 into dst (tails: the other lanes 0 for f32). dst is acc(j) for the
// bag's first row and max_input() for the others (see the file comment for groups).
void A64EmbagEmitter::load_value(uint32_t dst, int64_t first_col, int64_t cols) {
  if (f32_table()) return load_cols(dst, rowp_, row_disp(first_col), cols);
  const int64_t block_first = base_col() / kLanes, j = first_col / kLanes - block_first;
  const int64_t gv = group_vecs();
  if (j % gv != 0) return;  // loaded with its group
  const int64_t n = std::min(gv, block_at(block_first).num_vecs - j);
  const int64_t group_cols = std::min(key().dim, first_col + n * kLanes) - first_col;
  if (cols > group_cols) internal("load_value: columns beyond the group");
  std::vector<uint32_t> regs;
  for (int64_t k = 0; k < n; ++k) regs.push_back(dst == max_input() ? stage_[size_t(k)] : acc(j + k));
  ops_->load_value(regs, rowp_, row_disp(first_col), group_cols);
}

// Mean: IEEE division by (float)max(count, 1), in every lane of bcast_ once per block (f16/bf16
// tables: the count and the sum rounded to the table dtype first).
void A64EmbagEmitter::mean_divisor() {
  if (!f32_table()) return ops_->mean_divisor(bcast_, gp(G::kCount));
  const a64::Gp s = gp(G::kScratch), count = gp(G::kCount);
  a_.cmp(count, Imm(1));
  a_.csinc(s, count, a64::xzr, Imm(uint32_t(a64::CondCode::kGT)));  // count > 1 ? count : 1
  a_.scvtf(a64::s(bcast_), s);
  a_.dup(vq(bcast_).s4(), vq(bcast_).s(0));
}

void A64EmbagEmitter::mean_finish(uint32_t acc_id) {
  if (!f32_table()) return ops_->mean_divide(acc_id, bcast_);
  a_.fdiv(vq(acc_id).s4(), vq(acc_id).s4(), vq(bcast_).s4());
}

// f32 output: exactly the columns' bytes; f16 / bf16 output: converted by the operations.
void A64EmbagEmitter::store_output(uint32_t src, int64_t first_col, int64_t cols) {
  if (key().out == DType::kF32)
    return store_cols(src, gp(G::kOut), out_disp(first_col), cols * 4, gp(G::kScratch));
  if (!ops_) internal("an f16/bf16 output needs the table operations");
  const uint32_t one[] = {src};
  ops_->store_output(one, gp(G::kOut), out_disp(first_col), cols);
}

}  // namespace shapejit::jit

// A64EmbagEmitter, max mode: row ids dup'ed into id lanes (when the key has index outputs),
// copied with the first row, and blended where a later row is strictly greater (fcmgt:
// ordered, a NaN operand compares false; bit: insert where the mask is set).
#include <algorithm>
#include <cstddef>

#include "jit/a64/embag_emitter.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {
a64::Vec vq(uint32_t id) { return a64::v(id); }
}  // namespace

// 32-bit lanes take the low half of the id, exact because the skeleton sends ids >= 2^31 to
// the path with 64-bit lanes.
void A64EmbagEmitter::broadcast_row_id() {
  const a64::Vec rid = vq(bcast_);
  if (wide_ids()) a_.dup(rid.d2(), gp(G::kId));
  else a_.dup(rid.s4(), a64::w(gp(G::kId).id()));
}

void A64EmbagEmitter::copy_row_id(int64_t j, int64_t v) {
  a_.mov(vq(ids_lo(j)).b16(), vq(bcast_).b16());
  if (id_regs_of(v) == 2) a_.mov(vq(ids_hi(j)).b16(), vq(bcast_).b16());
}

// With 64-bit ids the 4 x 32-bit mask is sign-extended into two 2 x 64-bit masks, one per id
// register.
void A64EmbagEmitter::max_blend(int64_t j, int64_t v) {
  const a64::Vec x = vq(max_x(j)), m = vq(mask_), val = vq(acc(j));
  a_.fcmgt(m.s4(), x.s4(), val.s4());
  a_.bit(val.b16(), x.b16(), m.b16());
  if (!tracks_ids()) return;
  const a64::Vec rid = vq(bcast_), lo = vq(ids_lo(j));
  if (!wide_ids()) {
    a_.bit(lo.b16(), rid.b16(), m.b16());
    return;
  }
  const a64::Vec wide = vq(widen_);
  a_.sxtl(wide.d2(), m.s2());
  a_.bit(lo.b16(), rid.b16(), wide.b16());
  if (id_regs_of(v) == 2) {
    a_.sxtl2(wide.d2(), m.s4());
    a_.bit(vq(ids_hi(j)).b16(), rid.b16(), wide.b16());
  }
}

// max_indices[bag][col] from the id registers: 4 x 32-bit lanes stored like the values, or
// 64-bit elements two columns at a time: zero-extended from 32-bit lanes (uxtl/uxtl2 into
// load0_, free at store time), or the wide path's 2 x 64-bit registers as they are.
void A64EmbagEmitter::store_max_ids(const EmbagBlock& blk) {
  // The element offset of kOut (bag * dim + the block's column) locates the ids too, once a
  // strided output's gaps before the bag (bag * gap) are taken off: max_indices is dense.
  const a64::Gp s = gp(G::kScratch);
  load_field(s, offsetof(EmbagKernelArgs, output));
  a_.sub(s, gp(G::kOut), s);
  if (out_row_gap_bytes() != 0) {
    a_.mov(rowp_, Imm(uint64_t(out_row_gap_bytes())));  // rowp_ is free until max_indices below
    a_.msub(s, gp(G::kBag), rowp_, s);
  }
  const int64_t out_elem = embag_col_bytes(key().out, 1);
  if (out_size() == 2 * out_elem) a_.add(s, s, s);
  else if (out_size() > out_elem) a_.lsl(s, s, Imm(out_size() == 4 * out_elem ? 2 : 3));
  load_field(rowp_, offsetof(EmbagKernelArgs, max_indices));
  a_.add(s, s, rowp_);
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    const int64_t col = v * kLanes - base_col(), cols = vec_cols(v);
    if (out_size() == 4) {
      store_cols(ids_lo(j), s, col * 4, cols * 4, rowp_);
      continue;
    }
    uint32_t lo = ids_lo(j), hi = wide_ids() ? ids_hi(j) : load0_;
    if (!wide_ids()) a_.uxtl(vq(load0_).d2(), vq(lo).s2()), lo = load0_;
    store_cols(lo, s, col * 8, std::min<int64_t>(cols, 2) * 8, rowp_);
    if (cols <= 2) continue;
    if (!wide_ids()) a_.uxtl2(vq(load0_).d2(), vq(ids_lo(j)).s4());
    store_cols(hi, s, col * 8 + 16, (cols - 2) * 8, rowp_);
  }
}

}  // namespace shapejit::jit

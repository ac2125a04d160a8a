// A64EmbagEmitter, max mode: the first row of a bag is copied, later rows replace lanes where
// they are strictly greater (fcmgt: ordered, a NaN operand compares false), and the winning row
// ids are blended alongside with the same mask (bit: insert where the mask is set).
#include <cstddef>

#include "jit/a64/embag_emitter.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {
a64::Vec vq(uint32_t id) { return a64::v(id); }
}  // namespace

// Step: max, first row of the bag: copied as is (keeps -0.0 and NaN), with its row id.
void A64EmbagEmitter::emit_max_first(const Block& blk) {
  const a64::Vec rid = vq(bcast_);
  if (wide_ids()) a_.dup(rid.d2(), row_);
  else a_.dup(rid.s4(), a64::w(row_.id()));  // int32 indices: the id fits 32 bits
  a_.madd(rowp_, row_, stride_, weight_);
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    load_cols(acc_[size_t(j)], rowp_, vec_offset(v), vec_cols(v));
    a_.mov(vq(ids_lo_[size_t(j)]).b16(), rid.b16());
    if (id_regs_of(v) == 2) a_.mov(vq(ids_hi_[size_t(j)]).b16(), rid.b16());
  }
}

// Step: max, later rows: lanes where x > current take x and the row id. With 64-bit ids the
// 4 x 32-bit mask is sign-extended into two 2 x 64-bit masks, one per id register.
void A64EmbagEmitter::emit_max_update(const Block& blk) {
  const a64::Vec rid = vq(bcast_), x = vq(load0_), m = vq(mask_);
  if (wide_ids()) a_.dup(rid.d2(), row_);
  else a_.dup(rid.s4(), a64::w(row_.id()));
  a_.madd(rowp_, row_, stride_, weight_);
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    const a64::Vec val = vq(acc_[size_t(j)]), lo = vq(ids_lo_[size_t(j)]);
    load_cols(load0_, rowp_, vec_offset(v), vec_cols(v));
    a_.fcmgt(m.s4(), x.s4(), val.s4());
    a_.bit(val.b16(), x.b16(), m.b16());
    if (!wide_ids()) {
      a_.bit(lo.b16(), rid.b16(), m.b16());
      continue;
    }
    const a64::Vec wide = vq(widen_);
    a_.sxtl(wide.d2(), m.s2());
    a_.bit(lo.b16(), rid.b16(), wide.b16());
    if (id_regs_of(v) == 2) {
      a_.sxtl2(wide.d2(), m.s4());
      a_.bit(vq(ids_hi_[size_t(j)]).b16(), rid.b16(), wide.b16());
    }
  }
}

}  // namespace shapejit::jit

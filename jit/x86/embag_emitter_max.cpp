// X86EmbagEmitter, max mode: the first row of a bag is copied, later rows replace lanes where
// they are strictly greater (ordered compare), and the winning row ids are blended alongside.
#include <cstddef>

#include "jit/x86/embag_emitter.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {
constexpr uint32_t kCmpGtOq = 0x1E;  // _CMP_GT_OQ: ordered, a NaN operand compares false
}  // namespace

// Broadcasts the current row id to every lane of bcast_ (32- or 64-bit lanes) straight from
// the index array: a load-broadcast, no GPR-to-vector move. 32-bit lanes of an int64 index
// take its low half (little endian), exact because those ids are below 2^31.
void X86EmbagEmitter::broadcast_row_id() {
  const uint32_t shift = key_.index == DType::kI32 ? 2 : 3;
  if (wide_ids_) a_.vpbroadcastq(vec(bcast_), x86::qword_ptr(indices_, pos_, shift));
  else a_.vpbroadcastd(vec(bcast_), x86::dword_ptr(indices_, pos_, shift));
}

// Step: max, first row of the bag: copied as is (keeps -0.0 and NaN).
void X86EmbagEmitter::emit_max_first(const Block& blk) {
  broadcast_row_id();
  a_.imul(row_, stride_);
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    const x86::Vec val = vec(acc_[size_t(j)]);
    if (!is_tail(v)) a_.vmovups(val, row_mem(v));
    else if (t_.avx512) a_.k(k_tail_).z().vmovups(val, row_mem(v));
    else load_tail_avx2(val, row_mem(v), x86::xmm(xtmp_));
    a_.vmovaps(vec(idx_lo_[size_t(j)]), vec(bcast_));
    if (index_regs_of(v) == 2) a_.vmovaps(vec(idx_hi_[size_t(j)]), vec(bcast_));
  }
}

// Step: max, later rows: lanes where x > current (ordered) take x and the row id.
// vmaxps(x, val) is exactly `x > val ? x : val` (a NaN or an equal zero in either operand
// returns val), so the value chain is one 2-cycle op per row; the compare only feeds the id
// blend and stays off that chain.
void X86EmbagEmitter::emit_max_update(const Block& blk) {
  broadcast_row_id();
  a_.imul(row_, stride_);
  const x86::Vec x = vec(xtmp_), rid = vec(bcast_);
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    const x86::Vec val = vec(acc_[size_t(j)]), lo = vec(idx_lo_[size_t(j)]);
    const bool two = index_regs_of(v) == 2;
    if (!is_tail(v)) a_.vmovups(x, row_mem(v));
    else if (t_.avx512) a_.k(k_tail_).z().vmovups(x, row_mem(v));
    else load_tail_avx2(x, row_mem(v), vec(vcmp_).xmm());  // vcmp_ is free until the compare
    if (t_.avx512) {
      a_.vcmpps(k_cmp_, x, val, kCmpGtOq);
      a_.vmaxps(val, x, val);
      if (!wide_ids_) {
        a_.k(k_cmp_).vmovdqa32(lo, rid);
      } else {
        a_.k(k_cmp_).vmovdqa64(lo, rid);
        if (two) {
          a_.kshiftrw(k_hi_, k_cmp_, 8);
          a_.k(k_hi_).vmovdqa64(vec(idx_hi_[size_t(j)]), rid);
        }
      }
      continue;
    }
    const x86::Vec m = vec(vcmp_);
    a_.vcmpps(m, x, val, kCmpGtOq);
    a_.vmaxps(val, x, val);
    if (!wide_ids_) {
      a_.vblendvps(lo, lo, rid, m);
      continue;
    }
    const x86::Vec wide = vec(widen_);  // 32-bit lane mask -> two 64-bit lane masks
    a_.vpmovsxdq(wide, m.xmm());
    a_.vblendvpd(lo, lo, rid, wide);
    if (two) {
      a_.vextracti128(wide.xmm(), m, 1);
      a_.vpmovsxdq(wide, wide.xmm());
      a_.vblendvpd(vec(idx_hi_[size_t(j)]), vec(idx_hi_[size_t(j)]), rid, wide);
    }
  }
}

}  // namespace shapejit::jit

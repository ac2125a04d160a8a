// X86EmbagEmitter, max mode: row ids broadcast into id lanes (when the key has index outputs),
// copied with the first row, and blended where a later row is strictly greater (ordered
// compare). Without ids a row costs one vmaxps per vector.
#include <cstddef>

#include "jit/x86/embag_emitter.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {
constexpr uint32_t kCmpGtOq = 0x1E;  // _CMP_GT_OQ: ordered, a NaN operand compares false
}  // namespace

// Broadcasts the current id to every lane of bcast_ (32- or 64-bit lanes) straight from the
// index array: a load-broadcast, no GPR-to-vector move. 32-bit lanes of an int64 index take its
// low half (little endian), exact because those ids are below 2^31.
void X86EmbagEmitter::broadcast_row_id() {
  const uint32_t shift = key().index == DType::kI32 ? 2 : 3;
  const x86::Gp idx = gp(G::kIndices), pos = gp(G::kPos);
  if (wide_ids()) a_.vpbroadcastq(vec(bcast_), x86::qword_ptr(idx, pos, shift));
  else a_.vpbroadcastd(vec(bcast_), x86::dword_ptr(idx, pos, shift));
}

void X86EmbagEmitter::copy_row_id(int64_t j, int64_t v) {
  a_.vmovaps(vec(ids_lo(j)), vec(bcast_));
  if (id_regs_of(v) == 2) a_.vmovaps(vec(ids_hi(j)), vec(bcast_));
}

// vmaxps(x, val) is exactly `x > val ? x : val` (a NaN or an equal zero in either operand
// returns val), so the value chain is one 2-cycle op per row; the compare only feeds the id
// blend and stays off that chain.
void X86EmbagEmitter::max_blend(int64_t j, int64_t v) {
  const x86::Vec x = vec(xtmp_), val = vec(acc(j));
  if (!tracks_ids()) {
    a_.vmaxps(val, x, val);
    return;
  }
  const x86::Vec rid = vec(bcast_), lo = vec(ids_lo(j));
  const bool two = id_regs_of(v) == 2;
  if (t_.avx512) {
    a_.vcmpps(k_cmp_, x, val, kCmpGtOq);
    a_.vmaxps(val, x, val);
    if (!wide_ids()) {
      a_.k(k_cmp_).vmovdqa32(lo, rid);
    } else {
      a_.k(k_cmp_).vmovdqa64(lo, rid);
      if (two) {
        a_.kshiftrw(k_hi_, k_cmp_, 8);
        a_.k(k_hi_).vmovdqa64(vec(ids_hi(j)), rid);
      }
    }
    return;
  }
  const x86::Vec m = vec(vcmp_);
  a_.vcmpps(m, x, val, kCmpGtOq);
  a_.vmaxps(val, x, val);
  if (!wide_ids()) {
    a_.vblendvps(lo, lo, rid, m);
    return;
  }
  const x86::Vec wide = vec(widen_);  // 32-bit lane mask -> two 64-bit lane masks
  a_.vpmovsxdq(wide, m.xmm());
  a_.vblendvpd(lo, lo, rid, wide);
  if (two) {
    a_.vextracti128(wide.xmm(), m, 1);
    a_.vpmovsxdq(wide, wide.xmm());
    a_.vblendvpd(vec(ids_hi(j)), vec(ids_hi(j)), rid, wide);
  }
}

}  // namespace shapejit::jit

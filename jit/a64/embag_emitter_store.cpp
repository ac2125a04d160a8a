// A64EmbagEmitter: exact-width vector moves (tails never read or write past their columns).
#include <cstddef>

#include "jit/a64/embag_emitter.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {
a64::Vec vq(uint32_t id) { return a64::v(id); }  // the whole 128-bit register (q form)
}  // namespace

// `cols` floats (1..4) from base + offset into vector `dst`, never reading past them.
void A64EmbagEmitter::load_cols(uint32_t dst, const a64::Gp& base, int64_t offset, int64_t cols) {
  const int32_t off = static_cast<int32_t>(offset);
  switch (cols) {
    case 4: a_.ldr(vq(dst), a64::ptr(base, off)); return;
    case 1: a_.ldr(a64::s(dst), a64::ptr(base, off)); return;  // clears lanes 1-3
    case 2: a_.ldr(a64::d(dst), a64::ptr(base, off)); return;  // clears lanes 2-3
    default:
      a_.ldr(a64::d(dst), a64::ptr(base, off));
      add_imm(gp(G::kScratch), base, offset + 8);  // lane loads take no offset
      a_.ld1(vq(dst).s(2), a64::ptr(gp(G::kScratch)));
  }
}

// The first `bytes` (4, 8, 12 or 16) of vector `src` to base + offset.
void A64EmbagEmitter::store_cols(uint32_t src, const a64::Gp& base, int64_t offset, int64_t bytes,
                                 const a64::Gp& lane_addr) {
  const int32_t off = static_cast<int32_t>(offset);
  switch (bytes) {
    case 16: a_.str(vq(src), a64::ptr(base, off)); return;
    case 4: a_.str(a64::s(src), a64::ptr(base, off)); return;
    case 8: a_.str(a64::d(src), a64::ptr(base, off)); return;
    default:
      a_.str(a64::d(src), a64::ptr(base, off));
      a_.add(lane_addr, base, Imm(uint64_t(offset + 8)));
      a_.st1(vq(src).s(2), a64::ptr(lane_addr));
  }
}

}  // namespace shapejit::jit

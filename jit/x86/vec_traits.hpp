// What differs between the two x86 vector widths, read from jit/isa.hpp's table: shared by the
// embedding-bag and GEMM emitters, whose few instructions that differ beyond it branch on
// `avx512` (the tail kind).
#pragma once

#include <cstdint>

#include "jit/isa.hpp"

namespace shapejit::jit {

struct X86VecTraits {
  bool avx512;        ///< zmm + k-mask tails (TailMask::kOpmask), else ymm + vmaskmovps tails
  int64_t lanes;      ///< floats per vector (16 or 8)
  int64_t bytes;      ///< bytes per vector (64 or 32)
  uint32_t num_regs;  ///< vector registers (32 or 16)

  /// Traits of an x86 `isa`.
  static constexpr X86VecTraits of(Isa isa) {
    const IsaTraits& t = isa_traits(isa);
    return {t.tail == TailMask::kOpmask, t.lanes, t.vector_bytes(), uint32_t(t.vector_registers)};
  }
};

}  // namespace shapejit::jit

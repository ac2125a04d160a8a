// The AArch64 software prefetch the NEON emitters use. asmjit 1.9's a64 assembler has no PRFM,
// so the instruction word is built here and embedded.
#pragma once

#include <cstdint>
#include <string>

#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

/// The machine word of `prfm pldl1keep, [x<base_id>, #offset]` (offset a multiple of 8 in
/// [0, 32760]): PRFM (immediate, unsigned offset) = 0xF9800000 | imm12 << 10 | Rn << 5 | prfop,
/// with imm12 = offset / 8 and prfop PLDL1KEEP = 0b00000. Throws kInternalError otherwise.
inline uint32_t encode_prfm_pldl1keep(uint32_t base_id, int64_t offset) {
  if (offset < 0 || offset > 32760 || offset % 8 != 0 || base_id > 30)
    throw Error(Status::kInternalError, "prfm: offset " + std::to_string(offset) + " or register x" +
                                            std::to_string(base_id) + " cannot be encoded");
  return 0xF9800000u | uint32_t(offset / 8) << 10 | base_id << 5;
}

}  // namespace shapejit::jit

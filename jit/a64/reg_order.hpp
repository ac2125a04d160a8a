// The order in which the AArch64 emitters hand out registers: caller-saved ones first, so small
// kernels need no saves, and the AAPCS64 callee-saved ones last (the frame saves those taken).
#pragma once

#include <cstdint>
#include <vector>

namespace shapejit::jit {

/// x0-x17 (x18 is the platform register, x29 the frame pointer), then the callee-saved x19-x28,
/// and x30 last when `with_link_register` (kernels that call out take it explicitly).
inline std::vector<uint32_t> a64_gp_order(bool with_link_register) {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i <= 17; ++i) ids.push_back(i);
  for (uint32_t i = 19; i <= 28; ++i) ids.push_back(i);
  if (with_link_register) ids.push_back(30);
  return ids;
}

/// v0-v7 and v16-v31, then v8-v15, whose low halves (d8-d15) are callee-saved.
inline std::vector<uint32_t> a64_vec_order() {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i <= 7; ++i) ids.push_back(i);
  for (uint32_t i = 16; i <= 31; ++i) ids.push_back(i);
  for (uint32_t i = 8; i <= 15; ++i) ids.push_back(i);
  return ids;
}

}  // namespace shapejit::jit

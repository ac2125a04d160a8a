// Small helpers shared by the translation units of X86TableOps (embag_table_ops*.cpp) only.
#pragma once

#include <asmjit/x86.h>

#include <cstdint>
#include <string>

#include "shapejit/shapejit.hpp"

namespace shapejit::jit::table_ops_detail {

/// `m` moved by `offset` bytes, as an operand of `size` bytes.
inline asmjit::x86::Mem at(const asmjit::x86::Mem& m, int64_t offset, uint32_t size) {
  asmjit::x86::Mem r = m.cloneAdjusted(offset);
  r.setSize(size);
  return r;
}

/// A broken invariant of the table ops (a caller's bug, never a user's input).
[[noreturn]] inline void internal(const std::string& why) {
  throw Error(Status::kInternalError, "x86 table ops: " + why);
}

}  // namespace shapejit::jit::table_ops_detail

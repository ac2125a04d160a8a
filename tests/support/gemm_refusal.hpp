// Whether the GEMM generator refuses a key as unsupported (a key outside what the emitter of its
// ISA takes), emitting into a CodeHolder of `arch` without running anything.
#pragma once

#include <asmjit/core.h>

#include "jit/gemm_codegen.hpp"
#include "jit/gemm_kernel.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::test {

inline bool gemm_key_refused(const jit::GemmKey& key, asmjit::Arch arch = asmjit::Arch::kX64) {
  asmjit::CodeHolder code;
  code.init(asmjit::Environment(arch));
  try {
    jit::emit_gemm_kernel(key, code);
  } catch (const Error& e) {
    return e.status() == Status::kUnsupported;
  }
  return false;
}

}  // namespace shapejit::test

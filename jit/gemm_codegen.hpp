// Entry points of the linear-group (GEMM) microkernel generators.
#pragma once

#include <asmjit/core.h>

#include <cstddef>

#include "jit/gemm_kernel.hpp"
#include "jit/runtime_add.hpp"

namespace shapejit::jit {

/// A kernel generated into a JitRuntime: its entry point and the size of its code.
struct GeneratedGemmKernel {
  GemmKernelFn fn = nullptr;
  size_t code_bytes = 0;
};

/// Emits the kernel for `key` into `code` (initialised for the key's architecture), so the
/// same path feeds execution and jitdump. Throws shapejit::Error (kUnsupported for keys no
/// generator handles, kInternalError with asmjit's message).
void emit_gemm_kernel(const GemmKey& key, asmjit::CodeHolder& code);

/// Generates the kernel for `key` into `runtime` (the key's ISA must be runnable on the host).
/// When `logger` is given, the assembly listing is written to it. Throws like emit_gemm_kernel.
GeneratedGemmKernel generate_gemm_kernel(const GemmKey& key, asmjit::JitRuntime& runtime,
                                         asmjit::Logger* logger = nullptr);

/// generate_gemm_kernel under a bound on code memory: `admit` is asked with the kernel's exact
/// size before its code is added; when it refuses, nothing is added and `fn` is null.
GeneratedGemmKernel generate_gemm_kernel_admitted(const GemmKey& key, asmjit::JitRuntime& runtime,
                                                  const CodeAdmission& admit);

}  // namespace shapejit::jit

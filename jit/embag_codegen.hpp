// Entry points of the embedding-bag code generators (jit/x86, jit/a64).
#pragma once

#include <asmjit/core.h>

#include <cstddef>

#include "jit/embag_kernel.hpp"
#include "jit/runtime_add.hpp"

namespace shapejit::jit {

/// A kernel generated into a JitRuntime: its entry point and the size of its code.
struct GeneratedEmbagKernel {
  EmbagKernelFn fn = nullptr;
  size_t code_bytes = 0;
};

/// Emits the kernel for `key` into `code` (initialised for the key's architecture), so the
/// same path feeds execution and jitdump (which may cross-emit). Throws shapejit::Error
/// (kUnsupported for keys no generator handles, kInternalError with asmjit's message).
void emit_embag_kernel(const EmbagKey& key, asmjit::CodeHolder& code);

/// Generates the kernel for `key` into `runtime` (the key's ISA must be runnable on the host).
/// When `logger` is given, the assembly listing is written to it. Throws like emit_embag_kernel.
GeneratedEmbagKernel generate_embag_kernel(const EmbagKey& key, asmjit::JitRuntime& runtime,
                                           asmjit::Logger* logger = nullptr);

/// generate_embag_kernel under a bound on code memory: `admit` is asked with the kernel's exact
/// size before its code is added; when it refuses, nothing is added and `fn` is null.
GeneratedEmbagKernel generate_embag_kernel_admitted(const EmbagKey& key, asmjit::JitRuntime& runtime,
                                                    const CodeAdmission& admit);

}  // namespace shapejit::jit

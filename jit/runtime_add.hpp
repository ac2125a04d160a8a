// The step every generator's `generate_*_kernel` shares: check the host can run the ISA, emit
// into a CodeHolder for the runtime, add the code, and turn every failure into shapejit::Error.
#pragma once

#include <asmjit/core.h>

#include <cstddef>
#include <functional>
#include <string>

#include "jit/isa.hpp"

namespace shapejit::jit {

/// Throws Error(kUnsupported) when this host cannot run `isa` code (jit/host_features.hpp), so a
/// mismatched key fails cleanly instead of with SIGILL.
void require_host_runs(const std::string& name, Isa isa);

/// Adds the emitted `code` (for `isa`) to `runtime` and returns its entry point; throws Error
/// (kOutOfMemory or kInternalError, with asmjit's message) on failure, never returns null.
void* add_to_runtime(const std::string& name, Isa isa, asmjit::JitRuntime& runtime, asmjit::CodeHolder& code);

/// Asked with a kernel's exact code size after emission and before the code is added to a
/// runtime; false means "do not add it" (a bound on code memory would be exceeded).
using CodeAdmission = std::function<bool(size_t code_bytes)>;

/// emit_*_kernel's dispatch for any key with `isa`: runs the emitter of the ISA's family when
/// its row of jit/isa.hpp's table says the generator (`generator`, e.g. &IsaTraits::gemm_generator)
/// takes it; false (nothing emitted) otherwise, for the caller's error.
template <class Key, class EmitX86, class EmitA64>
bool emit_by_family(const Key& key, asmjit::CodeHolder& code, bool IsaTraits::*generator, EmitX86&& x86,
                    EmitA64&& a64) {
  if (!known_isa(key.isa) || !(isa_traits(key.isa).*generator)) return false;
  switch (isa_traits(key.isa).family) {
    case IsaFamily::kX86: x86(key, code); return true;
    case IsaFamily::kA64: a64(key, code); return true;
    case IsaFamily::kPortable: break;
  }
  return false;
}

/// generate_*_kernel for any key with `isa` and `name()`: emit(key, code) then add the code.
/// When `admit` is set and refuses the emitted size, nothing is added and the result is null.
template <class Fn, class Key, class Emit>
Fn generate_kernel(const Key& key, asmjit::JitRuntime& runtime, asmjit::Logger* logger, Emit&& emit,
                   size_t* code_bytes, const CodeAdmission& admit = {}) {
  const std::string name = key.name();
  require_host_runs(name, key.isa);
  asmjit::CodeHolder code;
  code.init(runtime.environment());
  if (logger) code.setLogger(logger);
  emit(key, code);
  *code_bytes = code.codeSize();
  if (admit && !admit(*code_bytes)) return nullptr;
  return reinterpret_cast<Fn>(add_to_runtime(name, key.isa, runtime, code));
}

}  // namespace shapejit::jit

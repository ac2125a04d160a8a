// The step every generator's `generate_*_kernel` shares: check the host can run the ISA, emit
// into a CodeHolder for the runtime, add the code, and turn every failure into shapejit::Error.
#pragma once

#include <asmjit/core.h>

#include <cstddef>
#include <string>

#include "jit/isa.hpp"

namespace shapejit::jit {

/// Throws Error(kUnsupported) when the runtime targets this x86-64 host and its CPU cannot run
/// `isa` code, so a mismatched key fails cleanly instead of with SIGILL.
void require_host_runs(const std::string& name, Isa isa, const asmjit::JitRuntime& runtime);

/// Adds the emitted `code` to `runtime` and returns its entry point; throws Error (kOutOfMemory
/// or kInternalError, with asmjit's message) on failure, never returns null.
void* add_to_runtime(const std::string& name, asmjit::JitRuntime& runtime, asmjit::CodeHolder& code);

/// generate_*_kernel for any key with `isa` and `name()`: emit(key, code) then add the code.
template <class Fn, class Key, class Emit>
Fn generate_kernel(const Key& key, asmjit::JitRuntime& runtime, asmjit::Logger* logger, Emit&& emit,
                   size_t* code_bytes) {
  const std::string name = key.name();
  require_host_runs(name, key.isa, runtime);
  asmjit::CodeHolder code;
  code.init(runtime.environment());
  if (logger) code.setLogger(logger);
  emit(key, code);
  *code_bytes = code.codeSize();
  return reinterpret_cast<Fn>(add_to_runtime(name, runtime, code));
}

}  // namespace shapejit::jit

// The two entry points of the embedding-bag generators: dispatch on the key's ISA family.
#include "jit/embag_codegen.hpp"

#include <asmjit/x86.h>

#include <string>

#include "jit/a64/embag_emitter.hpp"
#include "jit/x86/embag_emitter.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {
namespace {

// Host check for generate_embag_kernel, so a mismatched key fails cleanly, not with SIGILL.
// The compiler's cpuid probe, not asmjit::CpuInfo::host(): the latter returns all-zero
// features for the whole process once anything calls it during static initialisation
// (asmjit 1.9's global is constructed after such a call and wipes it).
bool host_runs(Isa isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kAvx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    case Isa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default: return false;
  }
#else
  const asmjit::CpuFeatures::X86& f = asmjit::CpuInfo::host().features().x86();
  switch (isa) {
    case Isa::kAvx512: return f.hasAVX512_F() && f.hasFMA();
    case Isa::kAvx2: return f.hasAVX2() && f.hasFMA();
    default: return false;
  }
#endif
}

}  // namespace

void emit_embag_kernel(const EmbagKey& key, asmjit::CodeHolder& code) {
  switch (key.isa) {
    case Isa::kAvx512:
    case Isa::kAvx2:
      emit_embag_kernel_x86(key, code);
      return;
    case Isa::kNeon:
      emit_embag_kernel_a64(key, code);
      return;
    case Isa::kScalar:
      break;
  }
  throw Error(Status::kUnsupported, key.name() + ": no generator for ISA " + std::string(isa_name(key.isa)));
}

GeneratedEmbagKernel generate_embag_kernel(const EmbagKey& key, asmjit::JitRuntime& runtime,
                                           asmjit::Logger* logger) {
  if (runtime.environment().arch() == asmjit::Arch::kX64 && !host_runs(key.isa))
    throw Error(Status::kUnsupported, key.name() + ": the host CPU cannot run " +
                                          std::string(isa_name(key.isa)) + " code");
  asmjit::CodeHolder code;
  code.init(runtime.environment());
  if (logger) code.setLogger(logger);
  emit_embag_kernel(key, code);

  EmbagKernelFn fn = nullptr;
  const asmjit::Error err = runtime.add(&fn, &code);
  if (err != asmjit::kErrorOk || fn == nullptr) {
    const Status status = err == asmjit::kErrorOutOfMemory ? Status::kOutOfMemory : Status::kInternalError;
    throw Error(status, key.name() + ": adding the kernel to the JIT runtime failed: " +
                            asmjit::DebugUtils::errorAsString(err));
  }
  return {fn, code.codeSize()};
}

}  // namespace shapejit::jit

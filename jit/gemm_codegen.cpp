// The two entry points of the GEMM generators: dispatch on the key's ISA family.
#include "jit/gemm_codegen.hpp"

#include <asmjit/x86.h>

#include <string>

#include "jit/a64/gemm_emitter.hpp"
#include "jit/x86/gemm_emitter.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {
namespace {

// Host check for generate_gemm_kernel, so a mismatched key fails cleanly, not with SIGILL.
bool host_runs(Isa isa) {
  const asmjit::CpuFeatures::X86& f = asmjit::CpuInfo::host().features().x86();
  switch (isa) {
    case Isa::kAvx512: return f.hasAVX512_F() && f.hasFMA();
    case Isa::kAvx2: return f.hasAVX2() && f.hasFMA();
    default: return false;
  }
}

}  // namespace

void emit_gemm_kernel(const GemmKey& key, asmjit::CodeHolder& code) {
  switch (key.isa) {
    case Isa::kAvx512:
    case Isa::kAvx2:
      emit_gemm_kernel_x86(key, code);
      return;
    case Isa::kNeon:
      emit_gemm_kernel_a64(key, code);
      return;
    case Isa::kScalar:
      break;
  }
  throw Error(Status::kUnsupported, key.name() + ": no GEMM generator for ISA " + std::string(isa_name(key.isa)));
}

GeneratedGemmKernel generate_gemm_kernel(const GemmKey& key, asmjit::JitRuntime& runtime,
                                         asmjit::Logger* logger) {
  if (runtime.environment().arch() == asmjit::Arch::kX64 && !host_runs(key.isa))
    throw Error(Status::kUnsupported, key.name() + ": the host CPU cannot run " +
                                          std::string(isa_name(key.isa)) + " code");
  asmjit::CodeHolder code;
  code.init(runtime.environment());
  if (logger) code.setLogger(logger);
  emit_gemm_kernel(key, code);

  GemmKernelFn fn = nullptr;
  const asmjit::Error err = runtime.add(&fn, &code);
  if (err != asmjit::kErrorOk || fn == nullptr) {
    const Status status = err == asmjit::kErrorOutOfMemory ? Status::kOutOfMemory : Status::kInternalError;
    throw Error(status, key.name() + ": adding the kernel to the JIT runtime failed: " +
                            asmjit::DebugUtils::errorAsString(err));
  }
  return {fn, code.codeSize()};
}

}  // namespace shapejit::jit

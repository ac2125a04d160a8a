// The two entry points of the GEMM generators: dispatch on the key's ISA family.
#include "jit/gemm_codegen.hpp"

#include <string>

#include "jit/a64/gemm_emitter.hpp"
#include "jit/x86/gemm_emitter.hpp"
#include "jit/runtime_add.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

void emit_gemm_kernel(const GemmKey& key, asmjit::CodeHolder& code) {
  // Every form, quantized ones included, has a generator on both families (the x86 one:
  // jit/x86/gemm_quant_ops.hpp; the AArch64 one: jit/a64/gemm_quant_ops.hpp).
  if (emit_by_family(key, code, &IsaTraits::gemm_generator, emit_gemm_kernel_x86, emit_gemm_kernel_a64)) return;
  throw Error(Status::kUnsupported, key.name() + ": no GEMM generator for ISA " + std::string(isa_name(key.isa)));
}

GeneratedGemmKernel generate_gemm_kernel(const GemmKey& key, asmjit::JitRuntime& runtime,
                                         asmjit::Logger* logger) {
  size_t bytes = 0;
  const GemmKernelFn fn = generate_kernel<GemmKernelFn>(key, runtime, logger, emit_gemm_kernel, &bytes);
  return {fn, bytes};
}

GeneratedGemmKernel generate_gemm_kernel_admitted(const GemmKey& key, asmjit::JitRuntime& runtime,
                                                  const CodeAdmission& admit) {
  size_t bytes = 0;
  const GemmKernelFn fn = generate_kernel<GemmKernelFn>(key, runtime, nullptr, emit_gemm_kernel, &bytes, admit);
  return {fn, bytes};
}

}  // namespace shapejit::jit

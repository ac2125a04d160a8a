// The two entry points of the embedding-bag generators: dispatch on the key's ISA family.
#include "jit/embag_codegen.hpp"

#include <string>

#include "jit/a64/embag_emitter.hpp"
#include "jit/x86/embag_emitter.hpp"
#include "jit/runtime_add.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

void emit_embag_kernel(const EmbagKey& key, asmjit::CodeHolder& code) {
  if (emit_by_family(key, code, &IsaTraits::embag_generator, emit_embag_kernel_x86, emit_embag_kernel_a64)) return;
  throw Error(Status::kUnsupported, key.name() + ": no generator for ISA " + std::string(isa_name(key.isa)));
}

GeneratedEmbagKernel generate_embag_kernel(const EmbagKey& key, asmjit::JitRuntime& runtime,
                                           asmjit::Logger* logger) {
  size_t bytes = 0;
  const EmbagKernelFn fn = generate_kernel<EmbagKernelFn>(key, runtime, logger, emit_embag_kernel, &bytes);
  return {fn, bytes};
}

GeneratedEmbagKernel generate_embag_kernel_admitted(const EmbagKey& key, asmjit::JitRuntime& runtime,
                                                    const CodeAdmission& admit) {
  size_t bytes = 0;
  const EmbagKernelFn fn = generate_kernel<EmbagKernelFn>(key, runtime, nullptr, emit_embag_kernel, &bytes, admit);
  return {fn, bytes};
}

}  // namespace shapejit::jit

#include "jit/runtime_add.hpp"

#include "jit/generated_code_observer.hpp"
#include "jit/host_features.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

void require_host_runs(const std::string& name, Isa isa) {
  // kScalar passes: it has no generator, and the emitter says so.
  if (const std::string why = isa_unsupported_reason(host_features(), isa); !why.empty())
    throw Error(Status::kUnsupported, name + ": this host cannot run " + std::string(isa_name(isa)) + " code (" +
                                          why + ")");
}

void* add_to_runtime(const std::string& name, Isa isa, asmjit::JitRuntime& runtime, asmjit::CodeHolder& code) {
  void* fn = nullptr;
  const asmjit::Error err = runtime._add(&fn, &code);
  if (err != asmjit::kErrorOk || fn == nullptr) {
    const Status status = err == asmjit::kErrorOutOfMemory ? Status::kOutOfMemory : Status::kInternalError;
    throw Error(status, name + ": adding the kernel to the JIT runtime failed: " +
                            asmjit::DebugUtils::errorAsString(err));
  }
  notify_generated_code(GeneratedCodeEvent::kKernelAdded, isa);
  return fn;
}

}  // namespace shapejit::jit

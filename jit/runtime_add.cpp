#include "jit/runtime_add.hpp"

#include "shapejit/shapejit.hpp"

namespace shapejit::jit {
namespace {

// The compiler's cpuid probe, not asmjit::CpuInfo::host(): the latter returns all-zero
// features for the whole process once anything calls it during static initialisation
// (asmjit 1.9's global is constructed after such a call and wipes it).
bool x86_host_runs(Isa isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kAvx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    case Isa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default: return false;
  }
#else
  (void)isa;
  return false;
#endif
}

}  // namespace

void require_host_runs(const std::string& name, Isa isa, const asmjit::JitRuntime& runtime) {
  if (runtime.environment().arch() == asmjit::Arch::kX64 && !x86_host_runs(isa))
    throw Error(Status::kUnsupported, name + ": the host CPU cannot run " + std::string(isa_name(isa)) + " code");
}

void* add_to_runtime(const std::string& name, asmjit::JitRuntime& runtime, asmjit::CodeHolder& code) {
  void* fn = nullptr;
  const asmjit::Error err = runtime._add(&fn, &code);
  if (err != asmjit::kErrorOk || fn == nullptr) {
    const Status status = err == asmjit::kErrorOutOfMemory ? Status::kOutOfMemory : Status::kInternalError;
    throw Error(status, name + ": adding the kernel to the JIT runtime failed: " +
                            asmjit::DebugUtils::errorAsString(err));
  }
  return fn;
}

}  // namespace shapejit::jit

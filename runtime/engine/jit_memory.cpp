// W^X JIT runtimes. Dual mapping keeps asmjit's allocator (dense packing of many small kernels);
// write-then-protect is the fallback that needs nothing but mmap/mprotect: a kernel gets its
// own pages, is written while they are rw-, and they become r-x before anyone can call it.
// Pages are never made writable again (a kernel may be running in another thread), which is
// why the fallback cannot pack several kernels into one page.
#include "runtime/engine/jit_memory.hpp"

#include <mutex>
#include <unordered_map>

#include "runtime/profiling/perf_map.hpp"

namespace shapejit::rt {
namespace {

using asmjit::Error;
namespace VirtMem = asmjit::VirtMem;
using VirtMem::MemoryFlags;

class WxJitRuntime final : public asmjit::JitRuntime {
 public:
  explicit WxJitRuntime(bool dual, const asmjit::JitAllocator::CreateParams* params)
      : asmjit::JitRuntime(params), dual_(dual) {}

  ~WxJitRuntime() noexcept override {
    for (const auto& [p, size] : regions_) VirtMem::release(p, size);
  }

  Error _add(void** dst, asmjit::CodeHolder* code) noexcept override {
    *dst = nullptr;
    if (dual_ && asmjit::JitRuntime::_add(dst, code) == asmjit::kErrorOk) return asmjit::kErrorOk;
    return add_protected(dst, code);  // the dual mapping failed (or is not used): own pages
  }

  Error _release(void* p) noexcept override {
    size_t size = 0;
    {
      std::lock_guard lock(mutex_);
      auto it = regions_.find(p);
      if (it == regions_.end()) return asmjit::JitRuntime::_release(p);
      size = it->second;
      regions_.erase(it);
    }
    return VirtMem::release(p, size);
  }

 private:
  Error add_protected(void** dst, asmjit::CodeHolder* code) noexcept {
    ASMJIT_PROPAGATE(code->flatten());
    ASMJIT_PROPAGATE(code->resolveUnresolvedLinks());
    const size_t estimated = code->codeSize();
    if (estimated == 0) return asmjit::kErrorNoCodeGenerated;
    const size_t page = VirtMem::info().pageSize;
    const size_t size = (estimated + page - 1) / page * page;
    void* p = nullptr;
    ASMJIT_PROPAGATE(VirtMem::alloc(&p, size, MemoryFlags::kAccessRW));
    Error err = code->relocateToBase(uint64_t(uintptr_t(p)));
    if (err == asmjit::kErrorOk) err = code->copyFlattenedData(p, size, asmjit::CopySectionFlags::kPadTargetBuffer);
    if (err == asmjit::kErrorOk) err = VirtMem::protect(p, size, MemoryFlags::kAccessRX);
    if (err == asmjit::kErrorOk) {
      try {
        std::lock_guard lock(mutex_);
        regions_.emplace(p, size);
      } catch (...) {
        err = asmjit::kErrorOutOfMemory;
      }
    }
    if (err != asmjit::kErrorOk) {
      VirtMem::release(p, size);
      return err;
    }
    VirtMem::flushInstructionCache(p, code->codeSize());
    *dst = p;
    return asmjit::kErrorOk;
  }

  const bool dual_;
  std::mutex mutex_;  // generation runs concurrently (the kernel cache compiles outside its lock)
  std::unordered_map<void*, size_t> regions_;  // write-then-protect kernels: start -> mapped bytes
};

}  // namespace

bool dual_mapping_available() {
  static const bool available = [] {
    const size_t page = VirtMem::info().pageSize;
    VirtMem::DualMapping dm{};
    if (VirtMem::allocDualMapping(&dm, page, MemoryFlags::kAccessRWX) != asmjit::kErrorOk) return false;
    VirtMem::releaseDualMapping(&dm, page);
    return true;
  }();
  return available;
}

CodeMemoryScheme default_code_memory_scheme() {
  // perf applies /tmp/perf-<pid>.map only to anonymous executable mappings, never to the memfd of
  // a dual mapping: a process that asked for the map gets kernels in anonymous pages instead.
  if (perf_map_enabled()) return CodeMemoryScheme::kWriteThenProtect;
  return dual_mapping_available() ? CodeMemoryScheme::kDualMapping : CodeMemoryScheme::kWriteThenProtect;
}

std::unique_ptr<asmjit::JitRuntime> make_jit_runtime(CodeMemoryScheme scheme) {
  if (scheme == CodeMemoryScheme::kAuto) scheme = default_code_memory_scheme();
  asmjit::JitAllocator::CreateParams params{};
  const bool dual = scheme == CodeMemoryScheme::kDualMapping;
  // Without the dual-mapping option the base allocator is never used (it allocates lazily).
  if (dual) params.options = asmjit::JitAllocatorOptions::kUseDualMapping;
  return std::make_unique<WxJitRuntime>(dual, &params);
}

}  // namespace shapejit::rt

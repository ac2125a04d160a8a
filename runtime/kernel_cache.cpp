// EmbagKernelCache. The lock guards only the map, the counters and the code reservation: a
// compilation runs outside it, published through a promise that is settled on every path (value
// or exception), and a failed entry leaves the map before its waiters wake, so the next lookup
// starts afresh. Reserving before compiling is what keeps the code-memory limit exact: checking
// only the code already held would let every compilation in flight pass the same check.
#include "runtime/kernel_cache.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

#include "runtime/embag_generic_kernel.hpp"
#include "runtime/jit_memory.hpp"
#include "runtime/perf_map.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

int64_t nanoseconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}

// Every failure reaches callers as shapejit::Error naming the kernel.
std::exception_ptr as_shapejit_error(std::exception_ptr error, const jit::EmbagKey& key) {
  try {
    std::rethrow_exception(error);
  } catch (const Error&) {
    return error;
  } catch (const std::bad_alloc&) {
    return std::make_exception_ptr(
        Error(Status::kOutOfMemory, "compiling " + key.name() + ": out of memory"));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(
        Error(Status::kInternalError, "compiling " + key.name() + ": " + e.what()));
  } catch (...) {
    return std::make_exception_ptr(
        Error(Status::kInternalError, "compiling " + key.name() + ": unknown exception"));
  }
}

// Epochs are unique in the process: every cache takes a fresh one (0 is no cache's).
uint64_t next_epoch() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

// The calling thread's last get_remembered answer. Constant-initialised (no guard on access);
// it holds no ownership: the kernel stays valid while the cache of `epoch` lives, and a cache
// is only asked while it lives.
struct RememberedKernel {
  uint64_t epoch = 0;
  jit::EmbagKey wanted{};
  EmbagKernelHandle handle{};
};
constinit thread_local RememberedKernel t_remembered;

}  // namespace

EmbagKernelCache::EmbagKernelCache(EmbagCompileFn compile, int64_t code_limit_bytes)
    : compile_(compile ? std::move(compile)
                       : EmbagCompileFn([](const jit::EmbagKey& key, asmjit::JitRuntime& runtime,
                                           const jit::CodeAdmission& admit) {
                           return jit::generate_embag_kernel_admitted(key, runtime, admit);
                         })),
      runtime_(make_jit_runtime()),
      epoch_(next_epoch()) {
  stats_.code_limit_bytes = code_limit_bytes < 0 ? default_code_limit_bytes() : code_limit_bytes;
}

EmbagKernelCache::~EmbagKernelCache() = default;

EmbagKernelHandle EmbagKernelCache::get(const jit::EmbagKey& key) {
  if (key.isa == jit::Isa::kScalar || key.dim == 0)
    return EmbagKernelHandle(key, generic_embag_kernel(key), true);
  {  // Hit path: a shared lock and one hash lookup.
    std::shared_lock lock(mutex_);
    if (auto it = kernels_.find(key); it != kernels_.end() && it->second.ready.fn != nullptr) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      return EmbagKernelHandle(key, it->second.ready.fn, it->second.ready.generic);
    }
  }
  return get_slow(key);
}

EmbagKernelHandle EmbagKernelCache::get_remembered(const jit::EmbagKey& wanted,
                                                   jit::EmbagKey (*resolve)(const jit::EmbagKey&)) {
  RememberedKernel& last = t_remembered;
  if (last.epoch == epoch_ && last.wanted == wanted) [[likely]] {
    if (!last.handle.generic()) hits_.fetch_add(1, std::memory_order_relaxed);  // as get()'s map hit
    return last.handle;
  }
  const EmbagKernelHandle handle = get(resolve(wanted));
  const jit::EmbagKey& key = handle.key();
  const bool bound_fallback = handle.generic() && key.isa != jit::Isa::kScalar && key.dim != 0;
  if (!bound_fallback) last = {epoch_, wanted, handle};
  return handle;
}

EmbagKernelHandle EmbagKernelCache::get_slow(const jit::EmbagKey& key) {
  std::shared_future<Compiled> pending;
  std::promise<Compiled> promise;
  bool compile_here = false;
  // The first reservation is a guess that only has to be cheap: the largest kernel emitted so
  // far rarely needs to grow once the code is emitted, and a key already refused for its size
  // is refused here next time instead of being emitted again.
  int64_t reserved = 0;
  {
    std::unique_lock lock(mutex_);
    if (auto it = kernels_.find(key); it != kernels_.end()) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      if (it->second.ready.fn != nullptr)  // published since the shared look
        return EmbagKernelHandle(key, it->second.ready.fn, it->second.ready.generic);
      pending = it->second.pending;
    } else if (!settle_reservation_locked(reserved, std::max<int64_t>(largest_emitted_, 1))) {
      ++stats_.generic_fallbacks;
    } else {
      try {
        kernels_.emplace(key, Slot{promise.get_future().share(), {}});
      } catch (...) {  // out of memory: the reservation must not outlive the attempt
        reserved_bytes_ -= reserved;
        throw;
      }
      ++stats_.misses;
      compile_here = true;
    }
  }
  if (compile_here) {
    const Compiled c = compile_now(key, promise, reserved);
    return EmbagKernelHandle(key, c.fn, c.generic);
  }
  if (pending.valid()) {
    Compiled c;
    try {
      c = pending.get();  // waits for the in-flight compilation
    } catch (const Error& e) {
      // Each waiter throws its own copy: the shared exception object is not touched by
      // several threads at once (what ThreadSanitizer would see through an uninstrumented
      // libstdc++ as a race).
      throw Error(e.status(), e.what());
    }
    return EmbagKernelHandle(key, c.fn, c.generic);
  }
  return EmbagKernelHandle(key, generic_embag_kernel(key), true);
}

bool EmbagKernelCache::settle_reservation_locked(int64_t& held, int64_t bytes) {
  const int64_t growth = bytes - held;
  if (growth > 0 && stats_.code_bytes + reserved_bytes_ + growth > stats_.code_limit_bytes) return false;
  reserved_bytes_ += growth;
  held = bytes;
  return true;
}

EmbagKernelCache::Compiled EmbagKernelCache::compile_now(const jit::EmbagKey& key,
                                                         std::promise<Compiled>& promise, int64_t reserved) {
  const auto t0 = std::chrono::steady_clock::now();
  try {  // from the first allocation on (the admission's std::function), so the promise is always kept
    bool asked = false, refused = false;
    // Between emission and adding the code: the exact size replaces the estimate, or the key
    // does not fit and nothing is added.
    const jit::CodeAdmission admit = [&](size_t code_bytes) {
      std::unique_lock lock(mutex_);
      asked = true;
      largest_emitted_ = std::max(largest_emitted_, static_cast<int64_t>(code_bytes));
      refused = !settle_reservation_locked(reserved, static_cast<int64_t>(code_bytes));
      return !refused;
    };
    const jit::GeneratedEmbagKernel generated = compile_(key, *runtime_, admit);
    if (refused) {  // over the limit: the generic kernel serves this lookup and its waiters
      const Compiled c{generic_embag_kernel(key), true};
      {
        std::unique_lock lock(mutex_);
        ++stats_.generic_fallbacks;
        stats_.compile_time_ns += nanoseconds_since(t0);
        reserved_bytes_ -= reserved;
        kernels_.erase(key);  // not cached: a higher limit lets the key compile
      }
      promise.set_value(c);
      return c;
    }
    if (generated.fn == nullptr)
      throw Error(Status::kInternalError, "compiling " + key.name() + ": the generator returned no function");
    if (!asked || static_cast<int64_t>(generated.code_bytes) != reserved)
      throw Error(Status::kInternalError,
                  "compiling " + key.name() + ": the generator added code the code-memory limit did not admit");
    const int64_t ns = nanoseconds_since(t0);
    // Named before any caller can run it, so a profile never sees the kernel anonymous.
    perf_map_record(reinterpret_cast<const void*>(generated.fn), generated.code_bytes, key.name());
    const Compiled c{generated.fn, false};
    {
      std::unique_lock lock(mutex_);
      ++stats_.compilations;
      ++stats_.kernels;
      stats_.compile_time_ns += ns;
      reserved_bytes_ -= reserved;  // the reservation becomes code held
      stats_.code_bytes += reserved;
      Slot& slot = kernels_.at(key);
      slot.ready = c;  // from now on lookups take the hit path
      slot.pending = {};
    }
    promise.set_value(c);
    return c;
  } catch (...) {
    const int64_t ns = nanoseconds_since(t0);
    std::exception_ptr error = std::current_exception();
    {
      std::unique_lock lock(mutex_);
      ++stats_.failed_compilations;
      stats_.compile_time_ns += ns;
      reserved_bytes_ -= reserved;  // released: the failed code (if any) is not counted
      kernels_.erase(key);  // never cache a failure: the next lookup compiles again
    }
    try {
      error = as_shapejit_error(error, key);
    } catch (...) {  // no memory for the message: pass the original on rather than lose the promise
    }
    promise.set_exception(error);
    std::rethrow_exception(error);
  }
}

EmbagCacheStats EmbagKernelCache::stats() const {
  std::shared_lock lock(mutex_);
  EmbagCacheStats s = stats_;
  s.hits = hits_.load(std::memory_order_relaxed);
  return s;
}

void EmbagKernelCache::set_code_limit_bytes(int64_t bytes) {
  const int64_t limit = bytes < 0 ? default_code_limit_bytes() : bytes;
  std::unique_lock lock(mutex_);
  stats_.code_limit_bytes = limit;
}

int64_t default_code_limit_bytes() {
  static const int64_t limit = [] {
    const char* text = std::getenv("SHAPEJIT_CODE_LIMIT_BYTES");
    if (text == nullptr || *text == '\0') return EmbagKernelCache::kDefaultCodeLimitBytes;
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0) {
      std::fprintf(stderr,
                   "shapejit: SHAPEJIT_CODE_LIMIT_BYTES=%s is not a non-negative integer; "
                   "using %lld\n",
                   text, static_cast<long long>(EmbagKernelCache::kDefaultCodeLimitBytes));
      return EmbagKernelCache::kDefaultCodeLimitBytes;
    }
    return static_cast<int64_t>(v);
  }();
  return limit;
}

EmbagKernelCache& embag_kernel_cache() {
  static EmbagKernelCache* cache = new EmbagKernelCache();
  return *cache;
}

}  // namespace shapejit::rt

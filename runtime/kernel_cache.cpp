// EmbagKernelCache. The lock guards only the map, the counters and the code reservation: a
// compilation runs outside it, published through a promise that is settled on every path (value
// or exception), and a failed entry leaves the map before its waiters wake, so the next lookup
// starts afresh. Reserving before compiling is what keeps the code-memory limit exact: checking
// only the code already held would let every compilation in flight pass the same check.
// A forked child has none of the threads whose compilations were in flight: their entries would
// stay pending there for ever (every asker waiting on a promise nobody keeps), so the child drops
// them and compiles those keys again (docs/fork.md).
#include "runtime/kernel_cache.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <mutex>
#include <new>
#include <string>

#include "runtime/embag_generic_kernel.hpp"
#include "runtime/fork_handlers.hpp"
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
  asmjit::JitRuntime* runtime = nullptr;
  {
    std::unique_lock lock(mutex_);
    if (auto it = kernels_.find(key); it != kernels_.end()) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      if (it->second.ready.fn != nullptr)  // published since the shared look
        return EmbagKernelHandle(key, it->second.ready.fn, it->second.ready.generic);
      pending = it->second.pending;
    } else if (runtime = &runtime_for_new_code_locked();
               !settle_reservation_locked(reserved, std::max<int64_t>(largest_emitted_, 1))) {
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
    const Compiled c = compile_now(key, *runtime, promise, reserved);
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

asmjit::JitRuntime& EmbagKernelCache::runtime_for_new_code_locked() {
  if (runtime_inherited_) {
    std::unique_ptr<asmjit::JitRuntime> fresh = make_jit_runtime();
    (void)runtime_.release();  // never freed: the inherited kernels keep running in this process
    runtime_ = std::move(fresh);
    runtime_inherited_ = false;
  }
  return *runtime_;
}

void EmbagKernelCache::reset_in_child() {
  // Only the forking thread exists, and it held mutex_ across the fork (the prepare handler).
  for (auto it = kernels_.begin(); it != kernels_.end();)
    it = it->second.ready.fn != nullptr ? std::next(it) : kernels_.erase(it);
  reserved_bytes_ = 0;  // every reservation belonged to a compilation in flight
  runtime_inherited_ = true;
  // A fresh lock rather than an unlock: glibc marks a write-locked rwlock with the writer's
  // thread id, which the forking thread no longer has in the child.
  new (&mutex_) std::shared_mutex();
}

EmbagKernelCache::Compiled EmbagKernelCache::compile_now(const jit::EmbagKey& key, asmjit::JitRuntime& runtime,
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
    const jit::GeneratedEmbagKernel generated = compile_(key, runtime, admit);
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

namespace {

// Created under a mutex the fork handlers take, so a fork never copies a half-made cache (a
// function-local static would leave its guard taken in the child).
std::atomic<EmbagKernelCache*> g_cache{nullptr};
std::mutex g_cache_creation;

// While the library loads, before any thread of the engine exists (runtime/fork_handlers.hpp).
[[maybe_unused]] const bool g_fork_handlers_at_load = [] {
  try {
    return install_fork_handlers();
  } catch (const std::bad_alloc&) {  // embag_kernel_cache() tries again
    return false;
  }
}();

}  // namespace

EmbagKernelCache& embag_kernel_cache() {
  if (EmbagKernelCache* c = g_cache.load(std::memory_order_acquire)) [[likely]] return *c;
  install_fork_handlers();
  std::lock_guard lock(g_cache_creation);
  if (g_cache.load(std::memory_order_relaxed) == nullptr)
    g_cache.store(new EmbagKernelCache(), std::memory_order_release);
  return *g_cache.load(std::memory_order_relaxed);
}

void kernel_cache_fork_prepare() {
  g_cache_creation.lock();
  if (EmbagKernelCache* c = g_cache.load(std::memory_order_relaxed)) c->lock_for_fork();
}

void kernel_cache_fork_parent() {
  if (EmbagKernelCache* c = g_cache.load(std::memory_order_relaxed)) c->unlock_in_parent();
  g_cache_creation.unlock();
}

void kernel_cache_fork_child() {
  if (EmbagKernelCache* c = g_cache.load(std::memory_order_relaxed)) c->reset_in_child();
  new (&g_cache_creation) std::mutex();  // fresh, as every lock in the child (fork_handlers.hpp)
}

}  // namespace shapejit::rt

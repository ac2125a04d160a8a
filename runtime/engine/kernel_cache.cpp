// KernelCache<Key>. The lock guards only the map, the counters and the code reservation: a
// compilation runs outside it, published through a promise that is settled on every path (the
// kernel, or the failure as a status and message), and a failed entry leaves the map before its
// waiters wake, so the next lookup starts afresh. Reserving before compiling is what keeps the
// code-memory limit exact: checking only the code already held would let every compilation in
// flight pass the same check.
// A forked child has none of the threads whose compilations were in flight: their entries would
// stay pending there for ever (every asker waiting on a promise nobody keeps), so the child drops
// them and compiles those keys again (docs/fork.md).
#include "runtime/engine/kernel_cache.hpp"

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

#include "runtime/engine/fork_handlers.hpp"
#include "runtime/engine/jit_memory.hpp"
#include "runtime/profiling/perf_map.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

int64_t nanoseconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}

// Every failure reaches callers as shapejit::Error naming the kernel.
template <class Key>
std::exception_ptr as_shapejit_error(std::exception_ptr error, const Key& key) {
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
template <class Key>
struct RememberedKernel {
  uint64_t epoch = 0;
  Key wanted{};
  KernelHandle<Key> handle{};
};
template <class Key>
constinit thread_local RememberedKernel<Key> t_remembered;

}  // namespace

// ---- The kinds of kernel ------------------------------------------------------------------

// KernelKind<jit::EmbagKey>::served_generic and ::generic live beside the generic kernel
// (runtime/embag/embag_generic_kernel.cpp).

jit::GeneratedEmbagKernel KernelKind<jit::EmbagKey>::generate(const jit::EmbagKey& key, asmjit::JitRuntime& runtime,
                                                              const jit::CodeAdmission& admit) {
  return jit::generate_embag_kernel_admitted(key, runtime, admit);
}

jit::GeneratedGemmKernel KernelKind<jit::GemmKey>::generate(const jit::GemmKey& key, asmjit::JitRuntime& runtime,
                                                            const jit::CodeAdmission& admit) {
  return jit::generate_gemm_kernel_admitted(key, runtime, admit);
}

// ---- CodeBudget ---------------------------------------------------------------------------

CodeBudget::CodeBudget(int64_t limit_bytes)
    : limit_(limit_bytes < 0 ? default_code_limit_bytes() : limit_bytes) {}

bool CodeBudget::settle(int64_t& held, int64_t bytes) {
  const int64_t growth = bytes - held;
  if (growth <= 0) {
    used_.fetch_add(growth, std::memory_order_relaxed);
  } else {
    int64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (used + growth > limit()) return false;
    } while (!used_.compare_exchange_weak(used, used + growth, std::memory_order_relaxed));
  }
  held = bytes;
  return true;
}

void CodeBudget::set_limit(int64_t bytes) {
  limit_.store(bytes < 0 ? default_code_limit_bytes() : bytes, std::memory_order_relaxed);
}

// ---- KernelCache --------------------------------------------------------------------------

template <class Key>
KernelCache<Key>::KernelCache(CompileFn compile, int64_t code_limit_bytes)
    : KernelCache(std::move(compile), std::make_shared<CodeBudget>(code_limit_bytes)) {}

template <class Key>
KernelCache<Key>::KernelCache(CompileFn compile, std::shared_ptr<CodeBudget> budget)
    : compile_(compile ? std::move(compile) : CompileFn(&Kind::generate)),
      budget_(std::move(budget)),
      runtime_(make_jit_runtime()),
      epoch_(next_epoch()) {}

template <class Key>
KernelCache<Key>::~KernelCache() = default;

template <class Key>
KernelHandle<Key> KernelCache<Key>::get(const Key& key) {
  if (Kind::served_generic(key)) return Handle(key, Kind::generic(key), true);
  {  // Hit path: a shared lock and one hash lookup.
    std::shared_lock lock(mutex_);
    if (auto it = kernels_.find(key); it != kernels_.end() && it->second.ready.fn != nullptr) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      return Handle(key, it->second.ready.fn, it->second.ready.generic);
    }
  }
  return get_slow(key);
}

template <class Key>
KernelHandle<Key> KernelCache<Key>::get_remembered(const Key& wanted, Key (*resolve)(const Key&)) {
  RememberedKernel<Key>& last = t_remembered<Key>;
  if (last.epoch == epoch_ && last.wanted == wanted) [[likely]] {
    count_remembered(last.handle);  // as get()'s map hit
    return last.handle;
  }
  const Handle handle = get(resolve(wanted));
  if (!bound_fallback(handle)) last = {epoch_, wanted, handle};
  return handle;
}

template <class Key>
KernelHandle<Key> KernelCache<Key>::get_slow(const Key& key) {
  std::shared_future<Outcome> pending;
  std::promise<Outcome> promise;
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
        return Handle(key, it->second.ready.fn, it->second.ready.generic);
      pending = it->second.pending;
    } else if (runtime = &runtime_for_new_code_locked();
               !settle_reservation_locked(reserved, std::max<int64_t>(largest_emitted_, 1))) {
      ++stats_.generic_fallbacks;
    } else {
      try {
        kernels_.emplace(key, Slot{promise.get_future().share(), {}});
      } catch (...) {  // out of memory: the reservation must not outlive the attempt
        release_reservation_locked(reserved);
        throw;
      }
      ++stats_.misses;
      compile_here = true;
    }
  }
  if (compile_here) {
    const Compiled c = compile_now(key, *runtime, promise, reserved);
    return Handle(key, c.fn, c.generic);
  }
  if (pending.valid()) {
    const Outcome& outcome = pending.get();  // waits for the in-flight compilation
    if (outcome.failure != Status::kOk)
      throw Error(outcome.failure, outcome.message.empty() ? "compiling " + key.name() + ": out of memory"
                                                           : outcome.message);
    return Handle(key, outcome.compiled.fn, outcome.compiled.generic);
  }
  return Handle(key, Kind::generic(key), true);
}

template <class Key>
bool KernelCache<Key>::settle_reservation_locked(int64_t& held, int64_t bytes) {
  const int64_t before = held;
  if (!budget_->settle(held, bytes)) return false;
  reserved_bytes_ += held - before;
  return true;
}

template <class Key>
void KernelCache<Key>::release_reservation_locked(int64_t held) {
  reserved_bytes_ -= held;
  budget_->release(held);
}

template <class Key>
asmjit::JitRuntime& KernelCache<Key>::runtime_for_new_code_locked() {
  if (runtime_inherited_) {
    std::unique_ptr<asmjit::JitRuntime> fresh = make_jit_runtime();
    (void)runtime_.release();  // never freed: the inherited kernels keep running in this process
    runtime_ = std::move(fresh);
    runtime_inherited_ = false;
  }
  return *runtime_;
}

template <class Key>
void KernelCache<Key>::reset_in_child() {
  // Only the forking thread exists, and it held mutex_ across the fork (the prepare handler), so
  // no compilation of this cache changed the budget meanwhile.
  for (auto it = kernels_.begin(); it != kernels_.end();)
    it = it->second.ready.fn != nullptr ? std::next(it) : kernels_.erase(it);
  release_reservation_locked(reserved_bytes_);  // every reservation belonged to a compilation in flight
  runtime_inherited_ = true;
  // A fresh lock rather than an unlock: glibc marks a write-locked rwlock with the writer's
  // thread id, which the forking thread no longer has in the child.
  new (&mutex_) std::shared_mutex();
}

template <class Key>
typename KernelCache<Key>::Compiled KernelCache<Key>::compile_now(const Key& key, asmjit::JitRuntime& runtime,
                                                                  std::promise<Outcome>& promise, int64_t reserved) {
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
    const typename Kind::Generated generated = compile_(key, runtime, admit);
    if (refused) {  // over the limit: the generic kernel serves this lookup and its waiters
      const Compiled c{Kind::generic(key), true};
      {
        std::unique_lock lock(mutex_);
        ++stats_.generic_fallbacks;
        stats_.compile_time_ns += nanoseconds_since(t0);
        release_reservation_locked(reserved);
        kernels_.erase(key);  // not cached: a higher limit lets the key compile
      }
      promise.set_value(Outcome{c, Status::kOk, {}});
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
      reserved_bytes_ -= reserved;  // the reservation becomes code held (still in the budget)
      stats_.code_bytes += reserved;
      Slot& slot = kernels_.at(key);
      slot.ready = c;  // from now on lookups take the hit path
      slot.pending = {};
    }
    promise.set_value(Outcome{c, Status::kOk, {}});
    return c;
  } catch (...) {
    const int64_t ns = nanoseconds_since(t0);
    std::exception_ptr error = std::current_exception();
    {
      std::unique_lock lock(mutex_);
      ++stats_.failed_compilations;
      stats_.compile_time_ns += ns;
      release_reservation_locked(reserved);  // the failed code (if any) is not counted
      kernels_.erase(key);  // never cache a failure: the next lookup compiles again
    }
    Outcome failed{{}, Status::kOutOfMemory, {}};  // what waiters get if the message cannot be built
    try {
      error = as_shapejit_error(error, key);
      std::rethrow_exception(error);
    } catch (const Error& e) {
      failed.failure = e.status();
      try {
        failed.message = e.what();
      } catch (...) {  // no memory for the copy: the status still reaches the waiters
      }
    } catch (...) {
    }
    promise.set_value(std::move(failed));
    std::rethrow_exception(error);
  }
}

template <class Key>
KernelCacheCounters KernelCache<Key>::stats() const {
  std::shared_lock lock(mutex_);
  KernelCacheCounters s = stats_;
  s.hits = hits_.load(std::memory_order_relaxed);
  s.code_limit_bytes = budget_->limit();
  return s;
}

template <class Key>
void KernelCache<Key>::set_code_limit_bytes(int64_t bytes) {
  budget_->set_limit(bytes);
}

template class KernelCache<jit::EmbagKey>;
template class KernelCache<jit::GemmKey>;

int64_t default_code_limit_bytes() {
  static const int64_t limit = [] {
    const char* text = std::getenv("SHAPEJIT_CODE_LIMIT_BYTES");
    if (text == nullptr || *text == '\0') return kDefaultCodeLimitBytes;
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0) {
      std::fprintf(stderr,
                   "shapejit: SHAPEJIT_CODE_LIMIT_BYTES=%s is not a non-negative integer; "
                   "using %lld\n",
                   text, static_cast<long long>(kDefaultCodeLimitBytes));
      return kDefaultCodeLimitBytes;
    }
    return static_cast<int64_t>(v);
  }();
  return limit;
}

namespace {

// The process's caches and the budget they share, created together under a mutex the fork
// handlers take, so a fork never copies them half made (a function-local static would leave its
// guard taken in the child).
struct ProcessCaches {
  std::shared_ptr<CodeBudget> budget = std::make_shared<CodeBudget>();
  EmbagKernelCache embag{{}, budget};
  GemmKernelCache gemm{{}, budget};
};
std::atomic<ProcessCaches*> g_caches{nullptr};
std::mutex g_cache_creation;

// While the library loads, before any thread of the engine exists (runtime/engine/fork_handlers.hpp).
[[maybe_unused]] const bool g_fork_handlers_at_load = [] {
  try {
    return install_fork_handlers();
  } catch (const std::bad_alloc&) {  // process_caches() tries again
    return false;
  }
}();

ProcessCaches& process_caches() {
  if (ProcessCaches* c = g_caches.load(std::memory_order_acquire)) [[likely]] return *c;
  install_fork_handlers();
  std::lock_guard lock(g_cache_creation);
  if (g_caches.load(std::memory_order_relaxed) == nullptr)
    g_caches.store(new ProcessCaches(), std::memory_order_release);
  return *g_caches.load(std::memory_order_relaxed);
}

}  // namespace

EmbagKernelCache& embag_kernel_cache() { return process_caches().embag; }

GemmKernelCache& gemm_kernel_cache() { return process_caches().gemm; }

KernelCacheCounters process_kernel_cache_stats() {
  const ProcessCaches& caches = process_caches();
  const KernelCacheCounters e = caches.embag.stats(), g = caches.gemm.stats();
  KernelCacheCounters s;
  s.hits = e.hits + g.hits;
  s.misses = e.misses + g.misses;
  s.compilations = e.compilations + g.compilations;
  s.failed_compilations = e.failed_compilations + g.failed_compilations;
  s.compile_time_ns = e.compile_time_ns + g.compile_time_ns;
  s.code_bytes = e.code_bytes + g.code_bytes;
  s.kernels = e.kernels + g.kernels;
  s.generic_fallbacks = e.generic_fallbacks + g.generic_fallbacks;
  s.code_limit_bytes = caches.budget->limit();
  return s;
}

// Each cache's lock is taken after the creation mutex, embedding bags' before GEMMs'; no path
// holds both cache locks at once.
void kernel_cache_fork_prepare() {
  g_cache_creation.lock();
  if (ProcessCaches* c = g_caches.load(std::memory_order_relaxed)) {
    c->embag.lock_for_fork();
    c->gemm.lock_for_fork();
  }
}

void kernel_cache_fork_parent() {
  if (ProcessCaches* c = g_caches.load(std::memory_order_relaxed)) {
    c->gemm.unlock_in_parent();
    c->embag.unlock_in_parent();
  }
  g_cache_creation.unlock();
}

void kernel_cache_fork_child() {
  if (ProcessCaches* c = g_caches.load(std::memory_order_relaxed)) {
    c->embag.reset_in_child();
    c->gemm.reset_in_child();
  }
  new (&g_cache_creation) std::mutex();  // fresh, as every lock in the child (fork_handlers.hpp)
}

}  // namespace shapejit::rt

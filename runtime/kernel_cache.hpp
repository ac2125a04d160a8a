// The embedding-bag kernel cache: EmbagKey -> generated kernel, compiled once per key even when
// many threads ask at the same time, with statistics and a bound on JIT code memory.
#pragma once

#include <asmjit/core.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "jit/embag_codegen.hpp"
#include "jit/embag_kernel.hpp"
#include "jit/runtime_add.hpp"

namespace shapejit::rt {

/// Generates the kernel of one key into the runtime; throws shapejit::Error on failure. Before
/// adding any code it must ask the admission with the code's exact size, once; when refused it
/// adds nothing and returns a null fn (jit::generate_embag_kernel_admitted does all this).
using EmbagCompileFn = std::function<jit::GeneratedEmbagKernel(const jit::EmbagKey&, asmjit::JitRuntime&,
                                                               const jit::CodeAdmission&)>;

/// A snapshot of a cache's counters.
struct EmbagCacheStats {
  int64_t hits = 0;                 ///< lookups served by a cached or in-flight compilation
  int64_t misses = 0;               ///< lookups that started a compilation
  int64_t compilations = 0;         ///< compilations that succeeded
  int64_t failed_compilations = 0;  ///< compilations that threw (never cached)
  int64_t compile_time_ns = 0;      ///< wall time of all compilations, failed ones included
  int64_t code_bytes = 0;           ///< code held by the cache's kernels
  int64_t kernels = 0;              ///< kernels held
  int64_t generic_fallbacks = 0;    ///< lookups answered by the generic kernel at the code bound
                                    ///< (refused before or after emitting the key's code)
  int64_t code_limit_bytes = 0;     ///< the bound in force
};

/// A kernel fetched once and called without a lookup. Valid while its cache lives (kernels
/// are never evicted); a default-constructed handle is empty.
class EmbagKernelHandle {
 public:
  EmbagKernelHandle() = default;
  EmbagKernelHandle(const jit::EmbagKey& key, jit::EmbagKernelFn fn, bool generic)
      : key_(key), fn_(fn), generic_(generic) {}

  /// Runs the kernel on one range of bags.
  void operator()(const jit::EmbagKernelArgs& args) const { fn_(&args); }
  jit::EmbagKernelFn fn() const { return fn_; }
  const jit::EmbagKey& key() const { return key_; }
  /// True when this is the generic C++ kernel (which reads D from the arguments).
  bool generic() const { return generic_; }
  explicit operator bool() const { return fn_ != nullptr; }

 private:
  jit::EmbagKey key_{};
  jit::EmbagKernelFn fn_ = nullptr;
  bool generic_ = false;
};

/// EmbagKey -> kernel. Generation runs outside the lock; concurrent askers of a key being
/// compiled wait for that one result; a failed compilation is reported to every waiter and
/// retried by the next lookup. Keys with isa kScalar or dim 0 are served by the generic kernel
/// directly (no map entry, not counted).
///
/// The code held never exceeds the limit, however many threads compile at once: a compilation
/// starts only after reserving an estimate of its size (the largest kernel emitted so far, at
/// least one byte) within the limit, and its code is added only after the reservation has been
/// settled to the exact emitted size, still within the limit. A key refused at either point is
/// served by the generic kernel (not cached: raising the limit lets it compile).
class EmbagKernelCache {
 public:
  static constexpr int64_t kDefaultCodeLimitBytes = int64_t{64} << 20;

  /// `compile` defaults to jit::generate_embag_kernel; `code_limit_bytes` < 0 means
  /// default_code_limit_bytes().
  explicit EmbagKernelCache(EmbagCompileFn compile = {}, int64_t code_limit_bytes = -1);
  ~EmbagKernelCache();
  EmbagKernelCache(const EmbagKernelCache&) = delete;
  EmbagKernelCache& operator=(const EmbagKernelCache&) = delete;

  /// The kernel of `key`, compiling it if needed. Throws shapejit::Error when compilation fails
  /// (kInternalError for non-shapejit exceptions, kOutOfMemory for bad_alloc).
  EmbagKernelHandle get(const jit::EmbagKey& key);
  /// The kernel of `resolve(wanted)` (get()), with the calling thread's last answer in front:
  /// asking again for the same `wanted` costs a key compare, no lock, no hash and no call of
  /// `resolve` (a pure function of the key: the API's fallback to the generic kernel). The
  /// thread's answer is tied to this cache's epoch, which no other cache shares, so a kernel of
  /// a destroyed cache (or of another one) is never served.
  /// A generic fallback at the code bound is never remembered (a raised bound replaces it, and
  /// every such lookup is counted), and a remembered answer counts as the hit get() would count.
  EmbagKernelHandle get_remembered(const jit::EmbagKey& wanted, jit::EmbagKey (*resolve)(const jit::EmbagKey&));
  /// Counters so far.
  EmbagCacheStats stats() const;
  /// Sets the bound on JIT code bytes (< 0 restores the default). Lowering it below the code
  /// already held only stops new compilations: running kernels are never freed under callers.
  void set_code_limit_bytes(int64_t bytes);

  // The fork handlers' part (runtime/fork_handlers.hpp): the map is locked across fork(), and
  // the child drops what belonged to the parent's compiling threads.
  void lock_for_fork() { mutex_.lock(); }
  void unlock_in_parent() { mutex_.unlock(); }
  void reset_in_child();

 private:
  struct Compiled {
    jit::EmbagKernelFn fn = nullptr;
    bool generic = false;
  };
  // A key's entry: in flight (pending valid, ready.fn null) or compiled (ready.fn set).
  struct Slot {
    std::shared_future<Compiled> pending;
    Compiled ready;
  };
  Compiled compile_now(const jit::EmbagKey& key, asmjit::JitRuntime& runtime, std::promise<Compiled>& promise,
                       int64_t reserved);
  // The runtime new code goes to, replacing one inherited from a forking parent first (may throw
  // std::bad_alloc). Called with mutex_ held.
  asmjit::JitRuntime& runtime_for_new_code_locked();
  // Settles a compilation's reservation from `held` to `bytes`; false (nothing changed) when
  // growing it would pass the limit. Called with mutex_ held.
  bool settle_reservation_locked(int64_t& held, int64_t bytes);
  EmbagKernelHandle get_slow(const jit::EmbagKey& key);

  EmbagCompileFn compile_;
  // The runtime that owns the generated code (W^X: runtime/jit_memory.hpp). Replaced only in a
  // forked child, before its first compilation, under mutex_; compilations take it under mutex_.
  std::unique_ptr<asmjit::JitRuntime> runtime_;
  // Set in a forked child: runtime_'s allocator is a copy of the parent's, and with dual mapping
  // its code pages are shared with the parent, so both would place new kernels at the same free
  // address and overwrite each other's code. Its kernels stay in use; new code goes elsewhere.
  bool runtime_inherited_ = false;
  // Shared for the hit path (many callers at once), exclusive to insert, publish or erase.
  mutable std::shared_mutex mutex_;
  std::unordered_map<jit::EmbagKey, Slot, jit::EmbagKeyHash> kernels_;
  std::atomic<int64_t> hits_{0};  // counted under the shared lock
  EmbagCacheStats stats_;         // the other counters; code_limit_bytes is the live limit
  int64_t reserved_bytes_ = 0;    // held by compilations in flight, counted against the limit
  int64_t largest_emitted_ = 0;   // the reservation a new compilation starts with (>= 1 byte)
  // What threads' remembered answers are valid for (get_remembered). Kernels are never dropped,
  // so one epoch lasts the cache's life; anything that dropped them would have to renew it.
  const uint64_t epoch_;
};

/// SHAPEJIT_CODE_LIMIT_BYTES when it is a non-negative integer (otherwise ignored with one
/// message on stderr), else EmbagKernelCache::kDefaultCodeLimitBytes.
int64_t default_code_limit_bytes();

/// The process-wide cache the API uses (created on first use, never destroyed so that
/// kernels stay valid for threads still running at exit). Its fork handling: docs/fork.md.
EmbagKernelCache& embag_kernel_cache();

}  // namespace shapejit::rt

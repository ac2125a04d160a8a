// The kernel cache: key -> generated kernel, compiled once per key even when many threads ask at
// the same time, with statistics. One template serves every kind of kernel (embedding bags by
// EmbagKey, linear groups' GEMM microkernels by GemmKey), and the process's caches count against
// one bound on JIT code memory (CodeBudget).
#pragma once

#include <asmjit/core.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "jit/embag_codegen.hpp"
#include "jit/embag_kernel.hpp"
#include "jit/gemm_codegen.hpp"
#include "jit/gemm_kernel.hpp"
#include "jit/runtime_add.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {

/// What a cache must know of one kind of kernel: specialised per key type below.
template <class Key>
struct KernelKind;

/// Embedding-bag kernels: the generic C++ kernel serves isa kScalar and dim 0 directly, and any
/// key refused at the code bound.
template <>
struct KernelKind<jit::EmbagKey> {
  using Hash = jit::EmbagKeyHash;
  using Fn = jit::EmbagKernelFn;
  using Generated = jit::GeneratedEmbagKernel;
  /// Keys no generator takes, served by generic() without a map entry and not counted.
  static bool served_generic(const jit::EmbagKey& key);
  /// The kernel for a key the cache does not compile.
  static Fn generic(const jit::EmbagKey& key);
  /// The default compiler: jit::generate_embag_kernel_admitted.
  static Generated generate(const jit::EmbagKey& key, asmjit::JitRuntime& runtime, const jit::CodeAdmission& admit);
};

/// Linear groups' GEMM microkernels: there is no generic kernel; a key refused at the code bound
/// gets an empty handle marked generic, and its group runs the scalar reference.
template <>
struct KernelKind<jit::GemmKey> {
  using Hash = jit::GemmKeyHash;
  using Fn = jit::GemmKernelFn;
  using Generated = jit::GeneratedGemmKernel;
  static bool served_generic(const jit::GemmKey&) { return false; }
  static Fn generic(const jit::GemmKey&) { return nullptr; }
  /// The default compiler: jit::generate_gemm_kernel_admitted.
  static Generated generate(const jit::GemmKey& key, asmjit::JitRuntime& runtime, const jit::CodeAdmission& admit);
};

/// Generates the kernel of one key into the runtime; throws shapejit::Error on failure. Before
/// adding any code it must ask the admission with the code's exact size, once; when refused it
/// adds nothing and returns a null fn (jit::generate_*_kernel_admitted do all this).
template <class Key>
using KernelCompileFn = std::function<typename KernelKind<Key>::Generated(const Key&, asmjit::JitRuntime&,
                                                                          const jit::CodeAdmission&)>;
using EmbagCompileFn = KernelCompileFn<jit::EmbagKey>;
using GemmCompileFn = KernelCompileFn<jit::GemmKey>;

/// A snapshot of a cache's counters.
struct KernelCacheCounters {
  int64_t hits = 0;                 ///< lookups served by a cached or in-flight compilation
  int64_t misses = 0;               ///< lookups that started a compilation
  int64_t compilations = 0;         ///< compilations that succeeded
  int64_t failed_compilations = 0;  ///< compilations that threw (never cached)
  int64_t compile_time_ns = 0;      ///< wall time of all compilations, failed ones included
  int64_t code_bytes = 0;           ///< code held by the cache's kernels
  int64_t kernels = 0;              ///< kernels held
  int64_t generic_fallbacks = 0;    ///< lookups refused at the code bound (refused before or
                                    ///< after emitting the key's code): the generic kernel, or
                                    ///< for a GEMM key the group's reference path, serves them
  int64_t code_limit_bytes = 0;     ///< the bound in force (of the cache's CodeBudget)
};

/// The bound on JIT code memory that one or more caches count against together: the code they
/// hold plus the reservations of their compilations in flight never exceed the limit. Each
/// cache changes it only under its own lock; the counters are atomics, so caches never share a
/// lock (and a fork needs nothing of it: see KernelCache::reset_in_child).
class CodeBudget {
 public:
  /// `limit_bytes` < 0 means default_code_limit_bytes().
  explicit CodeBudget(int64_t limit_bytes = -1);
  /// Settles a reservation from `held` to `bytes`; false (nothing changed) when growing it would
  /// pass the limit.
  bool settle(int64_t& held, int64_t bytes);
  /// Gives a reservation (or code) of `bytes` back.
  void release(int64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  int64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  /// < 0 restores the default. Below what is held it only stops new compilations.
  void set_limit(int64_t bytes);

 private:
  std::atomic<int64_t> used_{0};  // code held and reserved, by every cache counted here
  std::atomic<int64_t> limit_;
};

/// A kernel fetched once and called without a lookup. Valid while its cache lives (kernels
/// are never evicted); a default-constructed handle is empty.
template <class Key>
class KernelHandle {
 public:
  using Fn = typename KernelKind<Key>::Fn;
  KernelHandle() = default;
  KernelHandle(const Key& key, Fn fn, bool generic) : key_(key), fn_(fn), generic_(generic) {}

  /// Runs the kernel (on one range of bags, one tile...).
  template <class Args>
  void operator()(const Args& args) const {
    fn_(&args);
  }
  Fn fn() const { return fn_; }
  const Key& key() const { return key_; }
  /// True when no generated code serves the key: the generic C++ kernel (which reads D from
  /// the arguments) of an embedding bag, or none (fn null) for a GEMM key at the code bound.
  bool generic() const { return generic_; }
  explicit operator bool() const { return fn_ != nullptr; }

 private:
  Key key_{};
  Fn fn_ = nullptr;
  bool generic_ = false;
};
using EmbagKernelHandle = KernelHandle<jit::EmbagKey>;
using GemmKernelHandle = KernelHandle<jit::GemmKey>;

/// Key -> kernel. Generation runs outside the lock; concurrent askers of a key being compiled
/// wait for that one result; a failed compilation is reported to every waiter and retried by the
/// next lookup. Keys KernelKind<Key>::served_generic names are served by the generic kernel
/// directly (no map entry, not counted).
///
/// The code held never exceeds the budget's limit, however many threads compile at once: a
/// compilation starts only after reserving an estimate of its size (the largest kernel this
/// cache emitted so far, at least one byte) within the limit, and its code is added only after
/// the reservation has been settled to the exact emitted size, still within the limit. A key
/// refused at either point is served by the generic kernel (not cached: raising the limit lets
/// it compile).
template <class Key>
class KernelCache {
 public:
  using Kind = KernelKind<Key>;
  using Fn = typename Kind::Fn;
  using Handle = KernelHandle<Key>;
  using CompileFn = KernelCompileFn<Key>;

  /// `compile` defaults to Kind::generate; the cache has a budget of its own with
  /// `code_limit_bytes` (< 0 means default_code_limit_bytes()).
  explicit KernelCache(CompileFn compile = {}, int64_t code_limit_bytes = -1);
  /// A cache counting against `budget`, which other caches may share.
  KernelCache(CompileFn compile, std::shared_ptr<CodeBudget> budget);
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  /// The kernel of `key`, compiling it if needed. Throws shapejit::Error when compilation fails
  /// (kInternalError for non-shapejit exceptions, kOutOfMemory for bad_alloc).
  Handle get(const Key& key);
  /// The kernel of `resolve(wanted)` (get()), with the calling thread's last answer in front:
  /// asking again for the same `wanted` costs a key compare, no lock, no hash and no call of
  /// `resolve` (a pure function of the key: the API's fallback to the generic kernel). The
  /// thread's answer is tied to this cache's epoch, which no other cache shares, so a kernel of
  /// a destroyed cache (or of another one) is never served.
  /// A generic fallback at the code bound is never remembered (a raised bound replaces it, and
  /// every such lookup is counted), and a remembered answer counts as the hit get() would count.
  Handle get_remembered(const Key& wanted, Key (*resolve)(const Key&));
  /// Whether `handle` is the generic kernel standing in for a key the code bound refused: such
  /// an answer is never remembered (a raised bound replaces it, and every such lookup is counted).
  static bool bound_fallback(const Handle& handle) { return handle.generic() && !Kind::served_generic(handle.key()); }
  /// Counts the use of an answer a caller remembered as the hit get() would count.
  void count_remembered(const Handle& handle) {
    if (!handle.generic()) hits_.fetch_add(1, std::memory_order_relaxed);
  }
  /// Counters so far.
  KernelCacheCounters stats() const;
  /// Sets the bound on JIT code bytes of the cache's budget, for every cache sharing it (< 0
  /// restores the default). Lowering it below the code already held only stops new
  /// compilations: running kernels are never freed under callers.
  void set_code_limit_bytes(int64_t bytes);

  // The fork handlers' part (runtime/engine/fork_handlers.hpp): the map is locked across fork(), and
  // the child drops what belonged to the parent's compiling threads.
  void lock_for_fork() { mutex_.lock(); }
  void unlock_in_parent() { mutex_.unlock(); }
  void reset_in_child();

 private:
  struct Compiled {
    Fn fn = nullptr;
    bool generic = false;
  };
  // What waiters of an in-flight compilation receive. A failure travels as a status and a message
  // held by the future's shared state (never as one exception object shared between threads: its
  // reference count lives in uninstrumented libsupc++), and each waiter throws its own Error.
  struct Outcome {
    Compiled compiled;
    Status failure = Status::kOk;
    std::string message;
  };
  // A key's entry: in flight (pending valid, ready.fn null) or compiled (ready.fn set).
  struct Slot {
    std::shared_future<Outcome> pending;
    Compiled ready;
  };
  Compiled compile_now(const Key& key, asmjit::JitRuntime& runtime, std::promise<Outcome>& promise,
                       int64_t reserved);
  // The runtime new code goes to, replacing one inherited from a forking parent first (may throw
  // std::bad_alloc). Called with mutex_ held.
  asmjit::JitRuntime& runtime_for_new_code_locked();
  // Settles a compilation's reservation from `held` to `bytes` in the budget; false (nothing
  // changed) when growing it would pass the limit. Called with mutex_ held.
  bool settle_reservation_locked(int64_t& held, int64_t bytes);
  // Gives a compilation's whole reservation back. Called with mutex_ held.
  void release_reservation_locked(int64_t held);
  Handle get_slow(const Key& key);

  CompileFn compile_;
  std::shared_ptr<CodeBudget> budget_;
  // The runtime that owns the generated code (W^X: runtime/engine/jit_memory.hpp). Replaced only in a
  // forked child, before its first compilation, under mutex_; compilations take it under mutex_.
  std::unique_ptr<asmjit::JitRuntime> runtime_;
  // Set in a forked child: runtime_'s allocator is a copy of the parent's, and with dual mapping
  // its code pages are shared with the parent, so both would place new kernels at the same free
  // address and overwrite each other's code. Its kernels stay in use; new code goes elsewhere.
  bool runtime_inherited_ = false;
  // Shared for the hit path (many callers at once), exclusive to insert, publish or erase.
  mutable std::shared_mutex mutex_;
  std::unordered_map<Key, Slot, typename Kind::Hash> kernels_;
  std::atomic<int64_t> hits_{0};  // counted under the shared lock
  KernelCacheCounters stats_;     // the other counters; code_limit_bytes is the budget's
  int64_t reserved_bytes_ = 0;    // this cache's part of the budget held by compilations in flight
  int64_t largest_emitted_ = 0;   // the reservation a new compilation starts with (>= 1 byte)
  // What threads' remembered answers are valid for (get_remembered). Kernels are never dropped,
  // so one epoch lasts the cache's life; anything that dropped them would have to renew it.
  const uint64_t epoch_;
};

using EmbagKernelCache = KernelCache<jit::EmbagKey>;
using GemmKernelCache = KernelCache<jit::GemmKey>;

/// The bound a budget has unless told otherwise: 64 MiB.
inline constexpr int64_t kDefaultCodeLimitBytes = int64_t{64} << 20;

/// SHAPEJIT_CODE_LIMIT_BYTES when it is a non-negative integer (otherwise ignored with one
/// message on stderr), else kDefaultCodeLimitBytes.
int64_t default_code_limit_bytes();

/// The process-wide caches the API uses, counting against one CodeBudget (created together on
/// first use, never destroyed so that kernels stay valid for threads still running at exit).
/// Their fork handling: docs/fork.md.
EmbagKernelCache& embag_kernel_cache();
GemmKernelCache& gemm_kernel_cache();

/// The process caches' counters summed (what shapejit_kernel_cache_stats reports).
KernelCacheCounters process_kernel_cache_stats();

}  // namespace shapejit::rt

// Engine-wide settings seen from PyTorch (torch_engine.hpp): the thread count, which follows
// at::get_num_threads() unless set explicitly, and the version, ISA and cache queries.
#include "python/torch_engine.hpp"

#include <ATen/Parallel.h>
#include <ATen/core/Dict.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "jit/isa.hpp"
#include "python/torch_glue.hpp"
#include "runtime/engine/engine_arena.hpp"
#include "runtime/engine/isa_select.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/version.h"

namespace shapejit::torch_ext {
namespace {

// The torch thread count last given to the engine while following (0: none yet, so the first
// call applies torch's), or kExplicit after set_num_threads(n > 0). One atomic, so an op's fast
// path is one load and one comparison after at::get_num_threads().
constexpr int kExplicit = -1;
std::atomic<int> followed{0};
// Serialises changes (the slow paths); the fast path never takes it.
std::mutex change_mutex;

void resize_engine(int n, const char* what) { check_status(shapejit_set_num_threads(n), what); }

// Under change_mutex: gives the engine torch's count unless a count was set explicitly meanwhile.
void apply_torch_threads_locked(int torch_threads) {
  if (followed.load(std::memory_order_relaxed) == kExplicit) return;
  // torch may run more threads than CPUs; the engine's arena cannot (rt::runnable_threads).
  resize_engine(std::clamp(torch_threads, 1, rt::runnable_threads()), "follow_torch_threads");
  followed.store(torch_threads, std::memory_order_relaxed);
}

std::string version() { return SHAPEJIT_VERSION_STRING; }

std::string isa() { return std::string(jit::isa_name(rt::selected_isa())); }

// Every field of the engine's statistics, under the C struct's field names.
c10::Dict<std::string, int64_t> kernel_cache_stats() {
  shapejit_kernel_cache_stats s{};
  check_status(shapejit_get_kernel_cache_stats_sized(&s, sizeof s), "kernel_cache_stats");
  c10::Dict<std::string, int64_t> d;
  d.insert("hits", s.hits);
  d.insert("misses", s.misses);
  d.insert("compilations", s.compilations);
  d.insert("failed_compilations", s.failed_compilations);
  d.insert("compile_time_ns", s.compile_time_ns);
  d.insert("code_bytes", s.code_bytes);
  d.insert("kernels", s.kernels);
  d.insert("generic_fallbacks", s.generic_fallbacks);
  d.insert("code_limit_bytes", s.code_limit_bytes);
  d.insert("reference_linear_groups", s.reference_linear_groups);
  return d;
}

// The engine's arena size now: the explicit count, or torch's as of the latest shapejit op
// (capped at max_num_threads()).
int64_t get_num_threads() { return shapejit_get_num_threads(); }

// The largest count the engine can run at once (rt::runnable_threads).
int64_t max_num_threads() { return rt::runnable_threads(); }

// n > 0 fixes the engine's count; 0 returns to following torch (applied at once).
void set_num_threads(int64_t n) {
  TORCH_CHECK(n >= 0, "shapejit.set_num_threads: n = ", n,
              " is negative (0 follows torch.get_num_threads(), n > 0 fixes n threads)");
  TORCH_CHECK(n <= rt::runnable_threads(), "shapejit.set_num_threads: n = ", n, " exceeds the ",
              rt::runnable_threads(), " threads the engine can run at once (shapejit.max_num_threads(): the CPUs "
              "this process may use, as oneTBB counts them)");
  std::lock_guard lock(change_mutex);
  if (n > 0) {
    resize_engine(static_cast<int>(n), "set_num_threads");
    followed.store(kExplicit, std::memory_order_relaxed);
  } else {
    followed.store(0, std::memory_order_relaxed);
    apply_torch_threads_locked(at::get_num_threads());
  }
}

}  // namespace

void follow_torch_threads() {
  const int last = followed.load(std::memory_order_relaxed);
  if (last == kExplicit) return;
  const int torch_threads = at::get_num_threads();
  if (torch_threads == last) return;  // the common case: nothing changed
  std::lock_guard lock(change_mutex);
  apply_torch_threads_locked(torch_threads);
}

void register_engine_ops(torch::Library& m) {
  m.def("version() -> str", &version);
  m.def("isa() -> str", &isa);
  m.def("kernel_cache_stats() -> Dict(str, int)", &kernel_cache_stats);
  m.def("get_num_threads() -> int", &get_num_threads);
  m.def("set_num_threads(int n) -> ()", &set_num_threads);
  m.def("max_num_threads() -> int", &max_num_threads);
}

}  // namespace shapejit::torch_ext

// Public C and C++ entry points of the engine statistics and the code-memory bound.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "runtime/engine/engine_stats.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "runtime/engine/last_error.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"

namespace shapejit {

KernelCacheStats kernel_cache_stats() {
  const rt::KernelCacheCounters s = rt::process_kernel_cache_stats();
  KernelCacheStats out;
  out.hits = s.hits;
  out.misses = s.misses;
  out.compilations = s.compilations;
  out.failed_compilations = s.failed_compilations;
  out.compile_time_ns = s.compile_time_ns;
  out.code_bytes = s.code_bytes;
  out.kernels = s.kernels;
  out.generic_fallbacks = s.generic_fallbacks;
  out.code_limit_bytes = s.code_limit_bytes;
  out.reference_linear_groups = rt::reference_linear_groups();
  return out;
}

void set_code_memory_limit(int64_t bytes) { rt::embag_kernel_cache().set_code_limit_bytes(bytes); }

}  // namespace shapejit

namespace {

// The struct of shapejit 0.1 ended after code_limit_bytes: the unsized call writes no further.
constexpr size_t kStatsSize01 = offsetof(shapejit_kernel_cache_stats, reference_linear_groups);

// Copies the fields of `s` that lie wholly in the caller's first `size` bytes (C structs of
// int64_t fields only, so a byte prefix that is a multiple of 8 is a prefix of fields).
void fill_stats(shapejit_kernel_cache_stats* out, size_t size) {
  const shapejit::KernelCacheStats s = shapejit::kernel_cache_stats();
  const shapejit_kernel_cache_stats all{s.hits,       s.misses,           s.compilations,
                                        s.failed_compilations, s.compile_time_ns, s.code_bytes,
                                        s.kernels,    s.generic_fallbacks, s.code_limit_bytes,
                                        s.reference_linear_groups};
  static_assert(sizeof all % sizeof(int64_t) == 0, "only int64_t fields: no padding to copy");
  const size_t bytes = std::min(size, sizeof all) / sizeof(int64_t) * sizeof(int64_t);
  std::memcpy(out, &all, bytes);
}

void require_stats_pointer(const void* stats, const char* function) {
  if (stats == nullptr)
    throw shapejit::Error(shapejit::Status::kInvalidArgument,
                          std::string(function) + ": stats is NULL; it must point to a shapejit_kernel_cache_stats to fill");
}

}  // namespace

extern "C" shapejit_status shapejit_get_kernel_cache_stats(shapejit_kernel_cache_stats* stats) {
  return shapejit::rt::guarded([&] {
    require_stats_pointer(stats, "shapejit_get_kernel_cache_stats");
    fill_stats(stats, kStatsSize01);
  });
}

extern "C" shapejit_status shapejit_get_kernel_cache_stats_sized(shapejit_kernel_cache_stats* stats,
                                                                 size_t stats_size) {
  return shapejit::rt::guarded([&] {
    require_stats_pointer(stats, "shapejit_get_kernel_cache_stats_sized");
    if (stats_size < kStatsSize01)
      throw shapejit::Error(shapejit::Status::kInvalidArgument,
                            "shapejit_get_kernel_cache_stats_sized: stats_size is " + std::to_string(stats_size) +
                                "; it must be at least " + std::to_string(kStatsSize01) +
                                " (the nine fields every version has); pass sizeof(shapejit_kernel_cache_stats)");
    fill_stats(stats, stats_size);
  });
}

extern "C" shapejit_status shapejit_set_code_memory_limit(int64_t bytes) {
  return shapejit::rt::guarded([&] { shapejit::set_code_memory_limit(bytes); });
}

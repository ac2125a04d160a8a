// Public C and C++ entry points of the kernel cache: statistics and the code-memory bound.
#include "runtime/kernel_cache.hpp"
#include "runtime/last_error.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"

namespace shapejit {

KernelCacheStats kernel_cache_stats() {
  const rt::EmbagCacheStats s = rt::embag_kernel_cache().stats();
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
  return out;
}

void set_code_memory_limit(int64_t bytes) { rt::embag_kernel_cache().set_code_limit_bytes(bytes); }

}  // namespace shapejit

extern "C" shapejit_status shapejit_get_kernel_cache_stats(shapejit_kernel_cache_stats* stats) {
  return shapejit::rt::guarded([&] {
    if (stats == nullptr)
      throw shapejit::Error(shapejit::Status::kInvalidArgument,
                            "shapejit_get_kernel_cache_stats: stats is NULL; it must point to a "
                            "shapejit_kernel_cache_stats to fill");
    const shapejit::KernelCacheStats s = shapejit::kernel_cache_stats();
    *stats = shapejit_kernel_cache_stats{s.hits,         s.misses,           s.compilations,
                                         s.failed_compilations, s.compile_time_ns, s.code_bytes,
                                         s.kernels,      s.generic_fallbacks, s.code_limit_bytes};
  });
}

extern "C" shapejit_status shapejit_set_code_memory_limit(int64_t bytes) {
  return shapejit::rt::guarded([&] { shapejit::set_code_memory_limit(bytes); });
}

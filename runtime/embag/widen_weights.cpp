#include "runtime/embag/widen_weights.hpp"

#include "jit/host_features.hpp"
#include "ref/float16.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace shapejit::rt {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void widen_f16c(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}
#endif

}  // namespace

DType kernel_weight_dtype(DType psw) {
#if defined(__x86_64__)
  if (psw == DType::kF16) return DType::kF32;
#endif
  return psw;
}

void widen_f16_weights(const void* src, int64_t n, float* dst) {
  const auto* words = static_cast<const uint16_t*>(src);
#if defined(__x86_64__)
  static const bool f16c = [] {
    const jit::HostFeatures& h = jit::host_features();
    return h.f16c && h.avx2 && h.os_avx_state;
  }();
  if (f16c) return widen_f16c(words, n, dst);
#endif
  // No F16C: no x86 kernel runs on this host (the scalar ISA's reference reads the caller's).
  for (int64_t i = 0; i < n; ++i) dst[i] = ref::f16_to_f32(words[i]);
}

}  // namespace shapejit::rt

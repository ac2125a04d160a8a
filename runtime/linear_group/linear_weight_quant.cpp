#include "runtime/linear_group/linear_weight_quant.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/linear_group/linear_group_plan.hpp"

namespace shapejit::rt {

void quantize_weight_rows(shapejit_linear_quant quant, const float* w, int64_t rows, int64_t k, int64_t ldw,
                          int8_t* codes, float* scales) {
  const bool int4 = linear_int4_weights(quant);
  const float top = int4 ? 7.0f : 127.0f, bottom = int4 ? -8.0f : -127.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * ldw;
    int8_t* out = codes + r * k;
    float amax = 0.0f;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(row[i]));
    const float s = amax / top;  // one f32 division, as the rule says
    scales[r] = s;
    if (s == 0.0f) {
      std::fill_n(out, k, int8_t(0));
      continue;
    }
    // nearbyint rounds half to even in the default rounding mode (never changed by the library).
    for (int64_t i = 0; i < k; ++i) out[i] = int8_t(std::clamp(std::nearbyint(row[i] / s), bottom, top));
  }
}

}  // namespace shapejit::rt

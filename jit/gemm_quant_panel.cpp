#include "jit/gemm_quant_panel.hpp"

#include <cstring>

namespace shapejit::jit {
namespace {

uint8_t nibbles(int8_t low, int8_t high) { return uint8_t((low & 0xF) | ((high & 0xF) << 4)); }

}  // namespace

void pack_quant_panel(const GemmKey& key, const int8_t* codes, int64_t ld_codes, int64_t cols,
                      const float* wscale, const float* bias, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, size_t(gemm_panel_bytes(key)));
  const int64_t w = gemm_panel_width(key), k = key.k, kp = gemm_padded_k(key);
  // The code of column c at depth kk, zero in the padding past k.
  auto code = [&](int64_t c, int64_t kk) -> int8_t { return kk < k ? codes[c * ld_codes + kk] : int8_t(0); };

  for (int64_t c = 0; c < cols; ++c) {
    switch (key.quant) {
      case GemmQuant::kQd8Qc8w:
        for (int64_t g = 0; g < kp / 4; ++g)
          for (int64_t j = 0; j < 4; ++j) out[(g * w + c) * 4 + j] = uint8_t(code(c, 4 * g + j));
        break;
      case GemmQuant::kQd8Qc4w:
        for (int64_t g = 0; g < kp / 8; ++g)
          for (int64_t j = 0; j < 4; ++j) out[(g * w + c) * 4 + j] = nibbles(code(c, 8 * g + j), code(c, 8 * g + 4 + j));
        break;
      case GemmQuant::kF32Qc8w:
        for (int64_t kk = 0; kk < k; ++kk) out[kk * w + c] = uint8_t(code(c, kk));
        break;
      case GemmQuant::kF32Qc4w:
        if (gemm_int4_planes(key)) {
          for (int64_t g = 0; g < kp / 8; ++g) {
            uint32_t planes = 0;
            for (int64_t t = 0; t < 8; ++t) planes |= uint32_t(code(c, 8 * g + t) & 0xF) << (4 * t);
            for (int64_t j = 0; j < 4; ++j) out[(g * w + c) * 4 + j] = uint8_t(planes >> (8 * j));  // little-endian
          }
          break;
        }
        for (int64_t j = 0; j < kp / 2; ++j) out[j * w + c] = nibbles(code(c, 2 * j), code(c, 2 * j + 1));
        break;
      case GemmQuant::kF32: break;
    }
  }
  const GemmPanelOffsets o = gemm_panel_offsets(key);
  for (int64_t c = 0; c < cols; ++c) {
    if (o.colsum >= 0) {
      int32_t sum = 0;
      for (int64_t kk = 0; kk < k; ++kk) sum += codes[c * ld_codes + kk];
      std::memcpy(out + o.colsum + c * 4, &sum, 4);
    }
    if (o.wscale >= 0) std::memcpy(out + o.wscale + c * 4, &wscale[c], 4);
    if (o.bias >= 0) std::memcpy(out + o.bias + c * 4, &bias[c], 4);
  }
}

}  // namespace shapejit::jit

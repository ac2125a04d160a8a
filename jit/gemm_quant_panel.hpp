// Writing one panel of a quantized GEMM kernel's layout (jit/gemm_kernel.hpp): the one
// implementation of that layout outside the emitters, used by the runtime's packing and by the
// kernel tests alike.
#pragma once

#include <cstdint>

#include "jit/gemm_kernel.hpp"

namespace shapejit::jit {

/// Writes the panel of `key` (a quantized form) for columns [0, cols) (cols <= key.nc) at
/// `dst` (gemm_panel_bytes(key) bytes; every byte is written, zero where the layout has no
/// value). Column c's k codes are codes[c * ld_codes + kk], one code per byte, in the form's
/// range ([-127, 127] for qc8w, [-8, 7] for qc4w); wscale[c] its scale; bias[c] its bias
/// (read only when key.bias).
void pack_quant_panel(const GemmKey& key, const int8_t* codes, int64_t ld_codes, int64_t cols,
                      const float* wscale, const float* bias, void* dst);

}  // namespace shapejit::jit

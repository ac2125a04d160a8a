// The contract between the runtime and a generated linear-group (GEMM) microkernel: what it is
// specialised on (GemmKey), the packed-panel layout both sides agree on, and what it receives
// at run time (GemmKernelArgs).
//
// A kernel computes an mr x nc tile per panel, for `panels` consecutive panels of one part:
//   Y[r, c] = act(sum_k X[r, k] * P[k, c] + bias[c]) * scale
// where P is a panel of the packed weight ([k][nv * lanes] floats, then the bias row).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "jit/isa.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

/// How a kernel addresses its output.
enum class GemmStore : int {
  kRowMajor = 0,  ///< Y[r, c] at c_base + r * ldc + c * 4 (bytes)
  kTable = 1,     ///< Y[r, c] at c_base + row_off[r] + col_off[c / lanes] + (c % lanes) * 4
};

/// Floats per vector register (jit/isa.hpp: 16 for AVX-512, 8 for AVX2, 4 for NEON).
constexpr int64_t gemm_lanes(Isa isa) { return isa_traits(isa).lanes; }

/// Accumulator registers a kernel of `nv` vectors per panel may use on `isa` (x86: what the
/// nv weight vectors and two broadcast temporaries leave, at most 24; NEON: what the nv weights
/// leave, one X register per row besides): the one register budget of gemm_max_mr and the
/// emitters' partial-sum sets.
int gemm_accumulator_budget(Isa isa, int nv);

/// Largest row count a kernel of `nv` vectors per panel may have on `isa` (register budget:
/// mr * nv accumulators, nv weight vectors and two broadcast temporaries, or on NEON one X
/// register per row; at most 8 rows).
int gemm_max_mr(Isa isa, int nv);

/// Everything generated code is specialised on.
struct GemmKey {
  Isa isa = Isa::kAvx512;
  int mr = 8;           ///< rows of X computed per call (1..gemm_max_mr)
  int nc = 48;          ///< valid columns per panel; the panel holds nv() = ceil(nc / lanes) vectors
  int64_t k = 1;        ///< reduction length K >= 1
  bool bias = false;    ///< the panel carries a bias row, added before the activation
  Activation act = Activation::kNone;
  bool scale = false;   ///< multiply by GemmKernelArgs::scale after the activation
  GemmStore store = GemmStore::kRowMajor;
  int prefetch = 0;     ///< software prefetch of the weight stream, bytes ahead (0 = none)

  int64_t lanes() const { return gemm_lanes(isa); }
  /// Vectors per panel row.
  int nv() const { return int((nc + lanes() - 1) / lanes()); }
  /// Valid lanes of the last vector (0 = full).
  int tail() const { return int(nc % lanes()); }
  bool operator==(const GemmKey&) const = default;
  /// Canonical name, e.g. `gemm.avx512.8x48.k768.bias.gelu.scale.tab.pf512`.
  std::string name() const;
};

/// Inverse of GemmKey::name(); nullopt when the text is not a canonical name.
std::optional<GemmKey> parse_gemm_key(std::string_view name);

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const noexcept;
};

/// Floats of one panel row (nv vectors, zero-padded past nc).
inline int64_t gemm_panel_width(const GemmKey& key) { return key.nv() * key.lanes(); }

/// Bytes of one packed panel: k rows of gemm_panel_width floats, then (when key.bias) one
/// bias row, rounded up to 64 bytes so every panel starts on a cache line. Packing and the
/// emitter both use this, so consecutive panels are exactly this far apart.
inline int64_t gemm_panel_bytes(const GemmKey& key) {
  const int64_t rows = key.k + (key.bias ? 1 : 0);
  return (rows * gemm_panel_width(key) * 4 + 63) / 64 * 64;
}

/// Run-time arguments of one kernel call: rows [row0, row0 + mr) of X against `panels`
/// consecutive panels.
struct GemmKernelArgs {
  const float* a;          ///< X[row0, 0]
  int64_t lda;             ///< bytes between rows of X
  const float* b;          ///< the first panel (64-byte aligned)
  int64_t panels;          ///< panels to compute, >= 1 (consecutive, gemm_panel_bytes apart)
  float* c;                ///< kRowMajor: Y[row0, col0]; kTable: the output's base
  int64_t ldc;             ///< kRowMajor: bytes between rows of Y
  const int64_t* row_off;  ///< kTable: byte offsets of rows row0 .. row0 + mr - 1
  const int64_t* col_off;  ///< kTable: byte offsets of the column vectors, the first panel's first
  float scale;             ///< read when key.scale
};
static_assert(std::is_standard_layout_v<GemmKernelArgs>);

/// Signature of every generated GEMM kernel.
using GemmKernelFn = void (*)(const GemmKernelArgs*);

}  // namespace shapejit::jit

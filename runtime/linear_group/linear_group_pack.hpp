// Packing a linear group for the JIT microkernels, once, at build time: every part's weight rows
// (a row range of a packed weight or a weight of its own: the split is folded in here) are
// transposed into panels of the kernel's width, the bias is stored with each panel, and the
// part's kernels are fetched from the process's GEMM kernel cache (runtime/engine/kernel_cache.hpp).
// Running never copies a weight.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "jit/gemm_kernel.hpp"
#include "runtime/linear_group/linear_group_plan.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// Largest kernel row count (the row block) of any ISA.
inline constexpr int kMaxGemmMr = 8;

/// How a part's kernels write its output.
enum class PartStore : int {
  kRowMajor = 0,  ///< straight into Y with its row stride
  kTable = 1,     ///< head-split, each vector inside one head: row and column offset tables
  kScatter = 2,   ///< head-split with heads narrower than a vector: a row-major tile, then copied
};

/// One packed part: its panels (a full panel holds nc columns, the last may be narrower) and
/// its kernels, indexed by row count - 1.
struct PackedPart {
  int64_t n = 0, k = 0;
  int64_t nc = 0;               ///< columns of a full panel
  int64_t full_panels = 0;      ///< panels of nc columns
  int64_t edge_cols = 0;        ///< columns of the last, narrower panel (0 = none)
  int64_t offset = 0;           ///< byte offset of the part's first panel in PackedGroup::panels
  int64_t full_bytes = 0;       ///< bytes between full panels (jit::gemm_panel_bytes)
  int64_t edge_bytes = 0;       ///< bytes of the edge panel
  int mr = 0;                   ///< rows per kernel call (the row block)
  float scale = 1.0f;
  shapejit_layout layout = SHAPEJIT_LAYOUT_ROW_MAJOR;
  int64_t heads = 1;
  PartStore store = PartStore::kRowMajor;
  std::array<jit::GemmKernelFn, kMaxGemmMr> full{};  ///< [rows - 1]; null when full_panels == 0
  std::array<jit::GemmKernelFn, kMaxGemmMr> edge{};  ///< [rows - 1]; null when edge_cols == 0
  std::array<jit::GemmKey, kMaxGemmMr> full_keys{}, edge_keys{};

  /// Panels in all (full and edge).
  int64_t panels() const { return full_panels + (edge_cols > 0 ? 1 : 0); }
  /// Packed bytes of the whole part.
  int64_t bytes() const { return full_panels * full_bytes + edge_bytes; }
};

/// Frees what aligned_alloc returned.
struct AlignedFree {
  void operator()(void* p) const noexcept;
};

/// A packed group: the ISA its kernels run on, the parts and the panel memory they point into
/// (the kernels belong to the GEMM kernel cache, which never frees them).
struct PackedGroup {
  jit::Isa isa = jit::Isa::kScalar;
  shapejit_linear_quant quant = SHAPEJIT_LINEAR_F32;  ///< qd8: runs take quantized inputs
  bool signed_input = false;  ///< qd8: the kernels read the codes signed (jit::gemm_signed_input)
  std::vector<PackedPart> parts;
  std::unique_ptr<unsigned char[], AlignedFree> panels;  ///< every part's panels, 64-byte aligned
  int64_t panel_bytes = 0;

  /// The distinct kernels of the group, for jitdump and error messages.
  std::vector<jit::GemmKey> keys() const;
};

/// True when packing supports `isa` on this build (AVX-512 and AVX2 on x86-64).
bool gemm_isa_supported(jit::Isa isa);

/// The kernels' form of a group's form (GemmKey::quant).
jit::GemmQuant gemm_quant(shapejit_linear_quant quant);

/// Whether the qd8 kernels of `isa` use the 4-way int8 dot product: the host has it
/// (jit::host_has_int8_dot) and SHAPEJIT_INT8_DOT=0 is not set (read at each build).
bool use_int8_dot(jit::Isa isa);

/// Bytes of part `w`'s weights in `quant`'s form: 4 per f32 weight, 1 per int8 code, 1/2 per
/// int4 code.
int64_t part_weight_bytes(const LinearPartPlan& w, shapejit_linear_quant quant);

/// The key of part `w`'s kernels on `isa` before rows and panel width are chosen (k, bias,
/// activation, scale, store, the form and its dot variant; the weight prefetch when its group's
/// weights, `group_bytes` of them, or its own stream from DRAM); exposed for jitdump and tests.
jit::GemmKey gemm_part_key(const LinearPartPlan& w, jit::Isa isa, shapejit_linear_quant quant = SHAPEJIT_LINEAR_F32,
                           int64_t group_bytes = 0);

/// Packs every part and fetches its kernels for `isa` (the host must run it). Throws
/// shapejit::Error: kUnsupported for an ISA without a generator, a shape beyond it or a kernel
/// the code-memory limit has no room for; kOutOfMemory, kInternalError.
/// The arguments are assumed validated (runtime/validate_linear_group). A quantized form packs
/// the parts' codes (jit::pack_quant_panel); kUnsupported while no generator takes the form.
PackedGroup pack_linear_group(std::span<const LinearPartPlan> parts, jit::Isa isa,
                              shapejit_linear_quant quant = SHAPEJIT_LINEAR_F32);

}  // namespace shapejit::rt

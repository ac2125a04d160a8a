// Packing: panel choice, the transposing copy into panels, and each part's kernels from the GEMM
// kernel cache (the shapes are all known here, so nothing compiles later).
#include "runtime/linear_group/linear_group_pack.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "jit/gemm_codegen.hpp"
#include "jit/gemm_quant_panel.hpp"
#include "jit/host_features.hpp"
#include "runtime/engine/engine_arena.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "runtime/engine/tsan_sync.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

// Groups whose weights exceed what the caches hold stream them from DRAM (decode): their
// kernels prefetch this far ahead. The group's bytes decide, not a part's, as a run reads its
// parts one after another (three 8 MiB int4 parts stream as one 24 MiB part does: on Zen 5,
// 19 GB/s from the hardware prefetchers alone, 34 with these). Smaller groups are served well
// by the hardware prefetchers.
constexpr int64_t kStreamingBytes = int64_t(8) << 20;
constexpr int kStreamPrefetch = 8192;
constexpr int64_t kPackKBlock = 256;  // k rows per pass of the transposing copy
constexpr int64_t kParallelPackBytes = int64_t(4) << 20;

// Vectors of a full panel (jit/isa.hpp's table: the accumulators of a full row block fill the
// registers).
int full_panel_vectors(jit::Isa isa) { return jit::isa_traits(isa).gemm_panel_vectors; }

// Copies columns [col0, col0 + cols) of W (rows of W are output columns) into one panel of
// `width` floats per k row, followed by the bias row when `bias` is given. The panel memory is
// already zero, which is the padding past `cols`.
void fill_panel(float* panel, const LinearPartPlan& w, int64_t col0, int64_t cols, int64_t width) {
  for (int64_t kb = 0; kb < w.k; kb += kPackKBlock) {
    const int64_t ke = std::min(w.k, kb + kPackKBlock);
    for (int64_t c = 0; c < cols; ++c) {
      const float* src = w.weight + (col0 + c) * w.ldw;
      for (int64_t k = kb; k < ke; ++k) panel[k * width + c] = src[k];
    }
  }
  if (w.bias)
    for (int64_t c = 0; c < cols; ++c) panel[w.k * width + c] = w.bias[col0 + c];
}


// A part's panel geometry, output store and kernel keys on `isa` (its kernels not yet compiled,
// its offset not yet placed).
PackedPart lay_out_part(const LinearPartPlan& w, jit::Isa isa, shapejit_linear_quant quant, int64_t group_bytes) {
  PackedPart p;
  p.n = w.n;
  p.k = w.k;
  p.nc = full_panel_vectors(isa) * jit::gemm_lanes(isa);
  p.full_panels = w.n / p.nc;
  p.edge_cols = w.n % p.nc;
  p.scale = w.scale;
  p.layout = w.layout;
  p.heads = w.heads;
  const jit::GemmKey base = gemm_part_key(w, isa, quant, group_bytes);
  p.store = w.layout == SHAPEJIT_LAYOUT_ROW_MAJOR        ? PartStore::kRowMajor
            : base.store == jit::GemmStore::kTable ? PartStore::kTable
                                                   : PartStore::kScatter;
  // One row block for every part of an ISA and form (that of a full panel: the register budget
  // is the form's, jit::gemm_max_mr), so parts sharing an input block its rows alike and each
  // row's kernel (hence its rounding) never depends on the grouping or the thread count.
  p.mr = std::min(jit::gemm_max_mr(isa, full_panel_vectors(isa), base.quant, base.dot), kMaxGemmMr);
  // Streamed parts read their panels' k spans side by side where the ISA and the form gain
  // from it (jit::gemm_stream_split); such kernels do without the software prefetch (on the
  // AVX2 host it cost 10 % beside the four streams; one stream keeps it).
  const auto stream = [](jit::GemmKey k) {
    if (k.prefetch == 0) return k;
    k.k_split = jit::gemm_stream_split(k);
    if (k.k_split > 1) k.prefetch = 0;
    return k;
  };
  for (int r = 1; r <= p.mr; ++r) {
    jit::GemmKey key = base;
    key.mr = r;
    if (p.full_panels > 0) {
      key.nc = int(p.nc);
      p.full_keys[size_t(r - 1)] = stream(key);
      p.full_bytes = jit::gemm_panel_bytes(key);
    }
    if (p.edge_cols > 0) {
      key.nc = int(p.edge_cols);
      p.edge_keys[size_t(r - 1)] = stream(key);
      p.edge_bytes = jit::gemm_panel_bytes(key);
    }
  }
  return p;
}

// The kernel of `key` from the process's cache, counted in its statistics and its code-memory
// limit; kUnsupported when the limit has no room for it, so the group runs the reference.
jit::GemmKernelFn cached_kernel(const jit::GemmKey& key) {
  GemmKernelCache& cache = gemm_kernel_cache();
  const GemmKernelHandle kernel = cache.get(key);
  if (!kernel)
    throw Error(Status::kUnsupported, "linear group: kernel " + key.name() + " does not fit the code-memory limit (" +
                                          std::to_string(cache.stats().code_limit_bytes) + " bytes)");
  return kernel.fn();
}

// The group's panel memory: `bytes` (at least one cache line), 64-byte aligned and zeroed (the
// padding past a narrow panel's columns).
void allocate_panels(PackedGroup& g, int64_t bytes) {
  g.panel_bytes = std::max<int64_t>(bytes, 64);
  void* mem = std::aligned_alloc(64, size_t(g.panel_bytes));
  if (!mem)
    throw Error(Status::kOutOfMemory, "linear group: cannot allocate " + std::to_string(g.panel_bytes) +
                                          " bytes of packed weights");
  g.panels.reset(static_cast<unsigned char*>(mem));
  std::memset(mem, 0, size_t(g.panel_bytes));
}

// Copies every part's weights into its panels. Every panel is independent: large groups
// (decode-sized weights) are packed on the engine.
void fill_panels(PackedGroup& g, std::span<const LinearPartPlan> parts) {
  const bool quantized = g.quant != SHAPEJIT_LINEAR_F32;
  const int64_t lanes = jit::gemm_lanes(g.isa);
  std::vector<std::pair<size_t, int64_t>> panels;  // (part, panel)
  for (size_t i = 0; i < parts.size(); ++i)
    for (int64_t j = 0; j < g.parts[i].panels(); ++j) panels.emplace_back(i, j);
  auto fill = [&](size_t index) {
    const auto [i, j] = panels[index];
    const PackedPart& p = g.parts[i];
    float* panel = reinterpret_cast<float*>(g.panels.get() + p.offset + j * p.full_bytes);
    if (quantized) {
      // The one writer of the quantized layouts (the kernel tests use it too).
      const LinearPartPlan& w = parts[i];
      const bool full = j < p.full_panels;
      const int64_t col0 = j * p.nc;
      jit::pack_quant_panel(full ? p.full_keys[0] : p.edge_keys[0], w.codes + col0 * w.ldc, w.ldc,
                            full ? p.nc : p.edge_cols, w.wscale + col0, w.bias ? w.bias + col0 : nullptr, panel);
    } else if (j < p.full_panels) fill_panel(panel, parts[i], j * p.nc, p.nc, p.nc);
    else fill_panel(panel, parts[i], j * p.nc, p.edge_cols, (p.edge_cols + lanes - 1) / lanes * lanes);
  };
  std::shared_ptr<tbb::task_arena> arena;  // null: packed on this thread (also in a forked child)
  if (g.panel_bytes >= kParallelPackBytes && engine_threads() > 1) arena = engine_arena();
  if (!arena) {
    for (size_t i = 0; i < panels.size(); ++i) fill(i);
    return;
  }
  ParallelRegionSync sync;  // fork/join edges for ThreadSanitizer (runtime/engine/tsan_sync.hpp)
  const ParallelRegionSync::Region region(sync);
  arena->execute([&] {
    ParallelRegionSync::enter_execute();  // before any capture is read
    const ParallelRegionSync::Task task(sync);
    tbb::parallel_for(tbb::blocked_range<size_t>(0, panels.size()), [&](const tbb::blocked_range<size_t>& r) {
      const ParallelRegionSync::Task panel_task(sync);
      for (size_t i = r.begin(); i != r.end(); ++i) fill(i);
    });
  });
}
}  // namespace

void AlignedFree::operator()(void* p) const noexcept { std::free(p); }

bool gemm_isa_supported(jit::Isa isa) {
  const jit::IsaTraits& t = jit::isa_traits(isa);
  return t.gemm_generator && t.family == jit::kBuildFamily;
}

jit::GemmQuant gemm_quant(shapejit_linear_quant quant) {
  switch (quant) {
    case SHAPEJIT_LINEAR_F32: return jit::GemmQuant::kF32;
    case SHAPEJIT_LINEAR_QD8_QC8W: return jit::GemmQuant::kQd8Qc8w;
    case SHAPEJIT_LINEAR_QD8_QC4W: return jit::GemmQuant::kQd8Qc4w;
    case SHAPEJIT_LINEAR_F32_QC8W: return jit::GemmQuant::kF32Qc8w;
    case SHAPEJIT_LINEAR_F32_QC4W: return jit::GemmQuant::kF32Qc4w;
  }
  throw Error(Status::kInternalError, "linear group: unknown form " + std::to_string(int(quant)));
}

bool use_int8_dot(jit::Isa isa) {
  const char* env = std::getenv("SHAPEJIT_INT8_DOT");
  if (env && std::string(env) == "0") return false;
  return jit::host_has_int8_dot(jit::host_features(), isa);
}

int64_t part_weight_bytes(const LinearPartPlan& w, shapejit_linear_quant quant) {
  const jit::GemmQuant q = gemm_quant(quant);
  return q == jit::GemmQuant::kF32 ? w.n * w.k * 4 : jit::gemm_int4_weights(q) ? w.n * w.k / 2 : w.n * w.k;
}

jit::GemmKey gemm_part_key(const LinearPartPlan& w, jit::Isa isa, shapejit_linear_quant quant, int64_t group_bytes) {
  jit::GemmKey key;
  key.quant = gemm_quant(quant);
  key.dot = jit::gemm_quantized_input(key.quant) && use_int8_dot(isa);
  key.isa = isa;
  key.k = w.k;
  key.bias = w.bias != nullptr;
  key.act = static_cast<Activation>(w.activation);
  key.scale = w.scale != 1.0f;
  const int64_t lanes = jit::gemm_lanes(isa);
  const bool heads = w.layout != SHAPEJIT_LAYOUT_ROW_MAJOR;
  key.store = heads && (w.n / w.heads) % lanes == 0 ? jit::GemmStore::kTable : jit::GemmStore::kRowMajor;
  key.prefetch = std::max(group_bytes, part_weight_bytes(w, quant)) > kStreamingBytes ? kStreamPrefetch : 0;
  return key;
}

std::vector<jit::GemmKey> PackedGroup::keys() const {
  std::vector<jit::GemmKey> all;
  for (const PackedPart& p : parts)
    for (int r = 1; r <= p.mr; ++r) {
      if (p.full[size_t(r - 1)]) all.push_back(p.full_keys[size_t(r - 1)]);
      if (p.edge[size_t(r - 1)]) all.push_back(p.edge_keys[size_t(r - 1)]);
    }
  std::vector<jit::GemmKey> unique;
  for (const jit::GemmKey& k : all)
    if (std::find(unique.begin(), unique.end(), k) == unique.end()) unique.push_back(k);
  return unique;
}

PackedGroup pack_linear_group(std::span<const LinearPartPlan> parts, jit::Isa isa, shapejit_linear_quant quant) {
  if (!gemm_isa_supported(isa))
    throw Error(Status::kUnsupported, "linear group: no GEMM generator for ISA " + std::string(jit::isa_name(isa)));
  PackedGroup g;
  g.isa = isa;
  g.quant = quant;
  int64_t offset = 0, group_bytes = 0;
  for (const LinearPartPlan& w : parts) group_bytes += part_weight_bytes(w, quant);
  for (const LinearPartPlan& w : parts) {
    PackedPart p = lay_out_part(w, isa, quant, group_bytes);
    for (int r = 1; r <= p.mr; ++r) {
      if (p.full_panels > 0) p.full[size_t(r - 1)] = cached_kernel(p.full_keys[size_t(r - 1)]);
      if (p.edge_cols > 0) p.edge[size_t(r - 1)] = cached_kernel(p.edge_keys[size_t(r - 1)]);
    }
    p.offset = offset;
    offset += p.bytes();
    g.parts.push_back(p);
  }
  const std::vector<jit::GemmKey> keys = g.keys();  // one form and dot variant for every part
  g.signed_input = !keys.empty() && jit::gemm_signed_input(keys[0].isa, keys[0].quant, keys[0].dot);
  allocate_panels(g, offset);
  fill_panels(g, parts);
  return g;
}

}  // namespace shapejit::rt

// The packed qd8 run path (runtime/linear_group_exec with quantized inputs) before the quantized
// emitters exist: a packed group is assembled by hand around a scalar stand-in kernel that follows
// the GemmKernelArgs contract of jit/gemm_kernel.hpp to the letter (biased u8 rows, x_zero *
// colsum, the epilogue's three roundings), over panels written by jit::pack_quant_panel. Run on
// the small path and the blocked parallel path, every output must be bitwise the scalar
// reference's, so the runtime hands the kernels the right rows, strides, scales, zero points and
// panels. (Once the x86/NEON emitters land, linear_group_quant_test checks them end to end.)
#include <doctest/doctest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "jit/gemm_kernel.hpp"
#include "jit/gemm_quant_panel.hpp"
#include "ref/linear_group_quant.hpp"
#include "runtime/engine/engine_arena.hpp"
#include "runtime/linear_group/linear_group_exec.hpp"
#include "runtime/linear_group/linear_group_input_quant.hpp"

namespace {

using shapejit::jit::GemmKey;
using shapejit::jit::GemmKernelArgs;
using shapejit::jit::GemmQuant;

// Keys of the stand-in kernels, by slot (a kernel gets only its arguments: the slot is its key).
std::array<GemmKey, 4> g_keys;

// The contract, scalar: rows [0, Rows) against args->panels panels of key g_keys[Slot].
template <int Slot, int Rows>
void stand_in_kernel(const GemmKernelArgs* a) {
  const GemmKey& key = g_keys[Slot];
  const int64_t w = shapejit::jit::gemm_panel_width(key), kp = shapejit::jit::gemm_padded_k(key);
  const shapejit::jit::GemmPanelOffsets o = shapejit::jit::gemm_panel_offsets(key);
  const int64_t bytes = shapejit::jit::gemm_panel_bytes(key);
  for (int64_t p = 0; p < a->panels; ++p) {
    const auto* panel = reinterpret_cast<const unsigned char*>(a->b) + p * bytes;
    for (int r = 0; r < Rows; ++r) {
      const auto* u = reinterpret_cast<const uint8_t*>(a->a) + r * a->lda;
      for (int64_t c = 0; c < key.nc; ++c) {
        int32_t dot = 0, colsum = 0;
        for (int64_t kk = 0; kk < kp; ++kk) dot += int32_t(u[kk]) * int8_t(panel[(kk / 4 * w + c) * 4 + kk % 4]);
        std::memcpy(&colsum, panel + o.colsum + c * 4, 4);
        const int32_t acc = dot - a->x_zero[r] * colsum;
        float ws, bias = 0.0f;
        std::memcpy(&ws, panel + o.wscale + c * 4, 4);
        if (key.bias) std::memcpy(&bias, panel + o.bias + c * 4, 4);
        const volatile float s = a->x_scale[r] * ws;
        const volatile float prod = float(acc) * s;
        const float y = key.bias ? prod + bias : float(prod);
        std::memcpy(reinterpret_cast<unsigned char*>(a->c) + r * a->ldc + (p * key.nc + c) * 4, &y, 4);
      }
    }
  }
}

template <int Slot, size_t... R>
std::array<shapejit::jit::GemmKernelFn, shapejit::rt::kMaxGemmMr> kernels_of(std::index_sequence<R...>) {
  return {&stand_in_kernel<Slot, int(R) + 1>...};
}

struct Part {
  int64_t n, k;
  std::vector<int8_t> codes;
  std::vector<float> scales, bias;
};

// A packed qd8-qc8w group of row-major parts around the stand-in kernels (slots 2p, 2p + 1).
shapejit::rt::PackedGroup assemble(std::vector<Part>& parts) {
  using namespace shapejit::rt;
  PackedGroup g;
  g.isa = shapejit::jit::Isa::kAvx2;
  g.quant = SHAPEJIT_LINEAR_QD8_QC8W;
  const int64_t nc = shapejit::jit::isa_traits(g.isa).gemm_panel_vectors * shapejit::jit::gemm_lanes(g.isa);
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    PackedPart p;
    p.n = parts[i].n, p.k = parts[i].k, p.nc = nc;
    p.full_panels = p.n / nc, p.edge_cols = p.n % nc;
    p.mr = 4;
    GemmKey key;
    key.isa = g.isa, key.k = p.k, key.bias = !parts[i].bias.empty(), key.quant = GemmQuant::kQd8Qc8w;
    key.nc = int(nc);
    g_keys[2 * i] = key;
    key.nc = int(std::max<int64_t>(p.edge_cols, 1));
    g_keys[2 * i + 1] = key;
    p.full_bytes = shapejit::jit::gemm_panel_bytes(g_keys[2 * i]);
    p.edge_bytes = p.edge_cols ? shapejit::jit::gemm_panel_bytes(g_keys[2 * i + 1]) : 0;
    p.full = i == 0 ? kernels_of<0>(std::make_index_sequence<kMaxGemmMr>()) : kernels_of<2>(std::make_index_sequence<kMaxGemmMr>());
    p.edge = i == 0 ? kernels_of<1>(std::make_index_sequence<kMaxGemmMr>()) : kernels_of<3>(std::make_index_sequence<kMaxGemmMr>());
    p.offset = offset;
    offset += p.bytes();
    g.parts.push_back(p);
  }
  g.panel_bytes = std::max<int64_t>(offset, 64);
  g.panels.reset(static_cast<unsigned char*>(std::aligned_alloc(64, size_t(g.panel_bytes))));
  for (size_t i = 0; i < parts.size(); ++i) {
    const PackedPart& p = g.parts[i];
    for (int64_t j = 0; j < p.panels(); ++j) {
      const bool full = j < p.full_panels;
      const int64_t col0 = j * p.nc;
      shapejit::jit::pack_quant_panel(g_keys[2 * i + (full ? 0 : 1)], parts[i].codes.data() + col0 * p.k, p.k,
                                      full ? p.nc : p.edge_cols, parts[i].scales.data() + col0,
                                      parts[i].bias.empty() ? nullptr : parts[i].bias.data() + col0,
                                      g.panels.get() + p.offset + j * p.full_bytes);
    }
  }
  return g;
}

TEST_CASE("quantized linear: the packed qd8 run path hands kernels the contract's arguments") {
  std::mt19937_64 rng(0x5EED);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t k = 37;
  // Part 0: an edge panel only; part 1: full panels and an edge; both read one input (shared
  // quantization), part 1 also runs with an input of its own below.
  std::vector<Part> parts = {{20, k, {}, {}, {}}, {53, k, {}, {}, {}}};
  for (Part& p : parts) {
    p.codes.resize(size_t(p.n * k));
    p.scales.resize(size_t(p.n));
    std::vector<float> w(size_t(p.n * k));
    for (float& v : w) v = normal(rng);
    for (int64_t r = 0; r < p.n; ++r)
      shapejit::ref::quantize_weight_row(SHAPEJIT_LINEAR_QD8_QC8W, w.data() + r * k, k, p.codes.data() + r * k,
                                         &p.scales[size_t(r)]);
  }
  parts[1].bias.resize(53);
  for (float& b : parts[1].bias) b = normal(rng);
  const shapejit::rt::PackedGroup g = assemble(parts);

  for (int64_t m : {1, 3, 4, 9, 130}) {
    CAPTURE(m);
    const int64_t ldx = k + 5;
    std::vector<float> x(size_t(m * ldx), 0.0f), x2(size_t(m * ldx), 0.0f);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < k; ++c) x[size_t(r * ldx + c)] = normal(rng) * float(1 + r % 5), x2[size_t(r * ldx + c)] = normal(rng);
    for (int shared = 0; shared < 2; ++shared)
      for (int threads : {1, 2}) {
        std::vector<float> y0(size_t(m * 20), -1.0f), y1(size_t(m * 60), -1.0f);
        const shapejit_linear_group_io io[2] = {{x.data(), m, k, ldx, y0.data(), 20, 0, 0},
                                                {shared ? x.data() : x2.data(), m, k, ldx, y1.data(), 60, 0, 0}};
        shapejit::rt::set_engine_threads(threads);
        shapejit::rt::LinearExecOptions options;
        if (threads > 1) options.inline_flops = 0;  // the blocked, parallel path
        shapejit::rt::run_packed_group(g, io, options, shapejit::rt::quantize_run_inputs(io, g.signed_input));
        shapejit::rt::set_engine_threads(0);
        for (int p = 0; p < 2; ++p) {
          shapejit::ref::QuantPartView v;
          v.f.x = io[p].x, v.f.m = m, v.f.k = k, v.f.ldx = ldx, v.f.n = parts[size_t(p)].n;
          v.f.bias = parts[size_t(p)].bias.empty() ? nullptr : parts[size_t(p)].bias.data();
          v.f.y = nullptr, v.f.ldy = io[p].ldy;
          v.quant = SHAPEJIT_LINEAR_QD8_QC8W;
          v.codes = parts[size_t(p)].codes.data(), v.ldc = k, v.wscale = parts[size_t(p)].scales.data();
          const std::vector<float>& y = p == 0 ? y0 : y1;
          int64_t wrong = 0;
          for (int64_t r = 0; r < m; ++r)
            for (int64_t c = 0; c < v.f.n; ++c) {
              const float want = shapejit::ref::quant_pre(v, r, c), got = y[size_t(r * io[p].ldy + c)];
              wrong += std::memcmp(&want, &got, 4) != 0;
            }
          CAPTURE(p);
          CAPTURE(shared);
          CAPTURE(threads);
          CHECK(wrong == 0);
          for (int64_t r = 0; r < m; ++r)  // columns past N untouched
            for (int64_t c = v.f.n; c < io[p].ldy; ++c) CHECK(y[size_t(r * io[p].ldy + c)] == -1.0f);
        }
      }
  }
}

}  // namespace

// Rows are independent, so large inputs are cut into row ranges run on the engine arena; which
// thread quantizes a row never changes its bits. On AVX2 hosts the rows go through
// quantize_rows_avx2 (input_quant_avx2.cpp: the same bits, blocks of rows at a time); the
// scalar rule below serves the other hosts.
#include "runtime/linear_group/linear_group_input_quant.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "jit/host_features.hpp"
#include "runtime/engine/engine_arena.hpp"
#include "runtime/linear_group/input_quant_avx2.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

constexpr int64_t kParallelElements = int64_t(1) << 16;  // inputs smaller than this: one thread
constexpr int64_t kRowsPerTask = 32;

// Where one part's quantized rows are: `first`, the part whose quantization it uses (itself, or
// an earlier part with the same input; -1 without rows), and for a first part its offsets into
// the code and row buffers.
struct Placement {
  int64_t first = -1;
  int64_t code = 0, row = 0;
};

// Per calling thread, reused across runs: after the first run of a shape nothing allocates
// (tiny calls notice an allocation).
struct InputQuantScratch {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<int32_t> zeros;
  std::vector<QuantizedInput> parts;
  std::vector<Placement> placed;
};
thread_local InputQuantScratch t_input_scratch;

using Io = shapejit_linear_group_io;

bool same_input(const Io& a, const Io& b) { return a.x == b.x && a.m == b.m && a.k == b.k && a.ldx == b.ldx; }

// The message for part p's first bad row.
[[noreturn]] void report_bad_row(const Io& io, int64_t p, int64_t row) {
  const float* x = io.x + row * io.ldx;
  for (int64_t c = 0; c < io.k; ++c)
    if (!std::isfinite(x[c]))
      throw Error(Status::kInvalidArgument,
                  "linear_group: io[" + std::to_string(p) + "].x row " + std::to_string(row) + " holds " +
                      (std::isnan(x[c]) ? std::string("NaN") : std::string(x[c] > 0 ? "+inf" : "-inf")) +
                      " at column " + std::to_string(c) +
                      " (a qd8 form quantizes each input row from finite values)");
  throw Error(Status::kInvalidArgument,
              "linear_group: io[" + std::to_string(p) + "].x row " + std::to_string(row) +
                  ": its max - min overflows float32 (a qd8 form's row range must be finite)");
}

// ---- The scalar rule ------------------------------------------------------------------------

// The row's quantization parameters from lo <= 0 <= hi; false when the range overflows.
bool row_params(float lo, float hi, float& s, float& z) {
  const float range = hi - lo;
  if (!std::isfinite(range)) return false;
  s = range / 255.0f;
  if (s == 0.0f) s = 1.0f;  // a row of zeros, or a range below 255 * 2^-150
  // nearbyint: half to even in the default rounding mode (which the library never changes).
  z = std::clamp(std::nearbyint(-128.0f - lo / s), -128.0f, 127.0f);
  return true;
}

uint8_t code(float x, float s, float z) { return uint8_t(int(std::clamp(std::nearbyint(x / s) + z, -128.0f, 127.0f)) + 128); }

// `flip` (0, or 0x80 for signed codes q) is xor'ed into every code, never into the padding.
bool quantize_row_scalar(const float* x, int64_t k, uint8_t* u, float* scale, int32_t* zero, uint8_t flip) {
  float lo = 0.0f, hi = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < k; ++i) {
    finite &= std::isfinite(x[i]);
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  float s, z;
  if (!finite || !row_params(lo, hi, s, z)) return false;
  for (int64_t i = 0; i < k; ++i) u[i] = code(x[i], s, z) ^ flip;
  std::memset(u + k, 0, size_t(quantized_row_bytes(k) - k));
  *scale = s;
  *zero = int32_t(z) + 128;
  return true;
}

#if defined(__x86_64__)
const bool kRowsOnAvx2 = jit::host_runs(jit::Isa::kAvx2);  // CPU and OS (ymm state)
#endif

// ---- Rows, inputs, runs ----------------------------------------------------------------------

// Quantizes rows [r0, r1) of one input (`signed_codes`: q, the biased codes' top bit flipped);
// returns the first bad row, or r1.
int64_t quantize_rows(const Io& io, int64_t r0, int64_t r1, uint8_t* u, int64_t ldu, float* scale, int32_t* zero,
                      bool signed_codes) {
  const uint8_t flip = signed_codes ? 0x80 : 0;
#if defined(__x86_64__)
  if (kRowsOnAvx2)
    return r0 + quantize_rows_avx2(io.x + r0 * io.ldx, io.ldx, io.k, r1 - r0, u + r0 * ldu, ldu, scale + r0,
                                   zero + r0, flip);
#endif
  for (int64_t r = r0; r < r1; ++r)
    if (!quantize_row_scalar(io.x + r * io.ldx, io.k, u + r * ldu, scale + r, zero + r, flip)) return r;
  return r1;
}

// All rows of one input, on the engine arena when it is large; the first bad row, or m.
int64_t quantize_input(const Io& io, uint8_t* u, int64_t ldu, float* scale, int32_t* zero, bool signed_codes) {
  if (io.m * io.k < kParallelElements || io.m <= kRowsPerTask || engine_threads() <= 1)
    return quantize_rows(io, 0, io.m, u, ldu, scale, zero, signed_codes);
  const int64_t tasks = (io.m + kRowsPerTask - 1) / kRowsPerTask;
  std::atomic<int64_t> first_bad{io.m};
  EngineTasks run(static_cast<size_t>(tasks));
  run.run([&](size_t t) {
    const int64_t r0 = int64_t(t) * kRowsPerTask, r1 = std::min(io.m, r0 + kRowsPerTask);
    const int64_t bad = quantize_rows(io, r0, r1, u, ldu, scale, zero, signed_codes);
    if (bad == r1) return;
    int64_t seen = first_bad.load(std::memory_order_relaxed);
    while (bad < seen && !first_bad.compare_exchange_weak(seen, bad, std::memory_order_relaxed)) {
    }
  });
  return first_bad.load(std::memory_order_relaxed);
}

// The first part before p with p's input, or -1 (p has rows).
int64_t earlier_same_input(std::span<const Io> io, size_t p) {
  for (size_t q = 0; q < p; ++q)
    if (io[q].m > 0 && same_input(io[q], io[p])) return int64_t(q);
  return -1;
}

}  // namespace

bool quantize_input_row(const float* x, int64_t k, uint8_t* u, float* scale, int32_t* zero) {
  const Io io{x, 1, k, k, nullptr, 0, 0, 0};
  return quantize_rows(io, 0, 1, u, quantized_row_bytes(k), scale, zero, false) == 1;
}

std::span<const QuantizedInput> quantize_run_inputs(std::span<const Io> io, bool signed_codes) {
  InputQuantScratch& s = t_input_scratch;
  const size_t n = io.size();
  if (s.parts.size() < n) s.parts.resize(n), s.placed.resize(n);  // only ever grown: no per-run clearing
  int64_t code_bytes = 0, rows = 0;
  for (size_t p = 0; p < n; ++p) {
    Placement& at = s.placed[p];
    at.first = io[p].m == 0 ? -1 : earlier_same_input(io, p);
    if (io[p].m == 0 || at.first >= 0) continue;
    at = {int64_t(p), code_bytes, rows};
    code_bytes += io[p].m * quantized_row_bytes(io[p].k);
    rows += io[p].m;
  }
  if (s.codes.size() < size_t(code_bytes)) s.codes.resize(size_t(code_bytes));
  if (s.scales.size() < size_t(rows)) s.scales.resize(size_t(rows)), s.zeros.resize(size_t(rows));
  for (size_t p = 0; p < n; ++p) {
    const Placement& at = s.placed[p];
    QuantizedInput& qi = s.parts[p];
    if (at.first != int64_t(p)) {  // no rows, or an earlier part's input: already quantized
      qi = at.first < 0 ? QuantizedInput{} : s.parts[size_t(at.first)];
      continue;
    }
    qi.u = s.codes.data() + at.code;
    qi.ldu = quantized_row_bytes(io[p].k);
    qi.signed_codes = signed_codes;
    qi.scale = s.scales.data() + at.row;
    qi.zero = s.zeros.data() + at.row;
    const int64_t bad = quantize_input(io[p], s.codes.data() + at.code, qi.ldu, s.scales.data() + at.row,
                                       s.zeros.data() + at.row, signed_codes);
    if (bad < io[p].m) report_bad_row(io[p], int64_t(p), bad);
  }
  return std::span<const QuantizedInput>(s.parts.data(), n);
}

}  // namespace shapejit::rt

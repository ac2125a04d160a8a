// Linear-group part of the AVX-512 battery: packs groups with the runtime's packer (which generates
// the microkernels for every row count of the row block, full and edge panels), runs them and
// checks every output element against ref::reference_element's acceptance bound (the bound the
// linear-group JIT tests use), and every byte around the outputs for stray writes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "battery.hpp"
#include "jit/gemm_kernel.hpp"
#include "ref/linear_group.hpp"
#include "runtime/engine/engine_arena.hpp"
#include "runtime/linear_group/linear_group_exec.hpp"
#include "runtime/linear_group/linear_group_pack.hpp"
#include "support/k_split_kernels.hpp"

namespace shapejit::test::avx512_battery {

namespace {

using Rng = std::mt19937_64;
constexpr uint32_t kSentinelBits = 0x7FA5A5A5u;  // a NaN payload no kernel writes

// One part of a group: weights, epilogue, input and output geometry (strides in floats).
struct Part {
  int64_t m = 0, n = 0, k = 0, ldx = 0, ldw = 0, ldy = 0;
  int64_t heads = 1, batch = 0;
  shapejit_activation act = SHAPEJIT_ACTIVATION_NONE;
  shapejit_layout layout = SHAPEJIT_LAYOUT_ROW_MAJOR;
  float scale = 1.0f;
  bool bias = false;
  std::shared_ptr<std::vector<float>> x;  // shared between parts that read one input
  std::vector<float> w, b;

  ref::LinearPartView view(float* y) const {
    ref::LinearPartView v;
    v.x = x->data(), v.m = m, v.k = k, v.ldx = ldx;
    v.w = w.data(), v.n = n, v.ldw = ldw;
    v.bias = bias ? b.data() : nullptr;
    v.activation = act, v.scale = scale, v.layout = layout, v.heads = heads, v.batch = batch;
    v.y = y, v.ldy = ldy;
    return v;
  }
  // Output floats: the part's elements plus a tail of sentinels.
  int64_t out_floats() const {
    const int64_t body = layout == SHAPEJIT_LAYOUT_ROW_MAJOR ? (m > 0 ? (m - 1) * ldy + n : 0) : m * n;
    return body + 23;
  }
  std::string describe() const {
    std::ostringstream s;
    s << "m" << m << " n" << n << " k" << k << " ldx" << ldx << " ldw" << ldw << " ldy" << ldy << " act" << int(act)
      << (bias ? " bias" : "") << " scale" << scale << " layout" << int(layout) << " heads" << heads << " batch"
      << batch;
    return s.str();
  }
};

// Values in [-1, 1), a few inputs of magnitude 4 (activations deep in their tails), and, in the
// groups that ask for them, rare NaN and infinities.
float value(Rng& rng, float magnitude, bool specials) {
  if (specials && rng() % 97 == 0) {
    const float s[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(), -0.0f};
    return s[rng() % 4];
  }
  return std::uniform_real_distribution<float>(-magnitude, magnitude)(rng);
}

// The largest divisor of v that is at most cap.
int64_t divisor_up_to(int64_t v, int64_t cap) {
  for (int64_t d = std::min(v, cap); d > 1; --d)
    if (v % d == 0) return d;
  return 1;
}

// Shapes rotate through lists off the vector width (16), the panel width (48) and the row block
// (8, every remainder of it: each row count has a kernel of its own); head-split parts alternate between heads a multiple of 16 wide (stored through offset
// tables) and narrower heads (a row-major tile, then scattered).
// With `shared`, the part reads that part's input (the driver then runs them as one GEMM whose
// panel blocks may span parts).
Part make_part(int64_t item, int part, Rng& rng, shapejit_activation act, bool bias, float scale,
               shapejit_layout layout, bool specials, const Part* shared) {
  static constexpr int64_t kN[] = {1, 15, 17, 32, 47, 49, 64, 96, 100, 130};
  static constexpr int64_t kK[] = {1, 3, 16, 17, 33, 64, 129};
  static constexpr int64_t kM[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 14, 15, 23};  // every remainder mod 8
  Part p;
  const int64_t i = item * 3 + part;
  p.act = act, p.bias = bias, p.scale = scale, p.layout = layout;
  p.k = kK[i % std::size(kK)];
  p.m = kM[(i / 2) % std::size(kM)];
  if (layout == SHAPEJIT_LAYOUT_ROW_MAJOR) {
    p.n = kN[i % std::size(kN)];
  } else if (item % 2 == 0) {  // heads of 16 or 32 columns: offset-table stores
    p.heads = 1 + i % 3;
    p.n = p.heads * (i % 4 == 0 ? 32 : 16);
  } else {  // heads narrower than a vector, or not a multiple of it: scattered
    static constexpr int64_t kHeadWidths[] = {3, 8, 12, 20};
    p.heads = 2 + i % 3;
    p.n = p.heads * kHeadWidths[i % 4];
  }
  if (layout != SHAPEJIT_LAYOUT_ROW_MAJOR) p.batch = divisor_up_to(p.m, 1 + i % 4);
  p.ldx = p.k + (i % 3 == 0 ? 5 : 0);
  p.ldw = p.k + (i % 4 == 1 ? 3 : 0);
  p.ldy = p.n + (i % 5 == 2 ? 7 : 0);
  const float magnitude = i % 4 == 3 ? 4.0f : 1.0f;
  if (shared) {
    p.m = shared->m, p.k = shared->k, p.ldx = shared->ldx, p.x = shared->x;
    p.ldw = p.k + (i % 4 == 1 ? 3 : 0);
    if (layout != SHAPEJIT_LAYOUT_ROW_MAJOR) p.batch = divisor_up_to(p.m, 1 + i % 4);
  } else {
    p.x = std::make_shared<std::vector<float>>(size_t(std::max<int64_t>(p.m * p.ldx, 1)));
    for (float& v : *p.x) v = value(rng, magnitude, specials);
  }
  p.w.resize(size_t(p.n * p.ldw));
  for (float& v : p.w) v = value(rng, magnitude, specials);
  if (bias) {
    p.b.resize(size_t(p.n));
    for (float& v : p.b) v = value(rng, 1.0f, specials);
  }
  return p;
}

// The kernels a run of `parts` calls: rows go in blocks of the part's mr, the last block takes
// the remainder (runtime/linear_group_exec), on full and on edge panels. pack_linear_group also
// generates the row counts no block of this M uses; those are not counted.
std::set<std::string> executed_kernels(const rt::PackedGroup& g, const std::vector<Part>& parts) {
  std::set<std::string> names;
  for (size_t i = 0; i < parts.size(); ++i) {
    const rt::PackedPart& p = g.parts[i];
    for (int64_t rows : {parts[i].m >= p.mr ? int64_t(p.mr) : 0, parts[i].m % p.mr}) {
      if (rows == 0) continue;
      if (p.full_panels > 0) names.insert(p.full_keys[size_t(rows - 1)].name());
      if (p.edge_cols > 0) names.insert(p.edge_keys[size_t(rows - 1)].name());
    }
  }
  return names;
}

bool is_sentinel(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits == kSentinelBits;
}

// Runs the group on `threads` engine threads (two force the blocked, parallel path).
std::vector<std::vector<float>> run(const std::vector<Part>& parts, const rt::PackedGroup& g, int threads) {
  float sentinel;
  std::memcpy(&sentinel, &kSentinelBits, 4);
  std::vector<std::vector<float>> out;
  std::vector<shapejit_linear_group_io> io;
  for (const Part& p : parts) out.emplace_back(size_t(p.out_floats()), sentinel);
  for (size_t i = 0; i < parts.size(); ++i)
    io.push_back({parts[i].x->data(), parts[i].m, parts[i].k, parts[i].ldx, out[i].data(), parts[i].ldy,
                  parts[i].batch, parts[i].batch > 0 ? parts[i].m / parts[i].batch : 0});
  rt::set_engine_threads(threads);
  rt::LinearExecOptions exec;
  if (threads > 1) exec.inline_flops = 0;
  rt::run_packed_group(g, io, exec);
  rt::set_engine_threads(0);
  return out;
}

// "" when every element is accepted and nothing outside the part was written; else the first
// problem.
std::string check(const Part& p, const std::vector<float>& y, int64_t& checked) {
  const ref::LinearPartView v = p.view(nullptr);
  std::vector<char> owned(y.size(), 0);
  for (int64_t r = 0; r < p.m; ++r)
    for (int64_t c = 0; c < p.n; ++c) {
      const int64_t at = ref::output_offset(v, r, c);
      owned[size_t(at)] = 1;
      ++checked;
      const ref::ElementRef e = ref::reference_element(v, r, c);
      if (ref::accepted(y[size_t(at)], e.value, e.bound)) continue;
      std::ostringstream s;
      s << "Y[" << r << ", " << c << "] = " << y[size_t(at)] << ", reference " << e.value << " +- " << e.bound;
      return s.str();
    }
  for (size_t i = 0; i < y.size(); ++i)
    if (!owned[i] && !is_sentinel(y[i])) return "float " + std::to_string(i) + " outside the output was written";
  return "";
}

}  // namespace

// Every activation x bias x scale x layout, two groups each (one to three parts, with separate
// inputs and with one shared input; every third group also on two threads, which must give the
// same bits), every fourth with NaN and infinities, every fourth (another) with k-split kernels.
Tally run_linear_groups(const Options& options) {
  static constexpr shapejit_activation kActs[] = {SHAPEJIT_ACTIVATION_NONE, SHAPEJIT_ACTIVATION_RELU,
                                                  SHAPEJIT_ACTIVATION_GELU, SHAPEJIT_ACTIVATION_GELU_TANH,
                                                  SHAPEJIT_ACTIVATION_SILU};
  static constexpr shapejit_layout kLayouts[] = {SHAPEJIT_LAYOUT_ROW_MAJOR, SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST,
                                                 SHAPEJIT_LAYOUT_HEADS_BATCH_FIRST};
  Tally tally;
  int64_t item = 0;
  for (shapejit_activation act : kActs)
    for (int bias = 0; bias < 2; ++bias)
      for (float scale : {1.0f, -1.75f})
        for (shapejit_layout layout : kLayouts)
          for (int repeat = 0; repeat < 2; ++repeat, ++item) {
            if (!options.mine(item)) continue;
            Rng rng(options.seed ^ (uint64_t(item) * 0x9E3779B97F4A7C15ull) ^ 0x11ea5);
            const bool specials = item % 4 == 1;
            std::vector<Part> parts;
            for (int p = 0; p < 1 + item % 3; ++p)  // repeat 1: the parts share one input
              parts.push_back(make_part(item, p, rng, act, bias != 0, scale, layout, specials,
                                        repeat == 1 && p > 0 ? &parts[0] : nullptr));
            std::vector<rt::LinearPartPlan> weights;
            for (const Part& p : parts)
              weights.push_back({p.w.data(), p.ldw, p.n, p.k, p.bias ? p.b.data() : nullptr, p.act, p.scale,
                                 p.layout, p.heads});
            rt::PackedGroup g = rt::pack_linear_group(weights, options.isa);
            if (item % 4 == 3) test::use_k_split(g, 0);  // the most spans each kernel allows
            tally.kernels += int64_t(executed_kernels(g, parts).size());
            const auto one = run(parts, g, 1);
            std::vector<std::vector<float>> two;
            if (item % 3 == 0) two = run(parts, g, 2);
            for (size_t i = 0; i < parts.size(); ++i) {
              ++tally.cases;
              std::string diff = check(parts[i], one[i], tally.checked);
              if (diff.empty() && !two.empty() && std::memcmp(one[i].data(), two[i].data(), one[i].size() * 4) != 0)
                diff = "one and two engine threads give different bits";
              if (diff.empty()) continue;
              std::string keys;
              for (const jit::GemmKey& k : g.keys()) keys += " " + k.name();
              tally.fail(options, "linear",
                         "group " + std::to_string(item) + (specials ? " (with NaN/inf)" : "") + ", part " +
                             std::to_string(i) + " [" + parts[i].describe() + "]: " + diff + "\n  kernels:" + keys);
            }
          }
  return tally;
}

}  // namespace shapejit::test::avx512_battery

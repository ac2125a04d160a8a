// oneDNN peer of the linear-group benchmark (libdnnl-dev 2.6, built with SHAPEJIT_BENCH_ONEDNN).
//
// One primitive per group of parts that share an input and contiguous weight rows
// (self-attention: one primitive with N = 3E; cross-attention: q, then k and v together), with
// the bias fused. Weights are declared `any`, so the primitive picks its blocked layout, and are
// reordered into it once at build time; the run executes the primitives only. Both matmul and
// inner_product are built and the faster on the case (best of 5 calls at build time) is kept;
// the summary names the one in use. The int8 peer of the quantized rows is described at its
// section below.
// Threads: Debian builds oneDNN on OpenMP, so activate() sets omp_set_num_threads(threads), and
// the primitives are built per thread count (oneDNN plans its blocking for it).
#include "lg_peers_common.hpp"

#if defined(SHAPEJIT_BENCH_ONEDNN)
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <unordered_map>
#endif

namespace shapejit::bench {

#if defined(SHAPEJIT_BENCH_ONEDNN)
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

// One primitive of a group, its arguments and its output [M, group rows].
struct Step {
  dnnl::primitive prim;
  std::unordered_map<int, memory> args;
  memory dst;
};

// Row m of part p's result inside the output of its group's primitive.
const float* group_out_row(const LgCase& c, const std::vector<LgGroup>& groups, const std::vector<size_t>& part_loc,
                           const memory& dst, size_t part, int64_t m) {
  const LgGroup& g = groups[part_loc[part]];
  return static_cast<const float*>(dst.get_data_handle()) + m * g.rows + (c.parts[part].row_begin - g.row_begin);
}

// Which oneDNN primitive computes each group.
enum class Primitive { kMatmul, kInnerProduct };

class OnednnImpl final : public LgImpl {
 public:
  OnednnImpl(const LgData& data, int threads, Primitive kind)
      : d_(data), threads_(threads), kind_(kind), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    omp_set_num_threads(threads_);
    const LgCase& c = *data.c;
    groups_ = lg_packed_groups(c);
    part_loc_.resize(c.parts.size());
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      const LgGroup& g = groups_[gi];
      for (size_t p : g.parts) part_loc_[p] = gi;
      steps_.push_back(kind == Primitive::kMatmul ? make_matmul(g) : make_inner_product(g));
    }
    stream_.wait();
  }

  void activate(int) override { omp_set_num_threads(threads_); }

  void run() override {
    for (Step& s : steps_) s.prim.execute(stream_, s.args);
    stream_.wait();
  }

  const float* out_row(size_t part, int64_t m) const override {
    return group_out_row(*d_.c, groups_, part_loc_, steps_[part_loc_[part]].dst, part, m);
  }

  std::string info() const override {
    return std::string(kind_ == Primitive::kMatmul ? "matmul " : "inner_product ") + info_ + ", " +
           std::to_string(steps_.size()) + " primitive" + (steps_.size() > 1 ? "s" : "");
  }

 private:
  memory input_of(const LgGroup& g, const memory::desc& md) {
    return memory(md, engine_, const_cast<float*>(d_.inputs[size_t(g.input)].data()));
  }
  float* weight_of(const LgGroup& g) { return const_cast<float*>(d_.weight->data() + g.row_begin * d_.c->k); }
  float* bias_of(const LgGroup& g) { return const_cast<float*>(d_.bias->data() + g.row_begin); }

  // Reorders the group's weight rows (described by user_md) into the layout the primitive chose.
  memory reordered(const memory::desc& user_md, float* user, const memory::desc& wanted) {
    memory from(user_md, engine_, user), to(wanted, engine_);
    dnnl::reorder(from, to).execute(stream_, from, to);
    return to;
  }

  Step make_matmul(const LgGroup& g) {
    const memory::dim m = d_.c->input_rows[size_t(g.input)], n = g.rows, k = d_.c->k;
    const memory::desc src_md({m, k}, Dt::f32, Tag::ab), wei_md({k, n}, Dt::f32, Tag::any),
        bias_md({1, n}, Dt::f32, Tag::ab), dst_md({m, n}, Dt::f32, Tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, bias_md, dst_md), engine_);
    info_ = pd.impl_info_str();
    // Rows [row_begin, +n) of the [N, K] weight are the [K, n] matrix with strides (1, K): `ba`.
    memory w = reordered({{k, n}, Dt::f32, Tag::ba}, weight_of(g), pd.weights_desc());
    memory dst(pd.dst_desc(), engine_);
    return {dnnl::matmul(pd),
            {{DNNL_ARG_SRC, input_of(g, src_md)}, {DNNL_ARG_WEIGHTS, w},
             {DNNL_ARG_BIAS, memory(bias_md, engine_, bias_of(g))}, {DNNL_ARG_DST, dst}},
            dst};
  }

  Step make_inner_product(const LgGroup& g) {
    const memory::dim m = d_.c->input_rows[size_t(g.input)], n = g.rows, k = d_.c->k;
    const memory::desc src_md({m, k}, Dt::f32, Tag::nc), wei_md({n, k}, Dt::f32, Tag::any),
        bias_md({n}, Dt::f32, Tag::x), dst_md({m, n}, Dt::f32, Tag::nc);
    const dnnl::inner_product_forward::primitive_desc pd(
        dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference, src_md, wei_md, bias_md, dst_md),
        engine_);
    info_ = pd.impl_info_str();
    // PyTorch's [out, in] weight is oneDNN's `oi`.
    memory w = reordered({{n, k}, Dt::f32, Tag::oi}, weight_of(g), pd.weights_desc());
    memory dst(pd.dst_desc(), engine_);
    return {dnnl::inner_product_forward(pd),
            {{DNNL_ARG_SRC, input_of(g, src_md)}, {DNNL_ARG_WEIGHTS, w},
             {DNNL_ARG_BIAS, memory(bias_md, engine_, bias_of(g))}, {DNNL_ARG_DST, dst}},
            dst};
  }

  const LgData& d_;
  int threads_;
  Primitive kind_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<LgGroup> groups_;
  std::vector<size_t> part_loc_;
  std::vector<Step> steps_;
  std::string info_;
};

// Best of 5 calls after one warm-up (untimed by the benchmark: part of building the peer).
double best_call_seconds(LgImpl& impl) {
  impl.run();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    impl.run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// ---- int8 ----------------------------------------------------------------------------
//
// The int8 peer of the quantized rows (linear_group/onednn/<case>/t1/qd8-qc8w).
//
// The form closest to our qd8-qc8w that oneDNN 2.6's matmul offers: u8 source quantized
// dynamically per tensor (asymmetric, scale and zero point from the input's min and max with 0
// included, as torch's dynamic quantized Linear does), s8 weights quantized per output channel
// (max|W[n,:]| / 127, the same codes as our qc8w), f32 destination. oneDNN 2.6 matmul takes one
// source scale for the whole tensor (output scales are common or per column), so the source is
// quantized per tensor, not per row as ours.
// The source uses 7 bits (codes 0..127), as torch's reduce_range does on x86: without VNNI,
// oneDNN's int8 GEMM adds pairs of u8 x s8 products with vpmaddubsw, which saturates at 2^15;
// with all 8 bits its results on the AVX2 host were wrong (tiny_cross_e16, part 0 column 10:
// -0.529 for -0.264, outside any quantization bound), with 7 bits a pair stays below 2^15.
// Per group of parts sharing an input and contiguous weight rows (self-attention: one primitive
// with N = 3E), one matmul with runtime output scales (source scale x weight scale[n]), a
// runtime source zero point, and the bias added by a binary post-op after the scaling.
//
// Timed (run()): for each distinct input, one pass for min and max, one pass quantizing it to
// u8 (plain loops, compiled like the rest of the benchmark), the N output scales, then the
// primitives. Untimed (build): quantizing and reordering the weights, creating the primitives.

// Per-tensor dynamic u8 quantization of one input: real = scale * (u - zero_point).
struct SourceQuant {
  float scale = 1.0f;
  int32_t zero_point = 0;
};

constexpr int kSourceLevels = 127;  // 7-bit codes (see the top of the file)

SourceQuant quantize_source(const float* x, size_t n, uint8_t* out) {
  float lo = 0.0f, hi = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  constexpr float kMax = float(kSourceLevels);
  SourceQuant q;
  q.scale = hi > lo ? (hi - lo) / kMax : 1.0f;
  const float inv = 1.0f / q.scale;
  q.zero_point = int32_t(std::clamp(std::nearbyint(-lo * inv), 0.0f, kMax));
  const float zp = float(q.zero_point);
  for (size_t i = 0; i < n; ++i) out[i] = uint8_t(std::clamp(std::nearbyint(x[i] * inv) + zp, 0.0f, kMax));
  return q;
}

class OnednnInt8Impl final : public LgImpl {
 public:
  OnednnInt8Impl(const LgData& data, int threads)
      : d_(data), threads_(threads), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    omp_set_num_threads(threads_);
    const LgCase& c = *data.c;
    groups_ = lg_packed_groups(c);
    part_loc_.resize(c.parts.size());
    for (size_t i = 0; i < c.input_rows.size(); ++i) {
      sources_.emplace_back(size_t(c.input_rows[i] * c.k));
      source_quant_.emplace_back();
    }
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      for (size_t p : groups_[gi].parts) part_loc_[p] = gi;
      steps_.push_back(make_step(groups_[gi]));
    }
    stream_.wait();
  }

  void activate(int) override { omp_set_num_threads(threads_); }

  void run() override {
    for (size_t i = 0; i < sources_.size(); ++i)
      source_quant_[i] = quantize_source(d_.inputs[i].data(), sources_[i].size(), sources_[i].data());
    for (Int8Step& s : steps_) {
      const SourceQuant& q = source_quant_[size_t(s.input)];
      float* scales = static_cast<float*>(s.scales.get_data_handle());
      for (size_t n = 0; n < s.weight_scales.size(); ++n) scales[n] = q.scale * s.weight_scales[n];
      *static_cast<int32_t*>(s.zero_point.get_data_handle()) = q.zero_point;
      s.prim.execute(stream_, s.args);
    }
    stream_.wait();
  }

  const float* out_row(size_t part, int64_t m) const override {
    return group_out_row(*d_.c, groups_, part_loc_, steps_[part_loc_[part]].dst, part, m);
  }

  std::string info() const override {
    return "matmul u8 src (7-bit, per-tensor dynamic scale and zero point, quantized in the timed call) x s8 "
           "weights (per channel), f32 dst, " +
           info_ + ", " + std::to_string(steps_.size()) + " primitive" + (steps_.size() > 1 ? "s" : "");
  }

  LgQuantization quantization() const override { return {127, LgQuantization::Input::kPerTensor, kSourceLevels}; }

 private:
  // A step with the runtime arguments run() fills in: the output scales and the zero point.
  struct Int8Step : Step {
    int input = 0;
    memory scales, zero_point;
    std::vector<float> weight_scales;
  };

  Int8Step make_step(const LgGroup& g) {
    const memory::dim m = d_.c->input_rows[size_t(g.input)], n = g.rows, k = d_.c->k;
    const memory::desc src_md({m, k}, Dt::u8, Tag::ab), wei_md({k, n}, Dt::s8, Tag::any),
        dst_md({m, n}, Dt::f32, Tag::ab), bias_md({1, n}, Dt::f32, Tag::ab);
    dnnl::primitive_attr attr;
    attr.set_output_scales(1 << 1, {DNNL_RUNTIME_F32_VAL});  // one per column n
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    dnnl::post_ops ops;
    ops.append_binary(dnnl::algorithm::binary_add, bias_md);  // after the scaling
    attr.set_post_ops(ops);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), attr, engine_);
    info_ = pd.impl_info_str();

    // Weights per output channel, as our qc8w: s = max|W[n,:]| / 127, codes round half to even.
    Int8Step s;
    s.input = g.input;
    std::vector<int8_t> codes(size_t(n * k));  // [n, k]: the [k, n] matrix `ba`
    s.weight_scales.resize(size_t(n));
    const float* w = d_.weight->data() + g.row_begin * k;
    for (memory::dim r = 0; r < n; ++r) {
      float amax = 0.0f;
      for (memory::dim j = 0; j < k; ++j) amax = std::max(amax, std::fabs(w[r * k + j]));
      const float scale = amax / 127.0f;
      s.weight_scales[size_t(r)] = scale;
      for (memory::dim j = 0; j < k; ++j)
        codes[size_t(r * k + j)] = scale > 0 ? int8_t(std::clamp(std::nearbyint(w[r * k + j] / scale), -127.0f, 127.0f)) : 0;
    }
    memory user({{k, n}, Dt::s8, Tag::ba}, engine_, codes.data()), packed(pd.weights_desc(), engine_);
    dnnl::reorder(user, packed).execute(stream_, user, packed);
    stream_.wait();

    s.prim = dnnl::matmul(pd);
    s.dst = memory(pd.dst_desc(), engine_);
    s.scales = memory({{n}, Dt::f32, Tag::x}, engine_);
    s.zero_point = memory({{1}, Dt::s32, Tag::x}, engine_);
    s.args = {{DNNL_ARG_SRC, memory(src_md, engine_, sources_[size_t(g.input)].data())},
              {DNNL_ARG_WEIGHTS, packed},
              {DNNL_ARG_DST, s.dst},
              {DNNL_ARG_ATTR_OUTPUT_SCALES, s.scales},
              {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, s.zero_point},
              {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
               memory(bias_md, engine_, const_cast<float*>(d_.bias->data() + g.row_begin))}};
    return s;
  }

  const LgData& d_;
  int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<LgGroup> groups_;
  std::vector<size_t> part_loc_;
  std::vector<std::vector<uint8_t>> sources_;
  std::vector<SourceQuant> source_quant_;
  std::vector<Int8Step> steps_;
  std::string info_;
};

}  // namespace

// Both primitives are built and the faster one on this shape is kept, so the row shows oneDNN
// at its best (matmul wins the GEMM shapes, inner_product can win M = 1).
std::unique_ptr<LgImpl> make_onednn(const LgData& data, int threads) {
  auto matmul = std::make_unique<OnednnImpl>(data, threads, Primitive::kMatmul);
  const double matmul_seconds = best_call_seconds(*matmul);
  auto inner_product = std::make_unique<OnednnImpl>(data, threads, Primitive::kInnerProduct);
  const double inner_product_seconds = best_call_seconds(*inner_product);
  if (inner_product_seconds < matmul_seconds) return inner_product;
  return matmul;
}
bool onednn_applies(const LgCase&, int) { return true; }

std::unique_ptr<LgImpl> make_onednn_qd8(const LgData& data, int threads) {
  return std::make_unique<OnednnInt8Impl>(data, threads);
}
bool onednn_qd8_applies(const LgCase&, int) { return true; }

#else

std::unique_ptr<LgImpl> make_onednn(const LgData&, int) { return nullptr; }
bool onednn_applies(const LgCase&, int) { return false; }
std::unique_ptr<LgImpl> make_onednn_qd8(const LgData&, int) { return nullptr; }
bool onednn_qd8_applies(const LgCase&, int) { return false; }

#endif

}  // namespace shapejit::bench

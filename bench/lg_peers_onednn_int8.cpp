// oneDNN int8 peer of the quantized linear-group rows (linear_group/onednn/<case>/t1/qd8-qc8w;
// libdnnl-dev 2.6, built with SHAPEJIT_BENCH_ONEDNN).
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
#include "lg_peers_common.hpp"

#if defined(SHAPEJIT_BENCH_ONEDNN)
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
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
    for (Step& s : steps_) {
      const SourceQuant& q = source_quant_[size_t(s.input)];
      float* scales = static_cast<float*>(s.scales.get_data_handle());
      for (size_t n = 0; n < s.weight_scales.size(); ++n) scales[n] = q.scale * s.weight_scales[n];
      *static_cast<int32_t*>(s.zero_point.get_data_handle()) = q.zero_point;
      s.prim.execute(stream_, s.args);
    }
    stream_.wait();
  }

  const float* out_row(size_t part, int64_t m) const override {
    const LgGroup& g = groups_[part_loc_[part]];
    const float* dst = static_cast<const float*>(steps_[part_loc_[part]].dst.get_data_handle());
    return dst + m * g.rows + (d_.c->parts[part].row_begin - g.row_begin);
  }

  std::string info() const override {
    return "matmul u8 src (7-bit, per-tensor dynamic scale and zero point, quantized in the timed call) x s8 "
           "weights (per channel), f32 dst, " +
           info_ + ", " + std::to_string(steps_.size()) + " primitive" + (steps_.size() > 1 ? "s" : "");
  }

  LgQuantization quantization() const override { return {127, LgQuantization::Input::kPerTensor, kSourceLevels}; }

 private:
  struct Step {
    int input = 0;
    dnnl::primitive prim;
    std::unordered_map<int, memory> args;
    memory dst, scales, zero_point;
    std::vector<float> weight_scales;
  };

  Step make_step(const LgGroup& g) {
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
    Step s;
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
  std::vector<Step> steps_;
  std::string info_;
};

}  // namespace

std::unique_ptr<LgImpl> make_onednn_qd8(const LgData& data, int threads) {
  return std::make_unique<OnednnInt8Impl>(data, threads);
}
bool onednn_qd8_applies(const LgCase&, int) { return true; }

#else

std::unique_ptr<LgImpl> make_onednn_qd8(const LgData&, int) { return nullptr; }
bool onednn_qd8_applies(const LgCase&, int) { return false; }

#endif

}  // namespace shapejit::bench

// oneDNN peer of the linear-group benchmark (libdnnl-dev 2.6, built with SHAPEJIT_BENCH_ONEDNN).
//
// One primitive per group of parts that share an input and contiguous weight rows
// (self-attention: one primitive with N = 3E; cross-attention: q, then k and v together), with
// the bias fused. Weights are declared `any`, so the primitive picks its blocked layout, and are
// reordered into it once at build time; the run executes the primitives only. Both matmul and
// inner_product are built and the faster on the case (best of 5 calls at build time) is kept;
// the summary names the one in use.
// Threads: Debian builds oneDNN on OpenMP, so activate() sets omp_set_num_threads(threads), and
// the primitives are built per thread count (oneDNN plans its blocking for it).
#include "lg_peers_common.hpp"

#if defined(SHAPEJIT_BENCH_ONEDNN)
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <unordered_map>
#endif

namespace shapejit::bench {

#if defined(SHAPEJIT_BENCH_ONEDNN)
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

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
    const LgGroup& g = groups_[part_loc_[part]];
    const float* dst = static_cast<const float*>(steps_[part_loc_[part]].dst.get_data_handle());
    return dst + m * g.rows + (d_.c->parts[part].row_begin - g.row_begin);
  }

  std::string info() const override {
    return std::string(kind_ == Primitive::kMatmul ? "matmul " : "inner_product ") + info_ + ", " +
           std::to_string(steps_.size()) + " primitive" + (steps_.size() > 1 ? "s" : "");
  }

 private:
  struct Step {
    dnnl::primitive prim;
    std::unordered_map<int, memory> args;
    memory dst;
  };

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

#else

std::unique_ptr<LgImpl> make_onednn(const LgData&, int) { return nullptr; }
bool onednn_applies(const LgCase&, int) { return false; }

#endif

}  // namespace shapejit::bench

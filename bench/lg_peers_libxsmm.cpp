// libxsmm peer of the linear-group benchmark (libxsmm-dev 1.17, built with SHAPEJIT_BENCH_LIBXSMM).
//
// libxsmm_3x: one JIT small-GEMM kernel per part, dispatched once at build time, three calls per
// run. libxsmm is column-major, so each part computes Y_p^T [N_p x M_p] = W_p^T-as-A (N_p x K,
// the part's weight transposed once at build time into [K, N_p]) times X_p^T (K x M_p, which is
// X_p's row-major storage as is); Y_p^T column-major is Y_p row-major. The bias is broadcast into
// Y_p and the kernel accumulates with beta = 1. Only small shapes (libxsmm's domain: every part
// with M*N*K <= 64^3), one thread.
#include "lg_peers_common.hpp"

#if defined(SHAPEJIT_BENCH_LIBXSMM)
#include <libxsmm.h>

#include <stdexcept>
#endif

namespace shapejit::bench {

#if defined(SHAPEJIT_BENCH_LIBXSMM)
namespace {

class LibxsmmImpl final : public LgImpl {
 public:
  explicit LibxsmmImpl(const LgData& data) : d_(data), outs_(*data.c) {
    libxsmm_init();
    const LgCase& c = *data.c;
    for (const LgPart& p : c.parts) {
      // W_p [N_p, K] row-major -> [K, N_p] row-major = column-major N_p x K with lda = N_p.
      LgBuffer wt(size_t(p.rows * c.k));
      const float* w = data.part_weight(p);
      for (int64_t n = 0; n < p.rows; ++n)
        for (int64_t k = 0; k < c.k; ++k) wt.data()[k * p.rows + n] = w[n * c.k + k];
      const libxsmm_blasint m = libxsmm_blasint(p.rows), n = libxsmm_blasint(c.m_of(p)),
                            k = libxsmm_blasint(c.k);
      const libxsmm_blasint lda = m, ldb = k, ldc = m;
      const float alpha = 1.0f, beta = 1.0f;
      const int flags = LIBXSMM_GEMM_FLAG_NONE, prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
      const libxsmm_smmfunction kernel =
          libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
      if (kernel == nullptr)
        throw std::runtime_error("libxsmm_smmdispatch returned no kernel for m=" + std::to_string(m) +
                                 " n=" + std::to_string(n) + " k=" + std::to_string(k));
      kernels_.push_back(kernel);
      weights_t_.push_back(std::move(wt));
    }
  }

  void run() override {
    const LgCase& c = *d_.c;
    for (size_t i = 0; i < c.parts.size(); ++i) {
      const LgPart& p = c.parts[i];
      float* y = outs_.part(i);
      lg_fill_bias(y, c.m_of(p), p.rows, p.rows, d_.part_bias(p));
      kernels_[i](weights_t_[i].data(), d_.part_input(p), y);
    }
  }

  const float* out_row(size_t part, int64_t m) const override { return outs_.row(part, m); }
  std::string info() const override { return std::string("target ") + libxsmm_get_target_arch(); }

 private:
  const LgData& d_;
  LgPartOutputs outs_;
  std::vector<libxsmm_smmfunction> kernels_;
  std::vector<LgBuffer> weights_t_;
};

}  // namespace

std::unique_ptr<LgImpl> make_libxsmm_3x(const LgData& data, int) { return std::make_unique<LibxsmmImpl>(data); }
bool libxsmm_applies(const LgCase& c, int threads) {
  if (threads != 1) return false;
  for (const LgPart& p : c.parts)
    if (double(c.m_of(p)) * double(p.rows) * double(c.k) > 64.0 * 64.0 * 64.0) return false;
  return true;
}

#else

std::unique_ptr<LgImpl> make_libxsmm_3x(const LgData&, int) { return nullptr; }
bool libxsmm_applies(const LgCase&, int) { return false; }

#endif

}  // namespace shapejit::bench

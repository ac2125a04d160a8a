// ATen peer for the embedding-bag benchmarks (compiled against libtorch when it was found).
#include "aten_runner.hpp"

#include <stdexcept>
#include <vector>

#if defined(SHAPEJIT_BENCH_ATEN)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>  // at::set_num_threads (not pulled in by ATen.h in 1.13)
#endif

namespace shapejit::bench {

#if defined(SHAPEJIT_BENCH_ATEN)

bool aten_available() { return true; }

struct AtenRunner::Impl {
  at::Tensor weight;
  std::vector<at::Tensor> indices;  // one per index set
  at::Tensor offsets;
  c10::optional<at::Tensor> per_sample_weights;
  int mode = 0;
  int threads = 1;
  at::Tensor output;
};

// from_blob wraps the workload's memory; ATen only reads these tensors, so casting away const
// is safe.
AtenRunner::AtenRunner(const Workload& w, int mode, bool weighted, int threads) : impl_(new Impl) {
  const auto& spec = w.spec();
  impl_->weight = at::from_blob(const_cast<float*>(w.table()), {spec.rows, spec.dim}, at::kFloat);
  for (int64_t s = 0; s < w.num_sets(); ++s)
    impl_->indices.push_back(
        at::from_blob(const_cast<int64_t*>(w.indices(s)), {w.num_indices()}, at::kLong));
  impl_->offsets = at::from_blob(const_cast<int64_t*>(w.offsets().data()),
                                 {int64_t(w.offsets().size())}, at::kLong);
  if (weighted)
    impl_->per_sample_weights = at::from_blob(const_cast<float*>(w.per_sample_weights().data()),
                                              {w.num_indices()}, at::kFloat);
  impl_->mode = mode;
  impl_->threads = threads;
}

AtenRunner::~AtenRunner() = default;

void AtenRunner::prepare() { at::set_num_threads(impl_->threads); }

void AtenRunner::run(int64_t set) {
  // Assigning drops the previous call's tensors, so their deallocation is part of a call, as
  // it is in a model.
  impl_->output = std::get<0>(at::_embedding_bag_forward_only(
      impl_->weight, impl_->indices[size_t(set)], impl_->offsets, /*scale_grad_by_freq=*/false,
      impl_->mode, /*sparse=*/false, impl_->per_sample_weights, /*include_last_offset=*/false,
      /*padding_idx=*/-1));
}

const float* AtenRunner::output() const { return impl_->output.data_ptr<float>(); }

#else  // built without libtorch

bool aten_available() { return false; }

struct AtenRunner::Impl {};

AtenRunner::AtenRunner(const Workload&, int, bool, int) {
  throw std::runtime_error("built without libtorch (apt-get install libtorch-dev and reconfigure)");
}
AtenRunner::~AtenRunner() = default;
void AtenRunner::prepare() {}
void AtenRunner::run(int64_t) {}
const float* AtenRunner::output() const { return nullptr; }

#endif

}  // namespace shapejit::bench

// ATen peer of the dtype benchmarks (see aten_dtype_runner.hpp).
#include "aten_dtype_runner.hpp"

#include <stdexcept>
#include <string>

#if defined(SHAPEJIT_BENCH_ATEN)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#endif

namespace shapejit::bench {

#if defined(SHAPEJIT_BENCH_ATEN)

namespace {

using RowwiseOp = at::Tensor(const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&, bool,
                             int64_t, bool, const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
                             bool);

const char* rowwise_op_name(shapejit_dtype t) {
  switch (t) {
    case SHAPEJIT_Q8: return "quantized::embedding_bag_byte_rowwise_offsets";
    case SHAPEJIT_Q4: return "quantized::embedding_bag_4bit_rowwise_offsets";
    default: return "quantized::embedding_bag_2bit_rowwise_offsets";
  }
}

}  // namespace

const char* aten_dtype_unsupported_reason(shapejit_dtype table, int mode) {
  if (table == SHAPEJIT_BF16) return "ATen 1.13 has no bf16 embedding bag";
  if (is_quantized(table) && mode != 0) return "ATen's rowwise quantized ops compute a sum in every mode";
  return nullptr;
}

struct AtenDtypeRunner::Impl {
  shapejit_dtype table_dtype;
  at::Tensor weight;
  std::vector<at::Tensor> indices;
  at::Tensor offsets;
  c10::optional<at::Tensor> per_sample_weights;
  int mode = 0;
  c10::optional<c10::TypedOperatorHandle<RowwiseOp>> rowwise;
  at::Tensor output;
};

AtenDtypeRunner::AtenDtypeRunner(const Workload& w, const DtypeTable& t, int mode, bool weighted) : impl_(new Impl) {
  if (const char* why = aten_dtype_unsupported_reason(t.dtype(), mode)) throw std::runtime_error(why);
  const auto& spec = w.spec();
  impl_->table_dtype = t.dtype();
  impl_->mode = mode;
  void* table = const_cast<void*>(t.data());  // ATen only reads these tensors
  if (t.dtype() == SHAPEJIT_F16) {
    impl_->weight = at::from_blob(table, {spec.rows, spec.dim}, at::kHalf);
    if (weighted)
      impl_->per_sample_weights =
          at::from_blob(const_cast<void*>(t.per_sample_weights()), {w.num_indices()}, at::kHalf);
  } else {
    impl_->weight = at::from_blob(table, {spec.rows, t.row_bytes()}, at::kByte);
    if (weighted)
      impl_->per_sample_weights =
          at::from_blob(const_cast<void*>(t.per_sample_weights()), {w.num_indices()}, at::kFloat);
    impl_->rowwise = c10::Dispatcher::singleton()
                         .findSchemaOrThrow(rowwise_op_name(t.dtype()), "")
                         .typed<RowwiseOp>();
  }
  for (int64_t s = 0; s < w.num_sets(); ++s)
    impl_->indices.push_back(at::from_blob(const_cast<int64_t*>(w.indices(s)), {w.num_indices()}, at::kLong));
  impl_->offsets =
      at::from_blob(const_cast<int64_t*>(w.offsets().data()), {int64_t(w.offsets().size())}, at::kLong);
}

AtenDtypeRunner::~AtenDtypeRunner() = default;

void AtenDtypeRunner::prepare() { at::set_num_threads(1); }

void AtenDtypeRunner::run(int64_t set) {
  const at::Tensor& idx = impl_->indices[size_t(set)];
  if (impl_->rowwise) {
    impl_->output = impl_->rowwise->call(impl_->weight, idx, impl_->offsets, false, 0, false,
                                         impl_->per_sample_weights, c10::nullopt, false);
    return;
  }
  impl_->output = std::get<0>(at::_embedding_bag_forward_only(impl_->weight, idx, impl_->offsets, false,
                                                              impl_->mode, false, impl_->per_sample_weights,
                                                              false, -1));
}

std::vector<float> AtenDtypeRunner::output_f32() const {
  const at::Tensor f = impl_->output.to(at::kFloat).contiguous();
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

#else  // built without libtorch

const char* aten_dtype_unsupported_reason(shapejit_dtype, int) { return "built without libtorch"; }
struct AtenDtypeRunner::Impl {};
AtenDtypeRunner::AtenDtypeRunner(const Workload&, const DtypeTable&, int, bool) {
  throw std::runtime_error("built without libtorch (apt-get install libtorch-dev and reconfigure)");
}
AtenDtypeRunner::~AtenDtypeRunner() = default;
void AtenDtypeRunner::prepare() {}
void AtenDtypeRunner::run(int64_t) {}
std::vector<float> AtenDtypeRunner::output_f32() const { return {}; }

#endif

}  // namespace shapejit::bench

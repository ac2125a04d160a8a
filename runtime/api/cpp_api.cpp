// The embedding-bag C++ API: converts views to the C argument structs and shares their path;
// every entry validates its call once (into a plan) and runs that plan.
#include <cstring>
#include <new>
#include <numeric>
#include <string>
#include <utility>

#include "jit/dtype_traits.hpp"
#include "ref/embedding_bag.hpp"
#include "ref/float16.hpp"
#include "runtime/engine/c_enum.hpp"
#include "runtime/embag/embag_prepared.hpp"
#include "runtime/embag/embedding_bag.hpp"
#include "runtime/engine/dtype_name.hpp"
#include "runtime/embag/validate.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit {
namespace {

// Widens an int32 or int64 buffer of n elements to int64.
std::vector<int64_t> widen(const std::vector<unsigned char>& raw, DType dtype, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::kI32) {
      int32_t x;
      std::memcpy(&x, raw.data() + i * 4, 4);
      v[size_t(i)] = x;
    } else {
      std::memcpy(&v[size_t(i)], raw.data() + i * 8, 8);
    }
  }
  return v;
}

// Widens n output values of dtype f32, f16 or bf16 exactly to f32.
std::vector<float> widen_output(const std::vector<unsigned char>& raw, DType dtype, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  if (dtype == DType::kF32) {
    if (n > 0) std::memcpy(v.data(), raw.data(), size_t(n) * 4);
    return v;
  }
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, raw.data() + i * 2, 2);
    v[size_t(i)] = dtype == DType::kF16 ? ref::f16_to_f32(h) : ref::bf16_to_f32(h);
  }
  return v;
}

}  // namespace

// Enum fields are stored as the caller's int (any DType or Mode value is a valid int): the
// validator reports an out-of-range one, where converting it to the C enum would be undefined.
shapejit_embedding_bag_args EmbeddingBagCall::to_c() const {
  shapejit_embedding_bag_args a{};
  a.weight = weight.data;
  rt::set_c_enum(a.weight_dtype, weight.dtype);
  a.num_rows = weight.rows;
  a.dim = weight.dim;
  // 0 means dense rows: dim elements, or the packed row's bytes for a quantized table.
  // An unknown dtype keeps dim; validation rejects it.
  const jit::DtypeTraits* traits = jit::find_dtype_traits(static_cast<int64_t>(weight.dtype));
  const int64_t dense = traits && traits->quantized ? jit::table_row_bytes(weight.dtype, weight.dim) : weight.dim;
  a.row_stride = weight.row_stride == 0 ? dense : weight.row_stride;
  a.indices = indices.data;
  rt::set_c_enum(a.index_dtype, indices.dtype);
  a.num_indices = indices.size;
  a.offsets = offsets.data;
  rt::set_c_enum(a.offset_dtype, offsets.dtype);
  a.num_offsets = offsets.size;
  a.per_sample_weights = per_sample_weights;
  rt::set_c_enum(a.mode, mode);
  a.has_padding_idx = padding_idx.has_value();
  a.padding_idx = padding_idx.value_or(0);
  a.include_last_offset = include_last_offset;
  a.aten_partial_final_offset = aten_partial_final_offset;
  return a;
}

shapejit_embedding_bag_ex_args EmbeddingBagCall::to_c_ex() const {
  shapejit_embedding_bag_ex_args e = ref::embedding_bag_ex_defaults(to_c());
  if (output_dtype) rt::set_c_enum(e.output_dtype, *output_dtype);
  if (per_sample_weights_dtype) rt::set_c_enum(e.per_sample_weights_dtype, *per_sample_weights_dtype);
  if (!compressed_indices_mapping.empty()) {
    e.compressed_indices_mapping = compressed_indices_mapping.data();
    e.mapping_len = static_cast<int64_t>(compressed_indices_mapping.size());
  }
  e.offsets_as_lengths = offsets_as_lengths;
  e.skip_index_outputs = skip_index_outputs;
  e.output_row_stride = output_row_stride;
  e.aten_loop_arithmetic = aten_loop_arithmetic;
  return e;
}

EmbeddingBagShapes embedding_bag_output_shapes(const EmbeddingBagCall& call) {
  return rt::to_cpp_shapes(rt::plan_embedding_bag(call.to_c_ex()).shapes);
}

void embedding_bag(const EmbeddingBagCall& call, const EmbeddingBagOutputs& out) {
  rt::run_embedding_bag(call.to_c_ex(), out.output, out.offset2bag, out.bag_size, out.max_indices);
}

namespace {

// The C batch of a C++ one, its views' dtypes checked against the form's.
shapejit_embedding_bag_batch to_c_batch(const rt::EmbagCallPlan& form, const EmbeddingBagBatch& batch) {
  const auto check = [](const char* name, const IndexView& view, DType want) {
    if (view.size > 0 && view.dtype != want)
      throw Error(Status::kInvalidArgument, std::string("embedding_bag: batch.") + name + " are " +
                                                rt::dtype_name(int64_t(view.dtype)) + " but the form's are " +
                                                rt::dtype_name(int64_t(want)));
  };
  check("indices", batch.indices, form.index);
  check("offsets", batch.offsets, form.offset);
  return {batch.indices.data, batch.indices.size, batch.offsets.data, batch.offsets.size, batch.per_sample_weights};
}

}  // namespace

PreparedEmbeddingBag::PreparedEmbeddingBag(const EmbeddingBagCall& form)
    : prepared_(new shapejit_embedding_bag_prepared{rt::EmbagPrepared(form.to_c_ex())}) {}

PreparedEmbeddingBag::PreparedEmbeddingBag(PreparedEmbeddingBag&& other) noexcept
    : prepared_(std::exchange(other.prepared_, nullptr)) {}

PreparedEmbeddingBag& PreparedEmbeddingBag::operator=(PreparedEmbeddingBag&& other) noexcept {
  if (this != &other) {
    delete prepared_;
    prepared_ = std::exchange(other.prepared_, nullptr);
  }
  return *this;
}

PreparedEmbeddingBag::~PreparedEmbeddingBag() { delete prepared_; }

EmbeddingBagShapes PreparedEmbeddingBag::output_shapes(const EmbeddingBagBatch& batch) const {
  const rt::EmbagPrepared& p = prepared_->prepared;
  return rt::to_cpp_shapes(p.plan(to_c_batch(p.form(), batch), rt::IndexRangeCheck::kInPlan).shapes);
}

void PreparedEmbeddingBag::run(const EmbeddingBagBatch& batch, const EmbeddingBagOutputs& out) const {
  const rt::EmbagPrepared& p = prepared_->prepared;
  p.run(to_c_batch(p.form(), batch), out.output, out.offset2bag, out.bag_size, out.max_indices);
}

void embedding_bags(std::span<const EmbeddingBagCall> calls, std::span<const EmbeddingBagOutputs> outputs) {
  std::vector<shapejit_embedding_bag_ex_args> c;
  std::vector<rt::EmbagOutputs> o;
  c.reserve(calls.size());
  o.reserve(outputs.size());
  for (const EmbeddingBagCall& call : calls) c.push_back(call.to_c_ex());
  for (const EmbeddingBagOutputs& out : outputs) o.push_back({out.output, out.offset2bag, out.bag_size, out.max_indices});
  rt::run_embedding_bags(c, o);
}

EmbeddingBagResult embedding_bag(const EmbeddingBagCall& call) {
  shapejit_embedding_bag_ex_args dense = call.to_c_ex();
  dense.output_row_stride = 0;  // the result's rows are dense whatever the call asks
  const rt::EmbagCallPlan plan = rt::plan_embedding_bag(dense);  // the one validation
  const EmbeddingBagShapes s = rt::to_cpp_shapes(plan.shapes);
  const int64_t int_bytes = s.index_dtype == DType::kI32 ? 4 : 8;
  const int64_t out_bytes = plan.out == DType::kF32 ? 4 : 2;
  EmbeddingBagResult r;
  r.shapes = s;
  std::vector<unsigned char> out, o2b, bag, maxi;
  try {  // validation bounds the byte counts by int64, not by what can be allocated
    out.resize(size_t(s.output_rows * s.output_cols * out_bytes));
    o2b.resize(size_t(s.offset2bag_len * int_bytes));
    bag.resize(size_t(s.bag_size_len * int_bytes));
    maxi.resize(size_t(s.max_indices_rows * s.max_indices_cols * int_bytes));
  } catch (const std::bad_alloc&) {
    throw Error(Status::kOutOfMemory, "embedding_bag: cannot allocate the outputs (output " +
                                          std::to_string(s.output_rows) + " x " + std::to_string(s.output_cols) +
                                          " values, " + std::to_string(s.offset2bag_len) + " offset2bag entries)");
  }
  rt::run_embedding_bag(plan, out.data(), o2b.data(), bag.data(), maxi.data());
  r.output = widen_output(out, plan.out, s.output_rows * s.output_cols);
  r.offset2bag = widen(o2b, s.index_dtype, s.offset2bag_len);
  r.bag_size = widen(bag, s.index_dtype, s.bag_size_len);
  r.max_indices = widen(maxi, s.index_dtype, s.max_indices_rows * s.max_indices_cols);
  return r;
}

EmbeddingBagResult embedding_bag_2d(const TableView& weight, IndexView indices, int64_t bags, int64_t bag_len,
                                    Mode mode, const void* per_sample_weights, std::optional<int64_t> padding_idx) {
  int64_t total = 0;
  if (bags < 0 || bag_len < 0 || __builtin_mul_overflow(bags, bag_len, &total) || total != indices.size)
    throw Error(Status::kInvalidArgument,
                "embedding_bag: 2-D indices must have bags x bag_len == indices.size, but got " + std::to_string(bags) +
                    " x " + std::to_string(bag_len) + " for " + std::to_string(indices.size) + " indices");
  // The 2-D form is the 1-D form with offsets 0, L, 2L, ... (include_last_offset false).
  // The offsets take the indices' dtype, as ATen builds them, so no promotion happens.
  std::vector<int64_t> offsets64;
  std::vector<int32_t> offsets32;
  EmbeddingBagCall call;
  if (indices.dtype == DType::kI32) {
    for (int64_t b = 0; b < bags; ++b) offsets32.push_back(static_cast<int32_t>(b * bag_len));
    call.offsets = IndexView(offsets32);
  } else {
    for (int64_t b = 0; b < bags; ++b) offsets64.push_back(b * bag_len);
    call.offsets = IndexView(offsets64);
  }
  call.weight = weight;
  call.indices = indices;
  call.mode = mode;
  call.per_sample_weights = per_sample_weights;
  call.padding_idx = padding_idx;
  return embedding_bag(call);
}

}  // namespace shapejit

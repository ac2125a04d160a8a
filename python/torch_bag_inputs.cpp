// Indices, offsets and per-sample weights of an embedding-bag op, read once for every table dtype.
#include "python/torch_bag_inputs.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include <ATen/EmptyTensor.h>

#include "python/torch_engine.hpp"
#include "python/torch_glue.hpp"
#include "runtime/embag/embedding_bag.hpp"
#include "runtime/embag/validate.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::torch_ext {

namespace {

bool is_index_type(at::ScalarType t) { return t == at::kLong || t == at::kInt; }

// Indices and offsets are int32 or int64, each on its own (the engine reads either); ATen's rule.
void check_index_type(const char* op, const at::Tensor& t, const char* name, const char* why) {
  TORCH_CHECK(is_index_type(t.scalar_type()), op, ": ", name, " must be int32 or int64", why, ", but got ",
              t.scalar_type());
}

// 0, L, 2L, ... for indices [B, L] (int32 or int64), of the indices' dtype.
at::Tensor fixed_length_offsets(const at::Tensor& indices) {
  const int64_t bags = indices.size(0), len = indices.size(1);
  const at::ScalarType type = indices.scalar_type();
  at::Tensor offsets = at::detail::empty_cpu({bags}, type);
  if (type == at::kLong) {
    int64_t* o = offsets.data_ptr<int64_t>();
    for (int64_t b = 0; b < bags; ++b) o[b] = b * len;
  } else {
    int32_t* o = offsets.data_ptr<int32_t>();
    for (int64_t b = 0; b < bags; ++b) o[b] = static_cast<int32_t>(b * len);
  }
  return offsets;
}

// torch.embedding_bag (torch 2.13; test_index_dtypes.py holds us to it) converts indices and
// offsets to their promoted dtype (torch.result_type) and then requires int32 or int64: int8/int16/uint8/bool indices pass with
// int32/int64 offsets, and the index results take the promoted dtype. A pair already of int32
// and int64 is left as it is (the engine reads both and gives ATen's result dtypes).
void promote_like_aten(const char* op, BagInputs& in) {
  const at::ScalarType ti = in.indices.scalar_type(), to = in.offsets.scalar_type();
  if (is_index_type(ti) && is_index_type(to)) return;
  const at::ScalarType common = at::result_type(in.indices, in.offsets);
  TORCH_CHECK(is_index_type(common), op, ": indices (", ti, ") and offsets (", to, ") promote to ", common,
              ", but torch.embedding_bag takes indices and offsets whose promoted dtype is int32 or int64 (e.g. int8, "
              "int16, uint8 or bool indices with int32 or int64 offsets)");
  in.indices = in.indices.to(common);
  in.offsets = in.offsets.to(common);
}

}  // namespace

BagInputs bag_inputs(const char* op, const at::Tensor& indices, const c10::optional<at::Tensor>& offsets,
                     const c10::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
                     IndexDtypes index_dtypes) {
  check_cpu(indices, "indices");
  BagInputs in;
  // The 2-D form: row b of indices [B, L] is bag b, so the offsets are 0, L, 2L, ...
  if (indices.dim() == 2) {
    TORCH_CHECK(!offsets.has_value(), op, ": indices is 2-D [bags, bag_len], so offsets must be None (ATen's "
                                          "result with both is undefined)");
    TORCH_CHECK(!include_last_offset, op, ": include_last_offset must be False with 2-D indices");
    // No promotion: the offsets are made of the indices' dtype (as F.embedding_bag makes them).
    check_index_type(op, indices, "indices", " (2-D indices make offsets of their own dtype)");
    // The engine reads a pointer and a count, so a contiguous [B, L] tensor serves as it is; the
    // offsets are filled in place. Both skip the dispatcher (reshape, arange, mul_), which cost
    // about 5 us a call, more than a small bag's kernel (a 26-table group: 290 -> 154 us).
    in.indices = indices.contiguous();
    in.offsets = fixed_length_offsets(indices);
  } else {
    TORCH_CHECK(indices.dim() == 1, op, ": indices must be 1-D (with offsets) or 2-D [bags, bag_len], but got a ",
                indices.dim(), "-D tensor");
    TORCH_CHECK(offsets.has_value(), op, ": offsets is required with 1-D indices");
    check_cpu(*offsets, "offsets");
    TORCH_CHECK(offsets->dim() == 1, op, ": offsets must be 1-D, but got a ", offsets->dim(), "-D tensor");
    in.indices = indices.contiguous();
    in.offsets = offsets->contiguous();
    if (index_dtypes == IndexDtypes::kPromotedLikeAten) promote_like_aten(op, in);
    const char* why =
        index_dtypes == IndexDtypes::kPromotedLikeAten ? "" : " (torch's quantized embedding-bag ops promote neither)";
    check_index_type(op, in.indices, "indices", why);
    check_index_type(op, in.offsets, "offsets", why);
  }
  if (per_sample_weights.has_value()) {
    check_cpu(*per_sample_weights, "per_sample_weights");
    TORCH_CHECK(per_sample_weights->numel() == in.indices.numel(), op, ": per_sample_weights must have ",
                in.indices.numel(), " elements (one per index), but got ", per_sample_weights->numel());
    in.psw_given = indices.dim() == 2 ? per_sample_weights->reshape({-1}) : *per_sample_weights;
    in.psw = per_sample_weights->reshape({-1}).contiguous();
  }
  return in;
}

void fill_bag_args(shapejit_embedding_bag_args& a, const BagInputs& in, int64_t mode,
                   c10::optional<int64_t> padding_idx, bool include_last_offset) {
  a.indices = in.indices.data_ptr();
  a.index_dtype = to_shapejit_dtype(in.indices, "indices");
  a.num_indices = in.indices.numel();
  a.offsets = in.offsets.data_ptr();
  a.offset_dtype = to_shapejit_dtype(in.offsets, "offsets");
  a.num_offsets = in.offsets.numel();
  // An empty tensor's data pointer may be NULL, which shapejit reads as "no weights"; weights given
  // for zero indices are still weights (mode and dtype rules apply), so they get a real address.
  alignas(8) static const unsigned char no_elements[8] = {};
  a.per_sample_weights = !in.psw.defined() ? nullptr : in.psw.numel() ? in.psw.data_ptr() : no_elements;
  // Stored as an int, not converted to the C enum (UB when out of range), so validation reports
  // the caller's value; one beyond int32 becomes INT32_MIN, which is just as invalid.
  const int32_t mode_int = mode < INT32_MIN || mode > INT32_MAX ? INT32_MIN : int32_t(mode);
  std::memcpy(&a.mode, &mode_int, sizeof mode_int);
  a.has_padding_idx = padding_idx.has_value();
  a.padding_idx = padding_idx.value_or(0);
  a.include_last_offset = include_last_offset;
}

namespace {

// at::empty without the dispatcher: every result is a fresh dense CPU tensor, and on a small
// call the dispatcher's four round trips cost as much as the kernel.
at::Tensor empty_cpu(at::IntArrayRef sizes, at::ScalarType type) { return at::detail::empty_cpu(sizes, type); }

// The engine's C++ entry points: one validation per call (the C ABI would validate once for the
// shapes and again for the run). Engine errors become the errors check_status raises.
rt::EmbagCallPlan plan_bag(const shapejit_embedding_bag_ex_args& call, const char* what) {
  follow_torch_threads();
  try {
    return rt::plan_embedding_bag(rt::complete_ex_args(call));
  } catch (const Error& e) {
    raise_failure(static_cast<shapejit_status>(e.status()), e.what(), what);
  }
}

void run_plan(const rt::EmbagCallPlan& plan, void* output, void* offset2bag, void* bag_size, void* max_indices,
              const char* what) {
  try {
    rt::run_embedding_bag(plan, output, offset2bag, bag_size, max_indices);
  } catch (const Error& e) {
    raise_failure(static_cast<shapejit_status>(e.status()), e.what(), what);
  }
}

at::ScalarType output_type(const rt::EmbagCallPlan& plan) {
  return to_scalar_type(static_cast<shapejit_dtype>(plan.out));
}

}  // namespace

BagResults allocate_results(const shapejit_embedding_bag_shapes& s, at::ScalarType value_type, int64_t mode) {
  const at::ScalarType ints = to_scalar_type(s.index_out_dtype);
  at::Tensor output = empty_cpu({s.output_rows, s.output_cols}, value_type);
  at::Tensor offset2bag = empty_cpu({s.offset2bag_len}, ints);
  at::Tensor bag_size = empty_cpu({s.bag_size_len}, ints);
  at::Tensor max_indices = mode == SHAPEJIT_MAX ? empty_cpu({s.max_indices_rows, s.max_indices_cols}, ints)
                                                : empty_cpu({s.max_indices_rows}, ints);
  return {output, offset2bag, bag_size, max_indices};
}

BagResults run_bag(const shapejit_embedding_bag_ex_args& call, int64_t mode, const char* what) {
  const rt::EmbagCallPlan plan = plan_bag(call, what);
  BagResults r = allocate_results(plan.shapes, output_type(plan), mode);
  run_plan(plan, std::get<0>(r).data_ptr(), std::get<1>(r).data_ptr(), std::get<2>(r).data_ptr(),
           std::get<3>(r).data_ptr(), what);
  return r;
}

at::Tensor run_bag_output(const shapejit_embedding_bag_ex_args& call, const char* what) {
  // The engine computes the output alone: no index results to allocate, and max and mean skip
  // the id and count work (skip_index_outputs).
  shapejit_embedding_bag_ex_args output_only = call;
  output_only.skip_index_outputs = 1;
  const rt::EmbagCallPlan plan = plan_bag(output_only, what);
  const shapejit_embedding_bag_shapes& s = plan.shapes;
  at::Tensor output = empty_cpu({s.output_rows, s.output_cols}, output_type(plan));
  run_plan(plan, output.data_ptr(), nullptr, nullptr, nullptr, what);
  return output;
}

namespace {

// The group's plans, with rows `row_stride` elements apart (0: dense), each call computing its
// output alone unless `index_outputs`.
std::vector<rt::EmbagCallPlan> plan_group(std::span<const shapejit_embedding_bag_ex_args> calls, int64_t row_stride,
                                          bool index_outputs = false) {
  std::vector<rt::EmbagCallPlan> plans(calls.size());
  for (size_t k = 0; k < calls.size(); ++k) {
    shapejit_embedding_bag_ex_args c = calls[k];
    c.skip_index_outputs = index_outputs ? 0 : 1;
    c.output_row_stride = row_stride;
    plans[k] = rt::plan_group_call(rt::complete_ex_args(c), k);
  }
  return plans;
}

// An engine error of a group names the call as "embedding_bags: calls[k]: <rule>"
// (runtime/embag/embedding_bag.hpp); the group ops' entry k is bags[k] of EmbeddingBagGroup, so their
// messages say "bags[k]: <rule>", as their argument checks do.
[[noreturn]] void raise_group_failure(const Error& e, const char* what) {
  static constexpr char kCall[] = "embedding_bags: calls[";
  const char* detail = e.what();
  const std::string named = std::strncmp(detail, kCall, sizeof kCall - 1) == 0
                                ? std::string("bags[") + (detail + sizeof kCall - 1)
                                : std::string(detail);
  raise_failure(static_cast<shapejit_status>(e.status()), named.c_str(), what);
}

// The columns of all calls side by side (a negative dim is left to validation, which names it).
int64_t concat_columns(std::span<const shapejit_embedding_bag_ex_args> calls, const char* what) {
  TORCH_CHECK(!calls.empty(), "shapejit.", what, ": there must be at least one table to concatenate");
  int64_t columns = 0;
  for (const shapejit_embedding_bag_ex_args& c : calls)
    TORCH_CHECK(!__builtin_add_overflow(columns, std::max<int64_t>(c.call.dim, 0), &columns), "shapejit.", what,
                ": the tables' embedding dims add up to more than 2^63 - 1 columns");
  return columns;
}

// One [B, columns] output for every plan, each writing its column slice into outs[k].output.
at::Tensor concat_output(const std::vector<rt::EmbagCallPlan>& plans, int64_t columns, std::vector<rt::EmbagOutputs>& outs,
                         const char* what) {
  const shapejit_embedding_bag_shapes& first = plans.front().shapes;
  for (size_t k = 1; k < plans.size(); ++k) {
    TORCH_CHECK(plans[k].shapes.output_rows == first.output_rows, "shapejit.", what, ": bags[", k, "] has ",
                plans[k].shapes.output_rows, " bags but bags[0] has ", first.output_rows,
                " (the outputs are concatenated along dim 1, so every table needs the same number of bags)");
    TORCH_CHECK(plans[k].out == plans.front().out, "shapejit.", what, ": bags[", k, "]'s output dtype ",
                output_type(plans[k]), " differs from bags[0]'s ", output_type(plans.front()),
                " (the outputs are concatenated into one tensor)");
  }
  at::Tensor result = empty_cpu({first.output_rows, columns}, output_type(plans.front()));
  auto* base = static_cast<char*>(result.data_ptr());
  int64_t column = 0;
  for (size_t k = 0; k < plans.size(); ++k) {
    outs[k].output = base + column * int64_t(result.element_size());
    column += plans[k].dim;
  }
  return result;
}

}  // namespace

std::vector<at::Tensor> run_bags_output(std::span<const shapejit_embedding_bag_ex_args> calls, const char* what) {
  follow_torch_threads();
  std::vector<rt::EmbagOutputs> outs(calls.size());
  std::vector<at::Tensor> results;
  try {
    const std::vector<rt::EmbagCallPlan> plans = plan_group(calls, 0);
    for (size_t k = 0; k < calls.size(); ++k) {
      const shapejit_embedding_bag_shapes& s = plans[k].shapes;
      results.push_back(empty_cpu({s.output_rows, s.output_cols}, output_type(plans[k])));
      outs[k].output = results.back().data_ptr();
    }
    rt::run_embedding_bags(plans, outs);
  } catch (const Error& e) {
    raise_group_failure(e, what);
  }
  return results;
}

at::Tensor run_bags_concat_output(std::span<const shapejit_embedding_bag_ex_args> calls, const char* what) {
  follow_torch_threads();
  const int64_t columns = concat_columns(calls, what);
  at::Tensor result;
  try {
    const std::vector<rt::EmbagCallPlan> plans = plan_group(calls, columns);
    std::vector<rt::EmbagOutputs> outs(calls.size());
    result = concat_output(plans, columns, outs, what);
    rt::run_embedding_bags(plans, outs);
  } catch (const Error& e) {
    raise_group_failure(e, what);
  }
  return result;
}

GroupResults run_bags(std::span<const shapejit_embedding_bag_ex_args> calls, at::IntArrayRef modes, bool concat,
                      const char* what) {
  follow_torch_threads();
  const int64_t columns = concat ? concat_columns(calls, what) : 0;
  GroupResults r;
  auto& [outputs, offset2bag, bag_size, max_indices] = r;
  try {
    const std::vector<rt::EmbagCallPlan> plans = plan_group(calls, columns, /*index_outputs=*/true);
    std::vector<rt::EmbagOutputs> outs(calls.size());
    if (concat) outputs.push_back(concat_output(plans, columns, outs, what));
    for (size_t k = 0; k < calls.size(); ++k) {
      BagResults one = allocate_results(plans[k].shapes, output_type(plans[k]), modes[k]);
      if (!concat) outputs.push_back(std::get<0>(one));
      offset2bag.push_back(std::get<1>(one));
      bag_size.push_back(std::get<2>(one));
      max_indices.push_back(std::get<3>(one));
      if (!concat) outs[k].output = outputs.back().data_ptr();
      outs[k].offset2bag = offset2bag.back().data_ptr();
      outs[k].bag_size = bag_size.back().data_ptr();
      outs[k].max_indices = max_indices.back().data_ptr();
    }
    rt::run_embedding_bags(plans, outs);
  } catch (const Error& e) {
    raise_group_failure(e, what);
  }
  return r;
}

}  // namespace shapejit::torch_ext

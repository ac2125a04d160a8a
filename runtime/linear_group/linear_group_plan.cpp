// Decoding a validated linear-group description; see linear_group_plan.hpp.
#include "runtime/linear_group/linear_group_plan.hpp"

#include <algorithm>

#include "runtime/linear_group/linear_weight_quant.hpp"

namespace shapejit::rt {

LinearPartPlan resolve_linear_part(const shapejit_linear_group_desc& desc, int64_t p) {
  const shapejit_linear_part_desc& d = desc.parts[p];
  const bool packed = desc.form == SHAPEJIT_WEIGHTS_PACKED;
  LinearPartPlan part;
  part.weight = packed ? (desc.weight ? desc.weight + d.row_begin * desc.weight_stride : nullptr) : d.weight;
  part.ldw = packed ? desc.weight_stride : d.weight_stride;
  part.n = d.rows;
  part.k = packed ? desc.k : d.k;
  part.bias = desc.bias ? desc.bias + d.row_begin : nullptr;
  part.activation = d.activation;
  part.scale = d.has_scale ? d.scale : 1.0f;
  part.layout = d.layout;
  part.heads = d.layout == SHAPEJIT_LAYOUT_ROW_MAJOR ? 1 : d.heads;
  return part;
}

shapejit_linear_weight_codes resolve_part_codes(const shapejit_linear_group_ex_desc& desc, int64_t p) {
  if (desc.group.form == SHAPEJIT_WEIGHTS_SEPARATE) return desc.codes[p];
  const shapejit_linear_weight_codes& all = desc.codes[0];
  const int64_t row = desc.group.parts[p].row_begin;
  return {all.codes + row * all.stride, all.stride, all.scales + row};
}

void resolve_linear_codes(const shapejit_linear_group_ex_desc& desc, LinearGroupPlan& plan) {
  plan.quant = desc.quant;
  if (desc.quant == SHAPEJIT_LINEAR_F32) return;
  size_t codes = 0, scales = 0;
  for (const LinearPartPlan& part : plan.parts) codes += size_t(part.n * part.k), scales += size_t(part.n);
  plan.codes.resize(codes);
  plan.scales.resize(scales);
  int8_t* next_code = plan.codes.data();
  float* next_scale = plan.scales.data();
  for (size_t p = 0; p < plan.parts.size(); ++p) {
    LinearPartPlan& part = plan.parts[p];
    if (desc.codes) {
      const shapejit_linear_weight_codes given = resolve_part_codes(desc, int64_t(p));
      for (int64_t r = 0; r < part.n; ++r) std::copy_n(given.codes + r * given.stride, part.k, next_code + r * part.k);
      std::copy_n(given.scales, part.n, next_scale);
    } else {
      quantize_weight_rows(desc.quant, part.weight, part.n, part.k, part.ldw, next_code, next_scale);
    }
    part.weight = nullptr;  // the codes stand for the weights from now on
    part.ldw = 0;
    part.codes = next_code;
    part.ldc = part.k;
    part.wscale = next_scale;
    next_code += part.n * part.k;
    next_scale += part.n;
  }
}

}  // namespace shapejit::rt

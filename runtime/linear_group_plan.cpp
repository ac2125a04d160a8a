// Decoding a validated linear-group description; see linear_group_plan.hpp.
#include "runtime/linear_group_plan.hpp"

namespace shapejit::rt {

LinearPartPlan resolve_linear_part(const shapejit_linear_group_desc& desc, int64_t p) {
  const shapejit_linear_part_desc& d = desc.parts[p];
  const bool packed = desc.form == SHAPEJIT_WEIGHTS_PACKED;
  LinearPartPlan part;
  part.weight = packed ? desc.weight + d.row_begin * desc.weight_stride : d.weight;
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

}  // namespace shapejit::rt

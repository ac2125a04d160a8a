// torch.classes.shapejit.LinearGroup: a shapejit linear group built once from PyTorch weights
// (packed, e.g. nn.MultiheadAttention's in_proj_weight, or one weight per part) and run on
// tensors, each part's output allocated row-major [..., N_p] or head-split [Nb, H, L, Dh].
#include "python/torch_linear_group.hpp"

#include <ATen/ATen.h>
#include <torch/custom_class.h>

#include <cstdint>
#include <string>
#include <vector>

#include "python/torch_glue.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::torch_ext {
namespace {

shapejit_layout parse_layout(const std::string& s, size_t part) {
  if (s == "row_major") return SHAPEJIT_LAYOUT_ROW_MAJOR;
  if (s == "heads_seq_first") return SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST;
  if (s == "heads_batch_first") return SHAPEJIT_LAYOUT_HEADS_BATCH_FIRST;
  TORCH_CHECK(false, "shapejit.LinearGroup: layouts[", part, "] must be 'row_major', 'heads_seq_first' or "
                     "'heads_batch_first', but got '", s, "'");
}

shapejit_activation parse_activation(const std::string& s, size_t part) {
  if (s == "none") return SHAPEJIT_ACTIVATION_NONE;
  if (s == "relu") return SHAPEJIT_ACTIVATION_RELU;
  if (s == "gelu") return SHAPEJIT_ACTIVATION_GELU;
  if (s == "gelu_tanh") return SHAPEJIT_ACTIVATION_GELU_TANH;
  if (s == "silu") return SHAPEJIT_ACTIVATION_SILU;
  TORCH_CHECK(false, "shapejit.LinearGroup: activations[", part, "] must be 'none', 'relu', 'gelu', 'gelu_tanh' "
                     "or 'silu', but got '", s, "'");
}

// A 2-D f32 matrix with dense rows (any row stride >= cols), copying only when needed.
at::Tensor dense_rows(const at::Tensor& t, const std::string& name) {
  check_cpu(t, name.c_str());
  TORCH_CHECK(t.scalar_type() == at::kFloat, "shapejit: ", name, " must be float32, but got ", t.scalar_type());
  TORCH_CHECK(t.dim() == 2, "shapejit: ", name, " must be 2-D, but got a ", t.dim(), "-D tensor");
  const bool ok = (t.size(1) <= 1 || t.stride(1) == 1) && (t.size(0) <= 1 || t.stride(0) >= t.size(1));
  return ok ? t : t.contiguous();
}

int64_t row_stride(const at::Tensor& t) { return t.size(0) <= 1 ? t.size(1) : t.stride(0); }

class LinearGroupHolder : public torch::CustomClassHolder {
 public:
  // One weight: the packed form, parts are consecutive row ranges of `rows[p]` rows. Several
  // weights: one per part (K may differ); `rows` may be empty. The other lists are empty (all
  // defaults) or hold one entry per part. The bias is packed: part p reads its own row range.
  LinearGroupHolder(std::vector<at::Tensor> weights, c10::optional<at::Tensor> bias, std::vector<int64_t> rows,
                    std::vector<std::string> layouts, std::vector<int64_t> heads, std::vector<double> scales,
                    std::vector<std::string> activations) {
    TORCH_CHECK(!weights.empty(), "shapejit.LinearGroup: weights must hold one packed weight or one per part");
    const bool packed = weights.size() == 1 && !rows.empty();
    const size_t parts = packed ? rows.size() : weights.size();
    auto check_len = [&](size_t n, const char* what) {
      TORCH_CHECK(n == 0 || n == parts, "shapejit.LinearGroup: ", what, " must be empty or hold ", parts,
                  " entries (one per part), but holds ", n);
    };
    check_len(layouts.size(), "layouts");
    check_len(heads.size(), "heads");
    check_len(scales.size(), "scales");
    check_len(activations.size(), "activations");
    if (!packed) check_len(rows.size(), "rows");

    std::vector<at::Tensor> w;  // keeps any contiguous copies alive until the group has copied them
    for (size_t i = 0; i < weights.size(); ++i) w.push_back(dense_rows(weights[i], "weights[" + std::to_string(i) + "]"));
    at::Tensor b;
    if (bias.has_value()) {
      check_cpu(*bias, "bias");
      TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->dim() == 1,
                  "shapejit.LinearGroup: bias must be a 1-D float32 tensor, but got ", bias->dim(), "-D ",
                  bias->scalar_type());
      b = bias->contiguous();
    }

    std::vector<shapejit_linear_part_desc> desc(parts);
    int64_t row = 0;
    for (size_t p = 0; p < parts; ++p) {
      shapejit_linear_part_desc& d = desc[p];
      d.rows = packed ? rows[p] : (rows.empty() ? w[p].size(0) : rows[p]);
      d.row_begin = row;
      row += d.rows;
      if (!packed) {
        d.weight = w[p].data_ptr<float>();
        d.k = w[p].size(1);
        d.weight_stride = row_stride(w[p]);
      }
      d.activation = activations.empty() ? SHAPEJIT_ACTIVATION_NONE : parse_activation(activations[p], p);
      const float scale = scales.empty() ? 1.0f : static_cast<float>(scales[p]);
      d.has_scale = scale != 1.0f;
      d.scale = scale;
      d.layout = layouts.empty() ? SHAPEJIT_LAYOUT_ROW_MAJOR : parse_layout(layouts[p], p);
      d.heads = heads.empty() ? 1 : heads[p];
    }
    shapejit_linear_group_desc g{};
    g.form = packed ? SHAPEJIT_WEIGHTS_PACKED : SHAPEJIT_WEIGHTS_SEPARATE;
    if (packed) {
      g.weight = w[0].data_ptr<float>();
      g.weight_rows = w[0].size(0);
      g.k = w[0].size(1);
      g.weight_stride = row_stride(w[0]);
    }
    g.bias = b.defined() ? b.data_ptr<float>() : nullptr;
    g.bias_len = b.defined() ? b.numel() : 0;
    g.parts = desc.data();
    g.num_parts = int64_t(parts);
    check_status(shapejit_linear_group_create(&g, &group_), "LinearGroup");  // validates every rule above
    for (const shapejit_linear_part_desc& d : desc)
      parts_.push_back({d.rows, packed ? g.k : d.k, d.layout, d.heads});
  }

  ~LinearGroupHolder() override { shapejit_linear_group_destroy(group_); }
  LinearGroupHolder(const LinearGroupHolder&) = delete;
  LinearGroupHolder& operator=(const LinearGroupHolder&) = delete;

  int64_t num_parts() const { return int64_t(parts_.size()); }

  // inputs[p] is [..., K_p] for a row-major part (output [..., N_p]) and [L, Nb, K_p]
  // (heads_seq_first) or [Nb, L, K_p] (heads_batch_first) for a head-split part (output
  // [Nb, H, L, N_p / H]). Parts may pass the same tensor; it is then read once.
  std::vector<at::Tensor> run(std::vector<at::Tensor> inputs) const {
    TORCH_CHECK(inputs.size() == parts_.size(), "shapejit.LinearGroup.run: expected ", parts_.size(),
                " inputs (one per part), but got ", inputs.size());
    std::vector<at::Tensor> xs, ys;
    std::vector<shapejit_linear_group_io> io(parts_.size());
    for (size_t p = 0; p < parts_.size(); ++p) {
      const Part& part = parts_[p];
      const at::Tensor& x = inputs[p];
      const std::string name = "inputs[" + std::to_string(p) + "]";
      check_cpu(x, name.c_str());
      TORCH_CHECK(x.scalar_type() == at::kFloat, "shapejit.LinearGroup.run: ", name, " must be float32, but got ",
                  x.scalar_type());
      TORCH_CHECK(x.dim() >= 1 && x.size(-1) == part.k, "shapejit.LinearGroup.run: ", name, " has shape ",
                  x.sizes(), ", but part ", p, " takes inputs whose last dimension is K = ", part.k);
      at::Tensor y;
      if (part.layout == SHAPEJIT_LAYOUT_ROW_MAJOR) {
        std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
        shape.push_back(part.n);
        y = at::empty(shape, x.options());
        io[p].ldy = part.n;
      } else {
        TORCH_CHECK(x.dim() == 3, "shapejit.LinearGroup.run: ", name, " must be 3-D (",
                    part.layout == SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST ? "[L, Nb, K]" : "[Nb, L, K]",
                    ") for part ", p, "'s head-split output, but has shape ", x.sizes());
        const bool seq_first = part.layout == SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST;
        io[p].seq_len = seq_first ? x.size(0) : x.size(1);
        io[p].batch = seq_first ? x.size(1) : x.size(0);
        y = at::empty({io[p].batch, part.heads, io[p].seq_len, part.n / part.heads}, x.options());
      }
      // Rows in input order (row = l * Nb + n seq-first, n * L + l batch-first), dense within.
      at::Tensor x2 = dense_rows(x.reshape({-1, part.k}), name);
      io[p].x = x2.data_ptr<float>();
      io[p].m = x2.size(0);
      io[p].k = part.k;
      io[p].ldx = row_stride(x2);
      io[p].y = y.data_ptr<float>();
      xs.push_back(std::move(x2));
      ys.push_back(std::move(y));
    }
    check_status(shapejit_linear_group_run(group_, io.data(), int64_t(io.size())), "LinearGroup.run");
    return ys;
  }

 private:
  struct Part {
    int64_t n = 0, k = 0;
    shapejit_layout layout = SHAPEJIT_LAYOUT_ROW_MAJOR;
    int64_t heads = 1;
  };
  std::vector<Part> parts_;
  shapejit_linear_group* group_ = nullptr;
};

std::vector<at::Tensor> linear_group_run(const c10::intrusive_ptr<LinearGroupHolder>& group,
                                         std::vector<at::Tensor> inputs) {
  return group->run(std::move(inputs));
}

}  // namespace

void register_linear_group(torch::Library& m) {
  m.class_<LinearGroupHolder>("LinearGroup")
      .def(torch::init<std::vector<at::Tensor>, c10::optional<at::Tensor>, std::vector<int64_t>,
                       std::vector<std::string>, std::vector<int64_t>, std::vector<double>,
                       std::vector<std::string>>())
      .def("num_parts", &LinearGroupHolder::num_parts)
      .def("run", &LinearGroupHolder::run);
  m.def("linear_group_run", linear_group_run);
}

}  // namespace shapejit::torch_ext

// torch.classes.shapejit.LinearGroup: a shapejit linear group built from PyTorch weights
// (packed, e.g. nn.MultiheadAttention's in_proj_weight, or one weight per part) and run on
// tensors, each part's output allocated row-major [..., N_p] or head-split [Nb, H, L, Dh].
// The group remembers the tensors it was packed from, so it can be pickled (def_pickle: the
// sources and the per-part settings, repacked on load) and repacked when a caller's parameters
// changed (linear_group_run_current: storage, data pointer, shape and version counter).
#include "python/torch_linear_group.hpp"

#include <ATen/ATen.h>
#include <torch/custom_class.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "python/torch_engine.hpp"
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

// A form's name (docs/quantized-linear-semantics.md) as shapejit_linear_quant.
shapejit_linear_quant parse_quant(const std::string& s) {
  if (s == "f32") return SHAPEJIT_LINEAR_F32;
  if (s == "qd8-qc8w") return SHAPEJIT_LINEAR_QD8_QC8W;
  if (s == "qd8-qc4w") return SHAPEJIT_LINEAR_QD8_QC4W;
  if (s == "f32-qc8w") return SHAPEJIT_LINEAR_F32_QC8W;
  if (s == "f32-qc4w") return SHAPEJIT_LINEAR_F32_QC4W;
  TORCH_CHECK(false, "shapejit: quant must be 'f32', 'qd8-qc8w', 'qd8-qc4w', 'f32-qc8w' or 'f32-qc4w', but got '", s,
              "'");
}

// Weight codes: a 2-D int8 matrix with dense rows (copied only when needed).
at::Tensor dense_code_rows(const at::Tensor& t, const std::string& name) {
  check_cpu(t, name.c_str());
  TORCH_CHECK(t.scalar_type() == at::kChar, "shapejit: ", name, " (codes) must be int8, but got ", t.scalar_type());
  TORCH_CHECK(t.dim() == 2, "shapejit: ", name, " (codes) must be 2-D, but got a ", t.dim(), "-D tensor");
  const bool ok = (t.size(1) <= 1 || t.stride(1) == 1) && (t.size(0) <= 1 || t.stride(0) >= t.size(1));
  return ok ? t : t.contiguous();
}

// What a group's user chose per part; kept to repack and to pickle. Empty lists: defaults.
struct Settings {
  std::vector<int64_t> rows;
  std::vector<std::string> layouts;
  std::vector<int64_t> heads;
  std::vector<double> scales;
  std::vector<std::string> activations;
  std::string quant = "f32";             // the group's form
  std::vector<at::Tensor> code_scales;   // non-empty: the weights are int8 codes with these scales
};

// The version an in-place change bumps (inference tensors have none: they count as 0).
int64_t version_of(const at::Tensor& t) { return t.is_inference() ? 0 : t._version(); }

// A tensor a group was packed from: a detached alias (same storage and version counter; the
// strong storage reference also keeps its address from being reused by another tensor).
struct Source {
  at::Tensor alias;
  int64_t version = 0;

  explicit Source(const at::Tensor& t) : alias(t.detach()), version(version_of(t)) {}

  // Same memory, same view of it, and not modified in place since it was packed.
  bool same_as(const at::Tensor& t) const {
    return t.defined() && t.has_storage() &&
           t.storage().unsafeGetStorageImpl() == alias.storage().unsafeGetStorageImpl() &&
           t.data_ptr() == alias.data_ptr() && t.scalar_type() == alias.scalar_type() &&
           t.sizes() == alias.sizes() && t.strides() == alias.strides() && version_of(t) == version;
  }
};

struct Part {
  int64_t n = 0, k = 0;
  shapejit_layout layout = SHAPEJIT_LAYOUT_ROW_MAJOR;
  int64_t heads = 1;
};

// One packed shapejit group with its parts' shapes and the tensors it was packed from.
class Packed {
 public:
  Packed(const std::vector<at::Tensor>& weights, const c10::optional<at::Tensor>& bias, const Settings& s) {
    TORCH_CHECK(!weights.empty(), "shapejit.LinearGroup: weights must hold one packed weight or one per part");
    const bool packed = weights.size() == 1 && !s.rows.empty();
    const size_t parts = packed ? s.rows.size() : weights.size();
    auto check_len = [&](size_t n, const char* what) {
      TORCH_CHECK(n == 0 || n == parts, "shapejit.LinearGroup: ", what, " must be empty or hold ", parts,
                  " entries (one per part), but holds ", n);
    };
    check_len(s.layouts.size(), "layouts");
    check_len(s.heads.size(), "heads");
    check_len(s.scales.size(), "scales");
    check_len(s.activations.size(), "activations");
    if (!packed) check_len(s.rows.size(), "rows");

    const shapejit_linear_quant quant = parse_quant(s.quant);
    const bool given_codes = !s.code_scales.empty();
    TORCH_CHECK(!given_codes || quant != SHAPEJIT_LINEAR_F32,
                "shapejit.LinearGroup: codes need a quantized form, but quant is 'f32'");
    TORCH_CHECK(!given_codes || s.code_scales.size() == weights.size(), "shapejit.LinearGroup: code_scales holds ",
                s.code_scales.size(), " tensors for ", weights.size(), " code matrices (one each)");
    std::vector<at::Tensor> w;  // keeps any contiguous copies alive until the group has copied them
    std::vector<at::Tensor> cs;
    std::vector<shapejit_linear_weight_codes> codes;
    for (size_t i = 0; i < weights.size(); ++i) {
      const std::string name = "weights[" + std::to_string(i) + "]";
      w.push_back(given_codes ? dense_code_rows(weights[i], name) : dense_rows(weights[i], name));
      sources_.emplace_back(weights[i]);
      if (!given_codes) continue;
      const at::Tensor& sc = s.code_scales[i];
      check_cpu(sc, "code_scales");
      TORCH_CHECK(sc.scalar_type() == at::kFloat && sc.dim() == 1 && sc.size(0) == w[i].size(0),
                  "shapejit.LinearGroup: code_scales[", i, "] must be a 1-D float32 tensor of ", w[i].size(0),
                  " scales (one per row of codes), but got ", sc.dim(), "-D ", sc.scalar_type(), " ", sc.sizes());
      cs.push_back(sc.contiguous());
      codes.push_back({w[i].data_ptr<int8_t>(), row_stride(w[i]), cs.back().data_ptr<float>()});
    }
    at::Tensor b;
    if (bias.has_value()) {
      check_cpu(*bias, "bias");
      TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->dim() == 1,
                  "shapejit.LinearGroup: bias must be a 1-D float32 tensor, but got ", bias->dim(), "-D ",
                  bias->scalar_type());
      b = bias->contiguous();
      bias_.emplace_back(*bias);
    }

    std::vector<shapejit_linear_part_desc> desc(parts);
    int64_t row = 0;
    for (size_t p = 0; p < parts; ++p) {
      shapejit_linear_part_desc& d = desc[p];
      d.rows = packed ? s.rows[p] : (s.rows.empty() ? w[p].size(0) : s.rows[p]);
      d.row_begin = row;
      row += d.rows;
      if (!packed) {
        d.weight = given_codes ? nullptr : w[p].data_ptr<float>();
        d.k = w[p].size(1);
        d.weight_stride = row_stride(w[p]);
      }
      d.activation = s.activations.empty() ? SHAPEJIT_ACTIVATION_NONE : parse_activation(s.activations[p], p);
      const float scale = s.scales.empty() ? 1.0f : static_cast<float>(s.scales[p]);
      d.has_scale = scale != 1.0f;
      d.scale = scale;
      d.layout = s.layouts.empty() ? SHAPEJIT_LAYOUT_ROW_MAJOR : parse_layout(s.layouts[p], p);
      d.heads = s.heads.empty() ? 1 : s.heads[p];
    }
    shapejit_linear_group_desc g{};
    g.form = packed ? SHAPEJIT_WEIGHTS_PACKED : SHAPEJIT_WEIGHTS_SEPARATE;
    if (packed) {
      g.weight = given_codes ? nullptr : w[0].data_ptr<float>();
      g.weight_rows = w[0].size(0);
      g.k = w[0].size(1);
      g.weight_stride = row_stride(w[0]);
    }
    g.bias = b.defined() ? b.data_ptr<float>() : nullptr;
    g.bias_len = b.defined() ? b.numel() : 0;
    g.parts = desc.data();
    g.num_parts = int64_t(parts);
    shapejit_linear_group_ex_desc ex;
    shapejit_linear_group_ex_init(&ex, &g);
    ex.quant = quant;
    ex.codes = given_codes ? codes.data() : nullptr;
    ex.num_codes = int64_t(codes.size());
    check_status(shapejit_linear_group_create_ex(&ex, &group_), "LinearGroup");  // validates every rule above
    for (const shapejit_linear_part_desc& d : desc) parts_.push_back({d.rows, packed ? g.k : d.k, d.layout, d.heads});
  }

  ~Packed() { shapejit_linear_group_destroy(group_); }
  Packed(const Packed&) = delete;
  Packed& operator=(const Packed&) = delete;

  size_t num_parts() const { return parts_.size(); }

  // Whether `weights` and `bias` are exactly the tensors (and values) this group was packed from.
  bool packed_from(const std::vector<at::Tensor>& weights, const c10::optional<at::Tensor>& bias) const {
    if (weights.size() != sources_.size() || bias.has_value() != !bias_.empty()) return false;
    for (size_t i = 0; i < weights.size(); ++i)
      if (!sources_[i].same_as(weights[i])) return false;
    return !bias.has_value() || bias_[0].same_as(*bias);
  }

  std::vector<at::Tensor> source_weights() const {
    std::vector<at::Tensor> out;
    for (const Source& s : sources_) out.push_back(s.alias);
    return out;
  }
  c10::optional<at::Tensor> source_bias() const {
    return bias_.empty() ? c10::optional<at::Tensor>() : c10::optional<at::Tensor>(bias_[0].alias);
  }

  // inputs[p] is [..., K_p] for a row-major part (output [..., N_p]) and [L, Nb, K_p]
  // (heads_seq_first) or [Nb, L, K_p] (heads_batch_first) for a head-split part (output
  // [Nb, H, L, N_p / H]). Parts may pass the same tensor; it is then read once.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const {
    follow_torch_threads();
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
  std::vector<Part> parts_;
  std::vector<Source> sources_, bias_;  // bias_: none or one
  shapejit_linear_group* group_ = nullptr;
};

// The pickled form: (format, weights, bias), (rows, heads, scales), (layouts, activations).
// Format 1: an f32 group. Format 2: a quantized one; `weights` then holds the weights (or
// codes), then code_scales (none when built from f32 weights), then one int64 tensor
// [form, number of code_scales] (shapejit_linear_quant values), so format 1 files load as before.
// Tuples of at most 3: GCC 12 misreports reading longer ones out of an IValue (-Warray-bounds).
using State = std::tuple<std::tuple<int64_t, std::vector<at::Tensor>, c10::optional<at::Tensor>>,
                         std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<double>>,
                         std::tuple<std::vector<std::string>, std::vector<std::string>>>;

class LinearGroupHolder : public torch::CustomClassHolder {
 public:
  // One weight: the packed form, parts are consecutive row ranges of `rows[p]` rows. Several
  // weights: one per part (K may differ); `rows` may be empty. The other lists are empty (all
  // defaults) or hold one entry per part. The bias is packed: part p reads its own row range.
  // `quant` names the form; with `code_scales` (one per weight) the weights are int8 codes.
  LinearGroupHolder(std::vector<at::Tensor> weights, c10::optional<at::Tensor> bias, std::vector<int64_t> rows,
                    std::vector<std::string> layouts, std::vector<int64_t> heads, std::vector<double> scales,
                    std::vector<std::string> activations, std::string quant, std::vector<at::Tensor> code_scales)
      : settings_{std::move(rows),        std::move(layouts), std::move(heads),      std::move(scales),
                  std::move(activations), std::move(quant),   std::move(code_scales)},
        packed_(std::make_shared<const Packed>(weights, bias, settings_)) {}

  int64_t num_parts() const { return int64_t(current()->num_parts()); }

  // Runs the group as packed (later changes to its source tensors do not reach it).
  std::vector<at::Tensor> run(std::vector<at::Tensor> inputs) const { return current()->run(inputs); }

  // Runs the group packed from `weights` and `bias`, repacking first when they are not the
  // tensors (storage, data pointer, shape, strides, dtype) or values (version counter) it was
  // packed from: a module passes its parameters and always computes with their values.
  std::vector<at::Tensor> run_current(const std::vector<at::Tensor>& weights, const c10::optional<at::Tensor>& bias,
                                      const std::vector<at::Tensor>& inputs) {
    std::shared_ptr<const Packed> p;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!packed_->packed_from(weights, bias)) packed_ = std::make_shared<const Packed>(weights, bias, settings_);
      p = packed_;  // runs outside the lock: a concurrent repack leaves this pack alive
    }
    return p->run(inputs);
  }

  bool packed_from(const std::vector<at::Tensor>& weights, const c10::optional<at::Tensor>& bias) const {
    return current()->packed_from(weights, bias);
  }

  // The source tensors as they are now (an in-place change since packing is what a repack
  // would see) and the settings: loading packs the same group run_current would use.
  State state() const {
    std::shared_ptr<const Packed> p = current();
    std::vector<at::Tensor> tensors = p->source_weights();
    const bool quantized = settings_.quant != "f32";
    if (quantized) {
      for (const at::Tensor& t : settings_.code_scales) tensors.push_back(t);
      tensors.push_back(at::tensor({int64_t(parse_quant(settings_.quant)), int64_t(settings_.code_scales.size())},
                                   at::kLong));
    }
    return {{quantized ? 2 : 1, tensors, p->source_bias()},
            {settings_.rows, settings_.heads, settings_.scales},
            {settings_.layouts, settings_.activations}};
  }

  // The group as torch.compile and torch.export see it (torch._library.register_fake_class
  // rebuilds a Python stand-in from these pairs, python/shapejit/fake.py): the per-part settings
  // and the packed weights' shapes ([rows, cols] of each), which fix every output's shape. No
  // tensors: a traced graph must not read the pack's copies (callers pass the weights to
  // linear_group_run_current), and tensors here would alias the caller's.
  std::tuple<std::tuple<std::string, std::vector<int64_t>>, std::tuple<std::string, std::vector<int64_t>>,
             std::tuple<std::string, std::vector<int64_t>>, std::tuple<std::string, std::vector<std::string>>,
             std::tuple<std::string, std::vector<int64_t>>, std::tuple<std::string, std::vector<double>>,
             std::tuple<std::string, std::vector<std::string>>, std::tuple<std::string, std::vector<std::string>>>
  flatten() const {
    std::shared_ptr<const Packed> p = current();
    std::vector<int64_t> shapes;
    for (const at::Tensor& w : p->source_weights()) {
      shapes.push_back(w.size(0));
      shapes.push_back(w.size(1));
    }
    const c10::optional<at::Tensor> bias = p->source_bias();
    return {{"weight_shapes", shapes},
            {"bias_size", {bias.has_value() ? bias->size(0) : -1}},
            {"rows", settings_.rows},
            {"layouts", settings_.layouts},
            {"heads", settings_.heads},
            {"scales", settings_.scales},
            {"activations", settings_.activations},
            {"quant", {settings_.quant}}};
  }

  static c10::intrusive_ptr<LinearGroupHolder> from_state(State s) {
    auto& [tensors, numbers, names] = s;
    const int64_t format = std::get<0>(tensors);
    TORCH_CHECK(format == 1 || format == 2, "shapejit.LinearGroup: cannot load a pickled group of format ", format,
                "; this build reads formats 1 and 2");
    std::vector<at::Tensor> weights = std::move(std::get<1>(tensors));
    std::string quant = "f32";
    std::vector<at::Tensor> code_scales;
    if (format == 2) {
      TORCH_CHECK(!weights.empty() && weights.back().numel() == 2, "shapejit.LinearGroup: a format 2 pickle ends "
                                                                   "with its [form, code_scales] tensor");
      const at::Tensor meta = weights.back().to(at::kLong);
      weights.pop_back();
      static const char* const kNames[] = {"f32", "qd8-qc8w", "qd8-qc4w", "f32-qc8w", "f32-qc4w"};
      const int64_t form = meta[0].item<int64_t>(), count = meta[1].item<int64_t>();
      TORCH_CHECK(form >= 0 && form <= 4 && count >= 0 && count <= int64_t(weights.size()),
                  "shapejit.LinearGroup: a format 2 pickle names form ", form, " with ", count, " code scales");
      quant = kNames[form];
      code_scales.assign(weights.end() - count, weights.end());
      weights.resize(weights.size() - size_t(count));
    }
    return c10::make_intrusive<LinearGroupHolder>(
        std::move(weights), std::move(std::get<2>(tensors)), std::move(std::get<0>(numbers)),
        std::move(std::get<0>(names)), std::move(std::get<1>(numbers)), std::move(std::get<2>(numbers)),
        std::move(std::get<1>(names)), std::move(quant), std::move(code_scales));
  }

 private:
  std::shared_ptr<const Packed> current() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return packed_;
  }

  Settings settings_;
  mutable std::mutex mutex_;  // guards packed_ (the pointer; a Packed never changes)
  std::shared_ptr<const Packed> packed_;
};

std::vector<at::Tensor> linear_group_run(const c10::intrusive_ptr<LinearGroupHolder>& group,
                                         std::vector<at::Tensor> inputs) {
  return group->run(std::move(inputs));
}

std::vector<at::Tensor> linear_group_run_current(const c10::intrusive_ptr<LinearGroupHolder>& group,
                                                 std::vector<at::Tensor> weights, c10::optional<at::Tensor> bias,
                                                 std::vector<at::Tensor> inputs) {
  return group->run_current(weights, bias, inputs);
}

// Per-row quantized weights (docs/quantized-linear-semantics.md): codes int8 [R, K], scales f32 [R].
std::tuple<at::Tensor, at::Tensor> quantize_linear_weights(const at::Tensor& weight, const std::string& quant) {
  const at::Tensor w = dense_rows(weight, "weight");
  at::Tensor codes = at::empty({w.size(0), w.size(1)}, w.options().dtype(at::kChar));
  at::Tensor scales = at::empty({w.size(0)}, w.options());
  check_status(shapejit_linear_quantize_weights(parse_quant(quant), w.data_ptr<float>(), w.size(0), w.size(1),
                                                row_stride(w), codes.data_ptr<int8_t>(), scales.data_ptr<float>()),
               "quantize_linear_weights");
  return {codes, scales};
}

}  // namespace

void register_linear_group(torch::Library& m) {
  m.class_<LinearGroupHolder>("LinearGroup")
      .def(torch::init<std::vector<at::Tensor>, c10::optional<at::Tensor>, std::vector<int64_t>,
                       std::vector<std::string>, std::vector<int64_t>, std::vector<double>,
                       std::vector<std::string>, std::string, std::vector<at::Tensor>>(),
           "", {torch::arg("weights"), torch::arg("bias"), torch::arg("rows"), torch::arg("layouts"),
                torch::arg("heads"), torch::arg("scales"), torch::arg("activations"), torch::arg("quant") = "f32",
                torch::arg("code_scales") = c10::IValue(c10::List<at::Tensor>())})
      .def("num_parts", &LinearGroupHolder::num_parts)
      .def("run", &LinearGroupHolder::run)
      .def("run_current", &LinearGroupHolder::run_current)
      .def("packed_from", &LinearGroupHolder::packed_from)
      .def("__obj_flatten__", &LinearGroupHolder::flatten)
      .def_pickle([](const c10::intrusive_ptr<LinearGroupHolder>& self) { return self->state(); },
                  [](State s) { return LinearGroupHolder::from_state(std::move(s)); });
  // Schemas with a CPU kernel (not catch-all kernels, which torch treats as
  // CompositeImplicitAutograd): fake kernels and autograd are registered in Python
  // (python/shapejit/fake.py, autograd.py).
  m.def("linear_group_run(__torch__.torch.classes.shapejit.LinearGroup group, Tensor[] inputs) -> Tensor[]");
  m.impl("linear_group_run", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(linear_group_run)));
  // The group packed from `weights` and `bias` (repacked when they changed) run on `inputs`.
  m.def("linear_group_run_current(__torch__.torch.classes.shapejit.LinearGroup group, Tensor[] weights, "
        "Tensor? bias, Tensor[] inputs) -> Tensor[]");
  m.impl("linear_group_run_current", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(linear_group_run_current)));
  m.def("quantize_linear_weights(Tensor weight, str quant) -> (Tensor, Tensor)");
  m.impl("quantize_linear_weights", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(quantize_linear_weights)));
}

}  // namespace shapejit::torch_ext

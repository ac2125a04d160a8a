// What the linear-group benchmark and its peers (bench/lg_peers_*.cpp) share: the description
// of a case (parts, inputs, packed weight), its data, and the interface every implementation
// (shapejit's LinearGroup and each peer library) offers to the timed loop.
//
// Every peer computes, for every part p, Y_p[m, n] = sum_k X_p[m, k] * W[row_begin_p + n, k]
// + bias[row_begin_p + n] (PyTorch's [out, in] weight layout, bias included: the seed is
// nn.MultiheadAttention with in_proj_bias), each with its library's best way of doing so.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shapejit::bench {

/// The numeric form of a row (q-spec.md's names; the values are shapejit_linear_quant's):
/// f32, dynamic int8 inputs x int8 / int4 per-channel weights, or f32 inputs x those weights.
enum class LgForm : int { kF32 = 0, kQd8Qc8w = 1, kQd8Qc4w = 2, kF32Qc8w = 3, kF32Qc4w = 4 };
/// "f32", "qd8-qc8w", "qd8-qc4w", "f32-qc8w", "f32-qc4w" (the last component of a row's name).
const char* lg_form_name(LgForm form);

/// How an implementation quantizes, which bounds its distance from the f32 result (the check
/// before a row's first timing): weights per output channel to +-weight_levels steps of
/// max|W[n,:]| / weight_levels (0: f32 weights), inputs to input_levels steps of (max - min) per
/// row or over the whole input (both ranges including 0).
struct LgQuantization {
  enum class Input { kF32, kPerRow, kPerTensor };
  int weight_levels = 0;  ///< 0 (f32), 127 (qc8w) or 7 (qc4w)
  Input input = Input::kF32;
  int input_levels = 255;  ///< 255 (8-bit codes), 127 (7-bit)
};
/// The quantization of one of our forms (per-row inputs for qd8).
LgQuantization lg_form_quantization(LgForm form);

/// One projection of a case: rows [row_begin, row_begin + rows) of the packed weight, applied to
/// input `input`.
struct LgPart {
  int input = 0;
  int64_t row_begin = 0;
  int64_t rows = 0;
};

/// A linear-group workload: inputs (M rows of K each) and parts over one packed weight [sum N, K].
struct LgCase {
  std::string name;                 ///< `tiny_cross_e16`, `self_e768_m128`, ...
  int64_t k = 0;
  std::vector<int64_t> input_rows;  ///< M of each input
  std::vector<LgPart> parts;

  int64_t weight_rows() const;
  int64_t m_of(const LgPart& p) const { return input_rows[size_t(p.input)]; }
  /// 2 * M_p * N_p * K summed over the parts.
  double flops() const;
  /// Bytes of weight one call reads (sum N_p * K * 4); in a quantized form its codes (1 or 1/2
  /// byte each) and one f32 scale per output channel.
  double weight_bytes(LgForm form = LgForm::kF32) const;
};

/// A 64-byte aligned float buffer.
class LgBuffer {
 public:
  LgBuffer() = default;
  explicit LgBuffer(size_t n);
  float* data() { return p_.get(); }
  const float* data() const { return p_.get(); }
  size_t size() const { return n_; }

 private:
  struct Free {
    void operator()(float* p) const noexcept;
  };
  std::unique_ptr<float[], Free> p_;
  size_t n_ = 0;
};

/// The data of a case, shared by every implementation: packed weight [sum N, K] and bias
/// [sum N], uniform in [-1, 1) from a fixed seed (cases with the same weight shape share them),
/// and one input buffer per input.
struct LgData {
  const LgCase* c = nullptr;
  std::shared_ptr<const LgBuffer> weight, bias;
  std::vector<LgBuffer> inputs;

  explicit LgData(const LgCase& lg_case);
  const float* part_weight(const LgPart& p) const { return weight->data() + p.row_begin * c->k; }
  const float* part_bias(const LgPart& p) const { return bias->data() + p.row_begin; }
  const float* part_input(const LgPart& p) const { return inputs[size_t(p.input)].data(); }
};

/// One implementation built once for a case (weights packed or reordered, kernels generated,
/// plans made); only run() is timed.
class LgImpl {
 public:
  virtual ~LgImpl() = default;
  /// Applies a thread count before a timing (untimed); an implementation built for one thread
  /// count (see LgFactory) only ever gets that one.
  virtual void activate(int /*threads*/) {}
  /// Computes every part of the case.
  virtual void run() = 0;
  /// Row m of part p's result after run() (N_p contiguous floats).
  virtual const float* out_row(size_t part, int64_t m) const = 0;
  /// What the library chose (kernel, ISA), for the row's label.
  virtual std::string info() const { return {}; }
  /// How it quantizes (f32 implementations: nothing), for the check's bound.
  virtual LgQuantization quantization() const { return {}; }
};

/// Separate row-major outputs [M_p, N_p], one per part (what the 3-call peers write).
class LgPartOutputs {
 public:
  explicit LgPartOutputs(const LgCase& c);
  float* part(size_t p) { return out_[p].data(); }
  const float* row(size_t p, int64_t m) const { return out_[p].data() + m * n_[p]; }

 private:
  std::vector<LgBuffer> out_;
  std::vector<int64_t> n_;
};

/// Parts that one GEMM with N = sum of their N_p can compute: the same input and contiguous
/// weight rows (self-attention: one group of three; cross-attention: q, then k and v).
struct LgGroup {
  int input = 0;
  int64_t row_begin = 0, rows = 0;
  std::vector<size_t> parts;
};
std::vector<LgGroup> lg_packed_groups(const LgCase& c);

/// Peer factories (only called when the matching *_applies() is true). `threads` matters only
/// to peers that plan for a thread count at build time (oneDNN); the others are built once and
/// shared by every thread count. A peer that fails at build time throws (std::runtime_error or
/// its library's exception type derived from std::exception).
using LgFactory = std::unique_ptr<LgImpl> (*)(const LgData& data, int threads);
/// Whether a peer is compiled in and applies to a case and thread count (cheap, no data).
using LgApplies = bool (*)(const LgCase& c, int threads);

std::unique_ptr<LgImpl> make_onednn(const LgData& data, int threads);
bool onednn_applies(const LgCase& c, int threads);
std::unique_ptr<LgImpl> make_openblas_3x(const LgData& data, int threads);
std::unique_ptr<LgImpl> make_openblas_packed(const LgData& data, int threads);
bool openblas_applies(const LgCase& c, int threads);
bool openblas_packed_applies(const LgCase& c, int threads);
std::unique_ptr<LgImpl> make_libxsmm_3x(const LgData& data, int threads);
bool libxsmm_applies(const LgCase& c, int threads);
std::unique_ptr<LgImpl> make_xnnpack_3x(const LgData& data, int threads);
bool xnnpack_applies(const LgCase& c, int threads);
// The quantized peers (rows .../t1/qd8-qc8w): oneDNN's int8 matmul with the input quantized in
// the timed call, and XNNPACK's quantized fully-connected where the build has a usable one
// (make_xnnpack_qd8 throws the reason when it has not).
std::unique_ptr<LgImpl> make_onednn_qd8(const LgData& data, int threads);
bool onednn_qd8_applies(const LgCase& c, int threads);
std::unique_ptr<LgImpl> make_xnnpack_qd8(const LgData& data, int threads);
bool xnnpack_qd8_applies(const LgCase& c, int threads);

/// What each built implementation reported through LgImpl::info(), keyed `<impl>/<case>`
/// (+ `/<form>` for a quantized row)
/// (filled by linear_group_bench.cpp as implementations are built; printed by the row summary).
std::map<std::string, std::string> lg_impl_infos();

/// Fills the rows of `out` ([m, n], row stride ldc) with the bias (the beta = 1 GEMM peers add
/// onto it, as ATen's addmm does).
void lg_fill_bias(float* out, int64_t m, int64_t n, int64_t ldc, const float* bias);

}  // namespace shapejit::bench

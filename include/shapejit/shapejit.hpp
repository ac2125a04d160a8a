// shapejit C++ API: the same engine as the C ABI, with views, enum classes and exceptions. The
// buffer rules (alignment to the element size, no overlapping outputs) are those of shapejit.h;
// an enum class holding a value outside its enumerators is rejected and reported as its int.
// Everything declared here that the library defines is marked SHAPEJIT_API: libshapejit.so
// exports these and the C ABI, nothing else (the ABI note at the top of shapejit.h applies).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "shapejit/shapejit.h"

namespace shapejit {

enum class Status : int {
  kOk = SHAPEJIT_OK,
  kInvalidArgument = SHAPEJIT_INVALID_ARGUMENT,
  kUnsupported = SHAPEJIT_UNSUPPORTED,
  kOutOfMemory = SHAPEJIT_OUT_OF_MEMORY,
  kInternalError = SHAPEJIT_INTERNAL_ERROR,
};

enum class DType : int {
  kF32 = SHAPEJIT_F32, kF16 = SHAPEJIT_F16, kBF16 = SHAPEJIT_BF16,
  kI32 = SHAPEJIT_I32, kI64 = SHAPEJIT_I64,
  kQ8 = SHAPEJIT_Q8, kQ4 = SHAPEJIT_Q4, kQ2 = SHAPEJIT_Q2,  ///< rowwise-quantized table rows
};

enum class Mode : int { kSum = SHAPEJIT_SUM, kMean = SHAPEJIT_MEAN, kMax = SHAPEJIT_MAX };

/// The running library's version, SHAPEJIT_VERSION's number (compare with the header's macro).
inline int version() noexcept { return shapejit_version(); }
/// The running library's version as "MAJOR.MINOR.PATCH".
inline const char* version_string() noexcept { return shapejit_version_string(); }
/// A fixed, never-null description of `status` (shapejit_status_string).
SHAPEJIT_API const char* status_string(Status status) noexcept;

/// Thrown by every C++ entry point on failure; carries the status and the full message.
class SHAPEJIT_API Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

/// A 1-D integer tensor (indices or offsets): int32 or int64 elements.
struct IndexView {
  const void* data = nullptr;
  DType dtype = DType::kI64;
  int64_t size = 0;

  IndexView() = default;
  IndexView(std::span<const int64_t> v) : data(v.data()), dtype(DType::kI64), size(int64_t(v.size())) {}
  IndexView(std::span<const int32_t> v) : data(v.data()), dtype(DType::kI32), size(int64_t(v.size())) {}
  IndexView(const std::vector<int64_t>& v) : IndexView(std::span<const int64_t>(v)) {}
  IndexView(const std::vector<int32_t>& v) : IndexView(std::span<const int32_t>(v)) {}
};

/// A 2-D table [rows, dim] with rows `row_stride` elements apart. Quantized tables (kQ8/kQ4/kQ2):
/// dim is D and row_stride counts bytes (0 means the packed row size, rowwise_row_bytes).
struct TableView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0, dim = 0, row_stride = 0;  // row_stride 0 means dense rows
};

/// Everything one embedding_bag call reads (ATen's `_embedding_bag` arguments).
struct SHAPEJIT_API EmbeddingBagCall {
  TableView weight;
  IndexView indices;
  IndexView offsets;
  Mode mode = Mode::kSum;
  const void* per_sample_weights = nullptr;  ///< nullptr or indices.size weights (f32 for quantized tables)
  std::optional<int64_t> padding_idx;
  bool include_last_offset = false;
  bool aten_partial_final_offset = false;  ///< opt-in ATen 1.13 quirk, see the semantics document
  // ---- Options of some table dtypes (shapejit_embedding_bag_ex_args) ----
  std::optional<DType> output_dtype;              ///< default: the table's (kF32 for quantized)
  std::optional<DType> per_sample_weights_dtype;  ///< default: the table's (kF32 for quantized)
  std::span<const int32_t> compressed_indices_mapping;  ///< pruned quantized tables; empty: none
  bool offsets_as_lengths = false;  ///< ATen's quantized rowwise ops' offsets (see shapejit.h)
  /// Only the output (inference): offset2bag, bag_size and max_indices get 0 elements and are
  /// not computed; the output is bitwise the same (see shapejit.h).
  bool skip_index_outputs = false;
  /// Elements between output rows; 0: dense. Nonzero: >= dim, and only the rows' dim columns
  /// are written (calls writing column slices of one buffer concatenate; see shapejit.h).
  int64_t output_row_stride = 0;
  /// ATen's own loop's arithmetic, as with padding_idx, without padding_idx (torch runs that
  /// loop for a column-strided table or strided weights; see shapejit.h).
  bool aten_loop_arithmetic = false;

  /// The C ABI form of this call (the ex fields ignored).
  shapejit_embedding_bag_args to_c() const;
  /// The extended C ABI form of this call.
  shapejit_embedding_bag_ex_args to_c_ex() const;
};

/// Output shapes (ATen's forward-only path); `index_dtype` types the three integer outputs.
struct EmbeddingBagShapes {
  int64_t output_rows = 0, output_cols = 0;
  DType index_dtype = DType::kI64;
  int64_t offset2bag_len = 0, bag_size_len = 0, max_indices_rows = 0, max_indices_cols = 0;
};

/// Caller-owned output buffers; integer outputs are of EmbeddingBagShapes::index_dtype.
struct EmbeddingBagOutputs {
  void* output = nullptr;
  void* offset2bag = nullptr;
  void* bag_size = nullptr;
  void* max_indices = nullptr;
};

/// Owned results of the allocating overload; integer outputs widened to int64 for convenience,
/// the output widened exactly to f32 whatever its dtype.
struct EmbeddingBagResult {
  EmbeddingBagShapes shapes;
  std::vector<float> output;
  std::vector<int64_t> offset2bag, bag_size, max_indices;
};

/// Validates `call` and returns the output shapes (throws Error on invalid input).
SHAPEJIT_API EmbeddingBagShapes embedding_bag_output_shapes(const EmbeddingBagCall& call);
/// Runs the call into caller buffers sized by embedding_bag_output_shapes(). Buffers must be aligned
/// to their element size, and no output may overlap an input or another output (see shapejit.h).
SHAPEJIT_API void embedding_bag(const EmbeddingBagCall& call, const EmbeddingBagOutputs& out);
/// Runs the call into freshly allocated buffers (validated once); their rows are dense, whatever
/// call.output_row_stride says.
SHAPEJIT_API EmbeddingBagResult embedding_bag(const EmbeddingBagCall& call);
/// Runs many calls as one (a model's tables): outputs[k] receives calls[k]'s results, bitwise
/// those of embedding_bag(calls[k], outputs[k]). Every call is validated and every index checked
/// before any output is written; an Error names the call ("embedding_bags: calls[k]: ..."). No
/// output may overlap an input or an output of any call (shapejit_embedding_bags in shapejit.h).
SHAPEJIT_API void embedding_bags(std::span<const EmbeddingBagCall> calls, std::span<const EmbeddingBagOutputs> outputs);
/// What changes from one run of a PreparedEmbeddingBag to the next. The views' dtypes must be
/// the form's (a non-empty view of another dtype is an Error).
struct EmbeddingBagBatch {
  IndexView indices;
  IndexView offsets;
  const void* per_sample_weights = nullptr;  ///< present exactly when the form has weights
};

/// An embedding bag prepared once and run on batch after batch (shapejit_embedding_bag_prepare
/// in shapejit.h): each run gives bitwise the outputs, and the Error, of embedding_bag() on the
/// form with the batch put in, validating only what the batch brings. Runs may share one object.
class SHAPEJIT_API PreparedEmbeddingBag {
 public:
  /// Validates `form` and binds its kernel; throws Error. Of form.indices and form.offsets only
  /// the dtypes count; a non-null form.per_sample_weights means the batches carry weights.
  explicit PreparedEmbeddingBag(const EmbeddingBagCall& form);
  PreparedEmbeddingBag(PreparedEmbeddingBag&& other) noexcept;
  PreparedEmbeddingBag& operator=(PreparedEmbeddingBag&& other) noexcept;
  PreparedEmbeddingBag(const PreparedEmbeddingBag&) = delete;
  PreparedEmbeddingBag& operator=(const PreparedEmbeddingBag&) = delete;
  ~PreparedEmbeddingBag();

  /// The batch's output shapes (throws Error on an invalid batch).
  EmbeddingBagShapes output_shapes(const EmbeddingBagBatch& batch) const;
  /// Runs the batch into caller buffers sized by output_shapes() (the rules of embedding_bag()).
  void run(const EmbeddingBagBatch& batch, const EmbeddingBagOutputs& out) const;
  /// The underlying C handle (owned by this object).
  const shapejit_embedding_bag_prepared* c_handle() const noexcept { return prepared_; }

 private:
  shapejit_embedding_bag_prepared* prepared_ = nullptr;
};

/// The 2-D form: indices [bags, bag_len] with no offsets (bag b holds row b of indices).
SHAPEJIT_API EmbeddingBagResult embedding_bag_2d(const TableView& weight, IndexView indices, int64_t bags,
                                                 int64_t bag_len, Mode mode,
                                                 const void* per_sample_weights = nullptr,
                                                 std::optional<int64_t> padding_idx = std::nullopt);

// ---- Rowwise quantization (torch's embedding_bag_{byte,4bit,2bit}_prepack / _unpack) ----------

/// Options of rowwise_prepack (torch's defaults).
struct RowwisePrepackOptions {
  bool optimized_qparams = false;  ///< Q4/Q2 only: torch's choose_qparams_optimized per row
  int64_t nbins = 200;
  float ratio = 0.16f;
};
/// Bytes of one packed row of `dim` values (throws Error for a non-quantized dtype).
SHAPEJIT_API int64_t rowwise_row_bytes(DType qtype, int64_t dim);
/// Packs a [rows, dim] f32 or f16 table (rows src_row_stride elements apart, 0 means dim) into
/// rows x rowwise_row_bytes(qtype, dim) bytes, byte-identical to torch 1.13.
SHAPEJIT_API std::vector<uint8_t> rowwise_prepack(DType qtype, const void* src, DType src_dtype, int64_t rows,
                                                  int64_t dim, int64_t src_row_stride = 0,
                                                  const RowwisePrepackOptions& options = {});
/// Dequantizes packed rows (row_bytes apart, 0 means dense) to [rows, dim] f32.
SHAPEJIT_API std::vector<float> rowwise_unpack(DType qtype, const void* packed, int64_t rows, int64_t dim,
                                               int64_t row_bytes = 0);

/// Engine threads (size of the task arena); n <= 0 restores the default.
SHAPEJIT_API void set_num_threads(int n);
SHAPEJIT_API int num_threads();

// ---- Linear groups: fused split-GEMMs (split-gemm-semantics.md) ----------------------------

/// Activation applied after the bias and before the scale.
enum class Activation : int {
  kNone = SHAPEJIT_ACTIVATION_NONE, kRelu = SHAPEJIT_ACTIVATION_RELU, kGelu = SHAPEJIT_ACTIVATION_GELU,
  kGeluTanh = SHAPEJIT_ACTIVATION_GELU_TANH, kSilu = SHAPEJIT_ACTIVATION_SILU,
};

/// A part's output: row-major [m, N], or head-split [Nb, H, L, Dh] from sequence- or batch-first rows.
enum class OutputLayout : int {
  kRowMajor = SHAPEJIT_LAYOUT_ROW_MAJOR,
  kHeadsSeqFirst = SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST,
  kHeadsBatchFirst = SHAPEJIT_LAYOUT_HEADS_BATCH_FIRST,
};

/// Whether the parts' weights are row ranges of one packed weight or one weight each.
enum class WeightForm : int { kPacked = SHAPEJIT_WEIGHTS_PACKED, kSeparate = SHAPEJIT_WEIGHTS_SEPARATE };

/// The quantized forms of a linear group (docs/quantized-linear-semantics.md).
enum class LinearQuant : int {
  kF32 = SHAPEJIT_LINEAR_F32,
  kQd8Qc8w = SHAPEJIT_LINEAR_QD8_QC8W,  ///< int8 input per row x int8 weights per channel, exact int32
  kQd8Qc4w = SHAPEJIT_LINEAR_QD8_QC4W,  ///< int8 input per row x int4 weights per channel
  kF32Qc8w = SHAPEJIT_LINEAR_F32_QC8W,  ///< f32 input x int8 weights (weight-only, decode)
  kF32Qc4w = SHAPEJIT_LINEAR_F32_QC4W,  ///< f32 input x int4 weights (weight-only, decode)
};

/// Weight codes given instead of f32 weights: [rows, k], one code per byte, rows stride bytes
/// apart (0 means k), and one scale per row.
struct LinearWeightCodes {
  const int8_t* codes = nullptr;
  int64_t stride = 0;
  const float* scales = nullptr;
};

/// Quantizes w [rows, k] (rows stride floats apart, 0 means k) per row by the rules of `quant`
/// into codes [rows, k] and scales [rows] (throws Error; outputs untouched on error).
SHAPEJIT_API void quantize_linear_weights(LinearQuant quant, const float* w, int64_t rows, int64_t k, int64_t stride,
                                          int8_t* codes, float* scales);

/// One part of a linear group: where its weight and bias rows are, and its epilogue.
struct SHAPEJIT_API LinearPart {
  int64_t row_begin = 0;          ///< first row in the packed weight and in the packed bias
  int64_t rows = 0;               ///< N_p
  const float* weight = nullptr;  ///< separate form only: [rows, k]
  int64_t k = 0;                  ///< separate form: K_p (packed form: 0 means the packed k)
  int64_t weight_stride = 0;      ///< separate form: row stride of weight, 0 means k
  Activation activation = Activation::kNone;
  float scale = 1.0f;             ///< multiplies the activated value (e.g. 1/sqrt(Dh) for q)
  OutputLayout layout = OutputLayout::kRowMajor;
  int64_t heads = 1;              ///< H for the head-split layouts (must divide rows)

  /// The C ABI form of this part (strides of 0 resolved).
  shapejit_linear_part_desc to_c(WeightForm form) const;
};

/// Everything a LinearGroup is built from; the weights and bias are copied at build time.
struct SHAPEJIT_API LinearGroupDesc {
  WeightForm form = WeightForm::kPacked;
  const float* weight = nullptr;      ///< packed form: [weight_rows, k]
  int64_t weight_rows = 0, k = 0;
  int64_t weight_stride = 0;          ///< packed form: 0 means k
  std::span<const float> bias;        ///< empty, or the packed bias (part p reads [row_begin, +rows))
  std::vector<LinearPart> parts;
  LinearQuant quant = LinearQuant::kF32;  ///< the quantized form (weights quantized at build time
                                          ///< unless `codes` gives them)
  /// Empty: quantize the f32 weights. Packed form: one entry [weight_rows, k] (weight null);
  /// separate form: one per part [rows, k_p] (each part's weight null).
  std::vector<LinearWeightCodes> codes;

  /// Packed form, e.g. nn.MultiheadAttention's in_proj_weight [3E, E] and in_proj_bias [3E].
  static LinearGroupDesc packed(const float* weight, int64_t rows, int64_t k, std::span<const float> bias,
                                std::vector<LinearPart> parts);
  /// Separate form (kdim / vdim): each part brings its weight; the bias may still be packed.
  static LinearGroupDesc separate(std::vector<LinearPart> parts, std::span<const float> bias = {});
};

/// One part's input for a run: X [m, k] with rows ldx apart (0 means k).
struct LinearInput {
  const float* x = nullptr;
  int64_t m = 0, k = 0, ldx = 0;
};

/// One part's output for a run: row-major rows ldy apart (0 means N_p), or head-split with
/// batch * seq_len == m.
struct LinearOutput {
  float* y = nullptr;
  int64_t ldy = 0;
  int64_t batch = 0, seq_len = 0;
};

/// A group of linear projections built once and run as one call (see shapejit_linear_group_*).
class SHAPEJIT_API LinearGroup {
 public:
  /// Validates and builds the group; throws Error on invalid input.
  explicit LinearGroup(const LinearGroupDesc& desc);
  LinearGroup(LinearGroup&& other) noexcept;
  LinearGroup& operator=(LinearGroup&& other) noexcept;
  LinearGroup(const LinearGroup&) = delete;
  LinearGroup& operator=(const LinearGroup&) = delete;
  ~LinearGroup();

  /// Number of parts (inputs and outputs per run).
  int64_t num_parts() const;
  /// Runs every part; all arguments are checked before any output is written (throws Error).
  void run(std::span<const LinearInput> inputs, std::span<const LinearOutput> outputs) const;
  /// The underlying C handle (owned by this object).
  const shapejit_linear_group* c_handle() const noexcept { return group_; }

 private:
  shapejit_linear_group* group_ = nullptr;
};

/// Engine statistics: the kernel caches' (embedding bags' and GEMM kernels), then later fields (see
/// shapejit_kernel_cache_stats).
struct KernelCacheStats {
  int64_t hits = 0, misses = 0, compilations = 0, failed_compilations = 0;
  int64_t compile_time_ns = 0, code_bytes = 0, kernels = 0, generic_fallbacks = 0;
  int64_t code_limit_bytes = 0;
  int64_t reference_linear_groups = 0;  ///< linear groups running the scalar reference (appended)
};
/// The kernel cache's counters so far.
SHAPEJIT_API KernelCacheStats kernel_cache_stats();
/// Bound on JIT code bytes; beyond it new shapes run the generic kernel, new linear groups the
/// reference (< 0 restores the default).
SHAPEJIT_API void set_code_memory_limit(int64_t bytes);

}  // namespace shapejit

// shapejit C++ API: the same engine as the C ABI, with views, enum classes and exceptions.
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
};

enum class Mode : int { kSum = SHAPEJIT_SUM, kMean = SHAPEJIT_MEAN, kMax = SHAPEJIT_MAX };

/// Thrown by every C++ entry point on failure; carries the status and the full message.
class Error : public std::runtime_error {
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

/// A 2-D table [rows, dim] with rows `row_stride` elements apart.
struct TableView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0, dim = 0, row_stride = 0;  // row_stride 0 means dim
};

/// Everything one embedding_bag call reads (ATen's `_embedding_bag` arguments).
struct EmbeddingBagCall {
  TableView weight;
  IndexView indices;
  IndexView offsets;
  Mode mode = Mode::kSum;
  const void* per_sample_weights = nullptr;  ///< nullptr or indices.size values of weight's dtype
  std::optional<int64_t> padding_idx;
  bool include_last_offset = false;
  bool aten_partial_final_offset = false;  ///< opt-in ATen 1.13 quirk, see the semantics document

  /// The C ABI form of this call.
  shapejit_embedding_bag_args to_c() const;
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

/// Owned results of the allocating overload; integer outputs widened to int64 for convenience.
struct EmbeddingBagResult {
  EmbeddingBagShapes shapes;
  std::vector<float> output;
  std::vector<int64_t> offset2bag, bag_size, max_indices;
};

/// Validates `call` and returns the output shapes (throws Error on invalid input).
EmbeddingBagShapes embedding_bag_output_shapes(const EmbeddingBagCall& call);
/// Runs the call into caller buffers sized by embedding_bag_output_shapes().
void embedding_bag(const EmbeddingBagCall& call, const EmbeddingBagOutputs& out);
/// Runs the call into freshly allocated buffers (f32 tables only).
EmbeddingBagResult embedding_bag(const EmbeddingBagCall& call);
/// The 2-D form: indices [bags, bag_len] with no offsets (bag b holds row b of indices).
EmbeddingBagResult embedding_bag_2d(const TableView& weight, IndexView indices, int64_t bags,
                                    int64_t bag_len, Mode mode,
                                    const void* per_sample_weights = nullptr,
                                    std::optional<int64_t> padding_idx = std::nullopt);

/// Engine threads (size of the task arena); n <= 0 restores the default.
void set_num_threads(int n);
int num_threads();

}  // namespace shapejit

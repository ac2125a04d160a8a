// Random VALID embedding-bag calls for the differential and oracle tests, and guarded output
// buffers. One generator covers every rule of embedding-bag-semantics.md, so the JIT-vs-reference
// fuzz test and the PyTorch oracle exercise the same space; with a table dtype option it covers
// quantized-tables-semantics.md too (f16/bf16 tables, packed Q8/Q4/Q2 rows with random codes,
// scales and biases, output and weight dtypes, pruning, lengths-style offsets).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shapejit/shapejit.h"

namespace shapejit::test {

/// Limits of the generated cases; the defaults cover every rule at oracle-friendly sizes.
struct EmbagCaseOptions {
  int64_t max_dim = 1100;                  ///< widths 1..max_dim, biased small and to vector widths
  int64_t max_table_elements = 1 << 17;    ///< cap on num_rows * row_stride
  int64_t max_indices = 640;               ///< cap on N
  int64_t max_output_elements = 1 << 18;   ///< cap on B * D (fewer bags for wide rows)
  bool allow_partial_final_offset = true;  ///< generate aten_partial_final_offset cases
  /// Table dtype of the cases: F32 (the default draws exactly the cases it always drew), F16,
  /// BF16, Q8, Q4 or Q2 (Q4/Q2 widths are rounded up to whole bytes of codes).
  shapejit_dtype table = SHAPEJIT_F32;
  /// Also draw the extended options: output dtype (quantized), weight dtype (Q4/Q2), pruning
  /// (quantized) and offsets_as_lengths (any table). Off for F32 keeps the old stream.
  bool extended = false;
};

/// How a case's table values were drawn.
enum class TableKind { kRandom, kSmallIntegers, kFewValues, kSpecials };

/// One valid embedding-bag call with the buffers it reads (owned).
struct EmbagCase {
  uint64_t seed = 0;   ///< run seed the case was drawn from
  int64_t number = 0;  ///< case number within the run: (seed, number) regenerates it exactly
  TableKind table_kind = TableKind::kRandom;
  shapejit_dtype table_dtype = SHAPEJIT_F32;
  /// row_stride counts elements of a float table, bytes of a quantized one.
  int64_t num_rows = 0, dim = 0, row_stride = 0;
  std::vector<float> weight;  ///< f32 tables: num_rows * row_stride; gap columns hold a NaN pattern
  /// Other tables: (num_rows - 1) * row_stride + last row's bytes of f16/bf16 elements or packed
  /// rows (gaps hold a 0xA5 pattern).
  std::vector<unsigned char> table_bytes;
  shapejit_dtype index_dtype = SHAPEJIT_I64, offset_dtype = SHAPEJIT_I64;
  std::vector<int64_t> indices, offsets;        ///< logical values
  std::vector<int32_t> indices_i32, offsets_i32;  ///< storage when the dtype is int32
  std::vector<float> per_sample_weights;        ///< empty when the call has none (exact values)
  shapejit_dtype psw_dtype = SHAPEJIT_F32;      ///< dtype the weights are passed in
  std::vector<uint16_t> per_sample_weights16;   ///< storage when psw_dtype is f16/bf16
  shapejit_dtype output_dtype = SHAPEJIT_F32;
  std::optional<std::vector<int32_t>> mapping;  ///< compressed_indices_mapping (pruned tables)
  bool offsets_as_lengths = false;
  bool skip_index_outputs = false;  ///< only the output (extended cases; ex args only)
  int64_t output_row_stride = 0;    ///< elements between output rows, 0: dense (ex args only)
  bool aten_loop_arithmetic = false;  ///< ATen's own loop's arithmetic (extended cases; ex args only)
  shapejit_mode mode = SHAPEJIT_SUM;
  std::optional<int64_t> padding_idx;  ///< as passed: may be negative (wraps by num_rows)
  bool include_last_offset = false;
  bool aten_partial_final_offset = false;

  /// B = len(offsets) - include_last_offset.
  int64_t num_bags() const;
  /// The padding row after wrap-around, if any.
  std::optional<int64_t> padding_row() const;
  bool weighted() const { return !per_sample_weights.empty(); }
  bool strided() const { return row_stride != dim; }
  /// dtype of offset2bag, bag_size and max_indices (int64 when the input dtypes differ).
  shapejit_dtype index_out_dtype() const;
  /// The C ABI form; points into this case's buffers (`table`, when given, replaces the table
  /// pointer: e.g. a copy placed before a guard page, see GuardedTable).
  shapejit_embedding_bag_args to_args(const void* table = nullptr) const;
  /// The extended C ABI form (output and weight dtypes, mapping, lengths flag).
  shapejit_embedding_bag_ex_args to_ex_args(const void* table = nullptr) const;
  /// Bytes from the first row to the end of the last row's values.
  int64_t table_byte_size() const;
  const void* table_data() const;
  /// One line: mode, dtypes, sizes and flags.
  std::string summary() const;
  /// The whole spec (data included up to a size limit) and the replay command.
  std::string describe() const;
};

/// Case `number` of the run seeded with `seed` (independent of every other case).
EmbagCase make_embag_case(uint64_t seed, int64_t number, const EmbagCaseOptions& options = {});

/// A copy of a case's table whose last row ends right before a PROT_NONE page, so a read past
/// the last row's last byte faults (a 4-bit row of D = 2 is 5 bytes).
class GuardedTable {
 public:
  explicit GuardedTable(const EmbagCase& c);
  ~GuardedTable();
  GuardedTable(const GuardedTable&) = delete;
  GuardedTable& operator=(const GuardedTable&) = delete;
  const void* data() const { return data_; }

 private:
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const void* data_ = nullptr;
};

/// Short names for printing.
const char* mode_name(shapejit_mode mode);
const char* dtype_name(shapejit_dtype dtype);
const char* table_kind_name(TableKind kind);

/// The run seed: SHAPEJIT_TEST_SEED (decimal or 0x hex; "random" draws one), else `fallback`.
uint64_t test_seed(uint64_t fallback);
/// SHAPEJIT_TEST_CASE: replay only this case number.
std::optional<int64_t> test_case_filter();
/// SHAPEJIT_TEST_CASES overrides a test's case count (for long fuzzing runs).
int64_t test_case_count(int64_t fallback);

/// The four outputs of an embedding bag, in the C ABI's argument order.
enum class EmbagOutput { kOutput = 0, kOffset2bag = 1, kBagSize = 2, kMaxIndices = 3 };
inline constexpr EmbagOutput kAllEmbagOutputs[] = {EmbagOutput::kOutput, EmbagOutput::kOffset2bag,
                                                   EmbagOutput::kBagSize, EmbagOutput::kMaxIndices};
/// "output", "offset2bag", "bag_size" or "max_indices".
const char* output_name(EmbagOutput which);

/// Output buffers of one call, each between guard zones of NaN-pattern bytes. Buffers start
/// filled with a sentinel byte, so elements a call forgets to write show up in comparisons
/// (give the two sides of a differential test different sentinels).
class GuardedOutputs {
 public:
  static constexpr size_t kGuardBytes = 64;

  /// Allocates buffers of the given shapes. With `null_when_empty`, zero-length outputs are
  /// passed as NULL (allowed by the C ABI) instead of a guarded zero-length buffer.
  /// A nonzero `output_row_stride` lays the output's rows that many elements apart (the call's
  /// ex field of that name): its buffer spans the rows and the gaps between them.
  explicit GuardedOutputs(const shapejit_embedding_bag_shapes& shapes, unsigned char sentinel = 0xCD,
                          bool null_when_empty = false, shapejit_dtype output_dtype = SHAPEJIT_F32,
                          int64_t output_row_stride = 0);

  /// Pointer to pass for `which` (NULL for an empty output when null_when_empty).
  void* data(EmbagOutput which);
  /// The output's bytes after a call (the output's gaps included when its rows are strided).
  std::span<const std::byte> bytes(EmbagOutput which) const;
  /// The output's rows alone, back to back (bytes(kOutput) when they are dense).
  std::vector<std::byte> output_rows() const;
  /// "" when every byte between strided output rows still holds the sentinel.
  std::string check_output_gaps() const;
  /// Element count of the output.
  int64_t elements(EmbagOutput which) const { return elements_[index(which)]; }
  /// Calls the C ABI with these buffers.
  shapejit_status run(const shapejit_embedding_bag_args& args);
  shapejit_status run(const shapejit_embedding_bag_ex_args& args);
  /// "" when every guard byte is intact, else the buffer and byte that changed.
  std::string check_guards() const;
  /// True when every output byte still holds the sentinel (a failed call must not write).
  bool untouched() const;

 private:
  static size_t index(EmbagOutput which) { return static_cast<size_t>(which); }
  std::byte* payload(size_t k) { return storage_[k].data() + kGuardBytes; }
  const std::byte* payload(size_t k) const { return storage_[k].data() + kGuardBytes; }

  std::vector<std::byte> storage_[4];  // guard | payload (rounded up to 64 bytes) | guard
  size_t payload_bytes_[4] = {};
  int64_t elements_[4] = {};
  size_t rows_ = 0, row_bytes_ = 0, row_stride_bytes_ = 0;  // the output's layout
  unsigned char sentinel_;
  bool null_when_empty_;
};

/// "" when two runs' outputs are equal, else the first difference (output, element, both values'
/// bits). Every bit counts (-0.0, infinities, unwritten elements) except a NaN's sign and
/// payload in `output` (which of two NaN operands an add returns is not part of the contract);
/// then the guards of `got`.
std::string first_output_difference(const GuardedOutputs& want, const GuardedOutputs& got,
                                    shapejit_dtype output_dtype);

}  // namespace shapejit::test

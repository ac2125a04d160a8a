// The tables of the dtype benchmarks: a Workload's f32 table stored as f16, bf16 or rowwise
// quantized rows (Q8/Q4/Q2, packed by shapejit's prepack, which is byte-identical to torch's),
// built once per (workload, dtype) and shared by every implementation of a case.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jit/dtype_traits.hpp"
#include "shapejit/shapejit.h"
#include "workload.hpp"

namespace shapejit::bench {

/// A table dtype of the benchmarks and the name its rows carry (`f16 bf16 q8 q4 q2`).
struct TableDtype {
  shapejit_dtype dtype;
  const char* name;
};
inline constexpr TableDtype kF16Table{SHAPEJIT_F16, "f16"};
inline constexpr TableDtype kBF16Table{SHAPEJIT_BF16, "bf16"};
inline constexpr TableDtype kQ8Table{SHAPEJIT_Q8, "q8"};
inline constexpr TableDtype kQ4Table{SHAPEJIT_Q4, "q4"};
inline constexpr TableDtype kQ2Table{SHAPEJIT_Q2, "q2"};

inline bool is_quantized(shapejit_dtype t) { return jit::is_quantized_table(static_cast<DType>(t)); }

/// One workload's table in one dtype, 64-byte aligned.
class DtypeTable {
 public:
  DtypeTable(const Workload& w, shapejit_dtype dtype);

  const void* data() const { return bytes_.data() + pad_; }
  shapejit_dtype dtype() const { return dtype_; }
  /// Row stride as shapejit_embedding_bag_args counts it: elements (f16/bf16) or bytes (quantized).
  int64_t row_stride() const { return row_stride_; }
  /// Bytes of one row, what a gather reads (packed row incl. scale and bias for quantized).
  int64_t row_bytes() const { return row_bytes_; }
  /// Per-sample weights in the dtype the table takes (f16 for f16, bf16 for bf16, f32 for quantized).
  const void* per_sample_weights() const { return psw_.data(); }

 private:
  shapejit_dtype dtype_;
  int64_t row_stride_ = 0, row_bytes_ = 0;
  size_t pad_ = 0;
  std::vector<uint8_t> bytes_;
  std::vector<uint8_t> psw_;
};

/// The process-wide table of (workload, dtype), built on first use.
const DtypeTable& dtype_table_for(const Workload& w, shapejit_dtype dtype);

/// `n` values of `dtype` (f32, f16 or bf16) at `data`, widened exactly to f32 (outputs and
/// weights of the benchmarks' 16-bit tables).
std::vector<float> widen_to_f32(const void* data, size_t n, shapejit_dtype dtype);

}  // namespace shapejit::bench

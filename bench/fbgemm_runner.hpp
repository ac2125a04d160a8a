// The `fbgemm` implementation of the embedding-bag benchmarks: FBGEMM's own JIT embedding kernel
// (fbgemm::GenerateEmbeddingSpMDM, and GenerateEmbeddingSpMDMNBit for 4/2-bit rows), which pip
// torch 2.x's libtorch_cpu exports and ships the header of. The kernel is generated once per
// case and then called alone: no ATen dispatch, no tensors, no output allocation, which is what
// the `aten` rows add to the same kernel. Only fbgemm_runner.cpp includes FBGEMM's header, and
// only when the build found it (SHAPEJIT_BENCH_FBGEMM; Debian's libtorch 1.13 ships none).
//
// What FBGEMM's kernel computes, as these rows call it: int64 indices and offsets, offsets of
// bags + 1 values ending with the index count (its use_offsets convention), per-sample weights
// always float32, the output dense. Tables: f32 (f32 out), f16 (f16 out), bf16 (is_bf16_in,
// bf16 out), and the packed rows of dtype_tables.hpp as they are (Q8: float32 scale and bias
// after the codes, FBGEMM's default 8-bit layout; Q4/Q2: float16 scale and bias after the codes,
// its default N-bit layout). Modes sum, mean (normalize_by_lengths: it multiplies by 1/length
// where shapejit divides) and weighted sum; FBGEMM has no max.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dtype_tables.hpp"
#include "shapejit/shapejit.h"
#include "workload.hpp"

namespace shapejit::bench {

/// Why FBGEMM's kernel cannot run (table dtype, mode) in this build, or nullptr when it can.
/// table: SHAPEJIT_F32 or a dtype of dtype_tables.hpp; a weighted sum is SHAPEJIT_SUM.
const char* fbgemm_unsupported_reason(shapejit_dtype table, shapejit_mode mode);

/// One FBGEMM kernel, generated at construction: a table dtype, D, mode and weighting, int64
/// indices and offsets.
class FbgemmKernel {
 public:
  /// Throws std::runtime_error where fbgemm_unsupported_reason says so.
  FbgemmKernel(shapejit_dtype table, int64_t dim, shapejit_mode mode, bool weighted);
  ~FbgemmKernel();
  FbgemmKernel(const FbgemmKernel&) = delete;
  FbgemmKernel& operator=(const FbgemmKernel&) = delete;

  /// One call over `bags` bags: offsets holds bags + 1 values, offsets[bags] == num_indices;
  /// weights (float32, one per index) only when constructed weighted; output is bags x D of
  /// output_dtype(). Throws std::runtime_error when FBGEMM reports a failure (an index outside
  /// [0, num_rows) or offsets it rejects).
  void run(int64_t bags, int64_t num_indices, int64_t num_rows, const void* table, const int64_t* indices,
           const int64_t* offsets, const float* weights, void* output) const;
  /// f32 for f32 and quantized tables, the table's own dtype for f16 and bf16 (as shapejit's).
  shapejit_dtype output_dtype() const { return output_dtype_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  shapejit_dtype output_dtype_ = SHAPEJIT_F32;
};

/// FBGEMM's kernel bound to one case of a Workload: its f32 table (table == nullptr) or one of
/// its DtypeTables, the workload's index sets as they are, and copies made once here of what
/// FBGEMM reads in another form (offsets with the index count appended; f16/bf16 per-sample
/// weights widened to the float32 FBGEMM takes, exactly).
class FbgemmRunner {
 public:
  FbgemmRunner(const Workload& w, const DtypeTable* table, shapejit_mode mode, bool weighted);

  void run(int64_t set);
  /// The last call's [bags, dim] output in output_dtype().
  const void* output() const { return output_.data(); }
  shapejit_dtype output_dtype() const { return kernel_.output_dtype(); }
  /// The same widened to f32.
  std::vector<float> output_f32() const;

 private:
  const Workload& w_;
  const void* table_;
  FbgemmKernel kernel_;
  std::vector<int64_t> offsets_;
  std::vector<float> weights_;  // empty when unweighted
  std::vector<uint8_t> output_;
};

}  // namespace shapejit::bench

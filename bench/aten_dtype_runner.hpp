// The `aten` peer of the dtype benchmarks: torch.embedding_bag on an f16 table
// (at::_embedding_bag_forward_only) and torch's quantized rowwise ops
// (quantized::embedding_bag_{byte,4bit,2bit}_rowwise_offsets, which always sum) on Q8/Q4/Q2
// rows. bf16 has no ATen path in 1.13. Only this file's .cpp includes the ATen headers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dtype_tables.hpp"
#include "workload.hpp"

namespace shapejit::bench {

/// Why ATen cannot run (table dtype, mode) on this build, or nullptr when it can.
const char* aten_dtype_unsupported_reason(shapejit_dtype table, int mode);

class AtenDtypeRunner {
 public:
  /// mode: ATen's numbering (0 sum, 1 mean, 2 max); throws std::runtime_error where
  /// aten_dtype_unsupported_reason says so.
  AtenDtypeRunner(const Workload& workload, const DtypeTable& table, int mode, bool weighted);
  ~AtenDtypeRunner();
  AtenDtypeRunner(const AtenDtypeRunner&) = delete;
  AtenDtypeRunner& operator=(const AtenDtypeRunner&) = delete;

  /// Sets ATen's intra-op thread count to 1; call before timing.
  void prepare();
  void run(int64_t set);
  /// The last call's [bags, dim] output widened to f32.
  std::vector<float> output_f32() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shapejit::bench

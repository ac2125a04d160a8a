// The `aten` implementation of the embedding-bag benchmarks: libtorch's
// at::_embedding_bag_forward_only over tensors that wrap a Workload's buffers (no copies).
// Kept in its own translation unit so only one file includes the ATen headers.
#pragma once

#include <cstdint>
#include <memory>

#include "workload.hpp"

namespace shapejit::bench {

/// True when the binary was built with libtorch (SHAPEJIT_BENCH_ATEN).
bool aten_available();

/// One ATen embedding-bag call shape: a workload, a mode and a thread count.
class AtenRunner {
 public:
  /// mode: 0 sum, 1 mean, 2 max (ATen's numbering); weighted passes the per-sample weights.
  /// Throws std::runtime_error when the binary was built without libtorch.
  AtenRunner(const Workload& workload, int mode, bool weighted, int threads);
  ~AtenRunner();
  AtenRunner(const AtenRunner&) = delete;
  AtenRunner& operator=(const AtenRunner&) = delete;

  /// Sets ATen's intra-op thread count; call before timing (other benchmarks change it).
  void prepare();
  /// One call on index set `set`; the outputs live until the next call (ATen allocates them).
  void run(int64_t set);
  /// The [bags, dim] output of the last call.
  const float* output() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shapejit::bench

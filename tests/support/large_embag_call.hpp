// One f32 embedding-bag sum large enough that the engine runs it on several threads (its work is
// many times the partitioner's minimum chunk, runtime/engine/partition.hpp), with its reference outputs:
// for tests about the engine's threads rather than about the kernels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shapejit/shapejit.h"
#include "support/embag_cases.hpp"

namespace shapejit::test {

class LargeEmbagCall {
 public:
  /// `bags` bags of 16 rows each from a table of random values, rows `dim` wide.
  LargeEmbagCall(int64_t dim, int64_t bags, uint64_t seed);
  LargeEmbagCall(const LargeEmbagCall&) = delete;
  LargeEmbagCall& operator=(const LargeEmbagCall&) = delete;

  const shapejit_embedding_bag_args& args() const { return args_; }
  const shapejit_embedding_bag_shapes& shapes() const { return shapes_; }
  /// "" when `got` holds the reference outputs and its guards are intact, else what differs.
  std::string difference(const GuardedOutputs& got) const;

 private:
  std::vector<float> weight_;
  std::vector<int64_t> indices_, offsets_;
  shapejit_embedding_bag_args args_{};
  shapejit_embedding_bag_shapes shapes_{};
  std::unique_ptr<GuardedOutputs> want_;
};

}  // namespace shapejit::test

// A one-part linear group built through the C ABI, for tests about how groups are built and
// counted (engine statistics, the kernel cache), not about their arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "shapejit/shapejit.h"

namespace shapejit::test {

/// Y = X W^T for one part of n rows over K, with weights of small integers so results are exact.
struct OnePartGroup {
  int64_t n, k;
  std::vector<float> w;
  shapejit_linear_part_desc part{};
  shapejit_linear_group* handle = nullptr;

  /// Builds the group (REQUIREs success).
  OnePartGroup(int64_t rows, int64_t depth);
  ~OnePartGroup();
  OnePartGroup(const OnePartGroup&) = delete;
  OnePartGroup& operator=(const OnePartGroup&) = delete;

  /// Runs one row of X (all ones) and CHECKs that Y[0, r] is the sum of W's row r.
  void check_one_row() const;
};

}  // namespace shapejit::test

#include "support/one_part_group.hpp"

#include <doctest/doctest.h>

namespace shapejit::test {

OnePartGroup::OnePartGroup(int64_t rows, int64_t depth) : n(rows), k(depth), w(size_t(rows * depth)) {
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 3) - 1);
  part.rows = n;
  const shapejit_linear_group_desc desc{SHAPEJIT_WEIGHTS_PACKED, w.data(), n, k, k, nullptr, 0, &part, 1};
  REQUIRE(shapejit_linear_group_create(&desc, &handle) == SHAPEJIT_OK);
}

OnePartGroup::~OnePartGroup() { shapejit_linear_group_destroy(handle); }

void OnePartGroup::check_one_row() const {
  std::vector<float> x(size_t(k), 1.0f), y(size_t(n), -7.0f);
  const shapejit_linear_group_io io{x.data(), 1, k, k, y.data(), n, 0, 0};
  REQUIRE(shapejit_linear_group_run(handle, &io, 1) == SHAPEJIT_OK);
  for (int64_t r = 0; r < n; ++r) {
    double want = 0;
    for (int64_t c = 0; c < k; ++c) want += w[size_t(r * k + c)];
    CHECK(y[size_t(r)] == float(want));
  }
}

}  // namespace shapejit::test

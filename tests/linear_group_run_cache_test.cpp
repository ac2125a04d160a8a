// The per-thread memory of the last valid run (runtime/linear_group/linear_group.cpp): a run repeating it
// exactly skips re-validation, so these tests check that nothing else does. A run that differs
// in any field, that comes after a rejected run, or that goes to another group (even one at a
// destroyed group's address) is validated in full; a repeated run still computes.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shapejit/shapejit.h"

namespace {

// A packed group of 2 row-major parts over W [4, k] with bias; parts 0 and 1 take rows [0, 2)
// and [2, 4).
struct Group {
  std::vector<float> w, b{1, 2, 3, 4};
  shapejit_linear_part_desc parts[2] = {{.row_begin = 0, .rows = 2}, {.row_begin = 2, .rows = 2}};
  shapejit_linear_group* handle = nullptr;

  explicit Group(int64_t k) : w(size_t(4 * k)) {
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 5) - 2.0f;
    shapejit_linear_group_desc desc{SHAPEJIT_WEIGHTS_PACKED, w.data(), 4, k, k, b.data(), 4, parts, 2};
    REQUIRE(shapejit_linear_group_create(&desc, &handle) == SHAPEJIT_OK);
  }
  ~Group() { shapejit_linear_group_destroy(handle); }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
};

// Inputs [3, 2] and outputs [3, 2] per part, in separate buffers.
struct Io {
  std::vector<float> x = std::vector<float>(16, 1.0f), y = std::vector<float>(32, 0.0f);
  shapejit_linear_group_io io[2];
  Io() {
    io[0] = {x.data(), 3, 2, 2, y.data(), 2, 0, 0};
    io[1] = {x.data() + 8, 3, 2, 2, y.data() + 16, 2, 0, 0};
  }
  shapejit_status run(const Group& g) { return shapejit_linear_group_run(g.handle, io, 2); }
};

std::string last_error() { return shapejit_last_error(); }

TEST_CASE("linear group run cache: a changed field after a valid run is validated") {
  Group g(2);
  Io a;
  REQUIRE(a.run(g) == SHAPEJIT_OK);
  REQUIRE(a.run(g) == SHAPEJIT_OK);  // the repeat

  Io bad = a;
  bad.io[1].ldy = 1;  // less than N = 2
  CHECK(bad.run(g) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(last_error().find("io[1].ldy = 1") != std::string::npos);

  Io alias = a;
  alias.io[1].y = alias.io[0].y + 1;  // outputs overlap
  CHECK(alias.run(g) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(last_error().find("outputs must not alias") != std::string::npos);

  Io reads_output = a;
  reads_output.io[0].x = reads_output.io[1].y;  // an input overlapping an output
  CHECK(reads_output.run(g) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(last_error().find("must not overlap any input") != std::string::npos);

  // The rejected runs were not remembered: the same bad run is rejected again, and the valid
  // one still passes.
  CHECK(bad.run(g) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(a.run(g) == SHAPEJIT_OK);
  CHECK(alias.run(g) == SHAPEJIT_INVALID_ARGUMENT);
}

TEST_CASE("linear group run cache: the same io for another group is validated") {
  Group k2(2), k3(3);
  Io a;  // K = 2
  REQUIRE(a.run(k2) == SHAPEJIT_OK);
  CHECK(a.run(k3) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(last_error().find("mismatched K") != std::string::npos);
  CHECK(a.run(k2) == SHAPEJIT_OK);
}

TEST_CASE("linear group run cache: a new group at a destroyed group's address is validated") {
  Io a;  // K = 2
  // Allocators often hand a freed block to the next allocation of its size; whether or not
  // this one does, the run must be rejected every time.
  for (int i = 0; i < 8; ++i) {
    {
      Group k2(2);
      REQUIRE(a.run(k2) == SHAPEJIT_OK);
    }
    Group k3(3);
    CAPTURE(i);
    CHECK(a.run(k3) == SHAPEJIT_INVALID_ARGUMENT);
  }
}

TEST_CASE("linear group run cache: a repeated run still computes") {
  Group g(2);
  Io a;
  REQUIRE(a.run(g) == SHAPEJIT_OK);
  const std::vector<float> first = a.y;
  // New input values at the same addresses: the outputs must follow them.
  for (float& v : a.x) v = 2.0f;
  REQUIRE(a.run(g) == SHAPEJIT_OK);
  // Y = X W^T + b with X all-equal: Y(2) - b = 2 (Y(1) - b) for every output element.
  for (int p = 0; p < 2; ++p)
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < 2; ++c) {
        const size_t i = size_t(16 * p + 2 * r + c);
        const float bias = g.b[size_t(2 * p + c)];
        CAPTURE(p);
        CAPTURE(r);
        CAPTURE(c);
        CHECK(a.y[i] - bias == doctest::Approx(2.0f * (first[i] - bias)));
      }
}

}  // namespace

// Linear-group runs through the C ABI on the engine's ISA, against the reference, on the small
// (part by part) and the blocked (engine) paths: more parts than run_linear_group's 8-entry
// inline array (issue 10, item 9: the span over that array was built with the full part count
// before the heap took over), and head-split parts with heads narrower than a vector and more
// columns than the stack tile they are copied out through. Small-integer data keeps every value
// exact, so the comparison is bit for bit; a sentinel tail after each output must survive.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ref/linear_group.hpp"
#include "shapejit/shapejit.h"

namespace {

constexpr int64_t kK = 24, kBatch = 2, kTail = 16;
constexpr uint32_t kSentinelBits = 0x7FA5A5A5u;

struct Group {
  std::vector<float> weight, bias;
  std::vector<shapejit_linear_part_desc> parts;
  shapejit_linear_group_desc desc{};

  // Parts of `rows` outputs: row-major, and head-split in heads of `heads_a` and `heads_b`.
  Group(int num_parts, int64_t rows, int64_t heads_a, int64_t heads_b) {
    weight.resize(size_t(num_parts * rows * kK));
    for (size_t i = 0; i < weight.size(); ++i) weight[i] = float(int64_t((i * 37 + 11) % 7) - 3);
    bias.resize(size_t(num_parts * rows));
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = float(int64_t(i % 5) - 2);
    for (int p = 0; p < num_parts; ++p) {
      shapejit_linear_part_desc d{};
      d.row_begin = p * rows;
      d.rows = rows;
      d.activation = p % 2 ? SHAPEJIT_ACTIVATION_RELU : SHAPEJIT_ACTIVATION_NONE;
      d.layout = p % 3 == 0 ? SHAPEJIT_LAYOUT_ROW_MAJOR
                 : p % 3 == 1 ? SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST
                              : SHAPEJIT_LAYOUT_HEADS_BATCH_FIRST;
      d.heads = p % 3 == 1 ? heads_a : heads_b;
      parts.push_back(d);
    }
    desc = {SHAPEJIT_WEIGHTS_PACKED, weight.data(), num_parts * rows, kK, kK, bias.data(),
            num_parts * rows, parts.data(), num_parts};
  }
};

std::vector<float> sentinel_floats(size_t n) {
  std::vector<float> v(n);
  for (float& f : v) std::memcpy(&f, &kSentinelBits, 4);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs a group of num_parts parts through the C ABI and through the reference; every output
// must match bit for bit, sentinel tails included.
void check_against_reference(int num_parts, int64_t rows, int64_t heads_a, int64_t heads_b, int64_t m) {
  Group g(num_parts, rows, heads_a, heads_b);
  shapejit_linear_group* group = nullptr;
  REQUIRE(shapejit_linear_group_create(&g.desc, &group) == SHAPEJIT_OK);
  std::vector<float> x0(size_t(m * kK)), x1(size_t(m * kK));
  for (size_t i = 0; i < x0.size(); ++i) {
    x0[i] = float(int64_t((i * 13 + 1) % 5) - 2);
    x1[i] = float(int64_t((i * 11 + 3) % 4) - 1);
  }
  std::vector<std::vector<float>> got, want;
  std::vector<shapejit_linear_group_io> io, ref_io;
  for (int p = 0; p < num_parts; ++p) {
    got.push_back(sentinel_floats(size_t(m * rows + kTail)));
    want.push_back(sentinel_floats(size_t(m * rows + kTail)));
  }
  for (int p = 0; p < num_parts; ++p) {
    const float* x = p % 4 == 3 ? x1.data() : x0.data();  // most parts share one input
    io.push_back({x, m, kK, kK, got[size_t(p)].data(), rows, kBatch, m / kBatch});
    ref_io.push_back({x, m, kK, kK, want[size_t(p)].data(), rows, kBatch, m / kBatch});
  }
  CHECK(shapejit_linear_group_run(group, io.data(), num_parts) == SHAPEJIT_OK);
  shapejit::ref::linear_group(g.desc, ref_io.data());
  for (int p = 0; p < num_parts; ++p) {
    CAPTURE(p);
    CHECK(same_bits(got[size_t(p)], want[size_t(p)]));
  }
  CHECK(shapejit_linear_group_destroy(group) == SHAPEJIT_OK);
}

}  // namespace

TEST_CASE("linear group: more parts than the inline array, through the C ABI, vs the reference") {
  for (int num_parts : {9, 12}) {
    for (int64_t m : {4, 96}) {  // part by part, and on the engine
      CAPTURE(num_parts);
      CAPTURE(m);
      check_against_reference(num_parts, 20, 2, 10, m);
    }
  }
}

TEST_CASE("linear group: heads narrower than a vector, wider than the copy-out tile, vs the reference") {
  // 3 parts of 520 columns: row-major, 130 heads of 4 and 260 heads of 2 (both copied out
  // through a tile, 192 columns at a time), on every path.
  for (int64_t m : {2, 4, 96}) {
    CAPTURE(m);
    check_against_reference(3, 520, 130, 260, m);
  }
}

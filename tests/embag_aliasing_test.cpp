// Embedding-bag outputs that share a byte with an input or with another output are rejected
// before anything is written. All eight buffers live in one arena; each test moves one output
// onto another buffer and checks the status, that the message names both, and that not one
// byte of the arena (every output and every input) changed.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"

namespace {

constexpr int64_t kSlotBytes = 1024;  // each buffer's home; every buffer is under kSlotBytes / 2
enum Slot : int { kWeight, kIndices, kOffsets, kPsw, kOutput, kOffset2bag, kBagSize, kMaxIndices, kSlots };
const char* const kNames[kSlots] = {"weight", "indices",    "offsets",  "per_sample_weights",
                                    "output", "offset2bag", "bag_size", "max_indices"};

// A weighted sum with padding_idx (so offset2bag is written too) over int64 indices: all eight
// buffers are non-empty. Table 5 x 4, rows 6 floats apart; 6 indices in 3 bags.
struct Arena {
  std::vector<int64_t> storage = std::vector<int64_t>(size_t(kSlots + 2) * kSlotBytes / 8);
  std::array<unsigned char*, kSlots> ptr{};
  std::array<int64_t, kSlots> bytes{};
  shapejit_embedding_bag_args a{};

  Arena() {
    auto* base = reinterpret_cast<unsigned char*>(storage.data()) + kSlotBytes;  // room before slot 0
    for (int s = 0; s < kSlots; ++s) ptr[s] = base + s * kSlotBytes;
    std::memset(storage.data(), 0x5A, storage.size() * 8);
    float* w = reinterpret_cast<float*>(ptr[kWeight]);
    for (int i = 0; i < 5 * 6; ++i) w[i] = float(i % 7) - 3.0f;
    const int64_t idx[6] = {0, 4, 2, 3, 1, 2}, off[3] = {0, 2, 4};
    const float psw[6] = {0.5f, 2.0f, -1.0f, 1.5f, 3.0f, 0.25f};
    std::memcpy(ptr[kIndices], idx, sizeof idx);
    std::memcpy(ptr[kOffsets], off, sizeof off);
    std::memcpy(ptr[kPsw], psw, sizeof psw);
    a.weight = ptr[kWeight];
    a.weight_dtype = SHAPEJIT_F32;
    a.num_rows = 5;
    a.dim = 4;
    a.row_stride = 6;
    a.index_dtype = a.offset_dtype = SHAPEJIT_I64;
    a.num_indices = 6;
    a.num_offsets = 3;
    a.mode = SHAPEJIT_SUM;
    a.has_padding_idx = 1;
    a.padding_idx = 3;
    // Bytes each call touches: the table from row 0 to the end of row 4, and the outputs' shapes.
    bytes = {(4 * 6 + 4) * 4, 6 * 8, 3 * 8, 6 * 4, 3 * 4 * 4, 6 * 8, 3 * 8, 3 * 8};
    sync();
  }
  // Points the call's buffers at ptr[] (after a test moved one).
  void sync() {
    a.weight = ptr[kWeight];
    a.indices = ptr[kIndices];
    a.offsets = ptr[kOffsets];
    a.per_sample_weights = ptr[kPsw];
  }
  shapejit_status run() {
    sync();
    return shapejit_embedding_bag(&a, ptr[kOutput], ptr[kOffset2bag], ptr[kBagSize], ptr[kMaxIndices]);
  }
  std::vector<int64_t> snapshot() const { return storage; }
};

bool names_pair(const std::string& msg, const std::string& x, const std::string& y) {
  auto has = [&](const std::string& s) { return msg.find(s) != std::string::npos; };
  return (has(": " + x + " [") && has("overlaps " + y + " [")) || (has(": " + y + " [") && has("overlaps " + x + " ["));
}

// Runs the arena's call and expects the overlap of `moved` and `other` to be rejected untouched.
void expect_overlap_rejected(Arena& arena, int moved, int other) {
  const std::vector<int64_t> before = arena.snapshot();
  const shapejit_status st = arena.run();
  const std::string msg = shapejit_last_error();
  CAPTURE(msg);
  CHECK(st == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(names_pair(msg, kNames[moved], kNames[other]));
  CHECK(msg.find("must not overlap") != std::string::npos);
  CHECK(arena.storage == before);
}

}  // namespace

TEST_CASE("embag aliasing: the arena's call is valid and writes every output") {
  Arena arena;
  const std::vector<int64_t> before = arena.snapshot();
  REQUIRE(arena.run() == SHAPEJIT_OK);
  for (int s = kOutput; s < kSlots; ++s) {
    CAPTURE(kNames[s]);
    CHECK(std::memcmp(arena.ptr[s], reinterpret_cast<const unsigned char*>(before.data()) +
                                        (arena.ptr[s] - reinterpret_cast<unsigned char*>(arena.storage.data())),
                      size_t(arena.bytes[s])) != 0);
  }
}

// Every pair of an output with an input or an earlier output, in three placements: the output
// starting at the other's address, starting in its last 8 bytes, and ending in its first 8.
TEST_CASE("embag aliasing: every output against every input and every other output") {
  for (int out = kOutput; out < kSlots; ++out)
    for (int other = 0; other < kSlots; ++other) {
      if (other == out) continue;
      for (int placement = 0; placement < 3; ++placement) {
        Arena arena;
        unsigned char* const at = arena.ptr[other];
        arena.ptr[out] = placement == 0   ? at
                         : placement == 1 ? at + arena.bytes[other] - 8
                                          : at - arena.bytes[out] + 8;
        CAPTURE(kNames[out]);
        CAPTURE(kNames[other]);
        CAPTURE(placement);
        expect_overlap_rejected(arena, out, other);
      }
    }
}

// The two overlaps that broke the engine before the check: the JIT kernel crashed writing the
// output over the indices it was reading, and read past the table once offset2bag had replaced
// the indices with bag numbers.
TEST_CASE("embag aliasing: output == indices and offset2bag == indices, in every mode") {
  for (shapejit_mode mode : {SHAPEJIT_SUM, SHAPEJIT_MEAN, SHAPEJIT_MAX}) {
    for (int out : {int(kOutput), int(kOffset2bag)}) {
      Arena arena;
      arena.a.mode = mode;
      arena.a.per_sample_weights = nullptr;
      arena.ptr[kPsw] = nullptr;
      arena.bytes[kPsw] = 0;
      if (out == kOffset2bag) arena.a.has_padding_idx = mode == SHAPEJIT_SUM;  // sum writes it only then
      arena.ptr[out] = arena.ptr[kIndices];
      CAPTURE(mode);
      CAPTURE(kNames[out]);
      expect_overlap_rejected(arena, out, kIndices);
    }
  }
}

TEST_CASE("embag aliasing: the table counts from its first row to the end of its last") {
  Arena gap;  // the output in the 2-float gap after row 0 (between dim and row_stride)
  gap.a.num_offsets = 1;
  gap.bytes[kOutput] = 4 * 4;
  gap.ptr[kOutput] = gap.ptr[kWeight] + 4 * 4;
  expect_overlap_rejected(gap, kOutput, kWeight);
  Arena after;  // right after the last row's dim floats: not part of the table
  after.ptr[kOutput] = after.ptr[kWeight] + after.bytes[kWeight];
  CHECK(after.run() == SHAPEJIT_OK);
}

TEST_CASE("embag aliasing: adjacent buffers and zero-length buffers never overlap") {
  Arena adjacent;  // bag_size ends where max_indices begins; the output ends where indices begin
  adjacent.ptr[kBagSize] = adjacent.ptr[kMaxIndices] - adjacent.bytes[kBagSize];
  adjacent.ptr[kOutput] = adjacent.ptr[kIndices] - adjacent.bytes[kOutput];
  CHECK(adjacent.run() == SHAPEJIT_OK);
  Arena empty;  // sum without padding_idx: offset2bag is empty, so it may point anywhere
  empty.a.has_padding_idx = 0;
  empty.ptr[kOffset2bag] = empty.ptr[kIndices];
  CHECK(empty.run() == SHAPEJIT_OK);
  Arena no_dim;  // dim 0: neither the output nor the table has a byte
  no_dim.a.dim = 0;
  no_dim.a.row_stride = 0;
  no_dim.ptr[kOutput] = no_dim.ptr[kWeight];
  no_dim.ptr[kMaxIndices] = no_dim.ptr[kWeight] + 8;
  CHECK(no_dim.run() == SHAPEJIT_OK);
}

TEST_CASE("embag aliasing: the C++ API throws the same error and writes nothing") {
  Arena arena;
  arena.ptr[kMaxIndices] = arena.ptr[kOffsets];
  const std::vector<int64_t> before = arena.snapshot();
  shapejit::EmbeddingBagCall call;
  call.weight = {arena.ptr[kWeight], shapejit::DType::kF32, 5, 4, 6};
  call.indices = std::span<const int64_t>(reinterpret_cast<const int64_t*>(arena.ptr[kIndices]), 6);
  call.offsets = std::span<const int64_t>(reinterpret_cast<const int64_t*>(arena.ptr[kOffsets]), 3);
  call.per_sample_weights = arena.ptr[kPsw];
  call.padding_idx = 3;
  const shapejit::EmbeddingBagOutputs outs{arena.ptr[kOutput], arena.ptr[kOffset2bag], arena.ptr[kBagSize],
                                           arena.ptr[kMaxIndices]};
  try {
    shapejit::embedding_bag(call, outs);
    FAIL("expected an Error");
  } catch (const shapejit::Error& e) {
    CHECK(e.status() == shapejit::Status::kInvalidArgument);
    CHECK(names_pair(e.what(), "max_indices", "offsets"));
  }
  CHECK(arena.storage == before);
}

// The index range check (runtime/embag/validate.cpp): an unsigned max (AVX-512 over four
// accumulators for both widths, AVX2 for int32), a max of 32-bit words (int64 on AVX2, tables of
// up to 2^32 rows) or an OR-reduction of idx | (limit - 1 - idx) (elsewhere), vectorised for long
// calls and inline for short ones; the qemu_avx2 run covers the AVX2 clone. Every position modulo
// the vector widths and unroll (up to 64 int32 lanes), boundary values on both sides (for int64
// also values whose low word is in range and high word is not), int32 and int64, and the message
// naming the first bad index.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "shapejit/shapejit.h"

namespace {

// Validation only (output shapes): the index check runs there exactly as in a call.
template <class T>
shapejit_status check(const std::vector<T>& idx, int64_t rows, shapejit_dtype dtype) {
  static float table[4] = {};
  const int64_t offsets[1] = {0};
  shapejit_embedding_bag_args a{};
  a.weight = table;
  a.weight_dtype = SHAPEJIT_F32;
  a.num_rows = rows;
  a.dim = 1;
  a.row_stride = 1;
  a.indices = idx.data();
  a.index_dtype = dtype;
  a.num_indices = int64_t(idx.size());
  a.offsets = offsets;
  a.offset_dtype = SHAPEJIT_I64;
  a.num_offsets = 1;
  a.mode = SHAPEJIT_SUM;
  shapejit_embedding_bag_shapes s{};
  return shapejit_embedding_bag_output_shapes(&a, &s);
}

std::string first_bad_text(int64_t pos, int64_t value) {
  return "indices[" + std::to_string(pos) + "] = " + std::to_string(value) + " is out of range";
}

// Lengths around the inline limit (16), the int64 unroll (32 lanes) and the int32 one (64).
const int64_t kLengths[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 96, 127, 128, 129, 200};

template <class T>
void battery(shapejit_dtype dtype) {
  const int64_t rows = 1000;
  std::vector<int64_t> bad = {rows, rows + 1, -1, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()};
  if (sizeof(T) == 8) {
    // A valid low word under a high word of 1, of all ones (negative) and of 2^31 (negative).
    const int64_t high_one = int64_t(1) << 32;
    bad.insert(bad.end(), {high_one, high_one + rows - 1, -high_one + 5, std::numeric_limits<int64_t>::min() + 7});
  }
  for (int64_t n : kLengths) {
    CAPTURE(n);
    std::vector<T> idx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = T(i % 3 == 0 ? 0 : i % 3 == 1 ? rows - 1 : i % rows);
    REQUIRE(check(idx, rows, dtype) == SHAPEJIT_OK);  // 0 and limit - 1 pass
    for (int64_t pos = 0; pos < n; ++pos) {
      for (int64_t value : bad) {
        CAPTURE(pos);
        CAPTURE(value);
        const T saved = idx[size_t(pos)];
        idx[size_t(pos)] = T(value);
        CHECK(check(idx, rows, dtype) == SHAPEJIT_INVALID_ARGUMENT);
        std::string message = shapejit_last_error();
        CHECK_MESSAGE(message.find(first_bad_text(pos, value)) != std::string::npos, message);
        // With a second bad index later on, the first is still the one named.
        if (pos + 1 < n) {
          const T saved_last = idx[size_t(n - 1)];
          idx[size_t(n - 1)] = T(-1);
          CHECK(check(idx, rows, dtype) == SHAPEJIT_INVALID_ARGUMENT);
          message = shapejit_last_error();
          CHECK_MESSAGE(message.find(first_bad_text(pos, value)) != std::string::npos, message);
          idx[size_t(n - 1)] = saved_last;
        }
        idx[size_t(pos)] = saved;
      }
    }
  }
}

}  // namespace

TEST_CASE("index range: every position and boundary value, int64") { battery<int64_t>(SHAPEJIT_I64); }

TEST_CASE("index range: every position and boundary value, int32") { battery<int32_t>(SHAPEJIT_I32); }

TEST_CASE("index range: tables beyond the index type's range") {
  // int32 indices over 2^33 rows: every non-negative int32 is a row, every negative one is not.
  for (int64_t n : {int64_t(5), int64_t(70)}) {
    std::vector<int32_t> idx(size_t(n), std::numeric_limits<int32_t>::max());
    idx[0] = 0;
    CHECK(check(idx, int64_t(1) << 33, SHAPEJIT_I32) == SHAPEJIT_OK);
    for (int32_t v : {int32_t(-1), std::numeric_limits<int32_t>::min()}) {
      idx[size_t(n - 2)] = v;
      CHECK(check(idx, int64_t(1) << 33, SHAPEJIT_I32) == SHAPEJIT_INVALID_ARGUMENT);
      CHECK(std::string(shapejit_last_error()).find(first_bad_text(n - 2, v)) != std::string::npos);
      idx[size_t(n - 2)] = 0;
    }
  }
  // int64 indices over 2^60 rows: limit - 1 passes, INT64_MAX and INT64_MIN do not.
  const int64_t rows = int64_t(1) << 60;
  for (int64_t n : {int64_t(3), int64_t(40)}) {
    std::vector<int64_t> idx(size_t(n), rows - 1);
    CHECK(check(idx, rows, SHAPEJIT_I64) == SHAPEJIT_OK);
    for (int64_t v : {rows, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
      idx[size_t(n - 1)] = v;
      CHECK(check(idx, rows, SHAPEJIT_I64) == SHAPEJIT_INVALID_ARGUMENT);
      CHECK(std::string(shapejit_last_error()).find(first_bad_text(n - 1, v)) != std::string::npos);
      idx[size_t(n - 1)] = rows - 1;
    }
  }
  // int64 indices over exactly 2^32 rows (the widest table the AVX2 word-wise max covers) and one
  // row more (the OR form).
  for (const int64_t rows32 : {int64_t(1) << 32, (int64_t(1) << 32) + 1}) {
    CAPTURE(rows32);
    std::vector<int64_t> idx(40, 0);
    idx[7] = rows32 - 1;
    idx[33] = std::numeric_limits<uint32_t>::max();
    CHECK(check(idx, rows32, SHAPEJIT_I64) == SHAPEJIT_OK);
    for (int64_t v : {rows32, rows32 + 1, int64_t(1) << 33, int64_t(-1)}) {
      idx[21] = v;
      CHECK(check(idx, rows32, SHAPEJIT_I64) == SHAPEJIT_INVALID_ARGUMENT);
      CHECK(std::string(shapejit_last_error()).find(first_bad_text(21, v)) != std::string::npos);
      idx[21] = 0;
    }
  }
  // No rows: no index is valid, 0 included.
  CHECK(check(std::vector<int64_t>(20, 0), 0, SHAPEJIT_I64) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("indices[0] = 0 is out of range for a table of 0 rows") !=
        std::string::npos);
  CHECK(check(std::vector<int32_t>(3, 0), 0, SHAPEJIT_I32) == SHAPEJIT_INVALID_ARGUMENT);
}

TEST_CASE("index range: a pruned table's indices range over its mapping") {
  // Q8 rows of 4 codes + 8 bytes of scale and bias; 3 rows; a mapping of 50 entries.
  std::vector<uint8_t> table(3 * 12, 0);
  std::vector<int32_t> mapping(50, -1);
  mapping[49] = 2;
  for (int64_t n : {int64_t(4), int64_t(40)}) {
    CAPTURE(n);
    std::vector<int64_t> idx(size_t(n), 49);
    const int64_t offsets[1] = {0};
    shapejit_embedding_bag_ex_args e{};
    e.struct_size = sizeof e;
    e.call.weight = table.data();
    e.call.weight_dtype = SHAPEJIT_Q8;
    e.call.num_rows = 3;
    e.call.dim = 4;
    e.call.row_stride = 12;
    e.call.indices = idx.data();
    e.call.index_dtype = SHAPEJIT_I64;
    e.call.num_indices = n;
    e.call.offsets = offsets;
    e.call.offset_dtype = SHAPEJIT_I64;
    e.call.num_offsets = 1;
    e.call.mode = SHAPEJIT_SUM;
    e.output_dtype = SHAPEJIT_F32;
    e.per_sample_weights_dtype = SHAPEJIT_F32;
    e.compressed_indices_mapping = mapping.data();
    e.mapping_len = 50;
    shapejit_embedding_bag_shapes s{};
    CHECK(shapejit_embedding_bag_ex_output_shapes(&e, &s) == SHAPEJIT_OK);  // index 49 < 50 entries
    idx[size_t(n / 2)] = 50;
    CHECK(shapejit_embedding_bag_ex_output_shapes(&e, &s) == SHAPEJIT_INVALID_ARGUMENT);
    CHECK(std::string(shapejit_last_error())
              .find(first_bad_text(n / 2, 50) + " for compressed_indices_mapping of 50 entries") != std::string::npos);
  }
}

// Hand-checked values for the rules of quantized-tables-semantics.md that are easy to get wrong,
// each through the reference and through the public API (shapejit_embedding_bag_ex: the
// generic kernel or JIT code), which must agree bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ref/embedding_bag.hpp"
#include "ref/float16.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"

namespace {

using shapejit::ref::bf16_to_f32;
using shapejit::ref::f16_to_f32;
using shapejit::ref::f32_to_bf16;
using shapejit::ref::f32_to_f16;

// One call and its outputs: int64 indices and offsets, dense rows.
struct Bag {
  std::vector<unsigned char> table;
  shapejit_dtype table_dtype = SHAPEJIT_F32;
  int64_t rows = 0, dim = 0, row_stride = 0;
  std::vector<int64_t> indices, offsets;
  std::vector<unsigned char> psw;
  shapejit_dtype psw_dtype = SHAPEJIT_F32;
  shapejit_mode mode = SHAPEJIT_SUM;
  std::optional<int64_t> padding_idx;
  bool include_last_offset = false, lengths = false;
  std::vector<int32_t> mapping;
  bool pruned = false;
  shapejit_dtype out_dtype = SHAPEJIT_F32;

  // Results (reference; the API's are checked equal).
  std::vector<unsigned char> out;
  std::vector<int64_t> offset2bag, bag_size, max_indices;

  shapejit_embedding_bag_ex_args args() const {
    shapejit_embedding_bag_args a{};
    a.weight = table.data();
    a.weight_dtype = table_dtype;
    a.num_rows = rows;
    a.dim = dim;
    a.row_stride = row_stride;
    a.indices = indices.data();
    a.index_dtype = SHAPEJIT_I64;
    a.num_indices = int64_t(indices.size());
    a.offsets = offsets.data();
    a.offset_dtype = SHAPEJIT_I64;
    a.num_offsets = int64_t(offsets.size());
    a.per_sample_weights = psw.empty() ? nullptr : psw.data();
    a.mode = mode;
    a.has_padding_idx = padding_idx.has_value();
    a.padding_idx = padding_idx.value_or(0);
    a.include_last_offset = include_last_offset;
    shapejit_embedding_bag_ex_args e{};
    shapejit_embedding_bag_ex_init(&e, &a);
    e.output_dtype = out_dtype;
    e.per_sample_weights_dtype = psw_dtype;
    if (pruned) {
      e.compressed_indices_mapping = mapping.data();
      e.mapping_len = int64_t(mapping.size());
    }
    e.offsets_as_lengths = lengths;
    return e;
  }

  // Runs the reference and the API; checks they agree bytewise.
  void run() {
    const shapejit_embedding_bag_ex_args e = args();
    shapejit_embedding_bag_shapes s{};
    REQUIRE_MESSAGE(shapejit_embedding_bag_ex_output_shapes(&e, &s) == SHAPEJIT_OK, shapejit_last_error());
    const size_t out_bytes = out_dtype == SHAPEJIT_F32 ? 4 : 2;
    out.assign(size_t(s.output_rows * s.output_cols) * out_bytes, 0xEE);
    offset2bag.assign(size_t(s.offset2bag_len), -7);
    bag_size.assign(size_t(s.bag_size_len), -7);
    max_indices.assign(size_t(s.max_indices_rows * s.max_indices_cols), -7);
    std::vector<unsigned char> api_out(out);
    std::vector<int64_t> api_o2b(offset2bag), api_bag(bag_size), api_max(max_indices);
    shapejit::ref::embedding_bag(e, out.data(), offset2bag.data(), bag_size.data(), max_indices.data());
    REQUIRE_MESSAGE(shapejit_embedding_bag_ex(&e, api_out.data(), api_o2b.data(), api_bag.data(), api_max.data()) ==
                        SHAPEJIT_OK,
                    shapejit_last_error());
    CHECK(api_out == out);
    CHECK(api_o2b == offset2bag);
    CHECK(api_bag == bag_size);
    CHECK(api_max == max_indices);
  }
  float out_f32(size_t i) const {
    float v;
    std::memcpy(&v, out.data() + 4 * i, 4);
    return v;
  }
  uint16_t out_u16(size_t i) const {
    uint16_t v;
    std::memcpy(&v, out.data() + 2 * i, 2);
    return v;
  }
};

template <class T>
void append(std::vector<unsigned char>& bytes, T v) {
  const size_t at = bytes.size();
  bytes.resize(at + sizeof v);
  std::memcpy(bytes.data() + at, &v, sizeof v);
}

// A Q8 row of codes then f32 scale and bias.
void q8_row(Bag& b, std::vector<uint8_t> codes, float scale, float bias) {
  for (uint8_t q : codes) b.table.push_back(q);
  append(b.table, scale);
  append(b.table, bias);
  b.table_dtype = SHAPEJIT_Q8;
  b.dim = int64_t(codes.size());
  b.row_stride = b.dim + 8;
  ++b.rows;
}

void f32_weights(Bag& b, std::vector<float> w) {
  for (float v : w) append(b.psw, v);
}

}  // namespace

TEST_CASE("dtype ref: the 8-bit step is torch 2.13's single fma (scale 16519105*2^-54, q 65, bias 1 -> 1.0000001)") {
  Bag b;
  const float scale = 16519105.0f * 0x1p-54f;
  q8_row(b, {65}, scale, 1.0f);
  b.indices = {0};
  b.offsets = {0};
  b.run();
  // fmaf rounds once from the exact value 1 + 2^-24 (1 + 2^-30) and gets the next float; torch
  // 1.13's double step (and a multiply, then an add) gave 1.0.
  CHECK(b.out_f32(0) == std::nextafter(1.0f, 2.0f));
  CHECK(b.out_f32(0) == std::fmaf(scale, 65.0f, 1.0f));
}

TEST_CASE("dtype ref: the weight scales scale and bias separately, and the bias is added first") {
  // Row 0: q 0, scale 1, bias 1e8. Row 1: q 1, scale 2, bias -2e8, weight 0.5: s = 1, b = -1e8.
  // acc = 1e8; t = f32(1e8 - 1e8) = 0; acc = 1 * 1 + 0 = 1. Adding the code first would give
  // f32(1e8 + 1) - 1e8 = 0; weighting scale * q + bias as a whole gives 0.5 * f32(2 - 2e8) + 1e8 = 0.
  Bag b;
  q8_row(b, {0}, 1.0f, 1e8f);
  q8_row(b, {1}, 2.0f, -2e8f);
  b.indices = {0, 1};
  b.offsets = {0};
  f32_weights(b, {1.0f, 0.5f});
  b.run();
  CHECK(b.out_f32(0) == 1.0f);
}

TEST_CASE("dtype ref: Q4 and Q2 code order (even code = low nibble, code 0 = lowest crumb)") {
  Bag q4;
  q4.table = {0x21, 0x43};
  append(q4.table, f32_to_f16(1.0f));
  append(q4.table, f32_to_f16(0.5f));
  q4.table_dtype = SHAPEJIT_Q4;
  q4.rows = 1;
  q4.dim = 4;
  q4.row_stride = 6;
  q4.indices = {0};
  q4.offsets = {0};
  q4.run();
  for (size_t j = 0; j < 4; ++j) CHECK(q4.out_f32(j) == float(j + 1) + 0.5f);

  Bag q2;
  q2.table = {0xE4};  // 0b11'10'01'00: codes 0, 1, 2, 3
  append(q2.table, f32_to_f16(2.0f));
  append(q2.table, f32_to_f16(-1.0f));
  q2.table_dtype = SHAPEJIT_Q2;
  q2.rows = 1;
  q2.dim = 4;
  q2.row_stride = 5;  // a 2-bit row of D = 4 is 5 bytes: its trailer is unaligned
  q2.indices = {0};
  q2.offsets = {0};
  q2.run();
  for (size_t j = 0; j < 4; ++j) CHECK(q2.out_f32(j) == 2.0f * float(j) - 1.0f);
}

TEST_CASE("dtype ref: f16 mean rounds the count to f16 (2049 -> 2048)") {
  // Row 0 = 1, row 1 = 0; one 1 and 2048 zeros: mean = 1 / rnd16(2049) = 1 / 2048 = 2^-11 exactly
  // (1 / 2049 would give another f16).
  Bag b;
  append(b.table, f32_to_f16(1.0f));
  append(b.table, f32_to_f16(0.0f));
  b.table_dtype = SHAPEJIT_F16;
  b.out_dtype = SHAPEJIT_F16;
  b.psw_dtype = SHAPEJIT_F16;
  b.rows = 2;
  b.dim = 1;
  b.row_stride = 1;
  b.indices.assign(2049, 1);
  b.indices[0] = 0;
  b.offsets = {0};
  b.mode = SHAPEJIT_MEAN;
  b.run();
  CHECK(b.bag_size[0] == 2049);
  CHECK(b.out_u16(0) == f32_to_f16(0x1p-11f));
  CHECK(f32_to_f16(1.0f / 2049.0f) != f32_to_f16(0x1p-11f));
}

TEST_CASE("dtype ref: f16 sums accumulate in f32 and overflow to inf only at the end") {
  Bag b;
  append(b.table, f32_to_f16(40000.0f));
  append(b.table, f32_to_f16(-30000.0f));
  b.table_dtype = SHAPEJIT_F16;
  b.out_dtype = SHAPEJIT_F16;
  b.psw_dtype = SHAPEJIT_F16;
  b.rows = 2;
  b.dim = 1;
  b.row_stride = 1;
  b.indices = {0, 0, 0, 0, 1};
  // Bags {40000, 40000} -> inf; {40000, 40000, -30000} -> 50000 in the f32 accumulator, rounded
  // once to 49984 (rounding each step to f16 would overflow at 80000).
  b.offsets = {0, 2};
  b.run();
  CHECK(b.out_u16(0) == 0x7C00);
  CHECK(b.out_u16(1) == f32_to_f16(50000.0f));
  CHECK(f16_to_f32(b.out_u16(1)) == 49984.0f);
}

TEST_CASE("dtype ref: bf16 mean rounds the count to bf16 above 256 (257 -> 256); sums round once") {
  Bag b;
  append(b.table, f32_to_bf16(1.0f));
  append(b.table, f32_to_bf16(0.0f));
  b.table_dtype = SHAPEJIT_BF16;
  b.out_dtype = SHAPEJIT_BF16;
  b.psw_dtype = SHAPEJIT_BF16;
  b.rows = 2;
  b.dim = 1;
  b.row_stride = 1;
  b.indices.assign(257, 1);
  b.indices[0] = 0;
  b.offsets = {0};
  b.mode = SHAPEJIT_MEAN;
  b.run();
  CHECK(b.out_u16(0) == f32_to_bf16(0x1p-8f));
  // Weighted: w * x is exact in f32 and the sum rounds once: 1 + 2^-9 + 2^-9 = 1 + 2^-8, a tie
  // that rounds to even (1.0) in bf16; rounding each step would keep 1.0 too, so check the f32
  // accumulator with 3 terms whose rounded partial sums differ: 1 + 2^-8 + 2^-8 -> 1 + 2^-7.
  Bag w;
  append(w.table, f32_to_bf16(1.0f));
  append(w.table, f32_to_bf16(0x1p-8f));
  w.table_dtype = w.out_dtype = w.psw_dtype = SHAPEJIT_BF16;
  w.rows = 2;
  w.dim = 1;
  w.row_stride = 1;
  w.indices = {0, 1, 1};
  w.offsets = {0};
  for (float v : {1.0f, 1.0f, 1.0f}) append(w.psw, f32_to_bf16(v));
  w.run();
  CHECK(bf16_to_f32(w.out_u16(0)) == 1.0f + 0x1p-7f);  // per-step bf16 rounding would give 1.0
}

// The values torch 2.13 prints for the reproducers of quantized-tables-semantics.md section 11.
TEST_CASE("dtype ref: bf16 follows H6, torch 2.13's two paths (FBGEMM without padding_idx, ATen's loop with it)") {
  const auto bf16_bag = [](std::vector<float> rows, std::vector<int64_t> indices) {
    Bag b;
    for (float v : rows) append(b.table, f32_to_bf16(v));
    b.table_dtype = b.out_dtype = b.psw_dtype = SHAPEJIT_BF16;
    b.rows = int64_t(rows.size());
    b.dim = b.row_stride = 1;
    b.indices = std::move(indices);
    b.offsets = {0};
    return b;
  };
  const std::vector<float> tie_rows = {1.0f, 0x1p-8f, 0.0f};
  Bag sum = bf16_bag(tie_rows, {0, 1});  // 1 + 2^-8: a bf16 tie
  sum.run();
  CHECK(sum.out_u16(0) == 0x3F81);  // half up: 1 + 2^-7 (to nearest even would give 1.0)
  Bag padded = bf16_bag(tie_rows, {0, 1});
  padded.padding_idx = 2;
  padded.run();
  CHECK(padded.out_u16(0) == 0x3F80);  // 1.0
  Bag mean = bf16_bag(tie_rows, {0, 1, 2});
  mean.mode = SHAPEJIT_MEAN;
  mean.run();
  CHECK(bf16_to_f32(mean.out_u16(0)) == 0.3359375f);  // bu(1 + 2^-8) / 3 to nearest even
  Bag padded_mean = bf16_bag(tie_rows, {0, 1});
  padded_mean.mode = SHAPEJIT_MEAN;
  padded_mean.padding_idx = 2;
  padded_mean.run();
  CHECK(bf16_to_f32(padded_mean.out_u16(0)) == 0.5f);
  // Weighted: -inf + 2^100 * 2^100 is fused without padding_idx (-inf), the product overflows
  // first with it (-inf + inf = NaN).
  const std::vector<float> big_rows = {-INFINITY, 0x1p100f, 0.0f};
  for (bool with_padding : {false, true}) {
    Bag w = bf16_bag(big_rows, {0, 1});
    for (float v : {1.0f, 0x1p100f}) append(w.psw, f32_to_bf16(v));
    if (with_padding) w.padding_idx = 2;
    w.run();
    const float got = bf16_to_f32(w.out_u16(0));
    if (with_padding) CHECK(std::isnan(got));
    else CHECK(got == -INFINITY);
  }
}

TEST_CASE("dtype ref: pruned tables skip -1, count what remains, report the index as given") {
  // Rows: r0 = {1}, r1 = {5} (Q8: q 1 and 5, scale 1, bias 0). Mapping: index 0 -> pruned,
  // 1 -> r1, 2 -> r0.
  Bag b;
  q8_row(b, {1}, 1.0f, 0.0f);
  q8_row(b, {5}, 1.0f, 0.0f);
  b.pruned = true;
  b.mapping = {-1, 1, 0};
  b.indices = {0, 1, 2, 2, 0, 0};
  b.offsets = {0, 4};  // bags {pruned, r1, r0, r0} and {pruned, pruned}
  b.mode = SHAPEJIT_MEAN;
  b.run();
  CHECK(b.out_f32(0) == 7.0f / 3.0f);
  CHECK(b.bag_size[0] == 3);
  CHECK(b.out_f32(1) == 0.0f);
  CHECK_FALSE(std::signbit(b.out_f32(1)));
  CHECK(b.bag_size[1] == 0);
  b.mode = SHAPEJIT_MAX;
  b.run();
  CHECK(b.out_f32(0) == 5.0f);
  CHECK(b.max_indices[0] == 1);  // the index as given, not the row (1 here too) ...
  b.mapping = {-1, 0, 1};        // ... so swap the mapping: r1 is now reached by index 2
  b.run();
  CHECK(b.max_indices[0] == 2);
}

TEST_CASE("dtype ref: padding_idx names the index as given, before the mapping") {
  Bag b;
  q8_row(b, {3}, 1.0f, 0.0f);
  b.pruned = true;
  b.mapping = {0, 0, 0};  // every index reads row 0
  b.padding_idx = 1;
  b.indices = {0, 1, 2};
  b.offsets = {0};
  b.mode = SHAPEJIT_MEAN;
  b.run();
  CHECK(b.bag_size[0] == 2);  // index 1 pads although indices 0 and 2 read the same row
  CHECK(b.out_f32(0) == 3.0f);
  b.padding_idx = -1;  // wraps by the mapping's 3 entries: index 2
  b.indices = {2, 2, 1};
  b.run();
  CHECK(b.bag_size[0] == 1);
}

TEST_CASE("dtype ref: offsets as lengths ([1, 3] over 4 indices: bags {0, 1} and {2})") {
  Bag b;
  for (uint8_t q : {1, 2, 4, 8}) q8_row(b, {q}, 1.0f, 0.0f);
  b.indices = {0, 1, 2, 3};
  b.offsets = {1, 3};
  b.lengths = true;
  b.mode = SHAPEJIT_MEAN;
  b.run();
  CHECK(b.out_f32(0) == 1.5f);  // (1 + 2) / 2
  CHECK(b.out_f32(1) == 4.0f);  // bag 1 takes N - offsets[1] = 1 position: {2}
  CHECK(b.offset2bag == std::vector<int64_t>{0, 0, 1, 2});  // position 3 is in no bag: B
  // A negative length is an empty bag that consumes nothing; include_last_offset ignores the rest.
  b.offsets = {5, 3, 4, 5};
  b.include_last_offset = true;
  b.mode = SHAPEJIT_SUM;
  b.run();
  CHECK(b.out_f32(0) == 0.0f);
  CHECK(b.out_f32(1) == 1.0f);  // position 0
  CHECK(b.out_f32(2) == 2.0f);  // position 1
}

TEST_CASE("dtype ref: quantized f16/bf16 outputs are the f32 result rounded once; mean and max") {
  Bag b;
  q8_row(b, {1, 200}, 0.1f, 0.3f);
  q8_row(b, {3, 100}, 0.1f, 0.3f);
  b.indices = {0, 1};
  b.offsets = {0};
  b.run();
  const float s0 = b.out_f32(0), s1 = b.out_f32(1);
  b.out_dtype = SHAPEJIT_F16;
  b.run();
  CHECK(b.out_u16(0) == f32_to_f16(s0));
  CHECK(b.out_u16(1) == f32_to_f16(s1));
  b.out_dtype = SHAPEJIT_BF16;
  b.mode = SHAPEJIT_MEAN;
  b.run();
  CHECK(b.out_u16(0) == f32_to_bf16(s0 / 2.0f));
  b.out_dtype = SHAPEJIT_F32;
  b.mode = SHAPEJIT_MAX;
  b.run();
  // The dequantized element: f32(f64(scale) * q + f64(0 + bias)).
  CHECK(b.out_f32(0) == float(double(0.1f) * 3 + double(0.3f)));
  CHECK(b.max_indices[0] == 1);
  CHECK(b.out_f32(1) == float(double(0.1f) * 200 + double(0.3f)));
  CHECK(b.max_indices[1] == 0);
}

TEST_CASE("dtype ref: the C++ API runs every dtype and widens outputs exactly to f32") {
  Bag b;
  q8_row(b, {1, 2}, 0.5f, 0.0f);
  shapejit::EmbeddingBagCall call;
  call.weight = {b.table.data(), shapejit::DType::kQ8, 1, 2, 0};  // row_stride 0: packed rows
  const std::vector<int64_t> indices{0, 0}, offsets{0};
  call.indices = indices;
  call.offsets = offsets;
  call.output_dtype = shapejit::DType::kBF16;
  const shapejit::EmbeddingBagResult r = shapejit::embedding_bag(call);
  CHECK(r.output == std::vector<float>{1.0f, 2.0f});
  CHECK(shapejit::embedding_bag_output_shapes(call).output_cols == 2);
}

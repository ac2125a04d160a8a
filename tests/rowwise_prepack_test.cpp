// Rowwise prepack and unpack (docs/quantized-tables-semantics.md, §5): rows whose
// bytes are worked out by hand (ties, NaN and -0.0 at element 0, constant rows, ranges that
// overflow, D = 0), the search that torch never finishes, round trips, and every argument rule
// with dst left untouched. The byte-for-byte comparison with torch is
// python/tests/test_rowwise_prepack_oracle.py.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ref/float16.hpp"
#include "ref/rowwise_quantize.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"

namespace {

using shapejit::DType;
using shapejit::ref::f16_to_f32;
using shapejit::ref::f32_bits;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<uint8_t> pack(DType q, const std::vector<float>& row, shapejit::RowwisePrepackOptions o = {}) {
  return shapejit::rowwise_prepack(q, row.data(), DType::kF32, 1, int64_t(row.size()), 0, o);
}

float f32_at(const std::vector<uint8_t>& b, size_t at) {
  float v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}

uint16_t u16_at(const std::vector<uint8_t>& b, size_t at) {
  uint16_t v;
  std::memcpy(&v, b.data() + at, 2);
  return v;
}

shapejit_rowwise_prepack_args c_args(shapejit_dtype q, const float* src, int64_t rows, int64_t dim) {
  shapejit_rowwise_prepack_args a{};
  a.qtype = q;
  a.src = src;
  a.src_dtype = SHAPEJIT_F32;
  a.rows = rows;
  a.dim = dim;
  a.src_row_stride = dim;
  a.nbins = 200;
  a.ratio = 0.16f;
  return a;
}

// A C call that must fail with INVALID_ARGUMENT, a message holding `needle`, and dst untouched.
template <class Call>
void check_rejected(Call call, std::vector<uint8_t>& dst, const std::string& needle) {
  std::fill(dst.begin(), dst.end(), uint8_t(0xA5));
  CHECK(call() == SHAPEJIT_INVALID_ARGUMENT);
  const std::string message = shapejit_last_error();
  CAPTURE(message);
  CHECK(message.find(needle) != std::string::npos);
  for (uint8_t b : dst) REQUIRE(b == 0xA5);
}

}  // namespace

TEST_CASE("rowwise: row sizes") {
  CHECK(shapejit_rowwise_row_bytes(SHAPEJIT_Q8, 10) == 18);
  CHECK(shapejit_rowwise_row_bytes(SHAPEJIT_Q4, 10) == 9);
  CHECK(shapejit_rowwise_row_bytes(SHAPEJIT_Q2, 10) == 7);  // ceil(10 / 4) + 4
  CHECK(shapejit_rowwise_row_bytes(SHAPEJIT_Q2, 0) == 4);
  CHECK(shapejit_rowwise_row_bytes(SHAPEJIT_F32, 10) == -1);
  CHECK(shapejit_rowwise_row_bytes(SHAPEJIT_Q8, -1) == -1);
  CHECK(shapejit_rowwise_row_bytes(SHAPEJIT_Q8, INT64_MAX) == -1);
  CHECK(shapejit::rowwise_row_bytes(DType::kQ4, 300) == 154);
  CHECK_THROWS_AS(shapejit::rowwise_row_bytes(DType::kF16, 4), shapejit::Error);
}

TEST_CASE("rowwise: lrintf as torch's x86 build runs it") {
  using shapejit::ref::lrintf_x86;
  CHECK(lrintf_x86(0.5f) == 0);
  CHECK(lrintf_x86(1.5f) == 2);
  CHECK(lrintf_x86(2.5f) == 2);
  CHECK(lrintf_x86(-0.5f) == 0);
  CHECK(lrintf_x86(-1.5f) == -2);
  CHECK(lrintf_x86(8388609.0f) == 8388609);
  CHECK(lrintf_x86(1e18f) == int64_t(1e18f));
  CHECK(lrintf_x86(kNaN) == INT64_MIN);
  CHECK(lrintf_x86(9.3e18f) == INT64_MIN);
  CHECK(lrintf_x86(-9.3e18f) == INT64_MIN);
  CHECK(lrintf_x86(kInf) == INT64_MIN);
}

TEST_CASE("rowwise: 8-bit rows by hand") {
  SUBCASE("range 255 makes the inverse 1: ties go to even, -0.0 after +0.0 is not a new minimum") {
    const auto b = pack(DType::kQ8, {0.0f, 255.0f, 126.5f, 127.5f, 0.5f, 1.5f, -0.0f});
    CHECK(std::vector<uint8_t>(b.begin(), b.begin() + 7) == std::vector<uint8_t>{0, 255, 126, 128, 0, 2, 0});
    CHECK(f32_at(b, 7) == 1.0f);                   // scale 255 / 255
    CHECK(f32_bits(f32_at(b, 11)) == 0u);          // bias +0.0, the first minimum
  }
  SUBCASE("-0.0 at element 0 is the bias; 1 + 1e-8 is 1 in f32") {
    const auto b = pack(DType::kQ8, {-0.0f, 0.0f, 2.0f, 1.0f});
    CHECK(std::vector<uint8_t>(b.begin(), b.begin() + 4) == std::vector<uint8_t>{0, 0, 255, 128});  // 127.5 -> 128
    CHECK(f32_at(b, 4) == 2.0f / 255.0f);
    CHECK(f32_bits(f32_at(b, 8)) == 0x80000000u);
  }
  SUBCASE("a NaN never wins FBGEMM's min/max (torch 2.13): the range of the others, code 0 for it") {
    // pip torch 2.13 packs {NaN, 1, 2} as codes 0, 0, 255, scale 1/255, bias 1 (1.13 took the
    // NaN at element 0 as both minimum and maximum).
    const float nan_payload = shapejit::ref::f32_from_bits(0x7FC01234u);
    const auto b = pack(DType::kQ8, {nan_payload, 1.0f, 2.0f});
    CHECK(std::vector<uint8_t>(b.begin(), b.begin() + 3) == std::vector<uint8_t>{0, 0, 255});
    CHECK(f32_at(b, 3) == 1.0f / 255.0f);
    CHECK(f32_at(b, 7) == 1.0f);
  }
  SUBCASE("a NaN elsewhere is never picked and codes 0") {
    const auto b = pack(DType::kQ8, {1.0f, kNaN, 3.0f});
    CHECK(std::vector<uint8_t>(b.begin(), b.begin() + 3) == std::vector<uint8_t>{0, 0, 255});
    CHECK(f32_at(b, 7) == 1.0f);
  }
  SUBCASE("constant row: scale 0, codes 0") {
    const auto b = pack(DType::kQ8, {5.0f, 5.0f, 5.0f});
    CHECK(std::vector<uint8_t>(b.begin(), b.begin() + 3) == std::vector<uint8_t>{0, 0, 0});
    CHECK(f32_bits(f32_at(b, 3)) == 0u);
    CHECK(f32_at(b, 7) == 5.0f);
  }
  SUBCASE("an infinite range: scale inf, inverse 0, inf * 0 = NaN codes as 0") {
    const auto b = pack(DType::kQ8, {-3e38f, 3e38f, kInf});
    CHECK(std::vector<uint8_t>(b.begin(), b.begin() + 3) == std::vector<uint8_t>{0, 0, 0});
    CHECK(f32_at(b, 3) == kInf);
    CHECK(f32_at(b, 7) == -3e38f);
  }
}

TEST_CASE("rowwise: 4-bit and 2-bit rows by hand") {
  SUBCASE("4-bit: range 15 gives scale 1; even elements in the low nibble") {
    const auto b = pack(DType::kQ4, {0.0f, 15.0f, 7.5f, 8.5f});
    REQUIRE(b.size() == 6);
    CHECK(b[0] == 0xF0);  // codes 0, 15
    CHECK(b[1] == 0x88);  // codes 8 (7.5 ties to even), 8 (8.5 ties to even)
    CHECK(u16_at(b, 2) == 0x3C00);
    CHECK(u16_at(b, 4) == 0x0000);
  }
  SUBCASE("2-bit: element j%4 == 0 in the lowest two bits") {
    const auto b = pack(DType::kQ2, {0.0f, 3.0f, 1.5f, 2.5f, 0.5f, 1.0f, 2.0f, 3.0f});
    REQUIRE(b.size() == 6);
    CHECK(b[0] == 0xAC);  // codes 0, 3, 2, 2
    CHECK(b[1] == 0xE4);  // codes 0, 1, 2, 3
    CHECK(u16_at(b, 2) == 0x3C00);
  }
  SUBCASE("constant row: range 0 takes scale 1") {
    const auto b = pack(DType::kQ4, {5.0f, 5.0f});
    CHECK(b[0] == 0);
    CHECK(u16_at(b, 1) == 0x3C00);
    CHECK(u16_at(b, 3) == 0x4500);  // f16 5.0
  }
  SUBCASE("a min below -65504 rounds to -inf in f16: scale inf, codes from NaN are 0") {
    const auto b = pack(DType::kQ4, {-70000.0f, 0.0f});
    CHECK(b[0] == 0);
    CHECK(u16_at(b, 1) == 0x7C00);
    CHECK(u16_at(b, 3) == 0xFC00);
  }
  SUBCASE("a scale that rounds to 0 in f16 becomes 1") {
    const auto b = pack(DType::kQ4, {0.0f, 1e-8f});
    CHECK(b[0] == 0);
    CHECK(u16_at(b, 1) == 0x3C00);
    CHECK(u16_at(b, 3) == 0x0000);
  }
  SUBCASE("NaN at element 0 never wins FBGEMM's min/max (torch 2.13: scale 1, bias 1, code 0)") {
    const auto b = pack(DType::kQ4, {-shapejit::ref::f32_from_bits(0x7FC12345u), 1.0f});
    CHECK(b[0] == 0);
    CHECK(u16_at(b, 1) == 0x3C00);
    CHECK(u16_at(b, 3) == 0x3C00);
  }
}

TEST_CASE("rowwise: D = 0 rows hold the scale and bias of an all-zero row") {
  const auto q8 = shapejit::rowwise_prepack(DType::kQ8, nullptr, DType::kF32, 2, 0);
  REQUIRE(q8.size() == 16);
  CHECK(f32_bits(f32_at(q8, 8)) == 0u);  // scale 0 / 255
  CHECK(f32_bits(f32_at(q8, 12)) == 0u);
  const auto q2 = shapejit::rowwise_prepack(DType::kQ2, nullptr, DType::kF16, 1, 0);
  REQUIRE(q2.size() == 4);
  CHECK(u16_at(q2, 0) == 0x3C00);
  CHECK(u16_at(q2, 2) == 0x0000);
  CHECK(shapejit::rowwise_unpack(DType::kQ8, q8.data(), 2, 0).empty());
}

TEST_CASE("rowwise: optimized_qparams") {
  SUBCASE("the search never ends in torch on [1e8, 1e8+56, 1e8+8, 1e8]: rejected, nothing written") {
    const std::vector<float> rows = {1.0f, 2.0f, 3.0f, 4.0f, 1e8f, 1e8f + 56.0f, 1e8f + 8.0f, 1e8f};
    for (shapejit_dtype q : {SHAPEJIT_Q4, SHAPEJIT_Q2}) {
      std::vector<uint8_t> dst(size_t(2 * shapejit_rowwise_row_bytes(q, 4)));
      shapejit_rowwise_prepack_args a = c_args(q, rows.data(), 2, 4);
      a.optimized_qparams = 1;
      check_rejected([&] { return shapejit_rowwise_prepack(&a, dst.data()); }, dst, "row 1 cannot be packed");
      CHECK(std::string(shapejit_last_error()).find("never ends") != std::string::npos);
      a.optimized_qparams = 0;  // plain packing is fine
      CHECK(shapejit_rowwise_prepack(&a, dst.data()) == SHAPEJIT_OK);
    }
  }
  SUBCASE("nbins = 1: the one move cannot record a window, so the result is the plain one") {
    const std::vector<float> row = {0.0f, 0.3f, 0.5f, 9.0f, -2.0f, 1.0f};
    CHECK(pack(DType::kQ4, row, {true, 1, 0.16f}) == pack(DType::kQ4, row));
  }
  SUBCASE("an outlier is clipped, and the squared error never exceeds the plain packing's") {
    std::mt19937 gen(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> row(64);
      for (float& v : row) v = normal(gen);
      row[5] = 40.0f;
      for (DType q : {DType::kQ4, DType::kQ2}) {
        auto error = [&](const std::vector<uint8_t>& packed) {
          const auto back = shapejit::rowwise_unpack(q, packed.data(), 1, 64);
          float sum = 0.0f;
          for (size_t j = 0; j < row.size(); ++j) sum += (back[j] - row[j]) * (back[j] - row[j]);
          return sum;
        };
        const auto plain = pack(q, row), optimized = pack(q, row, {true, 200, 0.16f});
        CHECK(error(optimized) <= error(plain));
        CHECK(plain != optimized);
      }
    }
  }
}

TEST_CASE("rowwise: optimized_qparams keeps min_bins a float (torch 2.13)") {
  // nbins 60, ratio 0.2f: torch 2.13's min_bins is 48.0, 1.13 truncated 60 * (1 - 0.2f) =
  // 47.9999998 to 47, so the searches' thresholds differ; on this row they choose different
  // windows (bytes from pip torch 2.13; 1.13's rule gives {113, 141, 150, 57, 57, 0, 190}).
  const std::vector<float> row = {-1.125f, -1.75f, 0.75f,  -0.625f, -0.625f, 0.25f,
                                  -1.25f,  -0.375f, -0.125f, -1.0f,   -0.875f, -0.125f};
  CHECK(pack(DType::kQ2, row, {true, 60, 0.2f}) == std::vector<uint8_t>{113, 141, 150, 114, 57, 43, 190});
}

TEST_CASE("rowwise: f16 input is widened exactly, strides are honoured, unpack inverts within a step") {
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t rows = 5, dim = 24, stride = 29;
  std::vector<uint16_t> half(size_t(rows * stride), 0x7E00);  // NaN in the gaps: never read
  std::vector<float> widened(size_t(rows * dim)), strided(size_t(rows * stride), kNaN);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < dim; ++j) {
      const uint16_t h = shapejit::ref::f32_to_f16(normal(gen) + float(r));
      half[size_t(r * stride + j)] = h;
      widened[size_t(r * dim + j)] = strided[size_t(r * stride + j)] = f16_to_f32(h);
    }
  for (DType q : {DType::kQ8, DType::kQ4, DType::kQ2}) {
    CAPTURE(int(q));
    const auto dense = shapejit::rowwise_prepack(q, widened.data(), DType::kF32, rows, dim);
    CHECK(shapejit::rowwise_prepack(q, half.data(), DType::kF16, rows, dim, stride) == dense);
    CHECK(shapejit::rowwise_prepack(q, strided.data(), DType::kF32, rows, dim, stride) == dense);
    const int64_t row_bytes = shapejit::rowwise_row_bytes(q, dim);
    const auto back = shapejit::rowwise_unpack(q, dense.data(), rows, dim);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* tail = dense.data() + r * row_bytes + (row_bytes - (q == DType::kQ8 ? 8 : 4));
      float scale, bias;
      if (q == DType::kQ8) {
        std::memcpy(&scale, tail, 4);
        std::memcpy(&bias, tail + 4, 4);
      } else {
        uint16_t s, b;
        std::memcpy(&s, tail, 2);
        std::memcpy(&b, tail + 2, 2);
        scale = f16_to_f32(s);
        bias = f16_to_f32(b);
      }
      float lo = kInf, hi = -kInf;
      for (int64_t j = 0; j < dim; ++j) lo = std::min(lo, widened[size_t(r * dim + j)]), hi = std::max(hi, widened[size_t(r * dim + j)]);
      // Half a step, plus the f16 rounding of the bias and of the scale (which can pull the top code down).
      const float bound = 0.5f * scale + std::fabs(lo - bias) + (hi - lo) / 1024.0f + 1e-5f;
      for (int64_t j = 0; j < dim; ++j) {
        CAPTURE(r);
        CAPTURE(j);
        CHECK(std::fabs(back[size_t(r * dim + j)] - widened[size_t(r * dim + j)]) <= bound);
      }
    }
  }
}

TEST_CASE("rowwise: unpack is fmaf(code, scale, bias) (torch 2.13) and honours row_bytes") {
  // One 4-bit row, D = 4: codes 1, 2, 15, 0; scale 0.5, bias -1 (f16), padded to 8 bytes per row.
  const std::vector<uint8_t> rows = {0x21, 0x0F, 0x00, 0x38, 0x00, 0xBC, 0xEE, 0xEE};
  const auto back = shapejit::rowwise_unpack(DType::kQ4, rows.data(), 1, 4, 8);
  CHECK(back == std::vector<float>{-0.5f, 0.0f, 6.5f, -1.0f});
  // 8-bit: 65 * 16519105 * 2^-54 + 1 rounds once (one fma) to 1 + 2^-23; a multiply rounding the
  // product first (torch 1.13's unpack) gives 1.0.
  std::vector<uint8_t> q8 = {65, 0, 0, 0, 0, 0, 0, 0, 0};
  const float scale = std::ldexp(16519105.0f, -54), bias = 1.0f;
  std::memcpy(q8.data() + 1, &scale, 4);
  std::memcpy(q8.data() + 5, &bias, 4);
  const volatile float product = 65.0f * scale;
  CHECK(product + bias == 1.0f);
  CHECK(f32_bits(shapejit::rowwise_unpack(DType::kQ8, q8.data(), 1, 1)[0]) == f32_bits(std::nextafter(1.0f, 2.0f)));
}

TEST_CASE("rowwise: prepack argument rules; nothing is written on error") {
  const std::vector<float> src(64, 1.0f);
  std::vector<uint8_t> dst(256);
  auto reject = [&](shapejit_rowwise_prepack_args a, const std::string& needle, void* out = nullptr) {
    CAPTURE(needle);
    check_rejected([&] { return shapejit_rowwise_prepack(&a, out ? out : dst.data()); }, dst, needle);
  };
  const shapejit_rowwise_prepack_args ok = c_args(SHAPEJIT_Q4, src.data(), 2, 8);
  REQUIRE(shapejit_rowwise_prepack(&ok, dst.data()) == SHAPEJIT_OK);
  CHECK(shapejit_rowwise_prepack(nullptr, dst.data()) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()) == "rowwise_prepack: args must not be null");

  auto a = ok;
  a.qtype = SHAPEJIT_F32;
  reject(a, "qtype must be Q8 (5), Q4 (6) or Q2 (7), but got float32 (0)");
  std::memset(&a.qtype, 0x7F, sizeof a.qtype);  // any int a C caller may store
  reject(a, "but got unknown (2139062143)");
  a = ok, a.src_dtype = SHAPEJIT_BF16;
  reject(a, "src_dtype must be float32 or float16");
  a = ok, a.rows = -1;
  reject(a, "rows must be >= 0, but got -1");
  a = ok, a.dim = -4, a.src_row_stride = 0;
  reject(a, "dim must be >= 0, but got -4");
  a = ok, a.dim = 3, a.src_row_stride = 3;
  reject(a, "dim must be a multiple of 2 for Q4");
  a = ok, a.qtype = SHAPEJIT_Q2, a.dim = 6, a.src_row_stride = 6;
  reject(a, "dim must be a multiple of 4 for Q2");
  a = ok, a.src_row_stride = 7;
  reject(a, "src_row_stride must be >= dim (8), but got 7");
  a = ok, a.qtype = SHAPEJIT_Q8, a.optimized_qparams = 1;
  reject(a, "optimized_qparams applies to Q4 and Q2 only");
  a = ok, a.optimized_qparams = 1, a.nbins = 0;
  reject(a, "nbins must be in [1, 2^31 - 1], but got 0");
  a = ok, a.optimized_qparams = 1, a.ratio = 1.5f;
  reject(a, "ratio must be in [0, 1], but got 1.5");
  a.ratio = kNaN;
  reject(a, "ratio must be in [0, 1], but got nan");
  a = ok, a.nbins = 0, a.ratio = kNaN;  // ignored without the search
  CHECK(shapejit_rowwise_prepack(&a, dst.data()) == SHAPEJIT_OK);
  a = ok, a.rows = INT64_MAX / 4;
  reject(a, "whose byte count overflows int64");
  a = ok, a.src_row_stride = INT64_MAX / 2;
  reject(a, "src spans 2 rows");
  a = ok, a.src = nullptr;
  reject(a, "src is null but has 2 rows of 8 values");
  a = ok;
  CHECK(shapejit_rowwise_prepack(&a, nullptr) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("dst is null but must receive 16 bytes") != std::string::npos);
  a = ok, a.src = reinterpret_cast<const uint8_t*>(src.data()) + 2;
  reject(a, "is not aligned to 4 bytes");
  a = ok, a.src_dtype = SHAPEJIT_F16, a.src = reinterpret_cast<const uint8_t*>(src.data()) + 1;
  reject(a, "is not aligned to 2 bytes");
  // dst inside the source table.
  std::vector<float> shared(64, 2.0f);
  a = c_args(SHAPEJIT_Q8, shared.data(), 2, 8);
  const std::vector<float> before = shared;
  CHECK(shapejit_rowwise_prepack(&a, shared.data() + 4) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("overlaps src") != std::string::npos);
  CHECK(std::memcmp(before.data(), shared.data(), 64 * 4) == 0);
  // Zero rows need no pointers at all.
  a = c_args(SHAPEJIT_Q2, nullptr, 0, 8);
  CHECK(shapejit_rowwise_prepack(&a, nullptr) == SHAPEJIT_OK);
  // The C++ API throws the same rule.
  CHECK_THROWS_WITH_AS(shapejit::rowwise_prepack(DType::kQ4, src.data(), DType::kF32, 1, 5),
                       doctest::Contains("dim must be a multiple of 2"), shapejit::Error);
}

TEST_CASE("rowwise: unpack argument rules; nothing is written on error") {
  const auto packed = shapejit::rowwise_prepack(DType::kQ2, std::vector<float>(16, 1.0f).data(), DType::kF32, 2, 8);
  std::vector<uint8_t> dst(64 + 4);
  float* out = reinterpret_cast<float*>(dst.data());
  auto reject = [&](shapejit_dtype q, const void* src, int64_t rows, int64_t dim, int64_t row_bytes, float* to,
                    const std::string& needle) {
    CAPTURE(needle);
    check_rejected([&] { return shapejit_rowwise_unpack(q, src, rows, dim, row_bytes, to); }, dst, needle);
  };
  REQUIRE(shapejit_rowwise_unpack(SHAPEJIT_Q2, packed.data(), 2, 8, 6, out) == SHAPEJIT_OK);
  reject(SHAPEJIT_I64, packed.data(), 2, 8, 6, out, "qtype must be Q8");
  reject(SHAPEJIT_Q2, packed.data(), 2, 6, 6, out, "dim must be a multiple of 4 for Q2");
  reject(SHAPEJIT_Q2, packed.data(), -2, 8, 6, out, "rows must be >= 0");
  reject(SHAPEJIT_Q2, packed.data(), 2, 8, 5, out, "row_bytes must be >= the packed row size 6 (dim 8), but got 5");
  reject(SHAPEJIT_Q2, nullptr, 2, 8, 6, out, "src is null but has 2 rows");
  reject(SHAPEJIT_Q2, packed.data(), 2, 8, 6, nullptr, "dst is null but must receive 64 bytes");
  reject(SHAPEJIT_Q2, packed.data(), 2, 8, 6, reinterpret_cast<float*>(dst.data() + 2), "is not aligned to 4 bytes");
  reject(SHAPEJIT_Q2, packed.data(), 2, 8, INT64_MAX - 2, out, "src spans 2 rows");
  // dst over the packed rows themselves.
  std::vector<uint8_t> shared(packed);
  shared.resize(128);
  CHECK(shapejit_rowwise_unpack(SHAPEJIT_Q2, shared.data(), 2, 8, 6, reinterpret_cast<float*>(shared.data() + 8)) ==
        SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("overlaps src") != std::string::npos);
  CHECK(std::equal(packed.begin(), packed.end(), shared.begin()));
  CHECK(shapejit_rowwise_unpack(SHAPEJIT_Q8, nullptr, 0, 8, 16, nullptr) == SHAPEJIT_OK);
}

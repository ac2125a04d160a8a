// One test per validation rule: the status, a message naming the argument and the value, and
// every output buffer byte-for-byte unchanged (all outputs are pre-filled with a sentinel).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "runtime/engine/c_enum.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"
#include "support/prepared_embag.hpp"

namespace {

constexpr unsigned char kSentinel = 0xA5;
constexpr size_t kOutBytes = 1 << 16;

// A small valid call (4 rows x 3 cols, 6 int64 indices, 3 bags) that each test then breaks.
struct Fixture {
  std::vector<float> weight = std::vector<float>(4 * 5, 1.0f);
  std::vector<int64_t> indices{0, 1, 2, 3, 1, 2};
  std::vector<int32_t> indices32{0, 1, 2, 3, 1, 2};
  std::vector<int64_t> offsets{0, 2, 4};
  std::vector<int32_t> offsets32{0, 2, 4};
  std::vector<float> psw = std::vector<float>(6, 0.5f);
  std::vector<unsigned char> out, o2b, bag, maxi;
  shapejit_embedding_bag_args a{};

  Fixture() {
    a.weight = weight.data();
    a.weight_dtype = SHAPEJIT_F32;
    a.num_rows = 4;
    a.dim = 3;
    a.row_stride = 5;
    a.indices = indices.data();
    a.index_dtype = SHAPEJIT_I64;
    a.num_indices = 6;
    a.offsets = offsets.data();
    a.offset_dtype = SHAPEJIT_I64;
    a.num_offsets = 3;
    a.mode = SHAPEJIT_MEAN;
    for (auto* v : {&out, &o2b, &bag, &maxi}) v->assign(kOutBytes, kSentinel);
  }
  shapejit_status run() { return shapejit_embedding_bag(&a, out.data(), o2b.data(), bag.data(), maxi.data()); }
  bool outputs_untouched() const {
    for (auto* v : {&out, &o2b, &bag, &maxi})
      for (unsigned char c : *v)
        if (c != kSentinel) return false;
    return true;
  }
};

// Runs the broken call and checks status, that the message contains every fragment, and that no
// output changed; also checks shapejit_embedding_bag_output_shapes rejects the same call.
void expect_rejected(Fixture& f, shapejit_status expected, std::initializer_list<std::string> fragments) {
  const shapejit_status st = f.run();
  const std::string msg = shapejit_last_error();
  CAPTURE(msg);
  CHECK(st == expected);
  for (const std::string& frag : fragments) CHECK_MESSAGE(msg.find(frag) != std::string::npos, "missing: " << frag);
  CHECK(f.outputs_untouched());
  shapejit_embedding_bag_shapes shapes{};
  CHECK(shapejit_embedding_bag_output_shapes(&f.a, &shapes) == expected);
  // As a prepared call (its form prepared, its batch run): the same status and message.
  shapejit_embedding_bag_ex_args ex{};
  shapejit_embedding_bag_ex_init(&ex, &f.a);
  std::string prepared_msg;
  CHECK(shapejit::test::run_prepared(ex, f.out.data(), f.o2b.data(), f.bag.data(), f.maxi.data(), &prepared_msg) ==
        expected);
  CHECK(prepared_msg == msg);
  CHECK(f.outputs_untouched());
}

}  // namespace

TEST_CASE("validation: the fixture itself is valid and writes outputs") {
  Fixture f;
  REQUIRE(f.run() == SHAPEJIT_OK);
  CHECK_FALSE(f.outputs_untouched());
  CHECK(std::string(shapejit_last_error()).empty());
}

TEST_CASE("validation: padding_idx outside -n..n-1") {
  for (int64_t p : {int64_t{4}, int64_t{100}, int64_t{-5}, std::numeric_limits<int64_t>::min()}) {
    Fixture f;
    f.a.has_padding_idx = 1;
    f.a.padding_idx = p;
    CAPTURE(p);
    expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"padding_idx", "-4 through 3", "got " + std::to_string(p)});
  }
}

TEST_CASE("validation: index and offset dtypes must be int32 or int64") {
  Fixture f;
  f.a.index_dtype = SHAPEJIT_F32;
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"indices", "float32"});
  Fixture g;
  shapejit::rt::set_c_enum(g.a.offset_dtype, shapejit::DType(9));
  expect_rejected(g, SHAPEJIT_INVALID_ARGUMENT, {"offsets", "(9)"});
}

TEST_CASE("validation: weight dtype") {
  Fixture f;
  f.a.weight_dtype = SHAPEJIT_I64;
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"weight", "int64"});
  Fixture g;
  g.a.weight_dtype = SHAPEJIT_I32;
  expect_rejected(g, SHAPEJIT_INVALID_ARGUMENT, {"weight must be a float32, float16 or bfloat16 table or "
                                                 "rowwise-quantized q8, q4 or q2 rows", "int32 (3)"});
}

TEST_CASE("validation: mode must be sum, mean or max") {
  Fixture f;
  shapejit::rt::set_c_enum(f.a.mode, shapejit::Mode(7));
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"mode", "7"});
}

TEST_CASE("validation: offsets[0] must be 0") {
  Fixture f;
  f.offsets = {1, 2, 4};
  f.a.offsets = f.offsets.data();
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"offsets[0] has to be 0", "got 1"});
}

TEST_CASE("validation: offsets[-1] greater than N") {
  Fixture f;
  f.offsets = {0, 2, 7};
  f.a.offsets = f.offsets.data();
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"offsets[-1] can not be greater than input's length 6", "got 7"});
}

TEST_CASE("validation: an inner offset greater than N") {
  Fixture f;
  f.offsets = {0, 9, 9};
  f.a.offsets = f.offsets.data();
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"offsets[1] = 9", "length 6"});
}

TEST_CASE("validation: decreasing offsets (int32)") {
  Fixture f;
  f.offsets32 = {0, 4, 2};
  f.a.offsets = f.offsets32.data();
  f.a.offset_dtype = SHAPEJIT_I32;
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"non-decreasing", "offsets[2] = 2", "offsets[1] = 4"});
}

TEST_CASE("validation: per_sample_weights only with mode sum") {
  for (shapejit_mode m : {SHAPEJIT_MEAN, SHAPEJIT_MAX}) {
    Fixture f;
    f.a.mode = m;
    f.a.per_sample_weights = f.psw.data();
    expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"per_sample_weights", m == SHAPEJIT_MEAN ? "'mean'" : "'max'"});
  }
}

TEST_CASE("validation: include_last_offset with empty offsets") {
  Fixture f;
  f.a.include_last_offset = 1;
  f.a.num_offsets = 0;
  f.a.num_indices = 0;
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"include_last_offset", "empty"});
}

TEST_CASE("validation: include_last_offset with one offset and indices") {
  Fixture f;
  f.a.include_last_offset = 1;
  f.a.num_offsets = 1;
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"include_last_offset", "6 elements"});
}

TEST_CASE("validation: empty offsets with indices") {
  Fixture f;
  f.a.num_offsets = 0;
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"offsets is empty", "6 elements"});
}

TEST_CASE("validation: out-of-range indices report the first bad position") {
  for (int64_t bad : {int64_t{4}, int64_t{-1}, int64_t{1000000}, std::numeric_limits<int64_t>::max()}) {
    Fixture f;
    f.indices[3] = bad;
    f.indices[5] = bad;
    CAPTURE(bad);
    expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"indices[3] = " + std::to_string(bad), "4 rows"});
  }
  Fixture g;  // int32 indices; the padding row is range-checked like any other
  g.indices32[0] = -7;
  g.a.indices = g.indices32.data();
  g.a.index_dtype = SHAPEJIT_I32;
  g.a.has_padding_idx = 1;
  g.a.padding_idx = -1;
  expect_rejected(g, SHAPEJIT_INVALID_ARGUMENT, {"indices[0] = -7"});
}

TEST_CASE("validation: partial final offset needs the opt-in flag, then sum/mean without padding") {
  Fixture f;
  f.a.include_last_offset = 1;  // offsets {0,2,4}: offsets[-1] = 4 < N = 6
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"include_last_offset", "got 4", "aten_partial_final_offset"});
  Fixture g;
  g.a.include_last_offset = 1;
  g.a.aten_partial_final_offset = 1;
  g.a.mode = SHAPEJIT_MAX;
  expect_rejected(g, SHAPEJIT_INVALID_ARGUMENT, {"aten_partial_final_offset", "'max'"});
  Fixture h;
  h.a.include_last_offset = 1;
  h.a.aten_partial_final_offset = 1;
  h.a.has_padding_idx = 1;
  h.a.padding_idx = 0;
  expect_rejected(h, SHAPEJIT_INVALID_ARGUMENT, {"aten_partial_final_offset", "padding_idx"});
  Fixture ok;
  ok.a.include_last_offset = 1;
  ok.a.aten_partial_final_offset = 1;
  CHECK(ok.run() == SHAPEJIT_OK);
}

TEST_CASE("validation: negative sizes and strides below dim") {
  Fixture f;
  f.a.num_rows = -1;
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"weight.num_rows", "-1"});
  Fixture g;
  g.a.row_stride = 2;
  expect_rejected(g, SHAPEJIT_INVALID_ARGUMENT, {"row_stride", "got 2"});
  Fixture h;
  h.a.num_indices = -3;
  expect_rejected(h, SHAPEJIT_INVALID_ARGUMENT, {"indices.numel", "-3"});
  // The most negative counts: no rule may compute a byte count from them before the count's own
  // rule has run (the form's buffer rules once did, an overflow UBSan reports; found by fuzz/).
  Fixture n;
  n.a.num_indices = std::numeric_limits<int64_t>::min();
  expect_rejected(n, SHAPEJIT_INVALID_ARGUMENT, {"indices.numel", "-9223372036854775808"});
  Fixture o;
  o.a.num_offsets = std::numeric_limits<int64_t>::min();
  expect_rejected(o, SHAPEJIT_INVALID_ARGUMENT, {"offsets.numel", "-9223372036854775808"});
}

TEST_CASE("validation: byte counts that overflow int64") {
  Fixture f;
  f.a.num_rows = int64_t(1) << 40;
  f.a.row_stride = int64_t(1) << 40;
  f.a.dim = 3;
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"weight", "overflows"});
  Fixture g;
  g.a.num_indices = std::numeric_limits<int64_t>::max() / 4;
  expect_rejected(g, SHAPEJIT_INVALID_ARGUMENT, {"indices", "overflows"});
}

TEST_CASE("validation: null pointers for non-empty tensors") {
  Fixture f;
  f.a.weight = nullptr;
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"weight is null", "4 rows"});
  Fixture g;
  g.a.indices = nullptr;
  expect_rejected(g, SHAPEJIT_INVALID_ARGUMENT, {"indices is null", "6"});
  Fixture h;
  h.a.offsets = nullptr;
  expect_rejected(h, SHAPEJIT_INVALID_ARGUMENT, {"offsets is null", "3"});
}

TEST_CASE("validation: null output buffers for non-empty outputs") {
  Fixture f;
  const shapejit_status st = shapejit_embedding_bag(&f.a, f.out.data(), nullptr, f.bag.data(), f.maxi.data());
  CHECK(st == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("offset2bag") != std::string::npos);
  CHECK(f.outputs_untouched());
  CHECK(shapejit_embedding_bag(nullptr, f.out.data(), f.o2b.data(), f.bag.data(), f.maxi.data()) ==
        SHAPEJIT_INVALID_ARGUMENT);
  CHECK(f.outputs_untouched());
}

TEST_CASE("validation: zero-length outputs may be null") {
  Fixture f;  // sum without padding: offset2bag is empty
  f.a.mode = SHAPEJIT_SUM;
  CHECK(shapejit_embedding_bag(&f.a, f.out.data(), nullptr, f.bag.data(), f.maxi.data()) == SHAPEJIT_OK);
  Fixture g;  // no bags, no indices: every output is empty
  g.a.num_indices = 0;
  g.a.num_offsets = 0;
  CHECK(shapejit_embedding_bag(&g.a, nullptr, nullptr, nullptr, nullptr) == SHAPEJIT_OK);
}

// ---- Alignment: every buffer the call touches is aligned to its element size --------------

namespace {

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)));
  return buf;
}

// A copy of `src` starting `shift` bytes past an 8-aligned address.
struct ShiftedCopy {
  std::vector<int64_t> storage;
  unsigned char* data;
  template <class T>
  ShiftedCopy(const std::vector<T>& src, size_t shift) : storage(src.size() * sizeof(T) / 8 + 2) {
    data = reinterpret_cast<unsigned char*>(storage.data()) + shift;
    std::memcpy(data, src.data(), src.size() * sizeof(T));
  }
};

void expect_misaligned(Fixture& f, const std::string& name, const void* p, int alignment, const std::string& type) {
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT,
                  {name + " = " + hex(p) + " is not aligned to " + std::to_string(alignment) + " bytes",
                   "its " + type + " elements"});
}

}  // namespace

// int32 offsets at an odd address made the UBSan build abort in the reference's loads.
TEST_CASE("validation: misaligned inputs are rejected, naming the argument, address and alignment") {
  Fixture f;
  ShiftedCopy offsets32(f.offsets32, 1);
  f.a.offsets = offsets32.data;
  f.a.offset_dtype = SHAPEJIT_I32;
  expect_misaligned(f, "offsets", offsets32.data, 4, "int32");
  Fixture g;  // int64 needs 8: a 4-aligned address is not enough
  ShiftedCopy indices(g.indices, 4);
  g.a.indices = indices.data;
  expect_misaligned(g, "indices", indices.data, 8, "int64");
  Fixture h;
  ShiftedCopy weight(h.weight, 2);
  h.a.weight = weight.data;
  expect_misaligned(h, "weight", weight.data, 4, "float32");
  Fixture i;
  ShiftedCopy psw(i.psw, 3);
  i.a.mode = SHAPEJIT_SUM;
  i.a.per_sample_weights = psw.data;
  expect_misaligned(i, "per_sample_weights", psw.data, 4, "float32");
  Fixture j;  // int32 indices with int64 offsets
  ShiftedCopy indices32(j.indices32, 2);
  j.a.indices = indices32.data;
  j.a.index_dtype = SHAPEJIT_I32;
  expect_misaligned(j, "indices", indices32.data, 4, "int32");
}

TEST_CASE("validation: misaligned outputs are rejected and left untouched") {
  struct Case {
    int which;  // 0 output, 1 offset2bag, 2 bag_size, 3 max_indices
    size_t shift;
    const char* name;
    int alignment;
    const char* type;
  };
  for (const Case& c : {Case{0, 1, "output", 4, "float32"}, Case{1, 4, "offset2bag", 8, "int64"},
                        Case{2, 2, "bag_size", 8, "int64"}, Case{3, 6, "max_indices", 8, "int64"}}) {
    Fixture f;
    f.a.mode = SHAPEJIT_MAX;  // every output non-empty
    unsigned char* p[4] = {f.out.data(), f.o2b.data(), f.bag.data(), f.maxi.data()};
    p[c.which] += c.shift;
    CAPTURE(c.name);
    CHECK(shapejit_embedding_bag(&f.a, p[0], p[1], p[2], p[3]) == SHAPEJIT_INVALID_ARGUMENT);
    const std::string msg = shapejit_last_error();
    CAPTURE(msg);
    CHECK(msg.find(std::string(c.name) + " = " + hex(p[c.which]) + " is not aligned to " +
                   std::to_string(c.alignment) + " bytes, the size of its " + c.type + " elements") !=
          std::string::npos);
    CHECK(f.outputs_untouched());
  }
  Fixture g;  // int32 outputs (int32 indices and offsets) need 4 bytes only
  g.a.indices = g.indices32.data();
  g.a.index_dtype = SHAPEJIT_I32;
  g.a.offsets = g.offsets32.data();
  g.a.offset_dtype = SHAPEJIT_I32;
  CHECK(shapejit_embedding_bag(&g.a, g.out.data(), g.o2b.data() + 4, g.bag.data() + 12, g.maxi.data()) ==
        SHAPEJIT_OK);
  CHECK(shapejit_embedding_bag(&g.a, g.out.data(), g.o2b.data() + 2, g.bag.data(), g.maxi.data()) ==
        SHAPEJIT_INVALID_ARGUMENT);
}

TEST_CASE("validation: a zero-length buffer may be misaligned (it is never touched)") {
  Fixture f;  // no bags and no indices: every buffer but the table is empty
  f.a.num_indices = 0;
  f.a.num_offsets = 0;
  f.a.indices = reinterpret_cast<const unsigned char*>(f.indices.data()) + 1;
  f.a.offsets = reinterpret_cast<const unsigned char*>(f.offsets.data()) + 3;
  CHECK(shapejit_embedding_bag(&f.a, f.out.data() + 1, f.o2b.data() + 1, f.bag.data() + 1, f.maxi.data() + 1) ==
        SHAPEJIT_OK);
  Fixture g;  // sum without padding_idx: offset2bag is empty
  g.a.mode = SHAPEJIT_SUM;
  CHECK(shapejit_embedding_bag(&g.a, g.out.data(), g.o2b.data() + 1, g.bag.data(), g.maxi.data()) == SHAPEJIT_OK);
}

// ---- Enum fields print the caller's value --------------------------------------------------

TEST_CASE("validation: negative enum values are printed as the caller wrote them") {
  Fixture f;
  shapejit::rt::set_c_enum(f.a.mode, shapejit::Mode(-1));
  expect_rejected(f, SHAPEJIT_INVALID_ARGUMENT, {"mode must be 0 (sum), 1 (mean) or 2 (max), but got -1"});
  Fixture g;
  shapejit::rt::set_c_enum(g.a.offset_dtype, shapejit::DType(-5));
  expect_rejected(g, SHAPEJIT_INVALID_ARGUMENT, {"offsets must be int32 or int64, but got dtype unknown (-5)"});
  Fixture h;
  shapejit::rt::set_c_enum(h.a.index_dtype, shapejit::DType(-1));
  expect_rejected(h, SHAPEJIT_INVALID_ARGUMENT, {"indices must be int32 or int64, but got dtype unknown (-1)"});
  Fixture i;
  shapejit::rt::set_c_enum(i.a.weight_dtype, shapejit::DType(std::numeric_limits<int>::min()));
  expect_rejected(i, SHAPEJIT_INVALID_ARGUMENT, {"q8, q4 or q2 rows, but got dtype unknown (" +
                                                 std::to_string(std::numeric_limits<int>::min()) + ")"});
  Fixture j;
  shapejit::rt::set_c_enum(j.a.mode, shapejit::Mode(std::numeric_limits<int>::min()));
  expect_rejected(j, SHAPEJIT_INVALID_ARGUMENT, {"but got -2147483648"});
}

TEST_CASE("validation: the C++ API reports out-of-range enum class values as integers") {
  Fixture f;
  shapejit::EmbeddingBagCall call;
  call.weight = {f.weight.data(), shapejit::DType::kF32, 4, 3, 5};
  call.indices = f.indices;
  call.offsets = f.offsets;
  auto message = [&] {
    try {
      shapejit::embedding_bag(call, {f.out.data(), f.o2b.data(), f.bag.data(), f.maxi.data()});
    } catch (const shapejit::Error& e) {
      CHECK(e.status() == shapejit::Status::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  call.mode = shapejit::Mode(-1);
  CHECK(message().find("but got -1") != std::string::npos);
  call.mode = shapejit::Mode::kSum;
  call.offsets.dtype = shapejit::DType(-5);
  CHECK(message().find("offsets must be int32 or int64, but got dtype unknown (-5)") != std::string::npos);
  call.offsets.dtype = shapejit::DType::kI64;
  call.indices.dtype = shapejit::DType(-2);
  CHECK(message().find("indices must be int32 or int64, but got dtype unknown (-2)") != std::string::npos);
  call.indices.dtype = shapejit::DType::kI64;
  call.weight.dtype = shapejit::DType(8);
  CHECK(message().find("q8, q4 or q2 rows, but got dtype unknown (8)") != std::string::npos);
  CHECK(f.outputs_untouched());
  call.weight.dtype = shapejit::DType(-3);
  CHECK_THROWS_WITH_AS(shapejit::embedding_bag_output_shapes(call),
                       doctest::Contains("got dtype unknown (-3)"), shapejit::Error);
}

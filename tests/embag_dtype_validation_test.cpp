// The validation rules of the extended call (quantized-tables-semantics.md, "Beyond ATen" 7, and
// shapejit.h): each broken call is rejected with a message naming the argument, the value and
// the rule, by both ex entry points, and no output byte changes.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "ref/float16.hpp"
#include "shapejit/shapejit.h"
#include "support/prepared_embag.hpp"

namespace {

constexpr unsigned char kSentinel = 0xA5;

// A valid Q8 call: 4 rows of D = 3 (11-byte rows), 6 int64 indices, 3 bags, mean.
struct Fixture {
  std::vector<unsigned char> table = std::vector<unsigned char>(4 * 11, 1);
  std::vector<int64_t> indices{0, 1, 2, 3, 1, 2};
  std::vector<int64_t> offsets{0, 2, 4};
  std::vector<float> psw = std::vector<float>(6, 0.5f);
  std::vector<int32_t> mapping{0, 1, 2, 3};
  std::vector<unsigned char> out = std::vector<unsigned char>(4096, kSentinel),
                             o2b = std::vector<unsigned char>(4096, kSentinel),
                             bag = std::vector<unsigned char>(4096, kSentinel),
                             maxi = std::vector<unsigned char>(4096, kSentinel);
  shapejit_embedding_bag_ex_args e{};

  Fixture() {
    shapejit_embedding_bag_args a{};
    a.weight = table.data();
    a.weight_dtype = SHAPEJIT_Q8;
    a.num_rows = 4;
    a.dim = 3;
    a.row_stride = 11;
    a.indices = indices.data();
    a.index_dtype = SHAPEJIT_I64;
    a.num_indices = 6;
    a.offsets = offsets.data();
    a.offset_dtype = SHAPEJIT_I64;
    a.num_offsets = 3;
    a.mode = SHAPEJIT_MEAN;
    shapejit_embedding_bag_ex_init(&e, &a);
  }
  shapejit_status run() { return shapejit_embedding_bag_ex(&e, out.data(), o2b.data(), bag.data(), maxi.data()); }
  void reset() {
    for (auto* v : {&out, &o2b, &bag, &maxi}) v->assign(v->size(), kSentinel);
  }
  bool untouched() const {
    for (auto* v : {&out, &o2b, &bag, &maxi})
      for (unsigned char c : *v)
        if (c != kSentinel) return false;
    return true;
  }
};

void expect_rejected(Fixture& f, std::initializer_list<std::string> fragments,
                     shapejit_status expected = SHAPEJIT_INVALID_ARGUMENT) {
  f.reset();  // a fixture may have run successfully before
  CHECK(f.run() == expected);
  const std::string msg = shapejit_last_error();
  INFO("message: " << msg);
  for (const std::string& frag : fragments) CHECK_MESSAGE(msg.find(frag) != std::string::npos, "missing: " << frag);
  CHECK(f.untouched());
  shapejit_embedding_bag_shapes shapes{};
  CHECK(shapejit_embedding_bag_ex_output_shapes(&f.e, &shapes) == expected);
  // As a prepared call (its form prepared, its batch run): the same status and message.
  std::string prepared_msg;
  CHECK(shapejit::test::run_prepared(f.e, f.out.data(), f.o2b.data(), f.bag.data(), f.maxi.data(), &prepared_msg) ==
        expected);
  CHECK(prepared_msg == msg);
  CHECK(f.untouched());
}

}  // namespace

TEST_CASE("dtype validation: the fixture is valid, and ex_init reproduces the plain call") {
  Fixture f;
  CHECK(f.e.struct_size == sizeof(shapejit_embedding_bag_ex_args));
  CHECK(f.e.output_dtype == SHAPEJIT_F32);
  CHECK(f.e.per_sample_weights_dtype == SHAPEJIT_F32);
  CHECK(f.e.compressed_indices_mapping == nullptr);
  CHECK(f.run() == SHAPEJIT_OK);
  CHECK(shapejit_embedding_bag(&f.e.call, f.out.data(), f.o2b.data(), f.bag.data(), f.maxi.data()) == SHAPEJIT_OK);
}

TEST_CASE("dtype validation: struct_size must cover the call and not exceed this library's struct") {
  Fixture f;
  f.e.struct_size = sizeof(size_t) + sizeof(shapejit_embedding_bag_args) - 1;
  expect_rejected(f, {"struct_size", std::to_string(f.e.struct_size)});
  Fixture g;
  g.e.struct_size = sizeof(shapejit_embedding_bag_ex_args) + 8;
  expect_rejected(g, {"struct_size"});
  // A struct that ends right after `call` (an older caller) gets the defaults for the rest.
  Fixture h;
  h.e.struct_size = offsetof(shapejit_embedding_bag_ex_args, output_dtype);
  h.e.output_dtype = shapejit_dtype(99);  // not read
  CHECK(h.run() == SHAPEJIT_OK);
}

TEST_CASE("dtype validation: output dtype rules") {
  Fixture f;
  f.e.output_dtype = SHAPEJIT_I32;
  expect_rejected(f, {"output_dtype must be float32, float16 or bfloat16 for a q8 table", "int32 (3)"});
  Fixture g;
  g.e.call.weight_dtype = SHAPEJIT_F16;
  g.e.call.row_stride = 3;
  g.e.output_dtype = SHAPEJIT_F32;
  expect_rejected(g, {"output_dtype must be the table's dtype float16", "float32 (0)"});
}

TEST_CASE("dtype validation: per-sample-weight dtype rules") {
  Fixture f;
  f.e.call.mode = SHAPEJIT_SUM;
  f.e.call.per_sample_weights = f.psw.data();
  f.e.per_sample_weights_dtype = SHAPEJIT_F16;
  expect_rejected(f, {"per_sample_weights_dtype must be float32 for a q8 table", "float16 (1)"});
  Fixture g;
  g.e.call.mode = SHAPEJIT_SUM;
  g.e.call.weight_dtype = SHAPEJIT_Q4;
  g.e.call.dim = 2;
  g.e.call.row_stride = 5;
  g.e.call.per_sample_weights = g.psw.data();
  g.e.per_sample_weights_dtype = SHAPEJIT_BF16;
  expect_rejected(g, {"per_sample_weights_dtype must be float32 or float16 for a q4 table", "bfloat16 (2)"});
  g.e.per_sample_weights_dtype = SHAPEJIT_F16;
  CHECK(g.run() == SHAPEJIT_OK);
  Fixture h;
  h.e.call.mode = SHAPEJIT_SUM;
  h.e.call.weight_dtype = SHAPEJIT_BF16;
  h.e.call.row_stride = 3;
  h.e.output_dtype = SHAPEJIT_BF16;
  h.e.call.per_sample_weights = h.psw.data();
  h.e.per_sample_weights_dtype = SHAPEJIT_F32;
  expect_rejected(h, {"per_sample_weights_dtype must be the table's dtype bfloat16"});
}

TEST_CASE("dtype validation: packed row sizes, strides and widths") {
  Fixture f;
  f.e.call.row_stride = 10;
  expect_rejected(f, {"weight.row_stride counts bytes for q8 rows", "packed row's 11 bytes", "but got 10"});
  Fixture g;
  g.e.call.weight_dtype = SHAPEJIT_Q4;
  g.e.call.dim = 3;
  expect_rejected(g, {"weight.dim must be even for q4 rows", "but got 3"});
  Fixture h;
  h.e.call.weight_dtype = SHAPEJIT_Q2;
  h.e.call.dim = 6;
  expect_rejected(h, {"weight.dim must be a multiple of 4 for q2 rows", "but got 6"});
  // Quantized tables need no alignment: rows are read bytewise.
  Fixture k;
  k.table.resize(4 * 11 + 1);
  k.e.call.weight = k.table.data() + 1;
  CHECK(k.run() == SHAPEJIT_OK);
  // f16 tables need 2-byte alignment.
  Fixture m;
  m.e.call.weight_dtype = SHAPEJIT_F16;
  m.e.output_dtype = SHAPEJIT_F16;
  m.e.call.row_stride = 3;
  m.e.call.weight = m.table.data() + 1;
  expect_rejected(m, {"weight", "is not aligned to 2 bytes", "float16"});
}

TEST_CASE("dtype validation: mapping rules") {
  Fixture f;
  f.e.mapping_len = 4;
  expect_rejected(f, {"compressed_indices_mapping is null but mapping_len is 4"});
  Fixture g;
  g.e.compressed_indices_mapping = g.mapping.data();
  g.e.mapping_len = 3;
  expect_rejected(g, {"indices[3] = 3 is out of range for compressed_indices_mapping of 3 entries"});
  Fixture h;
  h.mapping[2] = 4;
  h.e.compressed_indices_mapping = h.mapping.data();
  h.e.mapping_len = 4;
  expect_rejected(h, {"compressed_indices_mapping[2] = 4 (read by indices[2])", "table of 4 rows"});
  h.mapping[2] = -2;
  expect_rejected(h, {"compressed_indices_mapping[2] = -2"});
  h.mapping[2] = -1;
  CHECK(h.run() == SHAPEJIT_OK);
  Fixture k;
  k.e.call.weight_dtype = SHAPEJIT_BF16;
  k.e.output_dtype = SHAPEJIT_BF16;
  k.e.call.row_stride = 3;
  k.e.compressed_indices_mapping = k.mapping.data();
  k.e.mapping_len = 4;
  expect_rejected(k, {"compressed_indices_mapping (pruning) is only supported for quantized tables", "bfloat16"});
  // padding_idx lives in the mapping's index space.
  Fixture m;
  m.mapping.resize(8, 0);
  m.e.compressed_indices_mapping = m.mapping.data();
  m.e.mapping_len = 8;
  m.e.call.has_padding_idx = 1;
  m.e.call.padding_idx = 7;
  CHECK(m.run() == SHAPEJIT_OK);
  m.e.call.padding_idx = 8;
  expect_rejected(m, {"padding_idx", "-8 through 7", "but got 8"});
  // The mapping is an input: an output over it is rejected.
  Fixture o;
  o.e.compressed_indices_mapping = reinterpret_cast<const int32_t*>(o.out.data());
  std::memcpy(o.out.data(), o.mapping.data(), 16);
  o.e.mapping_len = 4;
  CHECK(o.run() == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("overlaps compressed_indices_mapping") != std::string::npos);
}

TEST_CASE("dtype validation: offsets as lengths") {
  Fixture f;
  f.e.offsets_as_lengths = 1;
  f.e.call.num_offsets = 0;
  f.e.call.num_indices = 0;
  expect_rejected(f, {"offsets_as_lengths requires at least one offset, but offsets is empty"});
  Fixture g;
  g.e.offsets_as_lengths = 1;
  g.offsets = {0, 4, 3};  // bag 0 takes 4, bag 1 is empty (-1), bag 2 takes N - 3 = 3 > 6 - 4
  expect_rejected(g, {"offsets_as_lengths: bag 2 takes input's length - offsets[2] = 6 - 3", "after the 4 taken",
                      "indices has only 6"});
  Fixture h;
  h.e.offsets_as_lengths = 1;
  h.offsets = {-9, 0, 5};  // 9 positions do not fit in 6
  expect_rejected(h, {"bag 0 takes offsets[1] - offsets[0] = 0 - -9", "indices has only 6"});
  Fixture k;
  k.e.offsets_as_lengths = 1;
  k.offsets = {7, 8, 10};  // offsets[0] need not be 0: lengths 1, 2, then 6 - 10 < 0 (empty)
  CHECK(k.run() == SHAPEJIT_OK);
  k.e.call.include_last_offset = 1;
  k.e.call.aten_partial_final_offset = 1;
  expect_rejected(k, {"aten_partial_final_offset cannot be combined with offsets_as_lengths"});
}

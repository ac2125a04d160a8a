// Linear-group validation: one test per rule. Each checks the status, that the message names the
// argument and its value, and that every output byte is unchanged (outputs are pre-filled with a
// sentinel); a rejected create leaves its out-pointer as it was.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/engine/c_enum.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"

namespace {

using shapejit::LinearGroup;
using shapejit::LinearGroupDesc;
using shapejit::LinearInput;
using shapejit::LinearOutput;
using shapejit::LinearPart;
using shapejit::OutputLayout;

constexpr unsigned char kSentinel = 0xA5;

std::vector<float> sentinel_floats(size_t n) {
  std::vector<float> v(n);
  std::memset(v.data(), kSentinel, n * sizeof(float));
  return v;
}

bool is_sentinel(float v) {
  unsigned char b[4];
  std::memcpy(b, &v, 4);
  return b[0] == kSentinel && b[1] == kSentinel && b[2] == kSentinel && b[3] == kSentinel;
}

bool all_sentinel(const std::vector<float>& v) {
  for (float f : v)
    if (!is_sentinel(f)) return false;
  return true;
}

// A valid packed group of 3 parts over W [6, 2] and b [6]; part 2 is head-split (2 heads).
struct Fixture {
  std::vector<float> w{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<float> b{1, 2, 3, 4, 5, 6};
  std::vector<float> sep0{1, 2, 3, 4}, sep1{1, 2, 3, 4, 5, 6};
  std::vector<shapejit_linear_part_desc> parts{{.row_begin = 0, .rows = 2},
                                               {.row_begin = 2, .rows = 2},
                                               {.row_begin = 4, .rows = 2, .layout = SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST,
                                                .heads = 2}};
  shapejit_linear_group_desc desc{SHAPEJIT_WEIGHTS_PACKED, w.data(), 6, 2, 2, b.data(), 6, parts.data(), 3};
  std::vector<float> x = std::vector<float>(64, 1.0f);
  std::vector<float> out = sentinel_floats(3 * 64);  // every output lives in here
  shapejit_linear_group_io io[3];
  shapejit_linear_group* group = nullptr;

  Fixture() {
    for (int p = 0; p < 3; ++p) io[p] = {x.data(), 4, 2, 2, out.data() + 64 * p, 2, 2, 2};
  }
  ~Fixture() { shapejit_linear_group_destroy(group); }
  // Switches desc to the separate form (K = 2 and K = 3 for parts 0 and 1).
  void make_separate() {
    desc = {SHAPEJIT_WEIGHTS_SEPARATE, nullptr, 0, 0, 0, b.data(), 6, parts.data(), 2};
    parts[0] = {.row_begin = 0, .rows = 2, .weight = sep0.data(), .k = 2, .weight_stride = 2};
    parts[1] = {.row_begin = 2, .rows = 2, .weight = sep1.data(), .k = 3, .weight_stride = 3};
  }
};

void expect_message(const std::string& msg, std::initializer_list<std::string> fragments) {
  for (const std::string& frag : fragments) CHECK_MESSAGE(msg.find(frag) != std::string::npos, "missing: " << frag);
}

// Creating from f.desc fails with `fragments` in the message and leaves *out as it was.
void expect_create_rejected(Fixture& f, std::initializer_list<std::string> fragments) {
  auto* const marker = reinterpret_cast<shapejit_linear_group*>(uintptr_t{0x5a5a});
  shapejit_linear_group* out = marker;
  const shapejit_status st = shapejit_linear_group_create(&f.desc, &out);
  const std::string msg = shapejit_last_error();
  CAPTURE(msg);
  CHECK(st == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(out == marker);
  expect_message(msg, fragments);
}

// Running f.io fails with `fragments` in the message and every output byte unchanged.
void expect_run_rejected(Fixture& f, std::initializer_list<std::string> fragments, int64_t num_io = 3,
                         bool null_io = false) {
  REQUIRE(shapejit_linear_group_create(&f.desc, &f.group) == SHAPEJIT_OK);
  const shapejit_status st = shapejit_linear_group_run(f.group, null_io ? nullptr : f.io, num_io);
  const std::string msg = shapejit_last_error();
  CAPTURE(msg);
  CHECK(st == SHAPEJIT_INVALID_ARGUMENT);
  expect_message(msg, fragments);
  CHECK(all_sentinel(f.out));
}

constexpr int64_t kHuge = int64_t{1} << 61;

}  // namespace

TEST_CASE("linear group validation: the fixture is valid and writes its outputs") {
  Fixture f;
  REQUIRE(shapejit_linear_group_create(&f.desc, &f.group) == SHAPEJIT_OK);
  CHECK(shapejit_linear_group_run(f.group, f.io, 3) == SHAPEJIT_OK);
  CHECK_FALSE(all_sentinel(f.out));
  Fixture s;
  s.make_separate();
  s.io[1].k = s.io[1].ldx = 3;
  REQUIRE(shapejit_linear_group_create(&s.desc, &s.group) == SHAPEJIT_OK);
  CHECK(shapejit_linear_group_run(s.group, s.io, 2) == SHAPEJIT_OK);
}

TEST_CASE("linear group validation: null handles and descriptors") {
  Fixture f;
  shapejit_linear_group* out = nullptr;
  CHECK(shapejit_linear_group_create(nullptr, &out) == SHAPEJIT_INVALID_ARGUMENT);
  expect_message(shapejit_last_error(), {"desc", "NULL"});
  CHECK(shapejit_linear_group_create(&f.desc, nullptr) == SHAPEJIT_INVALID_ARGUMENT);
  expect_message(shapejit_last_error(), {"out", "NULL"});
  CHECK(shapejit_linear_group_run(nullptr, f.io, 3) == SHAPEJIT_INVALID_ARGUMENT);
  expect_message(shapejit_last_error(), {"group", "NULL"});
  CHECK(all_sentinel(f.out));
}

TEST_CASE("linear group validation: unknown enums") {
  Fixture f;
  shapejit::rt::set_c_enum(f.desc.form, shapejit::WeightForm(7));
  expect_create_rejected(f, {"desc.form = 7"});
  Fixture g;
  shapejit::rt::set_c_enum(g.parts[1].activation, shapejit::Activation(9));
  expect_create_rejected(g, {"desc.parts[1].activation = 9"});
  Fixture h;
  shapejit::rt::set_c_enum(h.parts[2].layout, OutputLayout(3));
  expect_create_rejected(h, {"desc.parts[2].layout = 3"});
}

TEST_CASE("linear group validation: part count and parts pointer") {
  Fixture f;
  f.desc.num_parts = 0;
  expect_create_rejected(f, {"desc.num_parts = 0", ">= 1"});
  Fixture g;
  g.desc.parts = nullptr;
  expect_create_rejected(g, {"desc.parts is NULL", "3"});
}

TEST_CASE("linear group validation: the packed weight's sizes, stride and pointer") {
  Fixture f;
  f.desc.weight_rows = 0;
  expect_create_rejected(f, {"desc.weight_rows = 0"});
  Fixture g;
  g.desc.k = 0;
  expect_create_rejected(g, {"desc.k = 0"});
  Fixture h;
  h.desc.weight_stride = 1;
  expect_create_rejected(h, {"desc.weight_stride = 1", "desc.k = 2"});
  Fixture i;
  i.desc.weight = nullptr;
  expect_create_rejected(i, {"desc.weight is NULL", "6 rows"});
}

TEST_CASE("linear group validation: a part's rows are empty or outside the packed weight") {
  Fixture f;
  f.parts[2].rows = 0;
  expect_create_rejected(f, {"desc.parts[2].rows = 0"});
  Fixture g;
  g.parts[2].row_begin = 5;
  expect_create_rejected(g, {"desc.parts[2].row_begin = 5", "rows = 2", "6 rows"});
  Fixture h;
  h.parts[0].row_begin = -1;
  expect_create_rejected(h, {"desc.parts[0].row_begin = -1"});
  Fixture i;
  i.parts[1].rows = std::numeric_limits<int64_t>::max();
  expect_create_rejected(i, {"desc.parts[1]", std::to_string(std::numeric_limits<int64_t>::max())});
}

TEST_CASE("linear group validation: a part's rows outside the packed bias") {
  Fixture f;
  f.desc.bias_len = 5;
  expect_create_rejected(f, {"desc.parts[2].row_begin = 4", "bias's 5 values"});
  Fixture g;
  g.make_separate();
  g.parts[1].row_begin = 6;
  expect_create_rejected(g, {"desc.parts[1].row_begin = 6", "bias"});
}

TEST_CASE("linear group validation: bias pointer and length") {
  Fixture f;
  f.desc.bias = nullptr;
  expect_create_rejected(f, {"desc.bias is NULL", "desc.bias_len = 6"});
  Fixture g;
  g.desc.bias_len = 0;
  expect_create_rejected(g, {"desc.bias_len = 0"});
  Fixture h;
  h.desc.bias_len = -2;
  expect_create_rejected(h, {"desc.bias_len = -2"});
}

TEST_CASE("linear group validation: mismatched K") {
  Fixture f;  // packed: a part's k must be 0 or the packed K
  f.parts[1].k = 3;
  expect_create_rejected(f, {"desc.parts[1].k = 3", "K = 2"});
  Fixture g;  // run: the input's width must equal the part's K
  g.io[1].k = 3;
  g.io[1].ldx = 3;
  expect_run_rejected(g, {"io[1].k = 3", "K = 2", "mismatched K"});
  Fixture h;  // separate weights with different K: each input must match its own part
  h.make_separate();
  expect_run_rejected(h, {"io[1].k = 2", "K = 3"}, 2);
}

TEST_CASE("linear group validation: packed and separate fields are not mixed") {
  Fixture f;
  f.parts[0].weight = f.sep0.data();
  expect_create_rejected(f, {"desc.parts[0].weight", "NULL in the packed form"});
  Fixture g;
  g.parts[0].weight_stride = 2;
  expect_create_rejected(g, {"desc.parts[0].weight_stride = 2"});
  Fixture h;
  h.make_separate();
  h.desc.weight = h.w.data();
  expect_create_rejected(h, {"desc.weight", "separate form"});
  Fixture i;
  i.make_separate();
  i.desc.k = 2;
  expect_create_rejected(i, {"desc.weight_rows, desc.k, desc.weight_stride = 0, 2, 0"});
}

TEST_CASE("linear group validation: separate weights' K, stride and pointer") {
  Fixture f;
  f.make_separate();
  f.parts[1].k = 0;
  expect_create_rejected(f, {"desc.parts[1].k = 0"});
  Fixture g;
  g.make_separate();
  g.parts[1].weight_stride = 2;
  expect_create_rejected(g, {"desc.parts[1].weight_stride = 2", "desc.parts[1].k = 3"});
  Fixture h;
  h.make_separate();
  h.parts[0].weight = nullptr;
  expect_create_rejected(h, {"desc.parts[0].weight is NULL", "2 rows"});
}

TEST_CASE("linear group validation: heads must divide N_p") {
  Fixture f;
  f.parts[2].heads = 3;
  expect_create_rejected(f, {"desc.parts[2].heads = 3", "desc.parts[2].rows = 2"});
  Fixture g;
  g.parts[2].heads = 0;
  expect_create_rejected(g, {"desc.parts[2].heads = 0"});
}

TEST_CASE("linear group validation: byte counts that overflow int64") {
  Fixture f;
  f.desc.weight_rows = kHuge;
  f.desc.weight_stride = 8;
  expect_create_rejected(f, {"desc.weight", std::to_string(kHuge), "overflows int64"});
  Fixture g;
  g.make_separate();
  g.parts[1].rows = kHuge;
  g.parts[1].row_begin = 0;
  g.desc.bias = nullptr;
  g.desc.bias_len = 0;
  expect_create_rejected(g, {"desc.parts[1].weight", std::to_string(kHuge), "overflows int64"});
  Fixture h;
  h.desc.bias_len = kHuge * 2;
  expect_create_rejected(h, {"desc.bias", std::to_string(kHuge * 2), "overflows int64"});
  Fixture i;
  i.io[0].m = kHuge;
  i.io[0].ldx = 4;
  expect_run_rejected(i, {"io[0].x", std::to_string(kHuge), "overflows int64"});
  const int64_t m = int64_t{1} << 59;  // X [m, 2] fits in int64 bytes; the outputs below do not
  Fixture j;
  j.io[1].m = m;
  j.io[1].ldy = 8;
  expect_run_rejected(j, {"io[1].y", std::to_string(m), "overflows int64"});
  Fixture k;  // head-split [m, 6]: m * 6 * 4 bytes
  k.parts[2] = {.row_begin = 0, .rows = 6, .layout = SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST, .heads = 2};
  k.io[2].m = k.io[2].batch = m;
  k.io[2].seq_len = 1;
  expect_run_rejected(k, {"io[2].y", std::to_string(m), "overflows int64"});
}

TEST_CASE("linear group validation: io count and pointer") {
  Fixture f;
  expect_run_rejected(f, {"num_io = 2", "3 parts"}, 2);
  Fixture g;
  expect_run_rejected(g, {"io is NULL", "3 parts"}, 3, true);
}

TEST_CASE("linear group validation: negative m, strides less than widths") {
  Fixture f;
  f.io[0].m = -1;
  expect_run_rejected(f, {"io[0].m = -1"});
  Fixture g;
  g.io[0].ldx = 1;
  expect_run_rejected(g, {"io[0].ldx = 1", "io[0].k = 2"});
  Fixture h;
  h.io[1].ldy = 1;
  expect_run_rejected(h, {"io[1].ldy = 1", "N = 2"});
}

TEST_CASE("linear group validation: null pointers for non-empty tensors") {
  Fixture f;
  f.io[1].x = nullptr;
  expect_run_rejected(f, {"io[1].x is NULL", "io[1].m = 4"});
  Fixture g;
  g.io[2].y = nullptr;
  expect_run_rejected(g, {"io[2].y is NULL", "io[2].m = 4"});
}

TEST_CASE("linear group validation: head-split needs batch * seq_len == m") {
  Fixture f;
  f.io[2].seq_len = 3;
  expect_run_rejected(f, {"io[2].batch * io[2].seq_len = 2 * 3", "io[2].m = 4"});
  Fixture g;
  g.io[2].batch = -2;
  g.io[2].seq_len = -2;
  expect_run_rejected(g, {"io[2].batch = -2"});
}

TEST_CASE("linear group validation: overlapping outputs") {
  Fixture f;  // part 1's output starts inside part 0's last row
  f.io[1].y = f.io[0].y + 7;
  expect_run_rejected(f, {"io[1].y", "overlaps", "io[0].y", "outputs must not alias"});
  Fixture g;  // rows interleaved: part 1 writes columns 1..2 of part 0's [4, 4] rows (cols 0..1)
  g.io[0].ldy = 4;
  g.io[1].ldy = 4;
  g.io[1].y = g.io[0].y + 1;
  expect_run_rejected(g, {"io[1].y", "io[0].y"});
  Fixture h;  // a head-split block over a row-major part's later rows
  h.io[2].y = h.io[0].y + 5;
  expect_run_rejected(h, {"io[2].y", "io[0].y"});
}

TEST_CASE("linear group validation: an output overlapping an input") {
  Fixture f;
  f.io[0].y = f.out.data() + 100;
  f.io[1].x = f.out.data() + 107;  // part 1 reads where part 0 writes
  expect_run_rejected(f, {"io[0].y", "overlaps", "io[1].x", "must not overlap any input"});
  Fixture g;  // in place: y == x
  g.io[2].x = g.io[2].y;
  expect_run_rejected(g, {"io[2].y", "io[2].x"});
}

TEST_CASE("linear group validation: column-interleaved outputs and shared inputs are legal") {
  Fixture f;  // q, k in columns [0,2) and [2,4) of one [4, 4] matrix; the head-split part elsewhere
  f.io[0].ldy = 4;
  f.io[1].ldy = 4;
  f.io[1].y = f.io[0].y + 2;
  REQUIRE(shapejit_linear_group_create(&f.desc, &f.group) == SHAPEJIT_OK);
  CHECK(shapejit_linear_group_run(f.group, f.io, 3) == SHAPEJIT_OK);
  // Every element of the 4x4 block was written exactly once.
  for (int i = 0; i < 16; ++i) CHECK_FALSE(is_sentinel(f.out[size_t(i)]));
  CHECK(is_sentinel(f.out[16]));
}

TEST_CASE("linear group validation: the C++ API throws Error with the same message") {
  Fixture f;
  f.parts[2].heads = 3;
  std::vector<LinearPart> parts{{.rows = 2}, {.row_begin = 2, .rows = 2},
                                {.row_begin = 4, .rows = 2, .layout = OutputLayout::kHeadsSeqFirst, .heads = 3}};
  try {
    LinearGroup g(LinearGroupDesc::packed(f.w.data(), 6, 2, f.b, parts));
    FAIL("expected an Error");
  } catch (const shapejit::Error& e) {
    CHECK(e.status() == shapejit::Status::kInvalidArgument);
    expect_message(e.what(), {"desc.parts[2].heads = 3"});
  }
  parts[2].heads = 2;
  LinearGroup g(LinearGroupDesc::packed(f.w.data(), 6, 2, f.b, parts));
  const LinearInput in{f.x.data(), 4, 2};
  const LinearOutput outs[2] = {{f.out.data()}, {f.out.data() + 64}};
  try {
    g.run({&in, 1}, outs);
    FAIL("expected an Error");
  } catch (const shapejit::Error& e) {
    CHECK(e.status() == shapejit::Status::kInvalidArgument);
    expect_message(e.what(), {"inputs.size() = 1", "outputs.size() = 2", "3 parts"});
  }
  CHECK(all_sentinel(f.out));
}

TEST_CASE("linear group validation: negative enums are printed as the caller wrote them") {
  Fixture f;
  shapejit::rt::set_c_enum(f.desc.form, shapejit::WeightForm(-1));
  expect_create_rejected(f, {"desc.form = -1 is not a weight form"});
  Fixture g;
  shapejit::rt::set_c_enum(g.parts[1].activation, shapejit::Activation(-1));
  expect_create_rejected(g, {"desc.parts[1].activation = -1 is not an activation"});
  Fixture h;
  shapejit::rt::set_c_enum(h.parts[2].layout, OutputLayout(std::numeric_limits<int>::min()));
  expect_create_rejected(h, {"desc.parts[2].layout = -2147483648 is not a layout"});
  // The C++ API hands any enum class value through as an integer.
  std::vector<LinearPart> parts{{.rows = 2}, {.row_begin = 2, .rows = 2}};
  auto create_message = [&](const LinearGroupDesc& desc) {
    try {
      LinearGroup group(desc);
    } catch (const shapejit::Error& e) {
      CHECK(e.status() == shapejit::Status::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  LinearGroupDesc bad_form = LinearGroupDesc::packed(f.w.data(), 6, 2, f.b, parts);
  bad_form.form = shapejit::WeightForm(-1);
  expect_message(create_message(bad_form), {"desc.form = -1 is not a weight form"});
  parts[1].activation = shapejit::Activation(-1);
  expect_message(create_message(LinearGroupDesc::packed(f.w.data(), 6, 2, f.b, parts)),
                 {"desc.parts[1].activation = -1 is not an activation"});
  parts[1].activation = shapejit::Activation::kNone;
  parts[0].layout = OutputLayout(-7);
  expect_message(create_message(LinearGroupDesc::packed(f.w.data(), 6, 2, f.b, parts)),
                 {"desc.parts[0].layout = -7 is not a layout"});
}

// ---- Alignment: every f32 buffer is aligned to 4 bytes ----------------------------------------

namespace {

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)));
  return buf;
}

// `p` moved by `bytes` (1 to 3: no longer a float's alignment).
template <class T>
T* shifted(T* p, int bytes) {
  using Byte = std::conditional_t<std::is_const_v<T>, const unsigned char, unsigned char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) + bytes);
}

std::string misaligned(const std::string& name, const void* p) {
  return name + " = " + hex(p) + " is not aligned to 4 bytes, the size of its float32 elements";
}

}  // namespace

TEST_CASE("linear group validation: misaligned weights and bias are rejected at create") {
  Fixture f;
  std::vector<float> w(f.w.size() + 1);
  float* const w1 = shifted(w.data(), 1);
  std::memcpy(w1, f.w.data(), f.w.size() * 4);
  f.desc.weight = w1;
  expect_create_rejected(f, {misaligned("desc.weight", w1)});
  Fixture g;
  g.desc.bias = shifted(g.b.data(), 2);
  expect_create_rejected(g, {misaligned("desc.bias", g.desc.bias)});
  Fixture h;
  h.make_separate();
  h.parts[1].weight = shifted(h.sep1.data(), 3);
  expect_create_rejected(h, {misaligned("desc.parts[1].weight", h.parts[1].weight)});
}

TEST_CASE("linear group validation: misaligned inputs and outputs are rejected, outputs untouched") {
  Fixture f;
  std::vector<float> x(f.x.size() + 1, 1.0f);
  f.io[1].x = shifted(x.data(), 1);
  expect_run_rejected(f, {misaligned("io[1].x", f.io[1].x)});
  Fixture g;  // row-major output
  g.io[0].y = shifted(g.io[0].y, 2);
  expect_run_rejected(g, {misaligned("io[0].y", g.io[0].y)});
  Fixture h;  // head-split output
  h.io[2].y = shifted(h.io[2].y, 3);
  expect_run_rejected(h, {misaligned("io[2].y", h.io[2].y)});
  Fixture i;  // m == 0: the pointers are never used, so they need not be aligned
  i.io[1].m = i.io[2].m = i.io[2].batch = 0;
  i.io[1].x = shifted(i.io[1].x, 1);
  i.io[2].y = shifted(i.io[2].y, 1);
  REQUIRE(shapejit_linear_group_create(&i.desc, &i.group) == SHAPEJIT_OK);
  CHECK(shapejit_linear_group_run(i.group, i.io, 3) == SHAPEJIT_OK);
}

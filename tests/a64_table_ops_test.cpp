// The NEON table-dtype operations (jit/a64/embag_table_ops.hpp), one at a time, against the
// spec's scalar formulas (ref/float16.hpp, ref/table_rows.hpp): tiny generated functions load a
// row of every dtype, accumulate it, dequantize it, finish a mean and store every output dtype,
// for every width 1..40 and several base offsets, bitwise (NaN-ness for computed NaNs; the
// stores of given NaNs bitwise). Rows end right before a PROT_NONE page, so a read past a row's
// last byte faults; stores are checked for bytes written outside their columns. On any host the
// operations cross-emit and their instruction counts stay within the documented budget; the
// runs need AArch64 (natively or under qemu-aarch64).
#include <doctest/doctest.h>

#include <asmjit/core.h>
#include <asmjit/arm/a64assembler.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "jit/a64/embag_table_ops.hpp"
#include "jit/a64/reg_order.hpp"
#include "jit/embag_plan.hpp"
#include "ref/float16.hpp"
#include "ref/table_rows.hpp"
#include "support/embag_cases.hpp"
#include "support/embag_jit_support.hpp"

namespace {

using shapejit::DType;
using shapejit::Mode;
using shapejit::jit::A64TableOps;
using shapejit::jit::EmbagKey;
using namespace asmjit;
namespace ref = shapejit::ref;

// Test kernels: void f(x0, x1, x2, x3); x9 is the operations' gp scratch.
using TestFn = void (*)(const void*, const void*, void*, int64_t);
constexpr int64_t kMaxDim = 40;

EmbagKey table_key(DType table, int64_t dim, Mode mode = Mode::kSum, bool weighted = false,
                   DType psw = DType::kF32, DType out = DType::kF32) {
  EmbagKey k;
  k.isa = shapejit::jit::Isa::kNeon;
  k.table = table;
  k.dim = dim;
  k.mode = mode;
  k.weighted = weighted;
  k.psw = psw;
  k.out = out;
  return k;
}

std::string dtype_text(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ8: return "q8";
    case DType::kQ4: return "q4";
    case DType::kQ2: return "q2";
    default: return "?";
  }
}

// The operations' registers first, then `extra` vectors for the test's own values, all from
// the caller-saved v0-v7, v16-v31.
struct Plan {
  std::vector<uint32_t> ops, mine;
};
Plan plan_registers(const A64TableOps& ops, int64_t extra) {
  std::vector<uint32_t> order;
  for (uint32_t id : shapejit::jit::a64_vec_order())
    if (id < 8 || id > 15) order.push_back(id);
  const int n = ops.needs().vecs;
  REQUIRE(n + extra <= int64_t(order.size()));
  REQUIRE(ops.needs().gps == 1);
  Plan p;
  p.ops.assign(order.begin(), order.begin() + n);
  p.mine.assign(order.begin() + n, order.begin() + n + extra);
  return p;
}

// Emits prologue-free code: `body` with the ops bound and their constants loaded, then ret.
void emit_body(CodeHolder& code, const EmbagKey& key, int64_t extra,
               const std::function<void(a64::Assembler&, A64TableOps&, const std::vector<uint32_t>&)>& body) {
  a64::Assembler a(&code);
  a.addDiagnosticOptions(DiagnosticOptions::kValidateAssembler);
  A64TableOps ops(key, a);
  const Plan p = plan_registers(ops, extra);
  const uint32_t gp[] = {9};
  ops.bind(p.ops, gp);
  ops.emit_constants();
  body(a, ops, p.mine);
  a.ret(a64::x30);
}

int64_t vecs_of(int64_t cols) { return (cols + 3) / 4; }

// Column blocks as a kernel skeleton would call them: `block` vectors at a time (0: all).
template <class F>
void for_blocks(int64_t dim, int64_t block, F f) {
  const int64_t step = block == 0 ? dim : 4 * block;
  for (int64_t c = 0; c < dim; c += step) f(c, std::min(step, dim - c));
}

std::vector<uint32_t> slice(const std::vector<uint32_t>& v, int64_t first, int64_t cols) {
  return {v.begin() + first / 4, v.begin() + first / 4 + vecs_of(cols)};
}

// Kernels of the four kinds. Offsets: the row (or output) is at base + `off`.
void emit_accumulate(CodeHolder& code, const EmbagKey& key, int64_t off, int64_t block) {
  emit_body(code, key, vecs_of(key.dim), [&](a64::Assembler& a, A64TableOps& ops, const std::vector<uint32_t>& acc) {
    for (size_t k = 0; k < acc.size(); ++k) a.ldr(a64::v(acc[k]), a64::ptr(a64::x2, int32_t(16 * k)));
    ops.load_weight(a64::x1, a64::x3);
    ops.row_setup(a64::x0, off);
    for_blocks(key.dim, block, [&](int64_t c, int64_t n) { ops.accumulate(slice(acc, c, n), a64::x0, off + ops.col_offset(c), n); });
    for (size_t k = 0; k < acc.size(); ++k) a.str(a64::v(acc[k]), a64::ptr(a64::x2, int32_t(16 * k)));
  });
}

void emit_load_value(CodeHolder& code, const EmbagKey& key, int64_t off, int64_t block) {
  emit_body(code, key, vecs_of(key.dim), [&](a64::Assembler& a, A64TableOps& ops, const std::vector<uint32_t>& dst) {
    ops.row_setup(a64::x0, off);
    for_blocks(key.dim, block, [&](int64_t c, int64_t n) { ops.load_value(slice(dst, c, n), a64::x0, off + ops.col_offset(c), n); });
    for (size_t k = 0; k < dst.size(); ++k) a.str(a64::v(dst[k]), a64::ptr(a64::x2, int32_t(16 * k)));
  });
}

using Rng = std::mt19937_64;

#if defined(__aarch64__)  // the helpers of the runs

// x0: f32 source (whole vectors), x1 + off: the output row; mean: x3 the count.
void emit_store(CodeHolder& code, const EmbagKey& key, int64_t off, bool mean) {
  emit_body(code, key, vecs_of(key.dim), [&](a64::Assembler& a, A64TableOps& ops, const std::vector<uint32_t>& src) {
    for (size_t k = 0; k < src.size(); ++k) a.ldr(a64::v(src[k]), a64::ptr(a64::x0, int32_t(16 * k)));
    if (mean) ops.mean_finish(src, a64::x3);
    for_blocks(key.dim, 2, [&](int64_t c, int64_t n) {
      ops.store_output(slice(src, c, n), a64::x1, off + shapejit::jit::embag_col_bytes(key.out, c), n);
    });
  });
}

// Random data with the special values -------------------------------------------------------

float special_f32(Rng& rng) {
  static const uint32_t bits[] = {0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x7F800000u, 0xFF800000u, 0x80000000u,
                                  0x00000000u, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, 0x3F800000u, 0x477FF000u,
                                  0x3F808000u, 0x3F818000u, 0x7FFFFFFFu, 0x477FEFFFu};
  const uint64_t r = rng();
  if (r % 4 == 0) return ref::f32_from_bits(bits[(r >> 8) % std::size(bits)]);
  if (r % 4 == 1) return ref::f32_from_bits(uint32_t(rng()));  // any pattern
  // Moderate values with low bits set (rounding work): +-[2^-8, 2^8).
  return std::ldexp(float(int32_t(rng() % (1u << 24)) - (1 << 23)), int(rng() % 16) - 31);
}

uint16_t special_u16(Rng& rng) {
  static const uint16_t bits[] = {0x7E00, 0xFE01, 0x7C01, 0x7C00, 0xFC00, 0x8000, 0x0000, 0x0001, 0x83FF, 0x7BFF, 0x3C00};
  const uint64_t r = rng();
  if (r % 3 == 0) return bits[(r >> 8) % std::size(bits)];
  return uint16_t(rng());
}

// A row of `key.table` with key.dim columns, laid out per B1, and its decoded form.
struct Row {
  std::vector<unsigned char> bytes;
  std::vector<float> value;  // widened element or code, per column
  float scale = 0, bias = 0;
};

Row make_row(const EmbagKey& key, Rng& rng) {
  Row r;
  const int64_t d = key.dim;
  r.bytes.assign(size_t(ref::table_row_bytes(int64_t(key.table), d)), 0);
  r.value.resize(size_t(d));
  auto put16 = [&](size_t at, uint16_t h) { std::memcpy(&r.bytes[at], &h, 2); };
  if (key.table == DType::kF32) {
    for (int64_t j = 0; j < d; ++j) {
      r.value[size_t(j)] = special_f32(rng);
      std::memcpy(&r.bytes[size_t(4 * j)], &r.value[size_t(j)], 4);
    }
    return r;
  }
  if (key.table == DType::kF16 || key.table == DType::kBF16) {
    for (int64_t j = 0; j < d; ++j) {
      const uint16_t h = special_u16(rng);
      put16(size_t(2 * j), h);
      r.value[size_t(j)] = key.table == DType::kF16 ? ref::f16_to_f32(h) : ref::bf16_to_f32(h);
    }
    return r;
  }
  const int bits = ref::quantized_bits(int64_t(key.table));
  const uint32_t qmax = (1u << bits) - 1;
  for (int64_t j = 0; j < d; ++j) {
    const uint64_t pick = rng() % 8;
    const uint32_t q = pick == 0 ? 0 : pick == 1 ? qmax : uint32_t(rng()) & qmax;
    const int per = 8 / bits;
    r.bytes[size_t(j / per)] |= static_cast<unsigned char>(q << (bits * (j % per)));
    r.value[size_t(j)] = float(q);
  }
  const size_t trailer = size_t(shapejit::jit::embag_col_bytes(key.table, d));
  if (key.table == DType::kQ8) {
    // The double-rounding witness now and then (fmaf and 1.13's f64 step differ): scale
    // 16519105 * 2^-54, bias 1.0.
    const bool witness = rng() % 6 == 0;
    r.scale = witness ? std::ldexp(16519105.0f, -54) : special_f32(rng);
    r.bias = witness ? 1.0f : (rng() % 5 == 0 ? -0.0f : special_f32(rng));
    std::memcpy(&r.bytes[trailer], &r.scale, 4);
    std::memcpy(&r.bytes[trailer + 4], &r.bias, 4);
  } else {
    const uint16_t s = special_u16(rng), b = rng() % 5 == 0 ? uint16_t(0x8000) : special_u16(rng);
    put16(trailer, s);
    put16(trailer + 2, b);
    r.scale = ref::f16_to_f32(s);
    r.bias = ref::f16_to_f32(b);
  }
  return r;
}

bool is_nan(DType t, const unsigned char* p) {
  if (t == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return std::isnan(f);
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return t == DType::kF16 ? (h & 0x7FFF) > 0x7C00 : (h & 0x7FFF) > 0x7F80;
}

bool same(float want, float got) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  return ref::f32_bits(want) == ref::f32_bits(got);
}

std::string hex(float x) {
  std::ostringstream s;
  s << x << " (0x" << std::hex << ref::f32_bits(x) << ")";
  return s.str();
}

// A buffer whose last byte sits right before a PROT_NONE page.
using PageEnd = shapejit::test::embag_jit::PageEndArray<std::byte>;

unsigned char* place_at_page_end(PageEnd& mem, const std::vector<unsigned char>& bytes) {
  unsigned char* p = reinterpret_cast<unsigned char*>(mem.data()) + mem.size() - bytes.size();
  std::memcpy(p, bytes.data(), bytes.size());
  return p;
}

// Keys to run: every table dtype with its weight dtypes.
struct Variant {
  DType table;
  bool weighted;
  DType psw;
};
const Variant kVariants[] = {
    {DType::kF32, false, DType::kF32}, {DType::kF32, true, DType::kF32},  {DType::kF16, false, DType::kF16},
    {DType::kF16, true, DType::kF16},  {DType::kBF16, false, DType::kBF16}, {DType::kBF16, true, DType::kBF16},
    {DType::kQ8, false, DType::kF32},  {DType::kQ8, true, DType::kF32},   {DType::kQ4, false, DType::kF32},
    {DType::kQ4, true, DType::kF16},   {DType::kQ2, false, DType::kF32},  {DType::kQ2, true, DType::kF32},
    {DType::kQ2, true, DType::kF16},
};
constexpr int64_t kOffsets[] = {0, 3, -200, 5000};  // aligned, unaligned, negative, beyond the immediates
constexpr int64_t kBlocks[] = {0, 1, 2, 3, 5};      // vectors per accumulate call (0: whole row)

#endif  // __aarch64__

// Counts the listing's instructions (asmjit prints one per line; labels end with ':').
int64_t count_instructions(const std::function<void(CodeHolder&)>& emit) {
  CodeHolder code;
  code.init(Environment(Arch::kAArch64));
  StringLogger logger;
  code.setLogger(&logger);
  emit(code);
  std::istringstream s(logger.data());
  int64_t n = 0;
  for (std::string line; std::getline(s, line);)
    if (!line.empty() && line.back() != ':') ++n;
  return n;
}

}  // namespace

TEST_CASE("a64 table ops: instruction counts per 16 columns stay within the budget") {
  // One accumulate call of 16 columns at an aligned offset, minus the test's own 4 ldr + 4 str +
  // ret and the row setup; the budget is what the register plan in embag_table_ops.cpp costs.
  struct Budget {
    DType table;
    int64_t accumulate, value;
  } const budgets[] = {{DType::kF32, 6, 2}, {DType::kF16, 10, 6}, {DType::kBF16, 10, 6},
                       {DType::kQ8, 47, 43}, {DType::kQ4, 22, 22}, {DType::kQ2, 25, 25}};
  for (const Budget& b : budgets) {
    CAPTURE(dtype_text(b.table));
    const EmbagKey sum = table_key(b.table, 16), max = table_key(b.table, 16, Mode::kMax);
    const int64_t base = count_instructions([&](CodeHolder& c) { emit_body(c, sum, 4, [](auto&, auto&, auto&) {}); });
    const int64_t setup = count_instructions([&](CodeHolder& c) {
      emit_body(c, sum, 4, [&](a64::Assembler&, A64TableOps& ops, auto&) { ops.row_setup(a64::x0, 0); });
    }) - base;
    const int64_t setup_max = count_instructions([&](CodeHolder& c) {
      emit_body(c, max, 4, [&](a64::Assembler&, A64TableOps& ops, auto&) { ops.row_setup(a64::x0, 0); });
    }) - base;
    const int64_t acc = count_instructions([&](CodeHolder& c) { emit_accumulate(c, sum, 0, 0); }) - base - 8 - setup;
    const int64_t value = count_instructions([&](CodeHolder& c) { emit_load_value(c, max, 0, 0); }) - base - 4 - setup_max;
    MESSAGE(dtype_text(b.table) << ": accumulate " << acc << ", dequantize/widen " << value << " per 16 columns; row setup "
                                << setup << " (sum) / " << setup_max << " (max)");
    CHECK(acc <= b.accumulate);
    CHECK(value <= b.value);
  }
}

TEST_CASE("a64 table ops: the B4 step is fmaf, which torch 1.13's f64 step misses on the witnesses") {
  // The witnesses the NEON kernels are run on below: a full-f32 scale (Q8, or a weighted Q4/Q2
  // scale) makes s * q an f32 midpoint that a tiny t decides only in a single fma.
  const float s = 0x1.2309acp+19f, t = 0x1.d032p-68f;
  CHECK(ref::f32_bits(ref::quantized_step(t, s, 0.0f, 14)) == ref::f32_bits(std::fma(s, 14.0f, t)));
  CHECK(ref::f32_bits(ref::quantized_step(t, s, 0.0f, 14)) != ref::f32_bits(float(std::fma(double(s), 14.0, double(t)))));
  const float q8_scale = std::ldexp(16519105.0f, -54);
  CHECK(ref::dequantized_value(q8_scale, 1.0f, 65) == std::nextafter(1.0f, 2.0f));
  CHECK(float(std::fma(double(q8_scale), 65.0, 1.0)) == 1.0f);
}

#if defined(__aarch64__)

namespace {

struct Runner {
  JitRuntime rt;
  TestFn build(const std::function<void(CodeHolder&)>& emit) {
    CodeHolder code;
    code.init(rt.environment());
    emit(code);
    TestFn fn = nullptr;
    REQUIRE(rt.add(&fn, &code) == kErrorOk);
    return fn;
  }
};

uint64_t run_seed() { return shapejit::test::test_seed(0x7AB1E0F5); }

}  // namespace

TEST_CASE("a64 table ops: accumulate matches the spec's step for every dtype, width and offset") {
  const uint64_t seed = run_seed();
  Runner run;
  PageEnd row_mem(256), psw_mem(64);
  int64_t cases = 0;
  for (const Variant& v : kVariants) {
    for (int64_t dim = 1; dim <= kMaxDim; ++dim) {
      const int64_t off = kOffsets[dim % 4], block = kBlocks[dim % 5];
      const EmbagKey key = table_key(v.table, dim, Mode::kSum, v.weighted, v.psw);
      const TestFn fn = run.build([&](CodeHolder& c) { emit_accumulate(c, key, off, block); });
      Rng rng(seed ^ (uint64_t(v.table) << 40) ^ (uint64_t(v.weighted) << 36) ^ uint64_t(dim) ^ (uint64_t(v.psw) << 44));
      std::vector<float> acc(size_t(4 * vecs_of(dim)));
      for (float& x : acc) x = rng() % 3 == 0 ? 0.0f : special_f32(rng);
      std::vector<float> want = acc;
      for (int row = 0; row < 4; ++row, ++cases) {
        const Row r = make_row(key, rng);
        const unsigned char* p = place_at_page_end(row_mem, r.bytes);
        const int64_t pos = int64_t(rng() % 8);
        std::vector<unsigned char> psw(64);
        for (size_t i = 0; i < 16; ++i) {
          const float f = special_f32(rng);
          if (v.psw == DType::kF32) std::memcpy(&psw[4 * i], &f, 4);
          else {
            const uint16_t h = rng() % 2 ? special_u16(rng) : (v.psw == DType::kF16 ? ref::f32_to_f16(f) : ref::f32_to_bf16(f));
            std::memcpy(&psw[2 * i], &h, 2);
          }
        }
        const unsigned char* w_at = place_at_page_end(psw_mem, psw);
        const float w = v.weighted ? ref::load_weight(w_at, int64_t(v.psw), pos) : 1.0f;
        for (int64_t j = 0; j < dim; ++j) {
          float& a = want[size_t(j)];
          const float x = r.value[size_t(j)];
          if (shapejit::jit::is_quantized_table(v.table)) a = ref::quantized_step(a, w * r.scale, w * r.bias, uint32_t(x));
          else if (!v.weighted) a = a + x;
          else a = key.weighted_terms_fused() ? std::fma(w, x, a) : a + w * x;  // ref's rule
        }
        fn(p - off, w_at, acc.data(), pos);
        shapejit::test::note_direct_run(shapejit::jit::Isa::kNeon);
        for (int64_t j = 0; j < dim; ++j) {
          if (same(want[size_t(j)], acc[size_t(j)])) continue;
          FAIL_CHECK("accumulate " << dtype_text(v.table) << (v.weighted ? " weighted psw " + dtype_text(v.psw) : std::string())
                     << " dim " << dim << " offset " << off << " block " << block << " row " << row << " column " << j
                     << ": want " << hex(want[size_t(j)]) << " got " << hex(acc[size_t(j)]) << " (seed " << seed << ")");
          acc[size_t(j)] = want[size_t(j)];  // report each difference once
        }
      }
      run.rt.release(fn);
    }
  }
  MESSAGE(cases << " rows accumulated, seed " << seed);
}

TEST_CASE("a64 table ops: fmaf (B4) on the double-rounding witnesses of Q8 and weighted Q4") {
  // Q8: scale 16519105 * 2^-54, bias 1.0, code 65 from +0.0 gives 1.0000001 (1.13's f64 step: 1.0).
  // Q4 with an f32 weight w and scale 1.0: s = w = 0x1.2309acp+19, code 14, acc 0x1.d032p-68
  // gives 0x1.fd50eep+22 (the f64 step: 0x1.fd50ecp+22).
  Runner run;
  PageEnd row_mem(64), psw_mem(4);
  struct Witness {
    DType table;
    float scale, bias, w, acc, want;
    uint32_t code;
  } const witnesses[] = {{DType::kQ8, std::ldexp(16519105.0f, -54), 1.0f, 1.0f, 0.0f, 0x1.000002p+0f, 65},
                         {DType::kQ4, 1.0f, 0.0f, 0x1.2309acp+19f, 0x1.d032p-68f, 0x1.fd50eep+22f, 14}};
  for (const Witness& wt : witnesses) {
    for (int64_t dim : {4, 16}) {
      const bool weighted = wt.table == DType::kQ4;
      const EmbagKey key = table_key(wt.table, dim, Mode::kSum, weighted, DType::kF32);
      std::vector<unsigned char> row(size_t(ref::table_row_bytes(int64_t(wt.table), dim)));
      const size_t trailer = size_t(shapejit::jit::embag_col_bytes(wt.table, dim));
      for (size_t i = 0; i < trailer; ++i)
        row[i] = static_cast<unsigned char>(wt.table == DType::kQ8 ? wt.code : wt.code | wt.code << 4);
      if (wt.table == DType::kQ8) {
        std::memcpy(&row[trailer], &wt.scale, 4);
        std::memcpy(&row[trailer + 4], &wt.bias, 4);
      } else {
        const uint16_t s = ref::f32_to_f16(wt.scale), b = ref::f32_to_f16(wt.bias);
        std::memcpy(&row[trailer], &s, 2);
        std::memcpy(&row[trailer + 2], &b, 2);
      }
      const unsigned char* p = place_at_page_end(row_mem, row);
      std::vector<unsigned char> w(4);
      std::memcpy(w.data(), &wt.w, 4);
      const unsigned char* wp = place_at_page_end(psw_mem, w);
      std::vector<float> acc(size_t(dim), wt.acc);
      const TestFn fn = run.build([&](CodeHolder& c) { emit_accumulate(c, key, 0, 0); });
      fn(p, wp, acc.data(), 0);
      for (int64_t j = 0; j < dim; ++j)
        CHECK_MESSAGE(ref::f32_bits(acc[size_t(j)]) == ref::f32_bits(wt.want),
                      dtype_text(wt.table) << " dim " << dim << " column " << j << ": got " << hex(acc[size_t(j)]));
      run.rt.release(fn);
    }
  }
}

TEST_CASE("a64 table ops: load_value widens or dequantizes every column exactly") {
  const uint64_t seed = run_seed() ^ 0x51;
  Runner run;
  PageEnd row_mem(256);
  for (DType table : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8, DType::kQ4, DType::kQ2}) {
    for (int64_t dim = 1; dim <= kMaxDim; ++dim) {
      const int64_t off = kOffsets[(dim + 1) % 4], block = kBlocks[(dim + 2) % 5];
      const EmbagKey key = table_key(table, dim, Mode::kMax);
      const TestFn fn = run.build([&](CodeHolder& c) { emit_load_value(c, key, off, block); });
      Rng rng(seed ^ (uint64_t(table) << 40) ^ uint64_t(dim));
      for (int rep = 0; rep < 4; ++rep) {
        const Row r = make_row(key, rng);
        const unsigned char* p = place_at_page_end(row_mem, r.bytes);
        std::vector<float> got(size_t(4 * vecs_of(dim)), -1.0f);
        fn(p - off, nullptr, got.data(), 0);
        for (int64_t j = 0; j < dim; ++j) {
          const float x = r.value[size_t(j)];
          const float want = shapejit::jit::is_quantized_table(table) ? ref::dequantized_value(r.scale, r.bias, uint32_t(x)) : x;
          CHECK_MESSAGE(same(want, got[size_t(j)]), "load_value " << dtype_text(table) << " dim " << dim << " offset " << off
                                                                  << " column " << j << ": want " << hex(want) << " got "
                                                                  << hex(got[size_t(j)]) << " (seed " << seed << ")");
        }
      }
      run.rt.release(fn);
    }
  }
}

TEST_CASE("a64 table ops: store_output and mean_finish round as the spec says, touching only their bytes") {
  const uint64_t seed = run_seed() ^ 0x57;
  Runner run;
  PageEnd out_mem(512);
  for (DType table : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8}) {
    for (DType out : {DType::kF32, DType::kF16, DType::kBF16}) {
      if ((table == DType::kF16 || table == DType::kBF16) && out != table) continue;  // float tables keep their dtype
      for (bool mean : {false, true}) {
        for (int64_t dim = 1; dim <= kMaxDim; ++dim) {
          const int64_t off = kOffsets[dim % 4];
          const EmbagKey key = table_key(table, dim, mean ? Mode::kMean : Mode::kSum, false, DType::kF32, out);
          const TestFn fn = run.build([&](CodeHolder& c) { emit_store(c, key, off, mean); });
          Rng rng(seed ^ (uint64_t(table) << 40) ^ (uint64_t(out) << 32) ^ (uint64_t(mean) << 30) ^ uint64_t(dim));
          for (int rep = 0; rep < 4; ++rep) {
            std::vector<float> src(size_t(4 * vecs_of(dim)));
            for (float& x : src) x = special_f32(rng);
            static const int64_t counts[] = {0, 1, 2, 3, 7, 257, 259, 2049, 2051, 65519, 65520, int64_t(1) << 40};
            const int64_t count = rng() % 2 ? counts[rng() % std::size(counts)] : int64_t(rng() % 100000);
            const int64_t elem = out == DType::kF32 ? 4 : 2, bytes = elem * dim;
            // Canary bytes before the row; the row's end touches the protected page.
            std::vector<unsigned char> fill(size_t(bytes + 64), 0xA5);
            unsigned char* end = place_at_page_end(out_mem, fill) + fill.size();
            unsigned char* row = end - bytes;
            fn(src.data(), row - off, nullptr, count);
            for (int64_t i = 0; i < 64; ++i) REQUIRE_MESSAGE(row[i - 64] == 0xA5, "byte " << i - 64 << " before the output written");
            for (int64_t j = 0; j < dim; ++j) {
              float x = src[size_t(j)];
              if (mean) {
                const bool half = table == DType::kF16 || table == DType::kBF16;
                const float c = float(std::max<int64_t>(count, 1));
                const float sum = table == DType::kBF16 ? ref::round_bf16_sum(key.bf16_fbgemm_path(), x)
                                                        : half ? ref::round_to_output(int64_t(table), x) : x;
                x = half ? sum / ref::round_to_output(int64_t(table), c) : x / c;
              }
              std::vector<unsigned char> want(static_cast<size_t>(elem));
              ref::store_float_output(want.data(), int64_t(out), 0, x, key.bf16_out_half_up());
              const unsigned char* got = row + elem * j;
              // Stores of given values are bitwise (NaNs included); a NaN the division computed
              // may carry another payload.
              const bool equal = std::memcmp(want.data(), got, size_t(elem)) == 0 ||
                                 (mean && is_nan(out, want.data()) && is_nan(out, got));
              CHECK_MESSAGE(equal, (mean ? "mean " : "store ") << dtype_text(table) << " -> " << dtype_text(out) << " dim "
                                   << dim << " offset " << off << " count " << count << " column " << j << " of "
                                   << hex(src[size_t(j)]) << " (seed " << seed << ")");
            }
          }
          run.rt.release(fn);
        }
      }
    }
  }
}

TEST_CASE("a64 table ops: exact-width loads of 1..16 bytes read only their bytes") {
  Runner run;
  PageEnd mem(64);
  const EmbagKey key = table_key(DType::kQ8, 16);
  for (int64_t n = 1; n <= 16; ++n) {
    for (int64_t off : kOffsets) {
      const TestFn fn = run.build([&](CodeHolder& c) {
        emit_body(c, key, 1, [&](a64::Assembler& a, A64TableOps& ops, const std::vector<uint32_t>& v) {
          a.movi(a64::v(v[0]).b16(), 0xEE);
          ops.load_bytes(v[0], a64::x0, off, n);
          a.str(a64::v(v[0]), a64::ptr(a64::x2));
        });
      });
      std::vector<unsigned char> src(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) src[size_t(i)] = static_cast<unsigned char>(0x10 + i);
      const unsigned char* p = place_at_page_end(mem, src);
      unsigned char got[16];
      fn(p - off, nullptr, got, 0);
      for (int64_t i = 0; i < 16; ++i)
        CHECK_MESSAGE(got[i] == (i < n ? src[size_t(i)] : 0), "n " << n << " offset " << off << " byte " << i);
      run.rt.release(fn);
    }
  }
}

#endif  // __aarch64__

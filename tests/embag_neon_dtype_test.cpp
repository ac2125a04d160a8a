// Generated NEON kernels over every table dtype (f16, bf16, Q8, Q4, Q2; f32 as the control)
// against the reference, bitwise: mode x weights (and their dtype) x output dtype x padding x
// pruning x index/offset types x widths x prefetch distances, from the shared random case
// generator (tests/support/embag_cases.hpp). Each case builds the kernel for its exact key
// (isa neon) and runs it as the runtime does (plan, key, arguments, sum-mode zeroing, whole or
// in bag ranges), with the table copied before a PROT_NONE page so a read past the last row's
// last byte faults. A width sweep then forces every D in 1..72 and the block-boundary widths.
// On any host the keys cross-emit (and objdump decodes them when installed); the runs need
// AArch64 (natively or under qemu-aarch64). Failures print the seed, the case and its replay.
#include <doctest/doctest.h>

#include <asmjit/core.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "jit/embag_codegen.hpp"
#include "jit/embag_plan.hpp"
#include "ref/embedding_bag.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/embag/validate.hpp"
#include "support/a64_support.hpp"
#include "support/embag_cases.hpp"
#include "support/embag_dtype_battery.hpp"
#include "support/embag_jit_support.hpp"

namespace {

using shapejit::DType;
using shapejit::Mode;
using shapejit::jit::EmbagKey;
using shapejit::jit::Isa;
using shapejit::test::EmbagCase;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;

constexpr shapejit_dtype kTables[] = {SHAPEJIT_F16, SHAPEJIT_BF16, SHAPEJIT_Q8,
                                      SHAPEJIT_Q4,  SHAPEJIT_Q2,   SHAPEJIT_F32};
constexpr int kMaxFailures = 4;

#if defined(__aarch64__)  // the helpers of the tests that run NEON code
shapejit::test::EmbagCaseOptions neon_options(shapejit_dtype table, int64_t max_dim) {
  shapejit::test::EmbagCaseOptions o;
  o.table = table;
  o.extended = true;
  o.max_dim = max_dim;
  o.max_table_elements = 1 << 15;
  o.max_indices = 300;
  o.max_output_elements = 1 << 14;
  return o;
}

// The NEON key of a case: the runtime's key with the ISA set (make_embag_key gives the generic
// kernel's key when the gate refuses one, and that key has every other field), and a prefetch
// distance from the battery's rotation.
EmbagKey neon_key_of(const shapejit::rt::EmbagCallPlan& plan, int64_t number) {
  EmbagKey key = shapejit::rt::make_embag_key(plan, Isa::kScalar);
  key.isa = Isa::kNeon;
  key.dim = plan.dim;
  const auto& pf = shapejit::test::embag_jit::kBatteryPrefetches;
  key.prefetch = pf[size_t(number) % std::size(pf)];
  return key;
}
#endif

}  // namespace

TEST_CASE("embag neon dtypes: every dtype key cross-emits, and objdump decodes it") {
  // Every combination the spec allows, at a few widths (tails, a group, blocks, a block loop).
  int64_t emitted = 0;
  for (DType table : {DType::kF16, DType::kBF16, DType::kQ8, DType::kQ4, DType::kQ2}) {
    const bool quantized = shapejit::jit::is_quantized_table(table);
    std::vector<DType> outs = quantized ? std::vector<DType>{DType::kF32, DType::kF16, DType::kBF16}
                                        : std::vector<DType>{table};
    std::vector<DType> psws = table == DType::kQ8   ? std::vector<DType>{DType::kF32}
                              : quantized           ? std::vector<DType>{DType::kF32, DType::kF16}
                                                    : std::vector<DType>{table};
    for (Mode mode : {Mode::kSum, Mode::kMean, Mode::kMax})
      for (int weighted = 0; weighted < (mode == Mode::kSum ? 2 : 1); ++weighted)
        for (DType psw : weighted ? psws : std::vector<DType>{DType::kF32})
          for (DType out : outs)
            for (int flags = 0; flags < 4; ++flags)
              for (int64_t dim : {1, 3, 6, 16, 37, 128, 1100, 2, 4, 36}) {
                if ((table == DType::kQ4 && dim % 2) || (table == DType::kQ2 && dim % 4)) continue;
                EmbagKey k;
                k.isa = Isa::kNeon;
                k.table = table;
                k.dim = dim;
                k.mode = mode;
                k.weighted = weighted != 0;
                k.psw = psw;
                k.out = out;
                k.padding = flags & 1;
                k.pruned = quantized && (flags & 2);
                k.index = flags & 2 ? DType::kI32 : DType::kI64;
                k.offset = DType::kI64;
                k.prefetch = dim == 37 || dim == 36 ? 0 : 16;
                CAPTURE(k.name());
                if (const auto why = shapejit::jit::embag_key_unsupported_reason(k)) {
                  FAIL_CHECK("the gate (jit/embag_plan.cpp) refuses a key the spec allows: " << *why);
                  return;  // one report is enough
                }
                shapejit::test::neon::Emitted out_code;
                CHECK_NOTHROW(out_code = shapejit::test::neon::emit_a64(
                                  [&](asmjit::CodeHolder& code) { shapejit::jit::emit_embag_kernel(k, code); }));
                ++emitted;
                // objdump is slow: decode one width per combination.
                if (dim != 37 && dim != 36) continue;
                const auto decoded = shapejit::test::neon::objdump_a64(out_code.bytes);
                if (!decoded) continue;
                INFO("asmjit:\n" << out_code.listing << "\nobjdump:\n" << decoded->text);
                CHECK(decoded->mnemonics == shapejit::test::neon::listing_mnemonics(out_code.listing));
              }
  }
  MESSAGE("cross-emitted " << emitted << " NEON dtype kernels");
}

TEST_CASE("embag neon dtypes: each dtype's kernel uses its widening and conversion instructions") {
  struct Expect {
    DType table;
    Mode mode;
    bool weighted;
    DType psw, out;
    std::vector<std::string> present, absent;
  };
  const std::vector<Expect> cases{
      {DType::kF16, Mode::kSum, false, DType::kF32, DType::kF16, {"fcvtl", "fcvtl2", "fadd", "fcvtn"}, {"shll", "fmla"}},
      {DType::kF16, Mode::kSum, true, DType::kF16, DType::kF16, {"fcvt", "fmla"}, {"fadd"}},
      {DType::kBF16, Mode::kMean, false, DType::kF32, DType::kBF16, {"shll", "shll2", "fdiv", "shrn"}, {"fcvtl"}},
      // bf16 weighted without padding_idx: rule H6 fuses (fmla), no product rounded apart.
      {DType::kBF16, Mode::kSum, true, DType::kBF16, DType::kBF16, {"shll", "fmla", "shrn"}, {"fmul"}},
      // Every bit width takes B4's f32 step (fadd, then fmla by element): no f64 (1.13's step,
      // fcvtl to 2d and fcvtn back) and no separate multiply, also in max.
      {DType::kQ8, Mode::kSum, false, DType::kF32, DType::kF32, {"uxtl", "ucvtf", "fadd", "fmla"}, {"zip1", "fcvtn", "fcvtl"}},
      {DType::kQ8, Mode::kMax, false, DType::kF32, DType::kF16, {"fcmgt", "bit", "fcvtn", "fmla"}, {"fmul", "fcvtl"}},
      // Q4/Q2: nibbles / crumbs split and interleaved.
      {DType::kQ4, Mode::kSum, false, DType::kF32, DType::kF32, {"and", "ushr", "zip1", "fmla"}, {"fcvtn2"}},
      {DType::kQ4, Mode::kSum, true, DType::kF16, DType::kF32, {"fcvt", "fmul", "fmla"}, {"fcvtn2", "fcvtl2"}},
      {DType::kQ2, Mode::kMax, false, DType::kF32, DType::kBF16, {"zip1", "fcmgt", "shrn"}, {}},
  };
  for (const Expect& e : cases) {
    EmbagKey k;
    k.isa = Isa::kNeon;
    k.table = e.table;
    k.dim = 40;
    k.mode = e.mode;
    k.weighted = e.weighted;
    k.psw = e.psw;
    k.out = e.out;
    CAPTURE(k.name());
    const auto out = shapejit::test::neon::emit_a64(
        [&](asmjit::CodeHolder& code) { shapejit::jit::emit_embag_kernel(k, code); });
    const std::vector<std::string> m = shapejit::test::neon::listing_mnemonics(out.listing);
    INFO("listing:\n" << out.listing);
    for (const std::string& p : e.present) CHECK_MESSAGE(shapejit::test::neon::has(m, p), "missing " << p);
    for (const std::string& a : e.absent) CHECK_MESSAGE(!shapejit::test::neon::has(m, a), "unexpected " << a);
  }
}

#if defined(__aarch64__)

namespace {

// Runs case c on its NEON kernel; "" when every output equals the reference bitwise.
std::string check_neon(const EmbagCase& c, asmjit::JitRuntime& rt, std::mt19937_64& rng, int64_t* ran) {
  const shapejit::test::GuardedTable table(c);
  const shapejit_embedding_bag_ex_args ex = c.to_ex_args(table.data());
  const shapejit::rt::EmbagCallPlan plan = shapejit::rt::plan_embedding_bag(ex);
  if (plan.partial_final_offset || plan.dim == 0) return "";  // reference-only quirk; dim 0 has no kernel
  const EmbagKey key = neon_key_of(plan, c.number);
  if (const auto why = shapejit::jit::embag_key_unsupported_reason(key))
    return "the gate refuses " + key.name() + ": " + *why;
  GuardedOutputs want(plan.shapes, 0xA5, false, c.output_dtype), got(plan.shapes, 0x5A, false, c.output_dtype);
  shapejit::ref::embedding_bag(ex, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                               want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
  shapejit::jit::GeneratedEmbagKernel kernel;
  try {
    kernel = shapejit::jit::generate_embag_kernel(key, rt);
  } catch (const shapejit::Error& e) {
    return key.name() + ": generation failed: " + e.what();
  }
  // Through the AAPCS64 probe: the kernel must leave x19-x28 and d8-d15 as it found them (wide
  // rows and the quantized dtypes' extra registers reach v8-v15).
  const auto probe = shapejit::test::neon::wrap_with_register_probe(rt, reinterpret_cast<const void*>(kernel.fn));
  if (!probe) return "the register probe could not be generated";
  const auto run = reinterpret_cast<shapejit::jit::EmbagKernelFn>(probe);
  shapejit::jit::EmbagKernelArgs args = shapejit::rt::make_embag_kernel_args(
      plan, got.data(EmbagOutput::kOutput), got.data(EmbagOutput::kOffset2bag), got.data(EmbagOutput::kBagSize),
      got.data(EmbagOutput::kMaxIndices));
  shapejit::rt::zero_sum_mode_counts(plan, got.data(EmbagOutput::kBagSize), got.data(EmbagOutput::kMaxIndices));
  shapejit::test::note_direct_run(key.isa);
  std::string saved;
  if (c.number % 2 == 0) {
    run(&args);
    saved = shapejit::test::neon::take_probe_report();
  } else {  // bag ranges, as the partition hands them to threads
    for (int64_t b = 0; b < plan.num_bags;) {
      const int64_t e = std::min(plan.num_bags, b + std::uniform_int_distribution<int64_t>(1, 7)(rng));
      shapejit::jit::EmbagKernelArgs part = args;
      part.bag_begin = b;
      part.bag_end = e;
      run(&part);
      saved += shapejit::test::neon::take_probe_report();
      b = e;
    }
  }
  shapejit::rt::fill_unbagged_positions(plan, got.data(EmbagOutput::kOffset2bag));
  rt.release(reinterpret_cast<void*>(probe));
  rt.release(kernel.fn);
  ++*ran;
  if (!saved.empty()) return key.name() + ": callee-saved registers changed: " + saved;
  const std::string diff = shapejit::test::first_output_difference(want, got, c.output_dtype);
  return diff.empty() ? "" : key.name() + ": " + diff;
}

struct Battery {
  uint64_t seed;
  asmjit::JitRuntime rt;
  std::mt19937_64 rng;
  int64_t ran = 0;
  int failures = 0;

  explicit Battery(uint64_t s) : seed(s), rng(s) {}
  void run(const EmbagCase& c, const std::string& options) {
    if (failures >= kMaxFailures) return;
    if (const std::string diff = check_neon(c, rt, rng, &ran); !diff.empty()) {
      ++failures;
      FAIL_CHECK("NEON kernel differs from the reference: " << diff << "\n" << options << "\n" << c.describe());
    }
  }
};

}  // namespace

TEST_CASE("embag neon dtypes: random cases of every dtype equal the reference bitwise") {
  Battery bat(shapejit::test::test_seed(0x4E0D7E5));
  const auto only = shapejit::test::test_case_filter();
  const int64_t cases = shapejit::test::test_case_count(150);
  for (shapejit_dtype table : kTables) {
    for (int64_t k = 0; k < cases; ++k) {
      if (only && k != *only) continue;
      bat.run(shapejit::test::make_embag_case(bat.seed, k, neon_options(table, 1100)),
              "options: extended, max_dim 1100 (table " + std::string(shapejit::test::dtype_name(table)) + ")");
    }
  }
  MESSAGE("random: seed " << bat.seed << " (SHAPEJIT_TEST_SEED replays), " << bat.ran << " NEON kernels run");
  CHECK(bat.failures == 0);
}

// Every width 1..72 (tails and groups of every size) and the widths around block boundaries,
// per dtype: cases are drawn with max_dim = D until one has that width (the generator's width
// draw ends at max_dim often), so (seed, number, max_dim) replays it.
TEST_CASE("embag neon dtypes: a width sweep over every dtype equals the reference bitwise") {
  Battery bat(shapejit::test::test_seed(0x5EE9D));
  std::vector<int64_t> dims;
  for (int64_t d = 1; d <= 72; ++d) dims.push_back(d);
  for (int64_t d : {76, 80, 84, 96, 100, 124, 128, 132, 160, 200, 252, 256, 260, 380, 516, 1028})
    dims.push_back(d);
  int64_t picked = 0;
  for (shapejit_dtype table : kTables) {
    for (int64_t d : dims) {
      if (table == SHAPEJIT_Q4 && d % 2) continue;  // nbit widths are whole bytes of codes
      if (table == SHAPEJIT_Q2 && d % 4) continue;
      for (int64_t k = int64_t(d) * 1000, tries = 0; tries < 400; ++k, ++tries) {
        const EmbagCase c = shapejit::test::make_embag_case(bat.seed, k, neon_options(table, d));
        if (c.dim != d) continue;
        bat.run(c, "options: extended, max_dim " + std::to_string(d));
        ++picked;
        break;
      }
    }
  }
  MESSAGE("width sweep: seed " << bat.seed << ", " << picked << " widths, " << bat.ran << " NEON kernels run");
  CHECK(bat.failures == 0);
}

// Max with int64 ids restarts a bag on 64-bit id lanes when an id does not fit 32 bits; that
// path has its own column blocks (and so its own load groups). Id r + 2^62 addresses the bytes
// of row r when the row stride is a multiple of 4 bytes (r * stride + 2^62 * stride wraps to
// the same address), so odd rows get huge ids without a huge table; expected: the reference on
// the plain ids, with the winning odd rows' ids shifted the same way. Pruned cases are left
// out (the mapping is indexed by the id), and so are cases whose padding row is odd.
TEST_CASE("embag neon dtypes: max with ids beyond 32 bits equals the reference bitwise") {
  constexpr int64_t kShift = int64_t(1) << 62;
  Battery bat(shapejit::test::test_seed(0x1D5B16));
  int64_t run = 0;
  for (shapejit_dtype table : kTables) {
    int64_t taken = 0;
    for (int64_t k = 0; k < 4000 && taken < 40 && bat.failures < kMaxFailures; ++k) {
      const EmbagCase c = shapejit::test::make_embag_case(bat.seed, k, neon_options(table, 600));
      const int64_t elem = table == SHAPEJIT_F32 ? 4 : table == SHAPEJIT_F16 || table == SHAPEJIT_BF16 ? 2 : 1;
      if (c.mode != SHAPEJIT_MAX || c.index_dtype != SHAPEJIT_I64 || c.mapping || c.offsets_as_lengths ||
          c.skip_index_outputs ||
          c.aten_partial_final_offset || (c.row_stride * elem) % 4 != 0 || c.dim == 0 ||
          (c.padding_row() && *c.padding_row() % 2 == 1))
        continue;
      ++taken;
      const shapejit::test::GuardedTable guarded(c);
      const shapejit_embedding_bag_ex_args ex = c.to_ex_args(guarded.data());
      const shapejit::rt::EmbagCallPlan plan = shapejit::rt::plan_embedding_bag(ex);
      const EmbagKey key = neon_key_of(plan, c.number);
      GuardedOutputs want(plan.shapes, 0xA5, false, c.output_dtype), got(plan.shapes, 0x5A, false, c.output_dtype);
      shapejit::ref::embedding_bag(ex, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                                   want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
      auto* expected_ids = static_cast<int64_t*>(want.data(EmbagOutput::kMaxIndices));
      for (int64_t e = 0; e < want.elements(EmbagOutput::kMaxIndices); ++e)
        if (expected_ids[e] % 2 == 1) expected_ids[e] += kShift;
      std::vector<int64_t> shifted = c.indices;
      for (int64_t& id : shifted)
        if (id % 2 == 1) id += kShift;
      shapejit::jit::EmbagKernelArgs args = shapejit::rt::make_embag_kernel_args(
          plan, got.data(EmbagOutput::kOutput), got.data(EmbagOutput::kOffset2bag), got.data(EmbagOutput::kBagSize),
          got.data(EmbagOutput::kMaxIndices));
      args.indices = shifted.data();
      const auto kernel = shapejit::jit::generate_embag_kernel(key, bat.rt);
      shapejit::test::note_direct_run(key.isa);
      kernel.fn(&args);
      bat.rt.release(kernel.fn);
      ++run;
      const std::string diff = shapejit::test::first_output_difference(want, got, c.output_dtype);
      if (!diff.empty()) {
        ++bat.failures;
        FAIL_CHECK("NEON kernel (" << key.name() << ", odd rows' ids + 2^62) differs: " << diff << "\n"
                                   << "options: extended, max_dim 600\n" << c.describe());
      }
    }
  }
  MESSAGE("ids beyond 32 bits: seed " << bat.seed << ", " << run << " NEON kernels run");
  CHECK(run > 100);
  CHECK(bat.failures == 0);
}

// The x86 back end's dtype battery (tests/support/embag_dtype_battery.hpp: every dtype x mode x
// weights x output x padding x pruning over its list of widths, its own problem generator) on
// NEON: a second, independently drawn battery.
TEST_CASE("embag neon dtypes: the shared dtype battery passes on NEON") {
  namespace dt = shapejit::test::embag_dtype;
  dt::Options o;
  o.isa = Isa::kNeon;
  o.seed = shapejit::test::test_seed(0xd7e5b);
  o.dims = dt::default_dims();
  const dt::Result r = dt::run(o);
  for (const std::string& text : r.reports) FAIL_CHECK(text);
  MESSAGE("shared dtype battery: seed " << o.seed << ", " << r.kernels << " NEON kernels, " << r.runs << " runs, "
                                        << r.checked << " values compared, " << r.failures << " failures");
  CHECK(r.kernels > 0);
  CHECK(r.failures == 0);
}

#endif  // __aarch64__

// Differential test of the public C ABI against the scalar reference (ref::embedding_bag) over
// random valid calls, with 1 and 2 engine threads: all four outputs must be byte-for-byte equal
// and no output's guard zone may change. Once the JIT runs behind the API, this is the
// JIT-vs-reference fuzz test.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "ref/embedding_bag.hpp"
#include "shapejit/shapejit.h"
#include "support/embag_cases.hpp"

namespace {

using shapejit::test::EmbagCase;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;

constexpr uint64_t kDefaultSeed = 0x5EEDEBA6;
// Sanitizer builds (Debug, instrumented) run a third of the cases to keep CI time in check.
#if defined(__SANITIZE_ADDRESS__)
constexpr int64_t kDefaultCases = 1000;
#else
constexpr int64_t kDefaultCases = 3000;
#endif
constexpr int kMaxFailingCases = 5;

// Smaller tables than the oracle's so thousands of cases stay fast, but the full width range
// of the JIT (every D up to 72, a spread up to 4100). Every 8th case is large enough to be
// split across threads (tens of thousands of row elements), so 1 vs 2 threads really differ.
shapejit::test::EmbagCaseOptions api_options(int64_t number) {
  shapejit::test::EmbagCaseOptions o;
  o.max_dim = 4100;
  const bool large = number % 8 == 0;
  o.max_table_elements = large ? 1 << 16 : 1 << 15;
  o.max_indices = large ? 4096 : 512;
  o.max_output_elements = large ? 1 << 17 : 1 << 15;
  return o;
}

std::string shapes_text(const shapejit_embedding_bag_shapes& s) {
  return "output " + std::to_string(s.output_rows) + "x" + std::to_string(s.output_cols) + ", ints " +
         shapejit::test::dtype_name(s.index_out_dtype) + ", offset2bag " + std::to_string(s.offset2bag_len) +
         ", bag_size " + std::to_string(s.bag_size_len) + ", max_indices " + std::to_string(s.max_indices_rows) +
         "x" + std::to_string(s.max_indices_cols);
}

// Whether a NaN must match the reference's sign and payload too. It need not: which NaN an
// add of two NaNs returns depends on the operand order the compiler or the ISA picks (x86
// keeps the first source's, AArch64's FMA the addend's), and IEEE 754 leaves it open. Every
// other bit is exact: NaN-ness, -0.0, infinities and every finite value.
constexpr bool kNanBitsMustMatch = false;

std::string element_text(std::span<const std::byte> bytes, size_t e, size_t element_bytes) {
  char text[80];
  if (element_bytes == 4 && bytes.size() >= (e + 1) * 4) {  // output: float with its bits
    float f;
    uint32_t bits;
    std::memcpy(&f, bytes.data() + e * 4, 4);
    std::memcpy(&bits, bytes.data() + e * 4, 4);
    std::snprintf(text, sizeof text, "%.9g (bits 0x%08x)", static_cast<double>(f), bits);
  } else {
    uint64_t v = 0;
    std::memcpy(&v, bytes.data() + e * element_bytes, element_bytes);
    std::snprintf(text, sizeof text, "%lld (bytes 0x%llx)",
                  element_bytes == 4 ? static_cast<long long>(static_cast<int32_t>(v)) : static_cast<long long>(v),
                  static_cast<unsigned long long>(v));
  }
  return text;
}

bool both_nan(std::span<const std::byte> a, std::span<const std::byte> b, size_t e) {
  float x, y;
  std::memcpy(&x, a.data() + e * 4, 4);
  std::memcpy(&y, b.data() + e * 4, 4);
  return std::isnan(x) && std::isnan(y);
}

// First differing element of one output ("" when the bytes are equal).
std::string compare_bytes(EmbagOutput which, std::span<const std::byte> api, std::span<const std::byte> ref,
                          size_t element_bytes) {
  if (std::memcmp(api.data(), ref.data(), api.size()) == 0) return "";
  const bool is_float = which == EmbagOutput::kOutput;
  for (size_t e = 0; e < api.size() / element_bytes; ++e) {
    if (std::memcmp(api.data() + e * element_bytes, ref.data() + e * element_bytes, element_bytes) == 0) continue;
    const bool nan_only = is_float && both_nan(api, ref, e);
    if (nan_only && !kNanBitsMustMatch) continue;
    return std::string(shapejit::test::output_name(which)) + "[" + std::to_string(e) + "]: API " +
           element_text(api, e, element_bytes) + ", reference " + element_text(ref, e, element_bytes) +
           (nan_only ? " (both NaN: sign/payload differ, i.e. another operand order than the reference)" : "") +
           "\n";
  }
  return "";
}

// One case through the API (with `threads` engine threads) and the reference.
std::string check_case(const EmbagCase& c) {
  const shapejit_embedding_bag_args args = c.to_args();
  shapejit_embedding_bag_shapes shapes{};
  if (shapejit_embedding_bag_output_shapes(&args, &shapes) != SHAPEJIT_OK)
    return std::string("the API rejected a valid case (output_shapes): ") + shapejit_last_error() + "\n";
  const shapejit_embedding_bag_shapes want = shapejit::ref::embedding_bag_shapes(args);
  if (shapes_text(shapes) != shapes_text(want))
    return "shapes: API " + shapes_text(shapes) + "; reference " + shapes_text(want) + "\n";

  // Different sentinels, so an element both sides forget to write still differs.
  GuardedOutputs api(shapes, 0xCD, /*null_when_empty=*/c.number % 3 == 0);
  GuardedOutputs ref(shapes, 0x5A);
  if (api.run(args) != SHAPEJIT_OK)
    return std::string("the API rejected a valid case: ") + shapejit_last_error() + "\n";
  shapejit::ref::embedding_bag(args, ref.data(EmbagOutput::kOutput), ref.data(EmbagOutput::kOffset2bag),
                               ref.data(EmbagOutput::kBagSize), ref.data(EmbagOutput::kMaxIndices));
  std::string diff = api.check_guards();
  if (!diff.empty()) diff += "\n";
  const size_t int_bytes = shapes.index_out_dtype == SHAPEJIT_I32 ? 4 : 8;
  for (EmbagOutput which : shapejit::test::kAllEmbagOutputs)
    diff += compare_bytes(which, api.bytes(which), ref.bytes(which), which == EmbagOutput::kOutput ? 4 : int_bytes);
  return diff;
}

TEST_CASE("embedding_bag C ABI equals the reference bitwise on random valid calls (1 and 2 threads)") {
  const uint64_t seed = shapejit::test::test_seed(kDefaultSeed);
  const auto only = shapejit::test::test_case_filter();
  const int64_t cases = shapejit::test::test_case_count(kDefaultCases);
  MESSAGE("embedding_bag API-vs-reference: seed " << seed << " (SHAPEJIT_TEST_SEED replays), " << cases
                                                  << " cases x threads {1, 2}");
  const auto start = std::chrono::steady_clock::now();
  int failing = 0;
  int64_t compared = 0, by_mode[3] = {}, row_elements = 0, large = 0;
  for (int threads : {1, 2}) {
    REQUIRE(shapejit_set_num_threads(threads) == SHAPEJIT_OK);
    for (int64_t k = 0; k < cases && failing < kMaxFailingCases; ++k) {
      if (only && k != *only) continue;
      const EmbagCase c = shapejit::test::make_embag_case(seed, k, api_options(k));
      if (std::string diff = check_case(c); !diff.empty()) {
        ++failing;
        FAIL_CHECK("with " << threads << " engine thread(s):\n" << c.describe() << diff);
        continue;
      }
      ++compared;
      ++by_mode[c.mode];
      row_elements += int64_t(c.indices.size()) * c.dim;
      large += int64_t(c.indices.size()) * c.dim >= (1 << 16) && c.num_bags() > 1;
    }
  }
  shapejit_set_num_threads(0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("compared " << compared << " calls (sum " << by_mode[0] << ", mean " << by_mode[1] << ", max "
                      << by_mode[2] << "), " << row_elements << " row elements (" << large
                      << " calls with >= 64Ki of them over 2+ bags), in " << seconds << " s");
  CHECK(failing == 0);
}

// The harness itself must be able to fail: guards notice stray writes on either side, the
// sentinel shows untouched outputs, and the byte comparison names the element.
TEST_CASE("embedding_bag test harness: guard zones, sentinel and byte comparison detect faults") {
  shapejit_embedding_bag_shapes s{};
  s.output_rows = 3;
  s.output_cols = 5;
  s.index_out_dtype = SHAPEJIT_I32;
  s.offset2bag_len = 7;
  s.bag_size_len = 3;
  s.max_indices_rows = 3;
  s.max_indices_cols = 1;
  GuardedOutputs a(s, 0xCD);
  CHECK(a.check_guards().empty());
  CHECK(a.untouched());
  CHECK(a.elements(EmbagOutput::kOffset2bag) == 7);
  auto* bag_size = static_cast<std::byte*>(a.data(EmbagOutput::kBagSize));
  bag_size[0] = std::byte{1};
  CHECK_FALSE(a.untouched());
  bag_size[3 * 4] = std::byte{0};  // one byte past the end
  CHECK(a.check_guards().find("bag_size") != std::string::npos);

  GuardedOutputs b(s, 0xCD);
  static_cast<std::byte*>(b.data(EmbagOutput::kOutput))[-1] = std::byte{0};  // just before the start
  CHECK(b.check_guards().find("output") != std::string::npos);

  GuardedOutputs c(s, 0xCD), d(s, 0xCD);
  CHECK(compare_bytes(EmbagOutput::kOutput, c.bytes(EmbagOutput::kOutput), d.bytes(EmbagOutput::kOutput), 4).empty());
  static_cast<std::byte*>(d.data(EmbagOutput::kOutput))[4 * 7 + 2] = std::byte{0};
  CHECK(compare_bytes(EmbagOutput::kOutput, c.bytes(EmbagOutput::kOutput), d.bytes(EmbagOutput::kOutput), 4)
            .find("output[7]") != std::string::npos);

  s.offset2bag_len = 0;  // empty outputs: NULL on request, else a guarded zero-length buffer
  GuardedOutputs e(s, 0xCD, /*null_when_empty=*/true), f(s, 0xCD);
  CHECK(e.data(EmbagOutput::kOffset2bag) == nullptr);
  CHECK(f.data(EmbagOutput::kOffset2bag) != nullptr);
}

}  // namespace

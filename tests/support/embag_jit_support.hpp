// Helpers of the generated-kernel tests (embag_jit_*_test.cpp): inputs that end at a
// PROT_NONE page, random calls for one EmbagKey, and a bitwise comparison with the reference
// that names the first differing (bag, column).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "jit/embag_kernel.hpp"
#include "shapejit/shapejit.h"
#include "support/embag_cases.hpp"
#include "support/host_isas.hpp"

namespace shapejit::test::embag_jit {

using Rng = std::mt19937_64;

// Which ISAs the host runs (the engine's rule; safe in doctest::skip decorators).
using test::host_has;
using test::host_isas;

/// Mixes a seed and a case number into an independent generator seed.
uint64_t mix(uint64_t x);
int64_t uniform(Rng& rng, int64_t lo, int64_t hi);  ///< inclusive
bool chance(Rng& rng, int percent);
float from_bits(uint32_t bits);

/// `count` elements of T whose end touches a PROT_NONE page (reading one past faults).
template <typename T>
class PageEndArray {
 public:
  explicit PageEndArray(size_t count);
  ~PageEndArray();
  PageEndArray(const PageEndArray&) = delete;
  PageEndArray& operator=(const PageEndArray&) = delete;
  T* data() { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  size_t size() const { return count_; }

 private:
  std::byte* map_ = nullptr;
  size_t map_bytes_ = 0, count_ = 0;
  T* data_ = nullptr;
};
extern template class PageEndArray<float>;
extern template class PageEndArray<std::byte>;

/// One call's inputs for `key`, laid out as the runtime would pass them: the table and the
/// index and offset arrays end at a protected page.
struct JitProblem {
  jit::EmbagKey key;
  int64_t rows = 1, stride = 1, bags = 0;
  int table_kind = 0;
  bool include_last_offset = false;
  int64_t padding_passed = 0;  ///< as the API receives it (may be negative)
  std::vector<int64_t> idx, off;
  std::optional<PageEndArray<float>> table, psw;
  std::optional<PageEndArray<std::byte>> idx_mem, off_mem;

  int64_t padding_row() const { return padding_passed < 0 ? padding_passed + rows : padding_passed; }
  /// The C ABI form, for the reference.
  shapejit_embedding_bag_args ref_args();
  /// Key, shape, flags, offsets and the first indices.
  std::string describe() const;
};

/// Draws inputs for p.key: bags empty, single, long or all padding; repeated rows; the last row
/// (which ends at the protected page) often; strided rows with prime gaps; NaN payloads, +-Inf,
/// +-0.0, signalling NaNs and few-valued tables (max ties).
void make_problem(JitProblem& p, Rng& rng);

/// Kernel arguments for all bags of `p`, writing into `out`.
jit::EmbagKernelArgs kernel_args(JitProblem& p, GuardedOutputs& out);

/// "" when `got` equals `want` bitwise, else the first differing output and (bag, column) with
/// both values; checks the guard zones too. See kSumNaNPayloadsExact in the .cpp.
std::string first_difference(const jit::EmbagKey& key, const GuardedOutputs& want,
                             const GuardedOutputs& got);
/// Sum/mean outputs that were NaN on both sides with different payloads since the last call.
int64_t take_tolerated_nan_payloads();

/// Runs `fn` over all bags of `p` (in one call, or in two calls split at `split`) and compares
/// with ref::embedding_bag; "" when equal, else the difference.
std::string run_and_compare(JitProblem& p, jit::EmbagKernelFn fn, std::optional<int64_t> split);

/// The kernel's assembly listing (or the generator's error), for failure reports.
std::string kernel_listing(const jit::EmbagKey& key);

/// Widths of the battery: every D in 1..72 and 85 .. 4100.
std::vector<int64_t> battery_dims();
/// Prefetch distances the battery rotates through (none, near, default, beyond the end).
inline constexpr int kBatteryPrefetches[] = {16, 0, 1, 5, 1000};

}  // namespace shapejit::test::embag_jit

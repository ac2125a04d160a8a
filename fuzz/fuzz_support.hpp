// Shared pieces of the libFuzzer harnesses: drawing C-ABI argument values (valid, edge and
// hostile) from the fuzzer's bytes, the status rules every call must obey, and failure reports.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "shapejit/shapejit.h"

namespace shapejit::fuzz {

/// Prints `what` (and the call description, if set) to stderr and aborts, which libFuzzer
/// records as a crash with the input that caused it.
[[noreturn]] void fail(const std::string& what);

/// Sets the description printed by fail() for the call under test.
void set_call_description(std::string text);

/// Checks a status any call may return: OK, INVALID_ARGUMENT or UNSUPPORTED, with a
/// non-empty shapejit_last_error() for the latter two. `what` names the call.
void check_status(shapejit_status status, const char* what);

/// Stores `value` into an enum field of a C struct without loading it as the enum type, so
/// out-of-range values (which any C caller can pass) reach the library as they are.
template <class Enum>
void store_enum(Enum& field, int64_t value) {
  static_assert(sizeof(Enum) == sizeof(int32_t));
  const int32_t v = static_cast<int32_t>(value);
  std::memcpy(&field, &v, sizeof v);
}

/// Draws from the fuzzer's bytes. Every draw has a common case (small, valid) and a tail of
/// edge and hostile values, so short inputs already give meaningful calls.
class Draw {
 public:
  explicit Draw(FuzzedDataProvider& fdp) : fdp_(fdp) {}

  /// True with probability percent/100. Once the bytes run out (every draw reads 0), likely
  /// events (>= 50 %) happen and unlikely ones do not, so short inputs give ordinary calls.
  bool chance(int percent) {
    const int v = fdp_.ConsumeIntegralInRange<int>(0, 99);
    return percent >= 50 ? v < percent : v >= 100 - percent;
  }
  int64_t in_range(int64_t lo, int64_t hi) { return fdp_.ConsumeIntegralInRange<int64_t>(lo, hi); }
  uint8_t byte() { return fdp_.ConsumeIntegral<uint8_t>(); }
  int64_t raw64() { return fdp_.ConsumeIntegral<int64_t>(); }
  uint32_t raw32() { return fdp_.ConsumeIntegral<uint32_t>(); }

  /// A dtype enum value: mostly `usual`, else any dtype or a value outside the enum.
  int64_t dtype(int64_t usual, int usual_percent);
  /// A size: mostly in [0, small_max], else 0, 1, negatives, powers of two near 2^31, 2^32,
  /// 2^40, 2^62 and INT64_MAX (callers decide which of these they can back with memory).
  int64_t size(int64_t small_max, int hostile_percent);
  /// A float: small integers (exact sums), raw bit patterns (NaN, inf, subnormals), specials.
  float value(int kind);
  /// A value kind for a whole tensor: 0 small integers, 1 raw bits, 2 all NaN, 3 mixed specials.
  int value_kind() { return fdp_.ConsumeIntegralInRange<int>(0, 3); }

 private:
  FuzzedDataProvider& fdp_;
};

/// Outcome counts of one fuzzing process, printed to stderr when it exits.
struct Tally {
  explicit Tally(const char* name) : name_(name) {}
  ~Tally();
  int64_t accepted = 0;   ///< calls that succeeded and matched the reference
  int64_t rejected = 0;   ///< calls rejected with INVALID_ARGUMENT or UNSUPPORTED
  int64_t too_large = 0;  ///< valid calls whose outputs the harness does not allocate
  int64_t checked = 0;    ///< output elements compared with the reference
  int64_t unchecked = 0;  ///< output elements outside what the reference bounds (f32 overflow)
 private:
  const char* name_;
};

/// a + b and a - b with two's-complement wrap-around (the harness must not overflow itself).
inline int64_t wrap_add(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }
inline int64_t wrap_sub(int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }

/// "0x..." bits and value of a float, for reports.
std::string float_text(float f);
/// The first `limit` values of a vector, for reports.
std::string list_text(const std::vector<int64_t>& v, size_t limit = 24);

}  // namespace shapejit::fuzz

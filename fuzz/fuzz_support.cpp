// Value drawing and failure reporting for the fuzz harnesses.
#include "fuzz_support.hpp"

#include <sanitizer/common_interface_defs.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace shapejit::fuzz {
namespace {

std::string& call_description() {
  static std::string text;
  return text;
}

}  // namespace

Tally::~Tally() {
  std::fprintf(stderr,
               "%s: %lld calls accepted and equal to the reference, %lld rejected, %lld valid but too large "
               "to run; %lld output elements compared, %lld left unchecked (f32-overflow regime)\n",
               name_, static_cast<long long>(accepted), static_cast<long long>(rejected),
               static_cast<long long>(too_large), static_cast<long long>(checked),
               static_cast<long long>(unchecked));
}

void print_call_description() { std::fprintf(stderr, "\n==== shapejit fuzz input:\n%s\n", call_description().c_str()); }

void set_call_description(std::string text) {
  // Sanitizer reports (ASan, UBSan) end the process themselves: print the call on the way out.
  static const bool registered = (__sanitizer_set_death_callback(print_call_description), true);
  (void)registered;
  call_description() = std::move(text);
}

void fail(const std::string& what) {
  std::fprintf(stderr, "\n==== shapejit fuzz failure: %s\n%s\n", what.c_str(), call_description().c_str());
  std::fflush(stderr);
  std::abort();
}

void check_status(shapejit_status status, const char* what) {
  if (status == SHAPEJIT_OK) return;
  if (status != SHAPEJIT_INVALID_ARGUMENT && status != SHAPEJIT_UNSUPPORTED)
    fail(std::string(what) + " returned status " + std::to_string(int(status)) + " (" + shapejit_last_error() +
         "); only OK, INVALID_ARGUMENT and UNSUPPORTED are expected");
  const char* message = shapejit_last_error();
  if (message == nullptr || *message == '\0')
    fail(std::string(what) + " failed with status " + std::to_string(int(status)) + " but no last_error message");
}

int64_t Draw::dtype(int64_t usual, int usual_percent) {
  if (chance(usual_percent)) return usual;
  static constexpr int64_t kAny[] = {SHAPEJIT_F32, SHAPEJIT_F16, SHAPEJIT_BF16, SHAPEJIT_I32, SHAPEJIT_I64,
                                     5, 7, 8, -1, std::numeric_limits<int32_t>::max(),
                                     std::numeric_limits<int32_t>::min()};
  return kAny[fdp_.ConsumeIntegralInRange<size_t>(0, std::size(kAny) - 1)];
}

int64_t Draw::size(int64_t small_max, int hostile_percent) {
  if (!chance(hostile_percent)) return in_range(0, small_max);
  static constexpr int64_t kHostile[] = {0,
                                         1,
                                         -1,
                                         std::numeric_limits<int64_t>::min(),
                                         (int64_t{1} << 31) - 1,
                                         int64_t{1} << 31,
                                         int64_t{1} << 32,
                                         int64_t{1} << 40,
                                         int64_t{1} << 61,
                                         int64_t{1} << 62,
                                         std::numeric_limits<int64_t>::max()};
  return kHostile[fdp_.ConsumeIntegralInRange<size_t>(0, std::size(kHostile) - 1)];
}

float Draw::value(int kind) {
  switch (kind) {
    case 0: return float(fdp_.ConsumeIntegralInRange<int>(-8, 8));
    case 1: {
      const uint32_t bits = fdp_.ConsumeIntegral<uint32_t>();
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case 2: return std::numeric_limits<float>::quiet_NaN();
    default: {
      static constexpr float kSpecial[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 3.0f,
                                           std::numeric_limits<float>::infinity(),
                                           -std::numeric_limits<float>::infinity(),
                                           std::numeric_limits<float>::quiet_NaN(),
                                           -std::numeric_limits<float>::quiet_NaN(),
                                           std::numeric_limits<float>::max(),
                                           std::numeric_limits<float>::denorm_min()};
      return kSpecial[fdp_.ConsumeIntegralInRange<size_t>(0, std::size(kSpecial) - 1)];
    }
  }
}

std::string float_text(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  char text[64];
  std::snprintf(text, sizeof text, "%.9g (0x%08x)", double(f), bits);
  return text;
}

std::string list_text(const std::vector<int64_t>& v, size_t limit) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < limit; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > limit) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s + "]";
}

}  // namespace shapejit::fuzz

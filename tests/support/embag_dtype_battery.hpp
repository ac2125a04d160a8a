// The dtype battery of the generated x86 embedding-bag kernels: every table dtype (f16, bf16,
// Q8, Q4, Q2; f32 with pruning) x mode (sum, weighted sum per allowed weight dtype, mean, max) x
// output dtype x padding x pruning, index/offset types and prefetch distances rotating, over a
// list of widths, each problem run whole and in bag ranges, compared bitwise with
// ref::embedding_bag. Tables end at a PROT_NONE page (the last row is read often), so a read
// past the last packed row's last byte faults. Shared by tests/embag_jit_test.cpp (doctest)
// and the AVX-512 battery (tests/avx512_battery, run under Bochs), so it reports instead of
// asserting.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "jit/embag_kernel.hpp"

namespace shapejit::test::embag_dtype {

struct Options {
  jit::Isa isa = jit::Isa::kAvx2;
  uint64_t seed = 0;
  std::vector<int64_t> dims;  ///< widths; Q4 rounds up to even, Q2 to a multiple of 4
  /// Work items (one key each) this run takes (sharding); all by default.
  std::function<bool(int64_t)> mine = [](int64_t) { return true; };
  /// Only emit the kernels (the host cannot run key.isa): checks that every key generates.
  bool emit_only = false;
  int max_reports = 10;
};

struct Result {
  int64_t kernels = 0, runs = 0, checked = 0;  ///< kernels generated, calls compared, values compared
  /// f16 outputs accepted one ulp away from zero (two for an f16 table's mean, which rounds the
  /// sum and then the quotient) because this host's vcvtps2ph rounds ties away (Bochs); always 0
  /// on a CPU that rounds to nearest even.
  int64_t f16_ties_away_accepted = 0;
  int64_t failures = 0;
  std::vector<std::string> reports;  ///< the first max_reports failures in full (seed, key, case)
};

/// True when this host's vcvtps2ph rounds an f16 tie away from zero whatever its imm8 says (the
/// Bochs emulator); false on real CPUs and when the host has no F16C.
bool host_f16_ties_away();

Result run(const Options& options);

/// Widths for a full run: every tail of both vector widths, block splits and block loops.
std::vector<int64_t> default_dims();

}  // namespace shapejit::test::embag_dtype

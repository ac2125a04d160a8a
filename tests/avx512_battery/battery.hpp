// The reduced AVX-512 battery: every generated kernel family run on AVX-512 (embedding bag in every
// variant over a spread of widths, the 64-bit id path of max mode, linear-group microkernels with
// every epilogue and store layout) and compared with the reference inside the same process. Sized
// to run in minutes under Bochs (tools/bochs/run.sh), where hosts without AVX-512 execute it.
#pragma once

#include <cstdint>
#include <string>

#include "jit/isa.hpp"

namespace shapejit::test::avx512_battery {

/// What the battery is asked to run.
struct Options {
  jit::Isa isa = jit::Isa::kAvx512;  ///< --isa avx2 runs the same battery natively (development aid)
  uint64_t seed = 0;                  ///< SHAPEJIT_TEST_SEED, else a fixed seed
  int shard = 0, shards = 1;          ///< --shard I/N: every N-th work item, from the I-th
  int max_reports = 10;               ///< failures printed in full; the rest are only counted

  /// True when work item `item` belongs to this shard.
  bool mine(int64_t item) const { return item % shards == shard; }
};

/// Counts of one family: distinct kernels generated and executed, comparisons with the reference.
struct Tally {
  int64_t kernels = 0, cases = 0, failures = 0;
  int64_t checked = 0;  ///< output elements compared

  /// Records a failed comparison; prints the first Options::max_reports in full.
  void fail(const Options& options, const std::string& family, const std::string& report);
};

/// Embedding bags: modes sum, weighted sum, mean and max x padding x int32/int64 indices and
/// offsets x include_last_offset, over widths with tails and column blocks; each problem runs
/// whole and split into two bag ranges.
Tally run_embag(const Options& options);

/// Max mode with row ids beyond 32 bits (the kernels' 64-bit id lanes).
Tally run_embag_wide_ids(const Options& options);

/// Table dtypes (f16, bf16, Q8, Q4, Q2; pruning): every mode x weight dtype x output dtype x
/// padding x pruning over widths with every tail kind (support/embag_dtype_battery.hpp). f16
/// outputs one ulp away from zero are accepted, and counted in the report, only where this
/// CPU's vcvtps2ph rounds ties away (Bochs).
Tally run_embag_dtypes(const Options& options);

/// Linear groups: every activation x bias x scale x store layout over shapes off the vector
/// and panel widths, against the double-precision reference's acceptance bound.
Tally run_linear_groups(const Options& options);

}  // namespace shapejit::test::avx512_battery

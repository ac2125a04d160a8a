// Result rows of shapejit_bench after min-of-repetitions, and the hook through which each
// benchmark family turns its plain per-call counters into figures (GB/s, GFLOP/s, ratios to
// peers measured in the same run). Independent of Google Benchmark's types.
//
// A family registers itself from its own source file:
//   [[maybe_unused]] const bool kRows = register_row_family({"embedding_bag/", finish, summary});
// `finish` sees the successful and failed rows of its family (in registration order) and adds
// columns with BenchRow::set; `summary` (optional) prints extra lines after the table.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace shapejit::bench {

/// One benchmark's result: the fastest repetition's wall time per call and its counters.
struct BenchRow {
  std::string name;  ///< registered name, e.g. embedding_bag/jit/sum/4096x128/256x32/t1
  std::optional<std::string> error;  ///< set when the benchmark failed or was skipped
  double seconds = 0;                ///< time per call: fastest call or repetition (bench_main.cpp)
  int64_t iterations = 0;            ///< calls per repetition
  int repetitions = 0;
  std::map<std::string, double> counters;  ///< plain per-call counters the benchmark set
  /// Derived figures in display order (empty optional: not available, shown as "-").
  std::vector<std::pair<std::string, std::optional<double>>> columns;

  /// The counter `key`, if the benchmark set it.
  std::optional<double> counter(const std::string& key) const;
  /// Sets (or replaces) the derived column `key`.
  void set(const std::string& key, std::optional<double> value);
  /// The derived column `key`, if set and available.
  std::optional<double> column(const std::string& key) const;
  /// counter(key) per second at the minimum time, scaled by 1e-9 (GB/s for bytes, GFLOP/s for
  /// flops).
  std::optional<double> giga_per_second(const std::string& key) const;
};

/// A row named <prefix><impl>/<problem>/t<threads> (the families that compare implementations of
/// one problem across thread counts: embag_scaling, embag_group).
struct ImplRowName {
  std::string impl, problem;
  int threads = 0;
};

/// "impl|problem|threads": the map key under which such families find a row's peers.
inline std::string impl_row_key(const std::string& impl, const std::string& problem, int threads) {
  return impl + "|" + problem + "|" + std::to_string(threads);
}

/// The parts of `name`, or nothing when it is not <prefix><impl>/<problem>/t<threads>.
std::optional<ImplRowName> parse_impl_row_name(const std::string& name, const std::string& prefix);

/// How one benchmark family (all names starting with `prefix`) finishes and summarises its rows.
struct RowFamily {
  std::string prefix;
  std::function<void(std::vector<BenchRow*>& rows)> finish;
  std::function<void(std::ostream& out, const std::vector<const BenchRow*>& rows)> summary;
};

/// Adds a family; call from a namespace-scope initialiser of the family's source file.
bool register_row_family(RowFamily family);

/// Runs every family's finish on its rows; rows of no family get their counters as columns.
void finish_rows(std::vector<BenchRow>& rows);

/// The console table: per family, one line per row (name, time, columns), then its summary.
void print_rows(std::ostream& out, const std::vector<BenchRow>& rows);

}  // namespace shapejit::bench

// main() of shapejit_bench: Google Benchmark with min-of-repetitions rows and peer ratios.
//
// Defaults (each overridable on the command line): --benchmark_repetitions=7,
// --benchmark_min_time=0.05, --benchmark_enable_random_interleaving=true. The reporter keeps,
// per benchmark, the repetition with the smallest time per call (Google Benchmark's `min`
// aggregate when only aggregates are reported) and prints one row per benchmark under its exact
// registered name. A repetition's time per call is the plain counter `min_call_seconds` (its
// fastest single call) when the benchmark sets it, else its mean wall time per call. Benchmarks set
// plain per-call counters (e.g. `bytes`); each family turns them into its figures and ratios from
// rows of the same run (bench_rows.hpp; embedding_bag_rows.cpp: GBps, vs_limit, vs_aten). Rows are
// printed in registration order once every benchmark finished (interleaving finishes them in random
// order), by family, each family followed by its summary. With --benchmark_format=json and with
// --benchmark_out (json; --benchmark_out_format=console writes the table instead) the same rows
// go through Google Benchmark's JSON reporter.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "bench_rows.hpp"

namespace {

using benchmark::BenchmarkReporter;
using shapejit::bench::BenchRow;

// Buffers every run and, at the end, hands min-of-repetitions rows either to an inner
// Google Benchmark reporter (json) or prints its own table (console).
// Seconds per call of one repetition: its fastest single call when the benchmark reports one
// (counter `min_call_seconds`; the `min` aggregate of it is the fastest over repetitions), else
// its mean wall time per call.
double call_seconds(const BenchmarkReporter::Run& run) {
  if (const auto it = run.counters.find("min_call_seconds"); it != run.counters.end())
    return it->second.value;
  return run.iterations > 0 ? run.real_accumulated_time / double(run.iterations) : 0.0;
}

class MinOfRepetitionsReporter : public BenchmarkReporter {
 public:
  explicit MinOfRepetitionsReporter(std::unique_ptr<BenchmarkReporter> inner)
      : inner_(std::move(inner)) {}

  bool ReportContext(const Context& context) override {
    if (!inner_) {
      PrintBasicContext(&GetErrorStream(), context);
      return true;
    }
    inner_->SetOutputStream(&GetOutputStream());
    inner_->SetErrorStream(&GetErrorStream());
    return inner_->ReportContext(context);
  }

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      Slot& slot = slots_[{run.family_index, run.per_family_instance_index}];
      if (run.error_occurred) {
        slot.error = run;
      } else if (run.run_type == Run::RT_Iteration) {
        ++slot.repetitions;
        if (!slot.best_iteration || call_seconds(run) < call_seconds(*slot.best_iteration))
          slot.best_iteration = run;
      } else if (run.aggregate_name == "min") {
        slot.min_aggregate = run;
      }
    }
    if (!inner_ && isatty(STDERR_FILENO) && !runs.empty())
      GetErrorStream() << "\r\033[K[" << slots_.size() << " done] "
                       << runs.front().run_name.function_name << std::flush;
  }

  void Finalize() override {
    if (!inner_ && isatty(STDERR_FILENO)) GetErrorStream() << "\r\033[K" << std::flush;
    std::vector<BenchRow> rows;
    std::vector<Run> runs;
    for (auto& [key, slot] : slots_) {
      std::optional<Run> chosen = slot.error            ? slot.error
                                  : slot.best_iteration ? slot.best_iteration
                                                        : slot.min_aggregate;
      if (!chosen) continue;
      Run run = *chosen;
      BenchRow row;
      row.name = run.run_name.function_name;
      if (run.error_occurred) row.error = run.error_message;
      row.seconds = call_seconds(run);
      row.iterations = int64_t(run.iterations);
      row.repetitions = slot.best_iteration ? slot.repetitions : int(run.repetitions);
      for (const auto& [key, counter] : run.counters) row.counters[key] = counter.value;
      rows.push_back(row);
      runs.push_back(run);
    }
    shapejit::bench::finish_rows(rows);
    if (!inner_) {
      shapejit::bench::print_rows(GetOutputStream(), rows);
      return;
    }
    for (size_t i = 0; i < runs.size(); ++i) {
      Run& run = runs[i];
      const BenchRow& row = rows[i];
      // One plain row under the registered name: no aggregate suffix, no time-type suffix.
      run.run_type = Run::RT_Iteration;
      run.aggregate_name.clear();
      run.run_name.time_type.clear();
      run.repetitions = row.repetitions;
      run.repetition_index = Run::no_repetition_index;
      run.counters.clear();
      for (const auto& [key, value] : row.columns)
        if (value) run.counters[key] = *value;
      inner_->ReportRuns({run});
    }
    inner_->Finalize();
  }

 private:
  struct Slot {
    std::optional<Run> best_iteration, min_aggregate, error;
    int repetitions = 0;
  };
  std::unique_ptr<BenchmarkReporter> inner_;
  std::map<std::pair<int64_t, int64_t>, Slot> slots_;
};

std::optional<std::string> flag_value(const std::vector<char*>& args, const char* flag) {
  const size_t n = std::strlen(flag);
  std::optional<std::string> value;
  for (size_t i = 1; i < args.size(); ++i)
    if (std::strncmp(args[i], flag, n) == 0 && (args[i][n] == '=' || args[i][n] == '\0'))
      value = args[i][n] == '=' ? std::string(args[i] + n + 1) : std::string("true");
  return value;
}

std::unique_ptr<BenchmarkReporter> inner_reporter(const std::string& format) {
  if (format == "json") return std::make_unique<benchmark::JSONReporter>();
  return nullptr;  // console (csv is deprecated in Google Benchmark): the reporter's own table
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  static char kRepetitions[] = "--benchmark_repetitions=7";
  static char kMinTime[] = "--benchmark_min_time=0.05";
  static char kInterleave[] = "--benchmark_enable_random_interleaving=true";
  for (char* fallback : {kRepetitions, kMinTime, kInterleave}) {
    const std::string flag(fallback, std::strchr(fallback, '='));
    if (!flag_value(args, flag.c_str())) args.insert(args.begin() + 1, fallback);
  }
  const std::string format = flag_value(args, "--benchmark_format").value_or("console");
  const std::optional<std::string> out = flag_value(args, "--benchmark_out");
  const std::string out_format = flag_value(args, "--benchmark_out_format").value_or("json");

  int count = int(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;

  MinOfRepetitionsReporter display(inner_reporter(format));
  if (out && !out->empty()) {
    MinOfRepetitionsReporter file(inner_reporter(out_format));
    benchmark::RunSpecifiedBenchmarks(&display, &file);
  } else {
    benchmark::RunSpecifiedBenchmarks(&display);
  }
  benchmark::Shutdown();
  return 0;
}

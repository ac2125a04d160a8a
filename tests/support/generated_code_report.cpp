#include "support/generated_code_report.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "jit/generated_code_observer.hpp"
#include "jit/host_features.hpp"

namespace shapejit::test {
namespace {

using jit::Isa;

constexpr Isa kGeneratedIsas[] = {Isa::kAvx512, Isa::kAvx2, Isa::kNeon};

// Constant-initialised: counting may start before any other static of this binary exists.
constinit std::atomic<int64_t> g_kernels[4] = {};
constinit std::atomic<int64_t> g_runs[4] = {};

void count_event(jit::GeneratedCodeEvent event, Isa isa) {
  const auto i = static_cast<size_t>(isa);
  if (i >= 4) return;
  std::atomic<int64_t>* counters = event == jit::GeneratedCodeEvent::kKernelAdded ? g_kernels : g_runs;
  counters[i].fetch_add(1, std::memory_order_relaxed);
}

// 9830 -> "9,830".
std::string grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string plural(int64_t n, const char* word) { return grouped(n) + " " + word + (n == 1 ? "" : "s"); }

// Why `isa` ran no generated code here, as the summary and the requirement say it.
std::string why_not_run(const IsaTally& tally, Isa isa) {
  const std::string why = jit::isa_unsupported_reason(jit::host_features(), isa);
  if (why.rfind("host is not ", 0) == 0) return "not this architecture";
  if (!why.empty()) return "SKIPPED (" + why + ")";
  const int64_t kernels = tally[isa].kernels;
  return "NOT RUN (the host runs it; " +
         (kernels > 0 ? plural(kernels, "kernel") + " generated, none executed" : std::string("no test executed it")) +
         ")";
}

// The tally line of one process: "pid 123: avx512 0 0 avx2 12 345 neon 0 0\n".
std::string tally_record(const IsaTally& t) {
  std::ostringstream s;
  s << "pid " << getpid() << ':';
  for (Isa isa : kGeneratedIsas) s << ' ' << jit::isa_name(isa) << ' ' << t[isa].kernels << ' ' << t[isa].runs;
  s << '\n';
  return s.str();
}

// Adds one tally line to `sum`; false when the line is not one tally_record() writes.
bool add_record(const std::string& line, IsaTally& sum) {
  std::istringstream s(line);
  std::vector<std::string> words;
  for (std::string w; s >> w;) words.push_back(w);
  if (words.size() < 5 || (words.size() - 2) % 3 != 0 || words[0] != "pid" || words[1].back() != ':') return false;
  for (size_t i = 2; i < words.size(); i += 3) {
    const std::optional<Isa> isa = jit::parse_isa(words[i]);
    char* end1 = nullptr;
    char* end2 = nullptr;
    const long long kernels = std::strtoll(words[i + 1].c_str(), &end1, 10);
    const long long runs = std::strtoll(words[i + 2].c_str(), &end2, 10);
    if (!isa || *end1 != '\0' || *end2 != '\0' || kernels < 0 || runs < 0) return false;
    sum[*isa].kernels += kernels;
    sum[*isa].runs += runs;
  }
  return true;
}

// The summary to stdout, then each unmet requirement to stderr; the exit status they imply.
int report(const IsaTally& tally, const std::string& where) {
  std::printf("%s\n", summary_line(tally, where).c_str());
  std::fflush(stdout);
  const char* required = std::getenv("SHAPEJIT_REQUIRE_ISAS");
  const std::vector<std::string> unmet = unmet_requirements(tally, required ? required : "");
  for (const std::string& m : unmet) std::fprintf(stderr, "FAILED: %s\n", m.c_str());
  return unmet.empty() ? 0 : 1;
}

}  // namespace

void start_counting() { jit::set_generated_code_observer(&count_event); }

IsaTally counted() {
  IsaTally t;
  for (size_t i = 0; i < 4; ++i) {
    t.by_isa[i].kernels = g_kernels[i].load(std::memory_order_relaxed);
    t.by_isa[i].runs = g_runs[i].load(std::memory_order_relaxed);
  }
  return t;
}

std::string summary_line(const IsaTally& tally, const std::string& where) {
  std::string s = "generated code executed" + where + ":";
  const char* sep = " ";
  for (Isa isa : kGeneratedIsas) {
    s += sep;
    sep = "; ";
    s += jit::isa_name(isa);
    s += ' ';
    const IsaCounts& c = tally[isa];
    // (appended piece by piece: g++ 12 warns falsely (-Wrestrict) on "literal" + temporary)
    if (c.runs > 0) {
      s += plural(c.runs, "run");
      s += " (";
      s += plural(c.kernels, "kernel");
      s += " generated)";
    } else {
      s += why_not_run(tally, isa);
    }
  }
  return s;
}

std::vector<std::string> unmet_requirements(const IsaTally& tally, const std::string& required) {
  std::vector<std::string> unmet;
  std::stringstream list(required);
  for (std::string name; std::getline(list, name, ',');) {
    if (name.empty()) continue;
    const std::optional<Isa> isa = jit::parse_isa(name);
    if (!isa || *isa == Isa::kScalar) {
      unmet.push_back("SHAPEJIT_REQUIRE_ISAS=" + required + ": '" + name +
                      "' is not an ISA with generated code (avx512, avx2, neon)");
    } else if (tally[*isa].runs == 0) {
      unmet.push_back("SHAPEJIT_REQUIRE_ISAS=" + required + ": " + name + " executed no generated code in this run: " +
                      why_not_run(tally, *isa));
    }
  }
  return unmet;
}

int finish_report(int doctest_status) {
  const IsaTally tally = counted();
  const char* tally_file = std::getenv("SHAPEJIT_ISA_TALLY");
  if (tally_file == nullptr || *tally_file == '\0') {
    const int status = report(tally, "");
    return doctest_status != 0 ? doctest_status : status;
  }
  std::printf("%s\n", summary_line(tally, " by this process").c_str());
  // One write() of a short line to an O_APPEND file: concurrent ctest processes do not
  // interleave their lines.
  const std::string record = tally_record(tally);
  const int fd = open(tally_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, record.data(), record.size()) != static_cast<ssize_t>(record.size())) {
    std::fprintf(stderr, "FAILED: cannot append to SHAPEJIT_ISA_TALLY=%s\n", tally_file);
    if (fd >= 0) close(fd);
    return doctest_status != 0 ? doctest_status : 1;
  }
  close(fd);
  return doctest_status;
}

int check_tally_file(const std::string& path) {
  IsaTally sum;
  sum.processes = 0;
  std::ifstream in(path);  // absent: no test process ran (every one filtered out)
  for (std::string line; std::getline(in, line);) {
    if (!add_record(line, sum)) {
      std::fprintf(stderr, "FAILED: %s: not a tally line: %s\n", path.c_str(), line.c_str());
      return 1;
    }
    ++sum.processes;
  }
  return report(sum, " in " + grouped(sum.processes) + (sum.processes == 1 ? " test process" : " test processes"));
}

}  // namespace shapejit::test

// shapejit_perf_record_test: profiles a real workload with the real perf and checks that samples
// in generated code resolve to kernel names, by both routes of docs/profiling.md. It re-runs
// itself (--workload) under
//   1. SHAPEJIT_PERF_JITDUMP=1 perf record -k 1 -e cpu-clock, then perf inject --jit;
//   2. SHAPEJIT_PERF_MAP=1 perf record -e cpu-clock;
// and counts, in `perf script`, the samples in generated code that land in a kernel named in the
// dump / the map (and, for reference, what route 1 shows before inject).
// Exit 0: at least 90 % named by each route; 1: fewer, or a step failed; 77 (ctest's skip code):
// no perf, or perf_event_open not permitted here; the reason is printed.
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "perf/jitdump_reader.hpp"
#include "shapejit/shapejit.hpp"

namespace {

namespace fs = std::filesystem;
constexpr int kSkip = 77;

double cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// About one CPU second of embedding bags in three kernels (sum d64, mean d128, max d32). CPU time,
// not wall time, so a busy machine still yields the samples (cpu-clock counts CPU time).
int workload() {
  shapejit::set_num_threads(1);
  const int64_t rows = 20000, bags = 512, len = 32;
  std::mt19937_64 rng(7);
  std::vector<int64_t> indices(size_t(bags * len)), offsets(static_cast<size_t>(bags));
  for (auto& i : indices) i = int64_t(rng() % uint64_t(rows));
  for (int64_t b = 0; b < bags; ++b) offsets[size_t(b)] = b * len;
  struct Case {
    int64_t dim;
    shapejit::Mode mode;
  };
  const Case cases[] = {{64, shapejit::Mode::kSum}, {128, shapejit::Mode::kMean}, {32, shapejit::Mode::kMax}};
  std::vector<std::vector<float>> tables;
  for (const Case& c : cases) tables.emplace_back(size_t(rows * c.dim), 0.25f);
  double checksum = 0;
  const double t0 = cpu_seconds();
  for (int round = 0; cpu_seconds() - t0 < 1.0 && round < 100000; ++round) {
    for (size_t k = 0; k < std::size(cases); ++k) {
      shapejit::EmbeddingBagCall call;
      call.weight = {tables[k].data(), shapejit::DType::kF32, rows, cases[k].dim, cases[k].dim};
      call.indices = indices;
      call.offsets = offsets;
      call.mode = cases[k].mode;
      checksum += double(shapejit::embedding_bag(call).output[0]);
    }
  }
  std::printf("workload pid %d done (checksum %g)\n", int(::getpid()), checksum);
  return 0;
}

std::string quote(const std::string& s) { return "'" + s + "'"; }  // paths from mkdtemp: no quotes

// Runs a shell command; its output goes to `log`. Returns the exit status (-1: not run).
int run(const std::string& cmd, const fs::path& log) {
  const int rc = std::system((cmd + " >" + quote(log.string()) + " 2>&1").c_str());
  return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string find_perf() {
  if (const char* p = std::getenv("SHAPEJIT_PERF"); p != nullptr && *p) return p;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t at = 0; at <= dirs.size();) {
    const size_t colon = std::min(dirs.find(':', at), dirs.size());
    const fs::path candidate = fs::path(dirs.substr(at, colon - at)) / "perf";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    at = colon + 1;
  }
  return "";
}

struct Shares {
  int64_t named = 0, unnamed = 0;  // samples in generated code: in a named kernel / not
  std::map<std::string, int64_t> per_kernel;
  double share() const { return named + unnamed == 0 ? 0.0 : double(named) / double(named + unnamed); }
};

// Classifies `perf script -F ip,sym,dso` lines: "<ip> <sym> (<dso>)". Generated code is what
// perf shows in a jitted-<pid>-<n>.so (after inject) or the perf map, in the memfd or an
// anonymous mapping, or at an address it knows no mapping for.
Shares classify(const std::string& script, const std::set<std::string>& names) {
  Shares s;
  std::istringstream lines(script);
  for (std::string line; std::getline(lines, line);) {
    // The dso is the parenthesis closing the line, matched: it may hold some, "(/memfd:vmem (deleted))".
    if (line.empty() || line.back() != ')') continue;
    size_t open = std::string::npos;
    for (size_t i = line.size(), depth = 0; i-- > 0;) {
      if (line[i] == ')') ++depth;
      else if (line[i] == '(' && --depth == 0) {
        open = i;
        break;
      }
    }
    if (open == std::string::npos) continue;
    const std::string dso = line.substr(open + 1, line.size() - open - 2);
    std::istringstream fields(line.substr(0, open));
    std::string ip, sym;
    fields >> ip;
    std::getline(fields >> std::ws, sym);
    while (!sym.empty() && sym.back() == ' ') sym.pop_back();
    const bool named_dso = dso.find("/jitted-") != std::string::npos ||
                           (dso.rfind("/tmp/perf-", 0) == 0 && dso.size() > 4 && dso.substr(dso.size() - 4) == ".map");
    const bool anonymous = dso.find("memfd:") != std::string::npos || dso.find("//anon") != std::string::npos ||
                           dso == "[unknown]";
    if (named_dso && names.count(sym)) {
      ++s.named;
      ++s.per_kernel[sym];
    } else if (named_dso || anonymous) {
      ++s.unnamed;
    }
  }
  return s;
}

struct Step {
  const char* what;
  std::string cmd;
  fs::path log;
};

bool run_steps(const std::vector<Step>& steps) {
  for (const Step& s : steps) {
    if (run(s.cmd, s.log) != 0) {
      std::printf("FAILED: %s: %s\n%s\n", s.what, s.cmd.c_str(), slurp(s.log).c_str());
      return false;
    }
  }
  return true;
}

// The names in every jit-*.dump of `dir` (the workload's one).
bool dumped_names(const fs::path& dir, std::set<std::string>& names) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (f.rfind("jit-", 0) != 0 || f.size() < 5 || f.substr(f.size() - 5) != ".dump") continue;
    std::string error;
    const auto dump = shapejit::test::read_jitdump(e.path().string(), error);
    if (!dump) {
      std::printf("FAILED: %s does not parse: %s\n", f.c_str(), error.c_str());
      return false;
    }
    for (const auto& r : dump->records)
      if (r.id == 0) names.insert(r.name);
  }
  return true;
}

// The names in the workload's perf map (its pid from the record log), which is then removed.
std::set<std::string> mapped_names(const fs::path& record_log) {
  std::set<std::string> names;
  const std::string log = slurp(record_log);
  const size_t at = log.find("workload pid ");
  if (at == std::string::npos) return names;
  const std::string map = "/tmp/perf-" + std::to_string(std::atoi(log.c_str() + at + 13)) + ".map";
  std::ifstream in(map);
  for (std::string start, size, name; in >> start >> size >> name;) names.insert(name);
  fs::remove(map);
  return names;
}

// Passes when at least 90 % of >= 100 samples in generated code are named, in each kernel.
bool judge(const char* route, const Shares& s) {
  std::printf("%s: %lld of %lld samples in generated code named (%.1f %%)\n", route, (long long)s.named,
              (long long)(s.named + s.unnamed), 100 * s.share());
  for (const auto& [name, n] : s.per_kernel) std::printf("  %8lld  %s\n", (long long)n, name.c_str());
  bool ok = true;
  if (s.named + s.unnamed < 100) {  // about 4000 at cpu-clock's 4 kHz for 1 s
    std::printf("FAILED (%s): too few samples in generated code to judge\n", route);
    ok = false;
  } else if (s.share() < 0.9) {
    std::printf("FAILED (%s): under 90 %% of the samples in generated code resolve to kernel names\n", route);
    ok = false;
  }
  for (const char* part : {".d64.sum.", ".d128.mean.", ".d32.max."}) {
    bool seen = false;
    for (const auto& [name, n] : s.per_kernel) seen = seen || name.find(part) != std::string::npos;
    if (!seen) {
      std::printf("FAILED (%s): no sample named in the kernel *%s*\n", route, part);
      ok = false;
    }
  }
  return ok;
}

int drive(const char* self) {
  const std::string perf = find_perf();
  if (perf.empty()) {
    std::printf("SKIPPED: no perf on PATH (apt-get install linux-perf), nothing to profile with\n");
    return kSkip;
  }
  char tmpl[] = "/tmp/shapejit-perf-record-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const fs::path dir = tmpl;
  const std::string perf_cmd = "HOME=" + quote(dir.string()) + " " + quote(perf);  // perf's caches stay in dir
  const fs::path probe_log = dir / "probe.log";
  if (run(perf_cmd + " record -q -N -k 1 -e cpu-clock -o " + quote((dir / "probe.data").string()) + " -- true",
          probe_log) != 0) {
    std::string paranoid = slurp("/proc/sys/kernel/perf_event_paranoid");
    while (!paranoid.empty() && std::isspace(static_cast<unsigned char>(paranoid.back()))) paranoid.pop_back();
    std::printf("SKIPPED: `%s record -k 1 -e cpu-clock -- true` failed here (kernel.perf_event_paranoid = %s), "
                "so perf_event_open is not permitted or perf is broken:\n%s\n",
                perf.c_str(), paranoid.empty() ? "unknown" : paranoid.c_str(), slurp(probe_log).c_str());
    fs::remove_all(dir);
    return kSkip;
  }
  auto path = [&](const char* name) { return quote((dir / name).string()); };
  const fs::path jit_dir = dir / "jit";
  // Route 1, the jitdump: perf record -k 1, perf inject --jit, perf script. The script of the
  // record before inject is what perf shows without the dump (the memfd, unnamed).
  bool ok = run_steps({
      {"perf record (jitdump)",
       "SHAPEJIT_PERF_JITDUMP=1 SHAPEJIT_PERF_JITDUMP_DIR=" + quote(jit_dir.string()) + " " + perf_cmd +
           " record -N -k 1 -e cpu-clock -o " + path("dump.data") + " -- " + quote(self) + " --workload",
       dir / "dump.record.log"},
      {"perf inject --jit", perf_cmd + " inject --jit -i " + path("dump.data") + " -o " + path("dump.jit.data"),
       dir / "dump.inject.log"},
      {"perf script (before inject)", perf_cmd + " script -F ip,sym,dso -i " + path("dump.data"),
       dir / "dump.before.txt"},
      {"perf script (after inject)", perf_cmd + " script -F ip,sym,dso -i " + path("dump.jit.data"),
       dir / "dump.after.txt"},
  });
  std::set<std::string> names;
  if (ok && dumped_names(jit_dir, names)) {
    if (names.empty()) {
      std::printf("FAILED: the workload dumped no kernel into %s (a host without a JIT ISA?)\n", jit_dir.c_str());
      ok = false;
    } else {
      const Shares before = classify(slurp(dir / "dump.before.txt"), names);
      std::printf("plain perf record + report: %lld of %lld samples in generated code named (%.1f %%)\n",
                  (long long)before.named, (long long)(before.named + before.unnamed), 100 * before.share());
      ok = judge("jitdump (perf inject --jit)", classify(slurp(dir / "dump.after.txt"), names)) && ok;
    }
  } else {
    ok = false;
  }
  // Route 2, the perf map: plain perf record (any clock), perf script.
  const bool recorded = run_steps({
      {"perf record (perf map)",
       "SHAPEJIT_PERF_MAP=1 " + perf_cmd + " record -N -e cpu-clock -o " + path("map.data") + " -- " + quote(self) +
           " --workload",
       dir / "map.record.log"},
      {"perf script (perf map)", perf_cmd + " script -F ip,sym,dso -i " + path("map.data"), dir / "map.txt"},
  });
  const std::set<std::string> map_names = mapped_names(dir / "map.record.log");
  if (recorded && map_names.empty()) std::printf("FAILED: SHAPEJIT_PERF_MAP=1 wrote no perf map\n");
  ok = recorded && !map_names.empty() && judge("perf map", classify(slurp(dir / "map.txt"), map_names)) && ok;
  if (ok) fs::remove_all(dir);
  else std::printf("(kept %s)\n", dir.c_str());
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--workload") return workload();
  if (argc != 1) {
    std::fprintf(stderr, "usage: %s (the test) | %s --workload (what it profiles)\n", argv[0], argv[0]);
    return 2;
  }
  std::error_code ec;
  const fs::path self = fs::canonical("/proc/self/exe", ec);  // argv[0] may be relative
  return drive(ec ? argv[0] : self.c_str());
}

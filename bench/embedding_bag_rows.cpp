// Figures of the embedding-bag rows (names in embedding_bag_bench.cpp and
// embedding_bag_dtype_bench.cpp): GB/s of row bytes, rows/s and the ratios to the limit, ATen and
// FBGEMM rows of the same case, all from rows of the same run.
//   GBps      counter `bytes` (row bytes gathered per call) / minimum time per call, in GB/s
//   Mrows_s   counter `rows` (rows gathered per call) / minimum time per call, in millions
//   vs_f32    on jit rows of a table dtype (names ending /<dtype>): time of the f32 jit row of the
//             same case / this row's time, i.e. this row's rows/s over the f32 kernel's
//   vs_limit  on jit, ref and aten rows: time of embedding_bag/limit/<case> / this row's time;
//             on jit-<isa> rows (an ISA below the engine's, embedding_bag_bench.cpp) the
//             limit-<isa> row of the same case, i.e. always the limit loop of the row's own ISA
//   vs_aten   on jit, jit-<isa> and ref rows: time of embedding_bag/aten/<case> / this row's time, where
//             the aten row at the same thread count is used when there is one, else the t1 row
//             (ATen is benchmarked on 1 thread only)
//   vs_fbgemm on jit, jit-<isa> and ref rows: the same against embedding_bag/fbgemm/<case>, FBGEMM's
//             kernel called directly (single-threaded: t1 rows only, as aten)
// where <case> = <mode>/<rows>x<dim>/<bags>x<len>/t<threads>[/<dtype>]. The ratios equal this row's
// GB/s over the peer's; they stay empty when the peer row did not run or failed.
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench_rows.hpp"
#include "runtime/engine/isa_select.hpp"

namespace shapejit::bench {
namespace {

constexpr const char* kPrefix = "embedding_bag/";

struct EmbagName {
  std::string impl;     // jit, ref, aten, fbgemm, limit (the part of <impl> before a '-')
  std::string isa;      // "-avx2" for jit-avx2 and limit-avx2, "" for the engine's own ISA
  std::string problem;  // <mode>/<rows>x<dim>/<bags>x<len>/t<threads>[/<dtype>]
};

// The problem's segments: <mode>/<shape>/<bags>/t<n> and the dtype suffix ("" for f32).
std::pair<std::string, std::string> split_dtype(const std::string& problem) {
  const size_t t = problem.rfind("/t");
  const size_t end = problem.find('/', t + 1);
  if (end == std::string::npos) return {problem, ""};
  return {problem.substr(0, end), problem.substr(end)};
}

std::optional<EmbagName> parse(const std::string& name) {
  const std::string prefix = kPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const size_t slash = name.find('/', prefix.size());
  if (slash == std::string::npos) return std::nullopt;
  const std::string impl = name.substr(prefix.size(), slash - prefix.size());
  const size_t dash = impl.find('-');
  return EmbagName{impl.substr(0, dash), dash == std::string::npos ? "" : impl.substr(dash),
                   name.substr(slash + 1)};
}

void finish(std::vector<BenchRow*>& rows) {
  // limit: <isa suffix><case>, aten and fbgemm: case -> seconds
  std::map<std::string, double> limit, aten, fbgemm;
  for (const BenchRow* r : rows) {
    const auto n = parse(r->name);
    if (!n || r->error || r->seconds <= 0) continue;
    if (n->impl == "limit") limit[n->isa + n->problem] = r->seconds;
    if (n->impl == "aten") aten[n->problem] = r->seconds;
    if (n->impl == "fbgemm") fbgemm[n->problem] = r->seconds;
  }
  const auto ratio = [](const std::map<std::string, double>& peer, const std::string& problem,
                        double seconds) {
    const auto it = peer.find(problem);
    return it == peer.end() ? std::nullopt : std::optional<double>(it->second / seconds);
  };
  // <mode>/<shape>/<bags>/t<n>[/<dtype>] -> the same case at t1.
  const auto at_t1 = [](const std::string& problem) {
    const auto [f32_case, dtype] = split_dtype(problem);
    return f32_case.substr(0, f32_case.rfind("/t") + 2) + "1" + dtype;
  };
  std::map<std::string, double> jit;  // f32 jit rows: case -> seconds
  for (const BenchRow* r : rows) {
    const auto n = parse(r->name);
    if (n && !r->error && r->seconds > 0 && n->impl == "jit" && n->isa.empty())
      jit[n->problem] = r->seconds;
  }
  for (BenchRow* r : rows) {
    const auto n = parse(r->name);
    if (!n || r->error || r->seconds <= 0) continue;
    r->set("GBps", r->giga_per_second("bytes"));
    if (const auto rows_per_s = r->giga_per_second("rows")) r->set("Mrows_s", *rows_per_s * 1e3);
    const auto [f32_case, dtype] = split_dtype(n->problem);
    if (n->impl == "jit" && !dtype.empty()) r->set("vs_f32", ratio(jit, f32_case, r->seconds));
    if (n->impl != "limit") r->set("vs_limit", ratio(limit, n->isa + n->problem, r->seconds));
    // A peer's row at the same thread count when there is one, else its t1 row.
    const auto vs_peer = [&](const std::map<std::string, double>& peer) {
      return peer.count(n->problem) ? ratio(peer, n->problem, r->seconds)
                                    : ratio(peer, at_t1(n->problem), r->seconds);
    };
    if (n->impl == "jit" || n->impl == "ref") {
      r->set("vs_aten", vs_peer(aten));
      r->set("vs_fbgemm", vs_peer(fbgemm));
    }
  }
}

std::string cell(std::optional<double> v, const char* format) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, *v);
  return buf;
}

// One line per case with every implementation's GB/s side by side; the jit-<isa> and
// limit-<isa> rows of a case get a line of their own, `<case> @<isa>`.
void summary(std::ostream& out, const std::vector<const BenchRow*>& rows) {
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, const BenchRow*>> by_case;
  for (const BenchRow* r : rows) {
    const auto n = parse(r->name);
    if (!n) continue;
    const std::string line = n->isa.empty() ? n->problem : n->problem + " @" + n->isa.substr(1);
    if (!by_case.count(line)) order.push_back(line);
    by_case[line][n->impl] = r;
  }
  size_t width = 4;
  for (const auto& p : order) width = std::max(width, p.size());
  char line[256];
  out << "\nembedding_bag: GB/s of row bytes at the minimum time, side by side (jit and limit run "
      << jit::isa_name(rt::selected_isa())
      << "; a line `@<isa>` has the jit-<isa> and limit-<isa> rows;\njit/f32: rows/s over the f32 "
         "kernel's)\n";
  std::snprintf(line, sizeof line, "%-*s %8s %8s %8s %8s %8s %10s %9s %11s %8s\n", int(width), "case", "limit",
                "aten", "fbgemm", "ref", "jit", "jit/limit", "jit/aten", "jit/fbgemm", "jit/f32");
  out << line;
  for (const auto& p : order) {
    const auto& impls = by_case[p];
    const auto gbps = [&](const char* impl) -> std::string {
      const auto it = impls.find(impl);
      if (it == impls.end()) return "";
      return it->second->error ? "err" : cell(it->second->column("GBps"), "%.1f");
    };
    const auto jit = impls.find("jit");
    const BenchRow* j = jit != impls.end() && !jit->second->error ? jit->second : nullptr;
    std::snprintf(line, sizeof line, "%-*s %8s %8s %8s %8s %8s %10s %9s %11s %8s\n", int(width), p.c_str(),
                  gbps("limit").c_str(), gbps("aten").c_str(), gbps("fbgemm").c_str(), gbps("ref").c_str(),
                  gbps("jit").c_str(), j ? cell(j->column("vs_limit"), "%.3f").c_str() : "",
                  j ? cell(j->column("vs_aten"), "%.3f").c_str() : "",
                  j ? cell(j->column("vs_fbgemm"), "%.3f").c_str() : "",
                  j ? cell(j->column("vs_f32"), "%.3f").c_str() : "");
    out << line;
  }
}

[[maybe_unused]] const bool kRegistered = register_row_family({kPrefix, finish, summary});

}  // namespace
}  // namespace shapejit::bench

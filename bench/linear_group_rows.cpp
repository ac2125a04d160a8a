// Figures of the linear-group rows (names and counters in linear_group_bench.cpp), all from rows
// of the same run at their minimum time per call:
//   GFLOPs        counter `flops` / time, in GFLOP/s
//   vs_peak       GFLOPs / peak, peak = the larger of counter `peak_flops` (FMA peak of the row's
//                 thread count, measured in the process by bench/fma_peak.cpp) and the GFLOPs of
//                 linear_group/fma_peak/zmm/t<threads> in this run
//   GBps          counter `bytes` / time (decode rows: weight bytes streamed, in the row's form;
//                 read_peak rows)
//   vs_bw         GBps / bandwidth, bandwidth = the larger of counter `read_bw` and the GBps of
//                 linear_group/read_peak/dram/t<threads> in this run
//   vs_best_peer  time of the fastest peer row (onednn, openblas_*, libxsmm_3x, xnnpack_3x) of
//                 the same case, thread count and form / this row's time: > 1 means faster than
//                 every peer, 1 is the best peer itself; empty when no peer row of the case ran.
//   vs_jit_f32    (quantized rows, .../<form>) time of our f32 row of the case / this row's time
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench_rows.hpp"
#include "lg_peers_common.hpp"

namespace shapejit::bench {
namespace {

constexpr const char* kPrefix = "linear_group/";
const char* const kPeers[] = {"onednn", "openblas_3x", "openblas_packed", "libxsmm_3x", "xnnpack_3x"};
const char* const kImpls[] = {"jit", "onednn", "openblas_3x", "openblas_packed", "libxsmm_3x", "xnnpack_3x"};

// linear_group/<impl>/<case>/t<threads>[/<form>]; f32 rows have no form component.
struct LgName {
  std::string impl;
  std::string problem;  // <case>/t<threads>[/<form>]
  std::string threads;  // t<threads>
  std::string form;     // empty for f32
  std::string f32_problem() const { return problem.substr(0, problem.size() - (form.empty() ? 0 : form.size() + 1)); }
};

std::optional<LgName> parse(const std::string& name) {
  const std::string prefix = kPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const size_t slash = name.find('/', prefix.size());
  if (slash == std::string::npos) return std::nullopt;
  LgName n{name.substr(prefix.size(), slash - prefix.size()), name.substr(slash + 1), {}, {}};
  // The limit rows (fma_peak/zmm/t1, read_peak/dram/t1) end in the thread count as f32 rows do.
  const size_t t = n.problem.find("/t");
  if (t == std::string::npos) return std::nullopt;
  const size_t end = n.problem.find('/', t + 1);
  n.threads = n.problem.substr(t + 1, end == std::string::npos ? std::string::npos : end - t - 1);
  if (end != std::string::npos) n.form = n.problem.substr(end + 1);
  return n;
}

bool is_peer(const std::string& impl) {
  return std::find(std::begin(kPeers), std::end(kPeers), impl) != std::end(kPeers);
}

std::optional<double> ratio(std::optional<double> num, std::optional<double> den) {
  if (!num || !den || *den <= 0) return std::nullopt;
  return *num / *den;
}

// The limits finish() settled on, per thread count, for the summary.
struct Limits {
  std::map<std::string, std::optional<double>> peak, bw;
};
Limits& limits() {
  static Limits l;
  return l;
}

std::optional<double> giga(std::optional<double> per_second) {
  return per_second ? std::optional<double>(*per_second * 1e-9) : std::nullopt;
}

std::optional<double> larger(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}

void finish(std::vector<BenchRow*>& rows) {
  std::map<std::string, double> best_peer;                // problem -> fastest peer's seconds
  std::map<std::string, std::optional<double>> peak, bw;  // t<n> -> GFLOP/s, GB/s
  std::map<std::string, double> jit_f32;                  // f32 problem -> our f32 row's seconds
  for (const BenchRow* r : rows) {
    const auto n = parse(r->name);
    if (!n || r->error || r->seconds <= 0) continue;
    const std::string t = n->threads;
    peak[t] = larger(peak[t], giga(r->counter("peak_flops")));
    bw[t] = larger(bw[t], giga(r->counter("read_bw")));
    if (r->name == std::string(kPrefix) + "fma_peak/zmm/" + t) peak[t] = larger(peak[t], r->giga_per_second("flops"));
    if (r->name == std::string(kPrefix) + "read_peak/dram/" + t) bw[t] = larger(bw[t], r->giga_per_second("bytes"));
    if (n->impl == "jit" && n->form.empty()) jit_f32[n->problem] = r->seconds;
    if (!is_peer(n->impl)) continue;
    auto [it, inserted] = best_peer.try_emplace(n->problem, r->seconds);
    if (!inserted) it->second = std::min(it->second, r->seconds);
  }
  for (BenchRow* r : rows) {
    const auto n = parse(r->name);
    if (!n || r->error || r->seconds <= 0) continue;
    const std::string t = n->threads;
    const auto gflops = r->giga_per_second("flops");
    const auto gbps = r->giga_per_second("bytes");
    r->set("GFLOPs", gflops);
    r->set("vs_peak", ratio(gflops, peak[t]));
    r->set("GBps", gbps);
    r->set("vs_bw", ratio(gbps, bw[t]));
    const auto best = best_peer.find(n->problem);
    const bool gemm = n->impl != "fma_peak" && n->impl != "read_peak";
    r->set("vs_best_peer", gemm && best != best_peer.end() ? std::optional<double>(best->second / r->seconds)
                                                             : std::nullopt);
    if (!n->form.empty()) {
      const auto f32 = jit_f32.find(n->f32_problem());
      r->set("vs_jit_f32", f32 != jit_f32.end() ? std::optional<double>(f32->second / r->seconds) : std::nullopt);
    }
  }
  limits() = {peak, bw};
}

std::string cell(std::optional<double> v, const char* format) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, *v);
  return buf;
}

// The quantized rows of each case next to our f32 row and the f32 and int8 peers of oneDNN: time,
// throughput, the ratios of the targets, and whether our group ran generated code or the
// scalar reference (its info, from the engine's reference_linear_groups counter).
void quantized_summary(std::ostream& out, const std::vector<const BenchRow*>& rows) {
  std::map<std::string, std::vector<std::pair<LgName, const BenchRow*>>> by_case;  // <case>/t<n> -> rows
  std::vector<std::string> order;
  for (const BenchRow* r : rows) {
    const auto n = parse(r->name);
    if (n && !n->form.empty() && std::find(order.begin(), order.end(), n->f32_problem()) == order.end())
      order.push_back(n->f32_problem());
  }
  if (order.empty()) return;
  for (const BenchRow* r : rows) {
    const auto n = parse(r->name);
    if (!n || std::find(order.begin(), order.end(), n->f32_problem()) == order.end()) continue;
    if (!n->form.empty() || n->impl == "jit" || n->impl == "onednn") by_case[n->f32_problem()].push_back({*n, r});
  }
  const auto infos = lg_impl_infos();
  char line[512];
  out << "\nlinear_group quantized forms: time per call at the minimum; vs_jit_f32 = our f32 group's time / the row's;\n"
         "GB/s and vs_bw count the form's weight bytes (decode rows)\n";
  std::snprintf(line, sizeof line, "%-22s %-9s %-10s %11s %8s %7s %6s %10s %12s  %s\n", "case", "form", "impl", "us",
                "GFLOP/s", "GB/s", "vs_bw", "vs_jit_f32", "vs_best_peer", "path");
  out << line;
  for (const std::string& problem : order) {
    for (const auto& [n, r] : by_case[problem]) {
      const std::string form = n.form.empty() ? "f32" : n.form;
      std::string path;
      if (n.impl == "jit") {
        const auto info = infos.find("jit/" + problem.substr(0, problem.find('/')) + (n.form.empty() ? "" : "/" + n.form));
        path = info == infos.end() ? "" : info->second.find("SCALAR REFERENCE") != std::string::npos ? "REFERENCE"
                                                                                                      : "kernels";
      }
      if (r->error) {
        std::snprintf(line, sizeof line, "%-22s %-9s %-10s %11s  %s\n", problem.c_str(), form.c_str(), n.impl.c_str(),
                      "-", r->error->c_str());
      } else {
        std::snprintf(line, sizeof line, "%-22s %-9s %-10s %11s %8s %7s %6s %10s %12s  %s\n", problem.c_str(),
                      form.c_str(), n.impl.c_str(), cell(r->seconds * 1e6, "%.2f").c_str(),
                      cell(r->column("GFLOPs"), "%.1f").c_str(), cell(r->column("GBps"), "%.1f").c_str(),
                      cell(r->column("vs_bw"), "%.2f").c_str(), cell(r->column("vs_jit_f32"), "%.2f").c_str(),
                      cell(r->column("vs_best_peer"), "%.2f").c_str(), path.c_str());
      }
      out << line;
    }
  }
}

// Per case and thread count: every implementation's GFLOP/s side by side, the best peer, and
// jit against it and against the peak; then what each library chose.
void summary(std::ostream& out, const std::vector<const BenchRow*>& rows) {
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, const BenchRow*>> by_case;
  for (const BenchRow* r : rows) {
    const auto n = parse(r->name);
    if (!n) continue;
    if (n->impl == "fma_peak" || n->impl == "read_peak" || !n->form.empty()) continue;
    if (!by_case.count(n->problem)) order.push_back(n->problem);
    by_case[n->problem][n->impl] = r;
  }
  if (order.empty()) return;
  size_t width = 4;
  for (const auto& p : order) width = std::max(width, p.size());
  char line[512];
  out << "\nlinear_group: GFLOP/s at the minimum time, side by side\n";
  int len = std::snprintf(line, sizeof line, "%-*s", int(width), "case");
  const auto col = [](const char* impl) { return std::max(9, int(std::string(impl).size())); };
  for (const char* impl : kImpls) len += std::snprintf(line + len, sizeof line - size_t(len), " %*s", col(impl), impl);
  std::snprintf(line + len, sizeof line - size_t(len), " %16s %9s %9s\n", "best peer", "jit/best", "jit/peak");
  out << line;
  for (const auto& p : order) {
    const auto& impls = by_case[p];
    len = std::snprintf(line, sizeof line, "%-*s", int(width), p.c_str());
    const BenchRow* best = nullptr;
    std::string best_name;
    for (const char* impl : kImpls) {
      const auto it = impls.find(impl);
      std::string text;
      if (it != impls.end()) text = it->second->error ? "err" : cell(it->second->column("GFLOPs"), "%.1f");
      len += std::snprintf(line + len, sizeof line - size_t(len), " %*s", col(impl), text.c_str());
      if (it != impls.end() && !it->second->error && is_peer(impl) && (!best || it->second->seconds < best->seconds)) {
        best = it->second;
        best_name = impl;
      }
    }
    const auto jit = impls.find("jit");
    const BenchRow* j = jit != impls.end() && !jit->second->error ? jit->second : nullptr;
    std::snprintf(line + len, sizeof line - size_t(len), " %16s %9s %9s\n", best_name.c_str(),
                  j ? cell(j->column("vs_best_peer"), "%.3f").c_str() : "",
                  j ? cell(j->column("vs_peak"), "%.3f").c_str() : "");
    out << line;
  }
  // The limits every ratio above used.
  for (const auto& [threads, peak] : limits().peak) {
    const auto bw = limits().bw.count(threads) ? limits().bw.at(threads) : std::nullopt;
    std::snprintf(line, sizeof line, "limits at %s: FMA peak %s GFLOP/s, DRAM read %s GB/s\n", threads.c_str(),
                  cell(peak, "%.1f").c_str(), cell(bw, "%.1f").c_str());
    out << line;
  }
  quantized_summary(out, rows);
  const auto infos = lg_impl_infos();
  if (!infos.empty()) {
    out << "\nlinear_group implementations (what each library chose):\n";
    for (const auto& [key, info] : infos) out << "  " << key << ": " << info << "\n";
  }
}

[[maybe_unused]] const bool kRegistered = register_row_family({kPrefix, finish, summary});

}  // namespace
}  // namespace shapejit::bench

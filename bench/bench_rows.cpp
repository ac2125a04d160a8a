// Row families and the console table of shapejit_bench (bench_main.cpp makes the rows).
#include "bench_rows.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace shapejit::bench {
namespace {

std::vector<RowFamily>& families() {
  static std::vector<RowFamily> registry;
  return registry;
}

const RowFamily* family_of(const std::string& name) {
  for (const RowFamily& f : families())
    if (name.compare(0, f.prefix.size(), f.prefix) == 0) return &f;
  return nullptr;
}

std::string pad(const std::string& s, size_t width, bool left) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

std::string number(double v) {
  char buf[64];
  // Three significant decimals for ratios, one for figures like GB/s.
  std::snprintf(buf, sizeof buf, std::fabs(v) < 10 ? "%.3f" : "%.1f", v);
  return buf;
}

std::string time_text(double seconds) {
  char buf[64];
  if (seconds >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.3f ms", seconds * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.2f us", seconds * 1e6);
  return buf;
}

// One block of rows that share a family: a header with the union of their column names.
void print_block(std::ostream& out, const std::vector<const BenchRow*>& rows, size_t name_width) {
  std::vector<std::string> keys;
  for (const BenchRow* r : rows)
    for (const auto& [key, value] : r->columns)
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  std::vector<size_t> widths;
  for (const auto& key : keys) widths.push_back(std::max<size_t>(key.size() + 2, 9));
  std::string header = pad("benchmark", name_width + 2, true) + pad("time/call", 12, false);
  for (size_t k = 0; k < keys.size(); ++k) header += pad(keys[k], widths[k], false);
  header += "   iterations x reps";
  out << header << "\n" << std::string(header.size(), '-') << "\n";
  for (const BenchRow* r : rows) {
    out << pad(r->name, name_width + 2, true);
    if (r->error) {
      out << "ERROR: " << *r->error << "\n";
      continue;
    }
    out << pad(time_text(r->seconds), 12, false);
    for (size_t k = 0; k < keys.size(); ++k) {
      const auto value = r->column(keys[k]);
      out << pad(value ? number(*value) : "-", widths[k], false);
    }
    out << "   " << r->iterations << " x " << r->repetitions << "\n";
  }
}

}  // namespace

std::optional<ImplRowName> parse_impl_row_name(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const size_t start = prefix.size();
  const size_t slash = name.find('/', start), t = name.rfind("/t");
  if (slash == std::string::npos || t == std::string::npos || t <= slash) return std::nullopt;
  return ImplRowName{name.substr(start, slash - start), name.substr(slash + 1, t - slash - 1),
                     std::atoi(name.c_str() + t + 2)};
}

std::optional<double> BenchRow::counter(const std::string& key) const {
  const auto it = counters.find(key);
  return it == counters.end() ? std::nullopt : std::optional<double>(it->second);
}

void BenchRow::set(const std::string& key, std::optional<double> value) {
  for (auto& [k, v] : columns)
    if (k == key) {
      v = value;
      return;
    }
  columns.emplace_back(key, value);
}

std::optional<double> BenchRow::column(const std::string& key) const {
  for (const auto& [k, v] : columns)
    if (k == key) return v;
  return std::nullopt;
}

std::optional<double> BenchRow::giga_per_second(const std::string& key) const {
  const auto amount = counter(key);
  if (!amount || error || seconds <= 0) return std::nullopt;
  return *amount / seconds * 1e-9;
}

bool register_row_family(RowFamily family) {
  families().push_back(std::move(family));
  return true;
}

void finish_rows(std::vector<BenchRow>& rows) {
  for (const RowFamily& f : families()) {
    std::vector<BenchRow*> mine;
    for (BenchRow& r : rows)
      if (family_of(r.name) == &f) mine.push_back(&r);
    if (!mine.empty() && f.finish) f.finish(mine);
  }
  for (BenchRow& r : rows)
    if (!family_of(r.name))
      for (const auto& [key, value] : r.counters) r.set(key, value);
}

void print_rows(std::ostream& out, const std::vector<BenchRow>& rows) {
  size_t name_width = 9;
  for (const BenchRow& r : rows) name_width = std::max(name_width, r.name.size());
  // Blocks in order of first appearance; rows of no family form one block of their own.
  std::vector<const RowFamily*> order;
  for (const BenchRow& r : rows)
    if (std::find(order.begin(), order.end(), family_of(r.name)) == order.end())
      order.push_back(family_of(r.name));
  bool first = true;
  for (const RowFamily* f : order) {
    std::vector<const BenchRow*> block;
    for (const BenchRow& r : rows)
      if (family_of(r.name) == f) block.push_back(&r);
    if (!first) out << "\n";
    first = false;
    print_block(out, block, name_width);
    if (f && f->summary) f->summary(out, block);
  }
}

}  // namespace shapejit::bench

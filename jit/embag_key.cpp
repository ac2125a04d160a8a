// EmbagKey's canonical name, its inverse and its hash: the one place the name format lives.
//
// Format: embag.<isa>.<table>.d<D>.<mode>.i<32|64>.o<32|64>[.w][.pad][.pf<N>]
// The generic kernel (dim 0) is `dgen`; `.pf<N>` appears only when the prefetch distance is
// not the default (16), so the default key reads as in design.md.
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jit/embag_kernel.hpp"

namespace shapejit::jit {
namespace {

constexpr int kDefaultPrefetch = 16;

std::string_view table_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    default: return "?";
  }
}

std::string_view mode_name(Mode m) {
  switch (m) {
    case Mode::kSum: return "sum";
    case Mode::kMean: return "mean";
    case Mode::kMax: return "max";
  }
  return "?";
}

std::string_view int_bits(DType t) { return t == DType::kI32 ? "32" : "64"; }

std::vector<std::string_view> split_dots(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    parts.push_back(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

// A canonical decimal: digits only, no sign, no leading zero (except "0" itself).
std::optional<int64_t> parse_decimal(std::string_view s) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

std::optional<DType> parse_int_type(std::string_view s, char prefix) {
  if (s.size() != 3 || s[0] != prefix) return std::nullopt;
  if (s.substr(1) == "32") return DType::kI32;
  if (s.substr(1) == "64") return DType::kI64;
  return std::nullopt;
}

}  // namespace

std::string EmbagKey::name() const {
  std::string s = "embag.";
  s += isa_name(isa);
  s += '.';
  s += table_name(table);
  s += dim == 0 ? std::string(".dgen") : ".d" + std::to_string(dim);
  s += '.';
  s += mode_name(mode);
  s += ".i";
  s += int_bits(index);
  s += ".o";
  s += int_bits(offset);
  if (weighted) s += ".w";
  if (padding) s += ".pad";
  if (prefetch != kDefaultPrefetch) s += ".pf" + std::to_string(prefetch);
  return s;
}

std::optional<EmbagKey> parse_embag_key(std::string_view name) {
  const std::vector<std::string_view> p = split_dots(name);
  if (p.size() < 7 || p.size() > 10 || p[0] != "embag") return std::nullopt;
  EmbagKey k;
  const auto isa = parse_isa(p[1]);
  if (!isa) return std::nullopt;
  k.isa = *isa;

  bool table_ok = false;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    if (table_name(t) == p[2]) k.table = t, table_ok = true;
  if (!table_ok) return std::nullopt;

  if (p[3] == "dgen") {
    k.dim = 0;
  } else {
    if (p[3].size() < 2 || p[3][0] != 'd') return std::nullopt;
    const auto dim = parse_decimal(p[3].substr(1));
    if (!dim || *dim == 0) return std::nullopt;
    k.dim = *dim;
  }

  bool mode_ok = false;
  for (Mode m : {Mode::kSum, Mode::kMean, Mode::kMax})
    if (mode_name(m) == p[4]) k.mode = m, mode_ok = true;
  if (!mode_ok) return std::nullopt;

  const auto index = parse_int_type(p[5], 'i');
  const auto offset = parse_int_type(p[6], 'o');
  if (!index || !offset) return std::nullopt;
  k.index = *index;
  k.offset = *offset;

  // Optional suffixes, each at most once and in canonical order.
  size_t i = 7;
  if (i < p.size() && p[i] == "w") k.weighted = true, ++i;
  if (i < p.size() && p[i] == "pad") k.padding = true, ++i;
  if (i < p.size() && p[i].substr(0, 2) == "pf") {
    const auto pf = parse_decimal(p[i].substr(2));
    if (!pf || *pf == kDefaultPrefetch || *pf > (1 << 20)) return std::nullopt;
    k.prefetch = static_cast<int>(*pf);
    ++i;
  }
  if (i != p.size()) return std::nullopt;
  return k;
}

size_t EmbagKeyHash::operator()(const EmbagKey& k) const noexcept {
  // All fields but dim fit in 32 bits together; dim gets its own 64-bit mix.
  uint64_t small = uint64_t(k.isa) | uint64_t(k.table) << 4 | uint64_t(k.mode) << 8 |
                   uint64_t(k.weighted) << 10 | uint64_t(k.padding) << 11 |
                   uint64_t(k.index) << 12 | uint64_t(k.offset) << 16 |
                   uint64_t(uint32_t(k.prefetch)) << 20;
  uint64_t h = small * 0x9E3779B97F4A7C15ull ^ uint64_t(k.dim) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<size_t>(h);
}

}  // namespace shapejit::jit

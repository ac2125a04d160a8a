// EmbagKey's canonical name, its inverse and its hash: the one place the name format lives.
//
// Format: embag.<isa>.<table>.d<D>.<mode>.i<32|64>.o<32|64>[.w[<psw>]][.pad][.aten][.pruned][.out<dtype>][.pf<N>][.head][.noidx][.os<N>]
// <table> is f32, f16, bf16, q8, q4 or q2. The generic kernel (dim 0) is `dgen`. Suffixes appear
// only when they differ from the default, so every f32 key reads as before:
//   .w        weighted with the table's natural weight dtype (its own for f32/f16/bf16, f32 for
//             quantized tables); .w<psw> (e.g. .wf16) with another one;
//   .aten     ATen's own loop's arithmetic without padding_idx (aten_loop);
//   .pruned   a compressed_indices_mapping;
//   .out<dt>  an output dtype other than the natural one (the table's, f32 for quantized);
//   .pf<N>    a prefetch distance other than 16;
//   .head     only the head of each row is prefetched (prefetch_head);
//   .noidx    no index outputs (offset2bag, bag_size, max_indices): the output rows only;
//   .os<N>    output rows N elements apart (N > D; dense rows have no suffix).
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
    case DType::kQ8: return "q8";
    case DType::kQ4: return "q4";
    case DType::kQ2: return "q2";
    default: return "?";
  }
}

constexpr DType kTables[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8, DType::kQ4, DType::kQ2};
constexpr DType kFloats[] = {DType::kF32, DType::kF16, DType::kBF16};

std::optional<DType> parse_float_dtype(std::string_view s) {
  for (DType t : kFloats)
    if (table_name(t) == s) return t;
  return std::nullopt;
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
  if (weighted) {
    s += ".w";
    if (psw != default_value_dtype(table)) s += table_name(psw);
  }
  if (padding) s += ".pad";
  if (aten_loop) s += ".aten";
  if (pruned) s += ".pruned";
  if (out != default_value_dtype(table)) {
    s += ".out";
    s += table_name(out);
  }
  if (prefetch != kDefaultPrefetch) s += ".pf" + std::to_string(prefetch);
  if (prefetch_head) s += ".head";
  if (!index_outputs) s += ".noidx";
  if (out_stride != 0) s += ".os" + std::to_string(out_stride);
  return s;
}

std::optional<EmbagKey> parse_embag_key(std::string_view name) {
  const std::vector<std::string_view> p = split_dots(name);
  if (p.size() < 7 || p.size() > 16 || p[0] != "embag") return std::nullopt;
  EmbagKey k;
  const auto isa = parse_isa(p[1]);
  if (!isa) return std::nullopt;
  k.isa = *isa;

  bool table_ok = false;
  for (DType t : kTables)
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
  // An unweighted key's psw is f32; a weighted one's the natural dtype unless named.
  if (i < p.size() && p[i].substr(0, 1) == "w") {
    k.weighted = true;
    k.psw = default_value_dtype(k.table);
    if (p[i].size() > 1) {
      const auto psw = parse_float_dtype(p[i].substr(1));
      if (!psw || *psw == k.psw) return std::nullopt;  // unknown, or not canonical
      k.psw = *psw;
    }
    ++i;
  }
  if (i < p.size() && p[i] == "pad") k.padding = true, ++i;
  if (i < p.size() && p[i] == "aten") k.aten_loop = true, ++i;
  if (i < p.size() && p[i] == "pruned") k.pruned = true, ++i;
  k.out = default_value_dtype(k.table);
  if (i < p.size() && p[i].substr(0, 3) == "out") {
    const auto out = parse_float_dtype(p[i].substr(3));
    if (!out || *out == k.out) return std::nullopt;
    k.out = *out;
    ++i;
  }
  if (i < p.size() && p[i].substr(0, 2) == "pf") {
    const auto pf = parse_decimal(p[i].substr(2));
    if (!pf || *pf == kDefaultPrefetch || *pf > (1 << 20)) return std::nullopt;
    k.prefetch = static_cast<int>(*pf);
    ++i;
  }
  if (i < p.size() && p[i] == "head") k.prefetch_head = true, ++i;
  if (i < p.size() && p[i] == "noidx") k.index_outputs = false, ++i;
  if (i < p.size() && p[i].substr(0, 2) == "os") {
    const auto os = parse_decimal(p[i].substr(2));
    if (!os || k.dim == 0 || *os <= k.dim) return std::nullopt;  // dense rows have no suffix
    k.out_stride = *os;
    ++i;
  }
  if (i != p.size()) return std::nullopt;
  return k;
}

size_t EmbagKeyHash::operator()(const EmbagKey& k) const noexcept {
  // All fields but dim and out_stride fit in 64 bits together (dtypes 4 bits each, flags 1
  // bit, prefetch 32); dim and out_stride get 64-bit mixes of their own.
  uint64_t small = uint64_t(k.isa) | uint64_t(k.table) << 4 | uint64_t(k.mode) << 8 |
                   uint64_t(k.weighted) << 10 | uint64_t(k.padding) << 11 |
                   uint64_t(k.index) << 12 | uint64_t(k.offset) << 16 |
                   uint64_t(k.out) << 20 | uint64_t(k.psw) << 24 | uint64_t(k.pruned) << 28 |
                   uint64_t(k.prefetch_head) << 29 | uint64_t(k.index_outputs) << 30 | uint64_t(k.aten_loop) << 31 |
                   uint64_t(uint32_t(k.prefetch)) << 32;
  uint64_t h = small * 0x9E3779B97F4A7C15ull ^ uint64_t(k.dim) * 0xC2B2AE3D27D4EB4Full ^
               uint64_t(k.out_stride) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<size_t>(h);
}

}  // namespace shapejit::jit

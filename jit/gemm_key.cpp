// GemmKey's canonical name, its inverse and its hash: the one place the name format lives.
//
// Format: gemm.<isa>.<mr>x<nc>.k<K>[.<quant>][.bias][.<act>][.scale][.tab][.pf<N>][.ks<S>][.dot]
// with <quant> one of qd8qc8w, qd8qc4w, f32qc8w, f32qc4w (absent for f32) and <act> one of
// relu, gelu, gelu_tanh, silu (absent for none). Suffixes appear in that order;
// parse_gemm_key accepts only canonical names.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jit/gemm_kernel.hpp"

namespace shapejit::jit {
namespace {

constexpr Activation kActivations[] = {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh,
                                       Activation::kSilu};

std::string_view act_name(Activation a) {
  switch (a) {
    case Activation::kNone: return "none";
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_tanh";
    case Activation::kSilu: return "silu";
  }
  return "?";
}

constexpr GemmQuant kQuantForms[] = {GemmQuant::kQd8Qc8w, GemmQuant::kQd8Qc4w, GemmQuant::kF32Qc8w,
                                     GemmQuant::kF32Qc4w};

std::string_view quant_name(GemmQuant q) {
  switch (q) {
    case GemmQuant::kF32: return "f32";
    case GemmQuant::kQd8Qc8w: return "qd8qc8w";
    case GemmQuant::kQd8Qc4w: return "qd8qc4w";
    case GemmQuant::kF32Qc8w: return "f32qc8w";
    case GemmQuant::kF32Qc4w: return "f32qc4w";
  }
  return "?";
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

// A canonical positive decimal: digits only, no sign, no leading zero.
std::optional<int64_t> parse_positive(std::string_view s) {
  if (s.empty() || s[0] == '0') return std::nullopt;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v <= 0) return std::nullopt;
  return v;
}

}  // namespace

GemmStepRegisters gemm_x86_step_registers(Isa isa, int nv, GemmQuant quant, bool dot) {
  if (gemm_x86_sign_step(isa, quant, dot)) return {nv, 3};
  switch (quant) {
    case GemmQuant::kF32:
    case GemmQuant::kF32Qc8w: return {nv, 2};
    // AVX-512 (int4 planes): per column vector its group's codes and one plane's values
    // (X86GemmQuantOps::emit_int4_group_load, emit_int4_plane).
    case GemmQuant::kF32Qc4w: return isa == Isa::kAvx512 ? GemmStepRegisters{2 * nv, 2} : GemmStepRegisters{nv, 2};
    case GemmQuant::kQd8Qc8w: return dot ? GemmStepRegisters{nv, 2} : GemmStepRegisters{2 * nv, 3};
    case GemmQuant::kQd8Qc4w: return dot ? GemmStepRegisters{2 * nv, 2} : GemmStepRegisters{2 * nv, 4};
  }
  return {nv, 2};
}

int gemm_accumulator_budget(Isa isa, int nv, GemmQuant quant, bool dot) {
  const IsaTraits& t = isa_traits(isa);
  // NEON: the registers the nv weights leave (each row also takes one X register).
  if (t.family == IsaFamily::kA64) return t.vector_registers - nv;
  // x86: the step's weights and temporaries besides the accumulators, of which AVX-512 keeps
  // at most 24 (5+ registers left for weights and broadcasts).
  const GemmStepRegisters step = gemm_x86_step_registers(isa, nv, quant, dot);
  return std::min(24, t.vector_registers - step.weights - step.temps);
}

int gemm_max_mr(Isa isa, int nv, GemmQuant quant, bool dot) {
  const IsaTraits& t = isa_traits(isa);
  if (nv < 1 || !t.gemm_generator) return 0;
  const int budget = gemm_accumulator_budget(isa, nv, quant, dot);
  // NEON: per row nv accumulators and one X register.
  if (t.family == IsaFamily::kA64) return std::clamp(budget / (nv + 1), 0, 8);
  return std::clamp(budget / nv, 0, 8);
}

int gemm_stream_split(const GemmKey& key) {
  constexpr int64_t kMinSpanK = 64;  // shorter spans: the streams' start-up outweighs them
  // The quantized forms at M = 1 are bound by their arithmetic, not the stream: split, they
  // were no faster on the AVX2 host (qd8-qc8w widening 10 % slower, by sign 5-8 %), so they
  // keep one stream.
  if (key.quant != GemmQuant::kF32) return 1;
  const int tile = key.mr * key.nv();
  const int sets_that_fit = gemm_accumulator_budget(key.isa, key.nv(), key.quant, key.dot) / std::max(tile, 1);
  int split = std::min(isa_traits(key.isa).gemm_stream_split, sets_that_fit);
  split = int(std::min<int64_t>(split, key.k / kMinSpanK));
  return split >= 2 ? split : 1;
}

std::string GemmKey::name() const {
  std::string s = "gemm.";
  s += isa_name(isa);
  s += '.' + std::to_string(mr) + 'x' + std::to_string(nc);
  s += ".k" + std::to_string(k);
  if (quant != GemmQuant::kF32) {
    s += '.';
    s += quant_name(quant);
  }
  if (bias) s += ".bias";
  if (act != Activation::kNone) {
    s += '.';
    s += act_name(act);
  }
  if (scale) s += ".scale";
  if (store == GemmStore::kTable) s += ".tab";
  if (prefetch != 0) s += ".pf" + std::to_string(prefetch);
  if (k_split != 1) s += ".ks" + std::to_string(k_split);
  if (dot) s += ".dot";
  return s;
}

std::optional<GemmKey> parse_gemm_key(std::string_view name) {
  const std::vector<std::string_view> p = split(name, '.');
  if (p.size() < 4 || p[0] != "gemm") return std::nullopt;
  GemmKey key;
  const auto isa = parse_isa(p[1]);
  if (!isa) return std::nullopt;
  key.isa = *isa;

  const std::vector<std::string_view> tile = split(p[2], 'x');
  if (tile.size() != 2) return std::nullopt;
  const auto mr = parse_positive(tile[0]);
  const auto nc = parse_positive(tile[1]);
  if (!mr || !nc || *mr > 64 || *nc > 4096) return std::nullopt;
  key.mr = int(*mr);
  key.nc = int(*nc);

  if (p[3].size() < 2 || p[3][0] != 'k') return std::nullopt;
  const auto k = parse_positive(p[3].substr(1));
  if (!k) return std::nullopt;
  key.k = *k;

  // Optional suffixes in canonical order: each stage may match at most once.
  size_t i = 4;
  for (GemmQuant q : kQuantForms)
    if (i < p.size() && p[i] == quant_name(q)) {
      key.quant = q;
      ++i;
      break;
    }
  if (i < p.size() && p[i] == "bias") key.bias = true, ++i;
  for (Activation a : kActivations)
    if (i < p.size() && p[i] == act_name(a)) {
      key.act = a;
      ++i;
      break;
    }
  if (i < p.size() && p[i] == "scale") key.scale = true, ++i;
  if (i < p.size() && p[i] == "tab") key.store = GemmStore::kTable, ++i;
  if (i < p.size() && p[i].size() > 2 && p[i].substr(0, 2) == "pf") {
    const auto pf = parse_positive(p[i].substr(2));
    if (!pf || *pf > (1 << 20)) return std::nullopt;
    key.prefetch = int(*pf);
    ++i;
  }
  if (i < p.size() && p[i].size() > 2 && p[i].substr(0, 2) == "ks") {
    const auto ks = parse_positive(p[i].substr(2));
    if (!ks || *ks < 2 || *ks > 64) return std::nullopt;
    key.k_split = int(*ks);
    ++i;
  }
  if (i < p.size() && p[i] == "dot") key.dot = true, ++i;
  if (i != p.size()) return std::nullopt;
  return key;
}

size_t GemmKeyHash::operator()(const GemmKey& k) const noexcept {
  size_t h = std::hash<int64_t>{}(k.k);
  auto mix = [&h](uint64_t v) { h ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  mix(uint64_t(k.isa));
  mix(uint64_t(k.mr));
  mix(uint64_t(k.nc));
  mix(uint64_t(k.bias) | uint64_t(k.scale) << 1 | uint64_t(k.store) << 2 | uint64_t(k.act) << 4);
  mix(uint64_t(k.prefetch));
  mix(uint64_t(k.quant) | uint64_t(k.dot) << 8 | uint64_t(k.k_split) << 16);
  return h;
}

const GemmKernelArgs kBlankGemmArgs{};  // gemm_kernel.hpp says why it lives here

}  // namespace shapejit::jit

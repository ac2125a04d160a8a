// The dtype battery: see embag_dtype_battery.hpp. Problems are small (few rows, short bags) so
// every key runs in well under a millisecond natively and the whole list stays within minutes
// under Bochs; the widths carry the variety (tails, column blocks, block loops).
#include "support/embag_dtype_battery.hpp"

#include <asmjit/x86.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>

#include "jit/embag_codegen.hpp"
#include "jit/embag_plan.hpp"
#include "ref/embedding_bag.hpp"
#include "ref/float16.hpp"
#include "ref/table_rows.hpp"
#include "support/embag_cases.hpp"
#include "support/embag_jit_support.hpp"
#include "support/host_isas.hpp"

namespace shapejit::test::embag_dtype {
namespace {

using jit::EmbagKey;
using jit::Isa;
using embag_jit::chance;
using embag_jit::mix;
using embag_jit::PageEndArray;
using embag_jit::Rng;
using embag_jit::uniform;

// One key of the battery: mode, weights, output, padding, pruning.
struct Variant {
  Mode mode;
  bool weighted;
  DType psw;
};

std::vector<Variant> variants(DType table) {
  std::vector<Variant> v{{Mode::kSum, false, DType::kF32}, {Mode::kMean, false, DType::kF32},
                         {Mode::kMax, false, DType::kF32}};
  if (table == DType::kF16 || table == DType::kBF16) v.push_back({Mode::kSum, true, table});
  else v.push_back({Mode::kSum, true, DType::kF32});
  if (table == DType::kQ4 || table == DType::kQ2) v.push_back({Mode::kSum, true, DType::kF16});
  return v;
}

std::vector<DType> outputs(DType table) {
  if (jit::is_quantized_table(table)) return {DType::kF32, DType::kF16, DType::kBF16};
  return {table};
}

int64_t adjust_dim(DType table, int64_t d) {
  if (table == DType::kQ4) return d + d % 2;
  if (table == DType::kQ2) return (d + 3) / 4 * 4;
  return d;
}

// ---- Values ----------------------------------------------------------------------------------

float special(Rng& rng) {
  static const uint32_t kBits[] = {0x7FC00000, 0xFFC00000, 0x7FA00001, 0x7F800000, 0xFF800000, 0x80000000, 0x00000000};
  return ref::f32_from_bits(kBits[uniform(rng, 0, 6)]);
}

float nice(Rng& rng) {
  if (chance(rng, 30)) return float(uniform(rng, -4, 4)) * 0.5f;  // ties for max, exact sums
  return std::uniform_real_distribution<float>(-3, 3)(rng);
}

float value(Rng& rng, int special_percent) { return chance(rng, special_percent) ? special(rng) : nice(rng); }

uint16_t half_of(DType t, float v) { return t == DType::kF16 ? ref::f32_to_f16(v) : ref::f32_to_bf16(v); }

void put(std::byte* p, const void* v, size_t n) { std::memcpy(p, v, n); }

// Row r of `table` at p: elements, or codes + scale + bias (Q8 sometimes the scale where B4's
// fmaf and torch 1.13's f64 step differ, with bias 1.0).
void fill_row(std::byte* p, DType table, int64_t dim, Rng& rng) {
  if (table == DType::kF32) {
    for (int64_t j = 0; j < dim; ++j) {
      const float v = value(rng, 5);
      put(p + 4 * j, &v, 4);
    }
    return;
  }
  if (table == DType::kF16 || table == DType::kBF16) {
    for (int64_t j = 0; j < dim; ++j) {
      const uint16_t h = chance(rng, 4) ? uint16_t(uniform(rng, 0, 0xFFFF)) : half_of(table, value(rng, 4));
      put(p + 2 * j, &h, 2);
    }
    return;
  }
  const int bits = ref::quantized_bits(int64_t(table));
  const int64_t code_bytes = jit::embag_col_bytes(table, dim);
  const int kind = int(uniform(rng, 0, 9));
  for (int64_t k = 0; k < code_bytes; ++k) {
    const auto b = static_cast<unsigned char>(kind == 0 ? 0 : kind == 1 ? 0xFF : uniform(rng, 0, 255));
    put(p + k, &b, 1);
  }
  (void)bits;
  std::byte* trailer = p + code_bytes;
  if (table == DType::kQ8) {
    const bool craft = chance(rng, 10);
    float scale = craft ? std::ldexp(16519105.0f, -54) : chance(rng, 3) ? special(rng)
                                                        : std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
    if (!craft && chance(rng, 20)) scale = std::ldexp(float(uniform(rng, 1 << 23, (1 << 24) - 1)), -int(uniform(rng, 30, 60)));
    const float bias = craft ? 1.0f : value(rng, 3);
    put(trailer, &scale, 4);
    put(trailer + 4, &bias, 4);
    return;
  }
  const float scale = chance(rng, 3) ? special(rng) : std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng);
  const uint16_t hs = ref::f32_to_f16(scale), hb = ref::f32_to_f16(value(rng, 3));
  put(trailer, &hs, 2);
  put(trailer + 2, &hb, 2);
}

// ---- One problem -------------------------------------------------------------------------------

struct Problem {
  EmbagKey key;
  int64_t rows = 1, stride_units = 0, stride_bytes = 0, bags = 0;
  bool include_last_offset = false;
  int64_t padding_idx = 0;
  std::vector<int64_t> idx, off;
  std::vector<float> psw;  // exact values (for printing)
  std::optional<PageEndArray<std::byte>> table, idx_mem, off_mem, psw_mem;
  std::vector<int32_t> mapping;

  shapejit_embedding_bag_ex_args ex_args() {
    shapejit_embedding_bag_args a{};
    a.weight = table->data();
    a.weight_dtype = static_cast<shapejit_dtype>(key.table);
    a.num_rows = rows;
    a.dim = key.dim;
    a.row_stride = stride_units;
    a.indices = idx_mem->data();
    a.index_dtype = static_cast<shapejit_dtype>(key.index);
    a.num_indices = int64_t(idx.size());
    a.offsets = off_mem->data();
    a.offset_dtype = static_cast<shapejit_dtype>(key.offset);
    a.num_offsets = int64_t(off.size());
    a.per_sample_weights = key.weighted ? psw_mem->data() : nullptr;
    a.mode = static_cast<shapejit_mode>(key.mode);
    a.has_padding_idx = key.padding;
    a.padding_idx = padding_idx;
    a.include_last_offset = include_last_offset;
    shapejit_embedding_bag_ex_args e{};
    shapejit_embedding_bag_ex_init(&e, &a);
    e.output_dtype = static_cast<shapejit_dtype>(key.out);
    e.per_sample_weights_dtype = static_cast<shapejit_dtype>(key.weighted ? key.psw : default_psw());
    if (key.pruned) {
      e.compressed_indices_mapping = mapping.data();
      e.mapping_len = int64_t(mapping.size());
    }
    e.aten_loop_arithmetic = key.aten_loop;
    return e;
  }
  DType default_psw() const { return jit::default_value_dtype(key.table); }

  std::string describe() {
    std::ostringstream os;
    os << "rows " << rows << ", stride " << stride_bytes << " bytes, bags " << bags
       << (include_last_offset ? " (include_last_offset)" : "");
    if (key.padding) os << ", padding_idx " << padding_idx;
    auto list = [&](const char* what, const auto& v) {
      os << "\n    " << what << " [" << v.size() << "] =";
      for (size_t i = 0; i < v.size() && i < 200; ++i) os << " " << v[i];
    };
    list("offsets", off);
    list("indices", idx);
    if (key.pruned) list("mapping", mapping);
    if (key.weighted) list("per_sample_weights", psw);
    const int64_t row_bytes = ref::table_row_bytes(int64_t(key.table), key.dim);
    for (int64_t r = 0; r < rows && row_bytes <= 256; ++r) {
      os << "\n    row " << r << " bytes:";
      const auto* p = reinterpret_cast<const unsigned char*>(table->data()) + r * stride_bytes;
      char hex[4];
      for (int64_t b = 0; b < row_bytes; ++b) std::snprintf(hex, sizeof hex, "%02x", p[b]), os << (b % 4 ? "" : " ") << hex;
    }
    return os.str();
  }
};

template <typename T>
void store_ints(std::optional<PageEndArray<std::byte>>& mem, const std::vector<int64_t>& v, DType t) {
  const size_t size = t == DType::kI32 ? 4 : 8;
  mem.emplace(std::max<size_t>(v.size(), 1) * size);
  for (size_t i = 0; i < v.size(); ++i) {
    const int32_t narrow = int32_t(v[i]);
    std::memcpy(mem->data() + i * size, size == 4 ? static_cast<const void*>(&narrow) : &v[i], size);
  }
  (void)sizeof(T);
}

void make_problem(Problem& p, Rng& rng) {
  const EmbagKey& k = p.key;
  p.rows = chance(rng, 15) ? 1 : uniform(rng, 2, 24);
  const int64_t row_bytes = ref::table_row_bytes(int64_t(k.table), k.dim);
  if (jit::is_quantized_table(k.table)) {
    p.stride_units = p.stride_bytes = row_bytes + (chance(rng, 40) ? uniform(rng, 1, 9) : 0);  // unaligned trailers
  } else {
    const int64_t elem = k.table == DType::kF32 ? 4 : 2;
    p.stride_units = k.dim + (chance(rng, 30) ? uniform(rng, 1, 5) : 0);
    p.stride_bytes = p.stride_units * elem;
  }
  p.table.emplace(size_t((p.rows - 1) * p.stride_bytes + row_bytes));
  std::memset(p.table->data(), 0xA5, p.table->size());
  for (int64_t r = 0; r < p.rows; ++r) fill_row(p.table->data() + r * p.stride_bytes, k.table, k.dim, rng);

  // Pruning: indices address a mapping of m entries (-1 skips; the last row often).
  const int64_t m = k.pruned ? uniform(rng, 2, 2 * p.rows + 1) : p.rows;
  if (k.pruned) {
    p.mapping.resize(size_t(m));
    for (auto& v : p.mapping)
      v = int32_t(chance(rng, 25) ? -1 : chance(rng, 33) ? p.rows - 1 : uniform(rng, 0, p.rows - 1));
  }
  p.bags = uniform(rng, 1, 10);
  const bool long_bags = chance(rng, 15);
  for (int64_t b = 0; b < p.bags; ++b) {
    p.off.push_back(int64_t(p.idx.size()));
    const int64_t len = chance(rng, 15) ? 0 : uniform(rng, 1, long_bags ? 40 : 6);
    for (int64_t i = 0; i < len; ++i) p.idx.push_back(chance(rng, 30) ? m - 1 : uniform(rng, 0, m - 1));
  }
  if (k.padding) {
    p.padding_idx = uniform(rng, 0, m - 1);
    const int density = int(uniform(rng, 0, 3)) * 30;
    for (auto& v : p.idx)
      if (chance(rng, density)) v = p.padding_idx;
  }
  p.include_last_offset = p.bags > 0 && chance(rng, 40);
  if (p.include_last_offset) p.off.push_back(int64_t(p.idx.size()));
  store_ints<int>(p.idx_mem, p.idx, k.index);
  store_ints<int>(p.off_mem, p.off, k.offset);
  if (k.weighted) {
    const size_t elem = k.psw == DType::kF32 ? 4 : 2;
    p.psw_mem.emplace(std::max<size_t>(p.idx.size(), 1) * elem);
    for (size_t i = 0; i < p.idx.size(); ++i) {
      float w = value(rng, 3);
      if (elem == 4) {
        std::memcpy(p.psw_mem->data() + 4 * i, &w, 4);
      } else {
        const uint16_t h = half_of(k.psw, w);
        std::memcpy(p.psw_mem->data() + 2 * i, &h, 2);
        w = k.psw == DType::kF16 ? ref::f16_to_f32(h) : ref::bf16_to_f32(h);
      }
      p.psw.push_back(w);
    }
  }
}

// ---- Comparison ------------------------------------------------------------------------------

bool f16_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool bf16_nan(uint16_t h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0; }

// "" when equal: output values bitwise (NaN-ness only for NaNs), the integer outputs bytewise,
// the guards intact. f16 outputs one ulp further from zero (two for an f16 table's mean) are
// accepted (and counted) only on a host whose vcvtps2ph rounds ties away.
std::string compare(const EmbagKey& key, const GuardedOutputs& want, const GuardedOutputs& got, int64_t* ties_away) {
  const auto a = want.bytes(EmbagOutput::kOutput), b = got.bytes(EmbagOutput::kOutput);
  const int64_t n = want.elements(EmbagOutput::kOutput);
  for (int64_t e = 0; e < n; ++e) {
    uint32_t x = 0, y = 0;
    const size_t size = key.out == DType::kF32 ? 4 : 2;
    std::memcpy(&x, a.data() + e * int64_t(size), size);
    std::memcpy(&y, b.data() + e * int64_t(size), size);
    if (x == y) continue;
    if (key.out == DType::kF32 && std::isnan(ref::f32_from_bits(x)) && std::isnan(ref::f32_from_bits(y))) continue;
    if (key.out == DType::kF16 && f16_nan(uint16_t(x)) && f16_nan(uint16_t(y))) continue;
    if (key.out == DType::kBF16 && bf16_nan(uint16_t(x)) && bf16_nan(uint16_t(y))) continue;
    // The mean of an f16 table rounds twice (the sum, then the quotient): up to two ulps.
    const uint32_t away = key.table == DType::kF16 && key.mode == Mode::kMean ? 2 : 1;
    if (key.out == DType::kF16 && host_f16_ties_away() && y > x && y - x <= away && (x & 0x7FFF) < 0x7C00) {
      ++*ties_away;
      continue;
    }
    char text[160];
    std::snprintf(text, sizeof text, "output[%lld] (bag %lld, column %lld) differs: want 0x%x, got 0x%x",
                  static_cast<long long>(e), static_cast<long long>(e / key.dim), static_cast<long long>(e % key.dim), x, y);
    return text;
  }
  for (EmbagOutput w : {EmbagOutput::kOffset2bag, EmbagOutput::kBagSize, EmbagOutput::kMaxIndices}) {
    const auto p = want.bytes(w), q = got.bytes(w);
    if (p.size() != q.size()) return std::string(output_name(w)) + ": sizes differ";
    const size_t elem = want.elements(w) > 0 ? p.size() / size_t(want.elements(w)) : 1;
    for (size_t i = 0; i < p.size(); i += elem) {
      if (std::memcmp(p.data() + i, q.data() + i, elem) == 0) continue;
      int64_t x = 0, y = 0;
      std::memcpy(&x, p.data() + i, elem);
      std::memcpy(&y, q.data() + i, elem);
      return std::string(output_name(w)) + "[" + std::to_string(i / elem) + "] differs: want " + std::to_string(x) +
             ", got " + std::to_string(y);
    }
  }
  return got.check_guards();
}

jit::EmbagKernelArgs kernel_args(Problem& p, GuardedOutputs& out, const shapejit_embedding_bag_ex_args& e) {
  jit::EmbagKernelArgs g{};
  g.weight = p.table->data();
  g.row_stride_bytes = p.stride_bytes;
  g.dim = p.key.dim;
  g.indices = p.idx_mem->data();
  g.offsets = p.off_mem->data();
  g.num_offsets = int64_t(p.off.size());
  g.num_indices = int64_t(p.idx.size());
  g.per_sample_weights = e.call.per_sample_weights;
  g.padding_idx = p.padding_idx;
  g.bag_begin = 0;
  g.bag_end = p.bags;
  g.output = out.data(EmbagOutput::kOutput);
  g.mapping = p.key.pruned ? p.mapping.data() : nullptr;
  g.offset2bag = out.data(EmbagOutput::kOffset2bag);
  g.bag_size = out.data(EmbagOutput::kBagSize);
  g.max_indices = out.data(EmbagOutput::kMaxIndices);
  if (p.key.mode == Mode::kSum) {  // kernels do not write the sum mode's zero counts
    if (g.bag_size) std::memset(g.bag_size, 0, out.bytes(EmbagOutput::kBagSize).size());
    if (g.max_indices) std::memset(g.max_indices, 0, out.bytes(EmbagOutput::kMaxIndices).size());
  }
  return g;
}

}  // namespace

bool host_f16_ties_away() {
  static const bool away = [] {
    if (!host_has(Isa::kAvx2)) return false;
    asmjit::JitRuntime rt;
    asmjit::CodeHolder code;
    code.init(rt.environment());
    asmjit::x86::Assembler a(&code);
    namespace x86 = asmjit::x86;
    a.vmovss(x86::xmm0, x86::dword_ptr(x86::rdi));
    a.vcvtps2ph(x86::xmm0, x86::xmm0, 0);
    a.vpextrw(x86::word_ptr(x86::rsi), x86::xmm0, 0);
    a.ret();
    void (*fn)(const float*, uint16_t*) = nullptr;
    if (rt.add(&fn, &code) != asmjit::kErrorOk) return false;
    const float tie = 1.0f + std::ldexp(1.0f, -11);  // halfway between f16 1.0 and 1.0 + 2^-10
    uint16_t h = 0;
    fn(&tie, &h);
    return h == 0x3C01;
  }();
  return away;
}

std::vector<int64_t> default_dims() {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= 40; ++i) d.push_back(i);
  for (int64_t i : {47, 48, 49, 63, 64, 65, 96, 100, 127, 128, 129, 160, 161, 200, 255, 256, 257, 300, 384, 385,
                    513, 1000, 1100, 2049})
    d.push_back(i);
  return d;
}

Result run(const Options& o) {
  Result res;
  asmjit::JitRuntime rt;
  static const bool trace = std::getenv("SHAPEJIT_BATTERY_TRACE") != nullptr;  // names each key before it runs
  int64_t item = 0;
  constexpr DType kTables[] = {DType::kF16, DType::kBF16, DType::kQ8, DType::kQ4, DType::kQ2, DType::kF32};
  for (DType table : kTables) {
    int64_t last_dim = -1;
    for (int64_t raw : o.dims) {
      const int64_t dim = adjust_dim(table, raw);
      if (dim == last_dim) continue;
      last_dim = dim;
      for (const Variant& v : variants(table)) {
        for (DType out : outputs(table)) {
          // padding 2: no padding_idx, ATen's loop's arithmetic asked for (bf16: H6's other path).
          for (int padding = 0; padding < 3; ++padding) {
            for (int pruned = 0; pruned < 2; ++pruned) {
              // f32 tables are the other tests' subject: here only their pruned keys.
              if (table == DType::kF32 ? !pruned : pruned && !jit::is_quantized_table(table)) continue;
              if (padding == 2 && table != DType::kBF16) continue;
              const int64_t number = item++;
              if (!o.mine(number)) continue;
              Problem p;
              EmbagKey& k = p.key;
              k.isa = o.isa;
              k.table = table;
              k.dim = dim;
              k.mode = v.mode;
              k.weighted = v.weighted;
              k.psw = v.weighted ? v.psw : DType::kF32;
              k.out = out;
              k.padding = padding == 1;
              k.aten_loop = padding == 2;
              k.pruned = pruned != 0;
              const int types = int((number / 3) % 4);
              k.index = types & 1 ? DType::kI32 : DType::kI64;
              k.offset = types & 2 ? DType::kI32 : DType::kI64;
              k.prefetch = embag_jit::kBatteryPrefetches[number % 5];
              k.index_outputs = number % 4 != 3;  // a quarter of the keys compute the output only
              auto fail = [&](const std::string& what) {
                if (++res.failures > o.max_reports) return;
                res.reports.push_back(k.name() + " (item " + std::to_string(number) + ", seed " + std::to_string(o.seed) +
                                      "): " + what + "\n    " + p.describe());
              };
              if (const auto why = jit::embag_key_unsupported_reason(k)) {
                fail("the gate refuses the key: " + *why);
                continue;
              }
              if (o.emit_only) {
                asmjit::CodeHolder code;
                code.init(asmjit::Environment(asmjit::Arch::kX64));
                try {
                  jit::emit_embag_kernel(k, code);
                  ++res.kernels;
                } catch (const std::exception& e) {
                  fail(std::string("emit failed: ") + e.what());
                }
                continue;
              }
              Rng rng(mix(o.seed ^ mix(uint64_t(number) * 7 + uint64_t(o.isa))));
              make_problem(p, rng);
              if (trace) std::fprintf(stderr, "embag dtype battery: item %lld %s\n  %s\n", static_cast<long long>(number),
                                      k.name().c_str(), p.describe().c_str());
              shapejit_embedding_bag_ex_args e = p.ex_args();
              e.skip_index_outputs = !k.index_outputs;  // zero-length index outputs in ref and got
              const shapejit_embedding_bag_shapes shapes = ref::embedding_bag_shapes(e);
              const auto out_dtype = static_cast<shapejit_dtype>(k.out);
              GuardedOutputs want(shapes, 0xA5, false, out_dtype);
              ref::embedding_bag(e, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                                 want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
              jit::GeneratedEmbagKernel kernel;
              try {
                kernel = jit::generate_embag_kernel(k, rt);
              } catch (const std::exception& ex) {
                fail(std::string("generation failed: ") + ex.what());
                continue;
              }
              ++res.kernels;
              for (int split = 0; split < 2; ++split) {
                if (split && p.bags < 2) continue;
                const int64_t at = split ? uniform(rng, 1, p.bags - 1) : p.bags;
                GuardedOutputs got(shapes, 0x5A, false, out_dtype);
                jit::EmbagKernelArgs g = kernel_args(p, got, e);
                note_direct_run(k.isa);
                g.bag_end = at;
                kernel.fn(&g);
                if (at < p.bags) {
                  g.bag_begin = at;
                  g.bag_end = p.bags;
                  kernel.fn(&g);
                }
                ++res.runs;
                res.checked += p.bags * dim;
                const std::string diff = compare(k, want, got, &res.f16_ties_away_accepted);
                if (!diff.empty()) {
                  fail(diff + (split ? " (bags split at " + std::to_string(at) + ")" : " (whole)"));
                  break;
                }
              }
              rt.release(kernel.fn);
            }
          }
        }
      }
    }
  }
  return res;
}

}  // namespace shapejit::test::embag_dtype

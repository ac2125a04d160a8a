// Random valid embedding-bag calls. Each case draws from its own generator seeded by
// (run seed, case number), so one failing case replays without the ones before it.
#include "support/embag_cases.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <type_traits>

#include <sys/mman.h>
#include <unistd.h>

#include <stdexcept>

#include "ref/float16.hpp"
#include "ref/table_rows.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::test {
namespace {

using Rng = std::mt19937_64;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int64_t uniform(Rng& rng, int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
bool chance(Rng& rng, double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
template <typename T, size_t K>
T pick(Rng& rng, const T (&items)[K]) { return items[static_cast<size_t>(uniform(rng, 0, K - 1))]; }

// Row widths: every small width, widths next to vector-register multiples (masked tails and
// column-block boundaries), anything up to max_dim, and a few odd fixed ones.
int64_t pick_dim(Rng& rng, int64_t max_dim) {
  static constexpr int64_t kVector[] = {4, 8, 16, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 4096};
  static constexpr int64_t kOdd[] = {85, 100, 163, 257, 300, 513, 1000, 1100};
  const int64_t roll = uniform(rng, 0, 99);
  int64_t d;
  if (roll < 40) d = uniform(rng, 1, 72);
  else if (roll < 70) d = pick(rng, kVector) + uniform(rng, -1, 1);
  else if (roll < 85) d = uniform(rng, 1, max_dim);
  else if (roll < 95) d = pick(rng, kOdd);
  else d = max_dim;
  return std::clamp<int64_t>(d, 1, max_dim);
}

int64_t pick_row_stride(Rng& rng, int64_t dim) {
  const int64_t roll = uniform(rng, 0, 99);
  if (roll < 70) return dim;
  if (roll < 80) return dim + 1;
  if (roll < 90) return (dim + 16) / 16 * 16 + 16 * uniform(rng, 0, 1);  // aligned, > dim
  static constexpr int64_t kPrimeGaps[] = {3, 7, 13, 31};
  return dim + pick(rng, kPrimeGaps);
}

int64_t pick_num_rows(Rng& rng, int64_t row_stride, int64_t max_elements) {
  const int64_t roll = uniform(rng, 0, 99);
  int64_t n;
  if (roll < 10) n = uniform(rng, 1, 3);
  else if (roll < 40) n = uniform(rng, 4, 32);
  else if (roll < 85) n = uniform(rng, 33, 1000);
  else n = uniform(rng, 1000, 20000);
  return std::max<int64_t>(1, std::min(n, max_elements / row_stride));
}

float special_value(Rng& rng) {
  const float kSpecials[] = {std::numeric_limits<float>::quiet_NaN(),
                             -std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(), -0.0f, 0.0f};
  return pick(rng, kSpecials);
}

// Table values of one kind; `few` holds the value set of kFewValues tables (ties for max).
float table_value(Rng& rng, TableKind kind, float scale, const std::vector<float>& few) {
  switch (kind) {
    case TableKind::kRandom:
      return scale * std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
    case TableKind::kSmallIntegers:
      return static_cast<float>(uniform(rng, -8, 8));
    case TableKind::kFewValues:
      return few[static_cast<size_t>(uniform(rng, 0, int64_t(few.size()) - 1))];
    case TableKind::kSpecials: {
      const int64_t roll = uniform(rng, 0, 99);
      if (roll < 15) return special_value(rng);
      if (roll < 55) return static_cast<float>(uniform(rng, -4, 4));
      return scale * std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
    }
  }
  return 0.0f;
}

void fill_table(Rng& rng, EmbagCase& c) {
  static constexpr TableKind kKinds[] = {TableKind::kRandom, TableKind::kRandom,
                                         TableKind::kSmallIntegers, TableKind::kFewValues,
                                         TableKind::kSpecials, TableKind::kSpecials};
  c.table_kind = pick(rng, kKinds);
  static constexpr float kScales[] = {1.0f, 1.0f, 1e-3f, 1e3f};
  const float scale = pick(rng, kScales);
  std::vector<float> few;
  const int64_t distinct = uniform(rng, 1, 4);
  for (int64_t k = 0; k < distinct; ++k)
    few.push_back(chance(rng, 0.3) ? (chance(rng, 0.5) ? -0.0f : 0.0f)
                                   : static_cast<float>(uniform(rng, -3, 3)) * 0.5f);
  // Gap columns of strided tables hold a NaN pattern: a kernel that reads them shows it.
  const float gap = std::bit_cast<float>(0xFFC5A5A5u);
  c.weight.assign(static_cast<size_t>(c.num_rows * c.row_stride), gap);
  for (int64_t r = 0; r < c.num_rows; ++r) {
    float* row = c.weight.data() + r * c.row_stride;
    // Some rows of a specials table are entirely special, so whole columns see NaN/Inf runs.
    const bool special_row = c.table_kind == TableKind::kSpecials && chance(rng, 0.1);
    for (int64_t d = 0; d < c.dim; ++d)
      row[d] = special_row ? special_value(rng) : table_value(rng, c.table_kind, scale, few);
  }
}

// Bag lengths: fixed (the 2-D form's shape), uniform, power-law (a few long bags among many
// short ones, the case that breaks equal-count partitioning) or mostly empty.
std::vector<int64_t> pick_bag_lengths(Rng& rng, int64_t max_indices) {
  const int64_t roll = uniform(rng, 0, 99);
  int64_t bags;
  if (roll < 4) bags = 0;
  else if (roll < 15) bags = 1;
  else if (roll < 55) bags = uniform(rng, 2, 16);
  else if (roll < 90) bags = uniform(rng, 17, 128);
  else bags = uniform(rng, 129, 600);
  std::vector<int64_t> lengths(static_cast<size_t>(bags), 0);
  enum class Shape { kFixed, kUniform, kPowerLaw, kMostlyEmpty, kAllEmpty };
  static constexpr Shape kShapes[] = {Shape::kFixed, Shape::kFixed, Shape::kFixed, Shape::kUniform,
                                      Shape::kUniform, Shape::kUniform, Shape::kUniform, Shape::kPowerLaw,
                                      Shape::kPowerLaw, Shape::kPowerLaw, Shape::kPowerLaw, Shape::kPowerLaw,
                                      Shape::kMostlyEmpty, Shape::kMostlyEmpty, Shape::kAllEmpty};
  const Shape shape = pick(rng, kShapes);
  const int64_t fixed = uniform(rng, 0, 40);
  const int64_t uniform_max = uniform(rng, 1, 64);
  for (auto& len : lengths) {
    switch (shape) {
      case Shape::kFixed: len = fixed; break;
      case Shape::kUniform: len = uniform(rng, 0, uniform_max); break;
      case Shape::kPowerLaw: {  // Pareto(alpha = 1.1) - 1: mostly 0-3, occasionally hundreds
        const double u = std::uniform_real_distribution<double>(1e-6, 1.0)(rng);
        len = static_cast<int64_t>(std::min(1e6, std::pow(u, -1.0 / 1.1))) - 1;
        break;
      }
      case Shape::kMostlyEmpty: len = chance(rng, 0.6) ? 0 : uniform(rng, 1, 8); break;
      case Shape::kAllEmpty: len = 0; break;  // N = 0 with bags
    }
  }
  // Keep N <= max_indices by cutting bags in order (later bags become empty).
  int64_t total = 0;
  for (auto& len : lengths) {
    len = std::min(len, max_indices - total);
    total += len;
  }
  return lengths;
}

void pick_indices(Rng& rng, EmbagCase& c, int64_t count) {
  const int64_t n = c.num_rows;
  const int64_t kind = uniform(rng, 0, 9);
  std::vector<int64_t> hot;
  for (int64_t k = uniform(rng, 1, 4); k > 0; --k) hot.push_back(uniform(rng, 0, n - 1));
  const int64_t start = uniform(rng, 0, n - 1);
  c.indices.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    int64_t v;
    if (kind < 6) v = uniform(rng, 0, n - 1);
    else if (kind < 9) v = hot[static_cast<size_t>(uniform(rng, 0, int64_t(hot.size()) - 1))];
    else v = (start + i) % n;  // sequential rows (streaming)
    c.indices[static_cast<size_t>(i)] = v;
  }
  if (n > 1 && chance(rng, 0.2)) {  // first and last rows: bounds of the table
    for (auto& v : c.indices)
      if (chance(rng, 0.2)) v = chance(rng, 0.5) ? 0 : n - 1;
  }
}

void pick_padding(Rng& rng, EmbagCase& c) {
  if (!chance(rng, 0.35)) return;
  const int64_t row = uniform(rng, 0, c.num_rows - 1);
  c.padding_idx = chance(rng, 0.5) ? row - c.num_rows : row;  // negative values wrap
  // Make the padding row occur: sprinkled, and sometimes filling whole bags.
  const double density = pick(rng, {0.0, 0.1, 0.1, 0.3, 0.3, 0.8, 1.0});
  for (auto& v : c.indices)
    if (chance(rng, density)) v = row;
}

void pick_per_sample_weights(Rng& rng, EmbagCase& c) {
  if (c.mode != SHAPEJIT_SUM || !chance(rng, 0.4)) return;
  const int64_t kind = uniform(rng, 0, 3);
  c.per_sample_weights.resize(c.indices.size());
  for (auto& w : c.per_sample_weights) {
    if (kind == 0) w = static_cast<float>(uniform(rng, -3, 3));
    else if (kind == 3 && chance(rng, 0.1)) w = special_value(rng);
    else w = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
  }
  if (c.indices.empty()) c.per_sample_weights.clear();  // N = 0: nothing to weight
}


// ---- Other table dtypes -------------------------------------------------------------------

// The tests build their inputs from the reference's dtype facts (the oracle), not the engine's table.
bool is_quantized(shapejit_dtype t) { return ref::is_quantized_table(t); }

int64_t packed_row_bytes(shapejit_dtype t, int64_t dim) {
  if (t == SHAPEJIT_Q8) return dim + 8;
  if (t == SHAPEJIT_Q4) return (dim + 1) / 2 + 4;
  return (dim + 3) / 4 + 4;
}

uint16_t to_half_bits(shapejit_dtype t, float v) { return t == SHAPEJIT_F16 ? ref::f32_to_f16(v) : ref::f32_to_bf16(v); }
float from_half_bits(shapejit_dtype t, uint16_t h) { return t == SHAPEJIT_F16 ? ref::f16_to_f32(h) : ref::bf16_to_f32(h); }

// f16/bf16 tables: the f32 values drawn by fill_table, rounded; `weight` keeps the widened
// rounded values (for printing), `table_bytes` the halves.
void round_half_table(EmbagCase& c) {
  c.table_bytes.resize(c.weight.size() * 2);
  for (size_t k = 0; k < c.weight.size(); ++k) {
    const uint16_t h = to_half_bits(c.table_dtype, c.weight[k]);
    std::memcpy(c.table_bytes.data() + 2 * k, &h, 2);
    c.weight[k] = from_half_bits(c.table_dtype, h);
  }
}

// A row's scale or bias: mostly moderate values of several magnitudes, some specials.
float qparam(Rng& rng, bool allow_specials) {
  if (allow_specials && chance(rng, 0.04)) return special_value(rng);
  static constexpr float kMagnitudes[] = {1e-3f, 0.05f, 1.0f, 1.0f, 30.0f};
  if (chance(rng, 0.05)) return 16519105.0f * 0x1p-54f;  // the spec's double-rounding scale
  return pick(rng, kMagnitudes) * std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
}

// Packed Q8/Q4/Q2 rows (B1): random codes (some rows all 0 or all max), then f32 (Q8) or f16
// (Q4/Q2) scale and bias. Gap bytes of strided rows hold 0xA5.
void fill_quantized_table(Rng& rng, EmbagCase& c) {
  c.table_kind = TableKind::kRandom;
  const int64_t row_bytes = packed_row_bytes(c.table_dtype, c.dim), code_bytes = row_bytes - (c.table_dtype == SHAPEJIT_Q8 ? 8 : 4);
  const bool specials = chance(rng, 0.3);
  if (specials) c.table_kind = TableKind::kSpecials;
  c.table_bytes.assign(size_t(c.num_rows * c.row_stride), 0xA5);
  for (int64_t r = 0; r < c.num_rows; ++r) {
    unsigned char* row = c.table_bytes.data() + r * c.row_stride;
    const int64_t kind = uniform(rng, 0, 9);
    for (int64_t k = 0; k < code_bytes; ++k)
      row[k] = kind == 0 ? 0x00 : kind == 1 ? 0xFF : static_cast<unsigned char>(uniform(rng, 0, 255));
    const float scale = qparam(rng, specials), bias = qparam(rng, specials);
    if (c.table_dtype == SHAPEJIT_Q8) {
      std::memcpy(row + code_bytes, &scale, 4);
      std::memcpy(row + code_bytes + 4, &bias, 4);
    } else {
      const uint16_t hs = ref::f32_to_f16(scale), hb = ref::f32_to_f16(bias);
      std::memcpy(row + code_bytes, &hs, 2);
      std::memcpy(row + code_bytes + 2, &hb, 2);
    }
  }
}

// Lengths-style offsets (B3) for bags of the given lengths: offsets[0] need not be 0, an empty
// bag is sometimes a negative step, positions after the last bag are sometimes left over.
// Returns N.
int64_t pick_length_offsets(Rng& rng, EmbagCase& c, const std::vector<int64_t>& lengths) {
  const int64_t bags = int64_t(lengths.size());
  std::vector<int64_t> off{chance(rng, 0.5) ? 0 : uniform(rng, -3, 3)};
  int64_t consumed = 0, consumed_before_last = 0;
  for (int64_t len : lengths) {
    consumed_before_last = consumed;
    const int64_t step = len == 0 && chance(rng, 0.3) ? -uniform(rng, 1, 3) : len;
    off.push_back(off.back() + step);
    consumed += len;
  }
  c.offsets_as_lengths = true;
  c.offsets.clear();
  if (c.include_last_offset) {
    c.offsets = off;  // B + 1 offsets; positions after the last bag are ignored
    return consumed + (chance(rng, 0.3) ? uniform(rng, 1, 4) : 0);
  }
  if (bags == 0) return 0;
  // The last bag takes N - offsets[B - 1] positions, which must fit after the earlier bags:
  // shift every offset (differences unchanged) so that offsets[B - 1] >= their positions.
  off.pop_back();
  const int64_t shift = std::max<int64_t>(0, consumed_before_last - off.back()) + (chance(rng, 0.5) ? 0 : uniform(rng, 0, 2));
  for (auto& v : off) v += shift;
  c.offsets = off;
  return consumed;
}

// Pruning (quantized tables): a mapping of M entries (some -1); indices and the padding index
// are folded into [0, M).
void pick_mapping(Rng& rng, EmbagCase& c) {
  const int64_t m = uniform(rng, 1, 2 * c.num_rows);
  std::vector<int32_t> mapping(static_cast<size_t>(m));
  const double pruned = pick(rng, {0.0, 0.2, 0.5, 1.0});
  for (auto& v : mapping) v = chance(rng, pruned) ? -1 : static_cast<int32_t>(uniform(rng, 0, c.num_rows - 1));
  for (auto& v : c.indices) v %= m;
  if (c.padding_idx) {
    const int64_t row = *c.padding_row() % m;
    c.padding_idx = *c.padding_idx < 0 ? row - m : row;
  }
  c.mapping = std::move(mapping);
}

// Weights in the dtype the call passes them in (the exact values stay in per_sample_weights).
void round_weights(EmbagCase& c, shapejit_dtype dtype) {
  c.psw_dtype = dtype;
  if (dtype == SHAPEJIT_F32) return;
  for (auto& w : c.per_sample_weights) {
    const uint16_t h = to_half_bits(dtype, w);
    c.per_sample_weights16.push_back(h);
    w = from_half_bits(dtype, h);
  }
}

}  // namespace

// EmbagCase ---------------------------------------------------------------------------------

int64_t EmbagCase::num_bags() const {
  return std::max<int64_t>(0, int64_t(offsets.size()) - (include_last_offset ? 1 : 0));
}

std::optional<int64_t> EmbagCase::padding_row() const {
  if (!padding_idx) return std::nullopt;
  return *padding_idx < 0 ? *padding_idx + num_rows : *padding_idx;
}

shapejit_dtype EmbagCase::index_out_dtype() const {
  return index_dtype == offset_dtype ? index_dtype : SHAPEJIT_I64;
}

const void* EmbagCase::table_data() const {
  return table_dtype == SHAPEJIT_F32 ? static_cast<const void*>(weight.data())
                                     : static_cast<const void*>(table_bytes.data());
}

int64_t EmbagCase::table_byte_size() const {
  if (num_rows == 0) return 0;
  if (is_quantized(table_dtype)) return (num_rows - 1) * row_stride + packed_row_bytes(table_dtype, dim);
  const int64_t element = table_dtype == SHAPEJIT_F32 ? 4 : 2;
  return ((num_rows - 1) * row_stride + dim) * element;
}

shapejit_embedding_bag_args EmbagCase::to_args(const void* table) const {
  shapejit_embedding_bag_args a{};
  a.weight = table ? table : table_data();
  a.weight_dtype = table_dtype;
  a.num_rows = num_rows;
  a.dim = dim;
  a.row_stride = row_stride;
  a.indices = index_dtype == SHAPEJIT_I32 ? static_cast<const void*>(indices_i32.data())
                                          : static_cast<const void*>(indices.data());
  a.index_dtype = index_dtype;
  a.num_indices = int64_t(indices.size());
  a.offsets = offset_dtype == SHAPEJIT_I32 ? static_cast<const void*>(offsets_i32.data())
                                           : static_cast<const void*>(offsets.data());
  a.offset_dtype = offset_dtype;
  a.num_offsets = int64_t(offsets.size());
  a.per_sample_weights = per_sample_weights.empty()  ? nullptr
                         : psw_dtype == SHAPEJIT_F32 ? static_cast<const void*>(per_sample_weights.data())
                                                     : static_cast<const void*>(per_sample_weights16.data());
  a.mode = mode;
  a.has_padding_idx = padding_idx.has_value();
  a.padding_idx = padding_idx.value_or(0);
  a.include_last_offset = include_last_offset;
  a.aten_partial_final_offset = aten_partial_final_offset;
  return a;
}

shapejit_embedding_bag_ex_args EmbagCase::to_ex_args(const void* table) const {
  shapejit_embedding_bag_ex_args e{};
  const shapejit_embedding_bag_args a = to_args(table);
  shapejit_embedding_bag_ex_init(&e, &a);
  e.output_dtype = output_dtype;
  e.per_sample_weights_dtype = psw_dtype;
  if (mapping) {
    e.compressed_indices_mapping = mapping->data();
    e.mapping_len = int64_t(mapping->size());
  }
  e.offsets_as_lengths = offsets_as_lengths;
  e.skip_index_outputs = skip_index_outputs;
  e.output_row_stride = output_row_stride;
  e.aten_loop_arithmetic = aten_loop_arithmetic;
  return e;
}

EmbagCase make_embag_case(uint64_t seed, int64_t number, const EmbagCaseOptions& options) {
  Rng rng(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(number))));
  // Draws of the other dtypes and options come from a stream of their own, so f32 cases
  // without them are the ones this generator always made.
  Rng ext(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(number) ^ 0xD7E5ull)));
  const shapejit_dtype table = options.table;
  const bool quantized = is_quantized(table);
  EmbagCase c;
  c.seed = seed;
  c.number = number;
  c.table_dtype = table;
  c.output_dtype = quantized ? SHAPEJIT_F32 : table;
  c.psw_dtype = quantized ? SHAPEJIT_F32 : table;
  c.mode = pick(rng, {SHAPEJIT_SUM, SHAPEJIT_MEAN, SHAPEJIT_MAX});
  c.index_dtype = chance(rng, 0.5) ? SHAPEJIT_I32 : SHAPEJIT_I64;
  c.offset_dtype = chance(rng, 0.5) ? SHAPEJIT_I32 : SHAPEJIT_I64;
  c.dim = pick_dim(rng, options.max_dim);
  if (table == SHAPEJIT_Q4) c.dim += c.dim % 2;            // whole bytes of codes
  if (table == SHAPEJIT_Q2) c.dim = (c.dim + 3) / 4 * 4;
  if (quantized) {
    const int64_t gap = chance(ext, 0.6) ? 0 : uniform(ext, 1, 9);  // odd strides: unaligned trailers
    c.row_stride = packed_row_bytes(table, c.dim) + gap;
  } else {
    c.row_stride = pick_row_stride(rng, c.dim);
  }
  c.num_rows = pick_num_rows(rng, c.row_stride, options.max_table_elements);
  if (quantized) fill_quantized_table(ext, c);
  else fill_table(rng, c);
  if (table == SHAPEJIT_F16 || table == SHAPEJIT_BF16) round_half_table(c);
  const bool lengths_form = options.extended && chance(ext, 0.3);

  std::vector<int64_t> lengths = pick_bag_lengths(rng, options.max_indices);
  const auto max_bags = static_cast<size_t>(std::max<int64_t>(1, options.max_output_elements / c.dim));
  if (lengths.size() > max_bags) lengths.resize(max_bags);
  const int64_t bags = int64_t(lengths.size());
  int64_t total = 0;
  for (int64_t len : lengths) {
    c.offsets.push_back(total);
    total += len;
  }
  c.include_last_offset = chance(rng, 0.3);
  // The partial final offset (offsets[B] < N) is valid only with the opt-in flag, in sum and
  // mean, without padding, and needs a bag for the trailing positions to follow.
  const bool partial = c.include_last_offset && options.allow_partial_final_offset && bags >= 1 &&
                       c.mode != SHAPEJIT_MAX && chance(rng, 0.3) && !lengths_form;
  int64_t trailing = 0;
  if (partial) {
    c.aten_partial_final_offset = true;
    trailing = uniform(rng, 1, 6);
  }
  if (c.include_last_offset) c.offsets.push_back(total);  // offsets[B] (== N unless partial)
  if (lengths_form) {
    trailing = pick_length_offsets(ext, c, lengths) - total;
    if (c.offsets.empty()) c.offsets.push_back(0);  // lengths need at least one offset
  }
  pick_indices(rng, c, total + trailing);
  if (!partial) pick_padding(rng, c);
  pick_per_sample_weights(rng, c);

  if (options.extended && quantized) {
    c.output_dtype = pick(ext, {SHAPEJIT_F32, SHAPEJIT_F32, SHAPEJIT_F16, SHAPEJIT_BF16});
    if (chance(ext, 0.35)) pick_mapping(ext, c);
  }
  if (c.weighted()) {
    if (table == SHAPEJIT_F16 || table == SHAPEJIT_BF16) round_weights(c, table);
    else if (options.extended && (table == SHAPEJIT_Q4 || table == SHAPEJIT_Q2) && chance(ext, 0.5))
      round_weights(c, SHAPEJIT_F16);
  }

  if (options.extended) c.skip_index_outputs = chance(ext, 0.25);
  if (options.extended) c.aten_loop_arithmetic = chance(ext, 0.25);  // last draw: earlier cases unchanged

  for (int64_t v : c.indices) c.indices_i32.push_back(static_cast<int32_t>(v));
  for (int64_t v : c.offsets) c.offsets_i32.push_back(static_cast<int32_t>(v));
  return c;
}

// GuardedTable -------------------------------------------------------------------------------

GuardedTable::GuardedTable(const EmbagCase& c) {
  const size_t bytes = static_cast<size_t>(c.table_byte_size());
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t data_pages = (bytes + page - 1) / page + 1;
  map_bytes_ = (data_pages + 1) * page;
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) throw std::runtime_error("GuardedTable: mmap failed");
  unsigned char* base = static_cast<unsigned char*>(map_);
  if (mprotect(base + data_pages * page, page, PROT_NONE) != 0) throw std::runtime_error("GuardedTable: mprotect failed");
  unsigned char* data = base + data_pages * page - bytes;
  if (bytes > 0) std::memcpy(data, c.table_data(), bytes);
  data_ = data;
}

GuardedTable::~GuardedTable() {
  if (map_ && map_ != MAP_FAILED) munmap(map_, map_bytes_);
}

// Printing ----------------------------------------------------------------------------------

const char* mode_name(shapejit_mode mode) {
  switch (mode) {
    case SHAPEJIT_SUM: return "sum";
    case SHAPEJIT_MEAN: return "mean";
    case SHAPEJIT_MAX: return "max";
  }
  return "?";
}

const char* dtype_name(shapejit_dtype dtype) {
  switch (dtype) {
    case SHAPEJIT_F32: return "f32";
    case SHAPEJIT_F16: return "f16";
    case SHAPEJIT_BF16: return "bf16";
    case SHAPEJIT_I32: return "i32";
    case SHAPEJIT_I64: return "i64";
    case SHAPEJIT_Q8: return "q8";
    case SHAPEJIT_Q4: return "q4";
    case SHAPEJIT_Q2: return "q2";
  }
  return "?";
}

const char* table_kind_name(TableKind kind) {
  switch (kind) {
    case TableKind::kRandom: return "random";
    case TableKind::kSmallIntegers: return "small-integers";
    case TableKind::kFewValues: return "few-values";
    case TableKind::kSpecials: return "specials";
  }
  return "?";
}

namespace {

// %.9g round-trips every float exactly; NaNs also show their bits (the payload may matter).
std::string float_text(float v) {
  char buf[48];
  if (std::isnan(v))
    std::snprintf(buf, sizeof buf, "nan(0x%08x)", std::bit_cast<uint32_t>(v));
  else
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

template <typename T>
void print_list(std::ostringstream& os, const char* name, const std::vector<T>& values, size_t limit) {
  os << "  " << name << " [" << values.size() << "] = [";
  for (size_t i = 0; i < values.size() && i < limit; ++i) {
    if (i) os << ", ";
    if constexpr (std::is_same_v<T, float>) os << float_text(values[i]);
    else os << values[i];
  }
  if (values.size() > limit) os << ", ... (" << values.size() - limit << " more)";
  os << "]\n";
}

}  // namespace

std::string EmbagCase::summary() const {
  std::ostringstream os;
  os << mode_name(mode) << (weighted() ? " weighted" : "");
  if (table_dtype != SHAPEJIT_F32) os << " table=" << dtype_name(table_dtype) << " out=" << dtype_name(output_dtype);
  if (weighted() && psw_dtype != SHAPEJIT_F32) os << " psw=" << dtype_name(psw_dtype);
  os << " idx=" << dtype_name(index_dtype)
     << " off=" << dtype_name(offset_dtype) << " n=" << num_rows << " D=" << dim
     << " stride=" << row_stride << (is_quantized(table_dtype) ? "B" : "") << " N=" << indices.size()
     << " len(offsets)=" << offsets.size() << " B=" << num_bags() << " values=" << table_kind_name(table_kind);
  if (padding_idx) os << " padding_idx=" << *padding_idx << " (index " << (mapping ? (*padding_idx < 0 ? *padding_idx + int64_t(mapping->size()) : *padding_idx) : *padding_row()) << ")";
  if (mapping) os << " pruned(mapping_len=" << mapping->size() << ")";
  if (include_last_offset) os << " include_last_offset";
  if (aten_partial_final_offset) os << " aten_partial_final_offset";
  if (offsets_as_lengths) os << " offsets_as_lengths";
  if (skip_index_outputs) os << " skip_index_outputs";
  if (output_row_stride != 0) os << " output_row_stride " << output_row_stride;
  if (aten_loop_arithmetic) os << " aten_loop_arithmetic";
  return os.str();
}

std::string EmbagCase::describe() const {
  constexpr size_t kListLimit = 4096;
  constexpr int64_t kTableLimit = 16384;  // weight elements printed at most
  std::ostringstream os;
  os << "embedding-bag case #" << number << " of seed " << seed << " (replay: SHAPEJIT_TEST_SEED="
     << seed << " SHAPEJIT_TEST_CASE=" << number << ")\n  " << summary() << "\n";
  print_list(os, "offsets", offsets, kListLimit);
  print_list(os, "indices", indices, kListLimit);
  if (weighted()) print_list(os, "per_sample_weights", per_sample_weights, kListLimit);
  if (mapping) print_list(os, "compressed_indices_mapping", *mapping, kListLimit);
  // Rows the call reads, in row order; the gap columns of strided rows are not shown.
  std::vector<int64_t> rows;
  for (int64_t v : indices) {
    const int64_t r = mapping ? int64_t((*mapping)[size_t(v)]) : v;
    if (r >= 0) rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const bool packed = is_quantized(table_dtype);
  os << "  weight rows read (" << rows.size() << " of " << num_rows << ")"
     << (packed ? ", packed bytes (codes, then scale and bias):\n" : ", columns 0.." + std::to_string(dim - 1) + ":\n");
  const int64_t row_len = packed ? packed_row_bytes(table_dtype, dim) : dim;
  int64_t printed = 0;
  for (int64_t r : rows) {
    if (printed + row_len > kTableLimit) {
      os << "    ... (truncated; the replay command regenerates every value)\n";
      break;
    }
    os << "    row " << r << ": ";
    for (int64_t d = 0; d < row_len; ++d) {
      if (packed) {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%02x", table_bytes[size_t(r * row_stride + d)]);
        os << hex;
      } else {
        os << (d ? " " : "") << float_text(weight[size_t(r * row_stride + d)]);
      }
    }
    os << "\n";
    printed += row_len;
  }
  return os.str();
}

// Environment -------------------------------------------------------------------------------

uint64_t test_seed(uint64_t fallback) {
  const char* text = std::getenv("SHAPEJIT_TEST_SEED");
  if (!text || !*text) return fallback;
  if (std::strcmp(text, "random") == 0) return std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  return std::strtoull(text, nullptr, 0);
}

std::optional<int64_t> test_case_filter() {
  const char* text = std::getenv("SHAPEJIT_TEST_CASE");
  if (!text || !*text) return std::nullopt;
  return std::strtoll(text, nullptr, 0);
}

int64_t test_case_count(int64_t fallback) {
  const char* text = std::getenv("SHAPEJIT_TEST_CASES");
  if (!text || !*text) return fallback;
  return std::max<int64_t>(1, std::strtoll(text, nullptr, 0));
}

// GuardedOutputs ----------------------------------------------------------------------------

const char* output_name(EmbagOutput which) {
  static constexpr const char* kNames[] = {"output", "offset2bag", "bag_size", "max_indices"};
  return kNames[static_cast<size_t>(which)];
}

namespace {
// Guard bytes repeat a signalling-NaN float (also an implausible integer): 0x7FBADBAD.
std::byte guard_byte(size_t k) {
  static constexpr unsigned char kPattern[4] = {0xAD, 0xDB, 0xBA, 0x7F};
  return std::byte{kPattern[k % 4]};
}
}  // namespace

GuardedOutputs::GuardedOutputs(const shapejit_embedding_bag_shapes& s, unsigned char sentinel,
                               bool null_when_empty, shapejit_dtype output_dtype, int64_t output_row_stride)
    : sentinel_(sentinel), null_when_empty_(null_when_empty) {
  const size_t out_bytes = output_dtype == SHAPEJIT_F32 ? sizeof(float) : 2;
  const size_t int_bytes = s.index_out_dtype == SHAPEJIT_I32 ? 4 : 8;
  elements_[0] = s.output_rows * s.output_cols;
  elements_[1] = s.offset2bag_len;
  elements_[2] = s.bag_size_len;
  elements_[3] = s.max_indices_rows * s.max_indices_cols;
  rows_ = size_t(s.output_rows);
  row_bytes_ = size_t(s.output_cols) * out_bytes;
  row_stride_bytes_ = output_row_stride != 0 ? size_t(output_row_stride) * out_bytes : row_bytes_;
  for (size_t k = 0; k < 4; ++k) {
    payload_bytes_[k] = static_cast<size_t>(elements_[k]) * (k == 0 ? out_bytes : int_bytes);
    if (k == 0 && rows_ > 0 && row_bytes_ > 0) payload_bytes_[k] = (rows_ - 1) * row_stride_bytes_ + row_bytes_;
    const size_t rounded = (payload_bytes_[k] + 63) / 64 * 64;
    storage_[k].resize(kGuardBytes + rounded + kGuardBytes);
    for (size_t b = 0; b < kGuardBytes; ++b) storage_[k][b] = guard_byte(b);
    for (size_t b = kGuardBytes + payload_bytes_[k]; b < storage_[k].size(); ++b) storage_[k][b] = guard_byte(b);
    std::memset(payload(k), sentinel_, payload_bytes_[k]);
  }
}

void* GuardedOutputs::data(EmbagOutput which) {
  const size_t k = index(which);
  if (null_when_empty_ && elements_[k] == 0) return nullptr;
  return payload(k);
}

std::span<const std::byte> GuardedOutputs::bytes(EmbagOutput which) const {
  const size_t k = index(which);
  return {payload(k), payload_bytes_[k]};
}

std::vector<std::byte> GuardedOutputs::output_rows() const {
  std::vector<std::byte> rows(rows_ * row_bytes_);
  if (rows.empty()) return rows;  // no row, or rows without columns
  for (size_t r = 0; r < rows_; ++r)
    std::memcpy(rows.data() + r * row_bytes_, payload(0) + r * row_stride_bytes_, row_bytes_);
  return rows;
}

std::string GuardedOutputs::check_output_gaps() const {
  if (payload_bytes_[0] == 0) return "";  // no row, or rows without columns: no gap either
  for (size_t r = 0; r + 1 < rows_; ++r)
    for (size_t b = r * row_stride_bytes_ + row_bytes_; b < (r + 1) * row_stride_bytes_; ++b)
      if (payload(0)[b] != std::byte{sentinel_})
        return "output byte " + std::to_string(b) + ", in the gap after row " + std::to_string(r) + ", was written";
  return "";
}

shapejit_status GuardedOutputs::run(const shapejit_embedding_bag_args& args) {
  return shapejit_embedding_bag(&args, data(EmbagOutput::kOutput), data(EmbagOutput::kOffset2bag),
                                data(EmbagOutput::kBagSize), data(EmbagOutput::kMaxIndices));
}

shapejit_status GuardedOutputs::run(const shapejit_embedding_bag_ex_args& args) {
  return shapejit_embedding_bag_ex(&args, data(EmbagOutput::kOutput), data(EmbagOutput::kOffset2bag),
                                   data(EmbagOutput::kBagSize), data(EmbagOutput::kMaxIndices));
}

std::string GuardedOutputs::check_guards() const {
  for (size_t k = 0; k < 4; ++k) {
    const auto& s = storage_[k];
    const size_t end = kGuardBytes + payload_bytes_[k];
    for (size_t b = 0; b < s.size(); b = b + 1 == kGuardBytes ? end : b + 1) {
      if (s[b] == guard_byte(b)) continue;
      std::ostringstream os;
      os << "guard of " << output_name(EmbagOutput(k)) << " (" << payload_bytes_[k] << " bytes) overwritten ";
      if (b < kGuardBytes) os << kGuardBytes - b << " bytes before its start";
      else os << "at byte " << b - end << " past its end";
      return os.str();
    }
  }
  return "";
}

bool GuardedOutputs::untouched() const {
  for (size_t k = 0; k < 4; ++k)
    for (size_t b = 0; b < payload_bytes_[k]; ++b)
      if (payload(k)[b] != std::byte{sentinel_}) return false;
  return true;
}

namespace {
bool is_nan_element(uint64_t bits, size_t element_bytes) {
  if (element_bytes == 4) return (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0;
  return false;
}
}  // namespace

std::string first_output_difference(const GuardedOutputs& want, const GuardedOutputs& got,
                                    shapejit_dtype output_dtype) {
  const std::vector<std::byte> want_rows = want.output_rows(), got_rows = got.output_rows();
  for (EmbagOutput w : kAllEmbagOutputs) {
    const bool rows = w == EmbagOutput::kOutput;  // compared row by row: either may be strided
    const std::span<const std::byte> a = rows ? std::span<const std::byte>(want_rows) : want.bytes(w);
    const std::span<const std::byte> b = rows ? std::span<const std::byte>(got_rows) : got.bytes(w);
    if (a.size() != b.size()) return std::string(output_name(w)) + ": sizes differ";
    const size_t element_bytes = want.elements(w) > 0 ? a.size() / size_t(want.elements(w)) : 1;
    for (size_t e = 0; e * element_bytes < a.size(); ++e) {
      if (std::memcmp(a.data() + e * element_bytes, b.data() + e * element_bytes, element_bytes) == 0) continue;
      uint64_t x = 0, y = 0;
      std::memcpy(&x, a.data() + e * element_bytes, element_bytes);
      std::memcpy(&y, b.data() + e * element_bytes, element_bytes);
      if (w == EmbagOutput::kOutput) {
        bool nx, ny;
        if (output_dtype == SHAPEJIT_F32) {
          nx = is_nan_element(x, 4), ny = is_nan_element(y, 4);
        } else {
          const float fx = output_dtype == SHAPEJIT_F16 ? ref::f16_to_f32(uint16_t(x)) : ref::bf16_to_f32(uint16_t(x));
          const float fy = output_dtype == SHAPEJIT_F16 ? ref::f16_to_f32(uint16_t(y)) : ref::bf16_to_f32(uint16_t(y));
          nx = std::isnan(fx), ny = std::isnan(fy);
        }
        if (nx && ny) continue;
      }
      char text[128];
      std::snprintf(text, sizeof text, "[%zu] differs: want 0x%llx, got 0x%llx", e, static_cast<unsigned long long>(x),
                    static_cast<unsigned long long>(y));
      return output_name(w) + std::string(text);
    }
  }
  if (std::string gaps = got.check_output_gaps(); !gaps.empty()) return gaps;
  return got.check_guards();
}

}  // namespace shapejit::test

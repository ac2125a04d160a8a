// Case arithmetic, data generation and output buffers shared by the linear-group peers.
#include "lg_peers_common.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <utility>

namespace shapejit::bench {

int64_t LgCase::weight_rows() const {
  int64_t rows = 0;
  for (const LgPart& p : parts) rows = std::max(rows, p.row_begin + p.rows);
  return rows;
}

double LgCase::flops() const {
  double f = 0;
  for (const LgPart& p : parts) f += 2.0 * double(m_of(p)) * double(p.rows) * double(k);
  return f;
}

double LgCase::weight_bytes(LgForm form) const {
  const bool int4 = form == LgForm::kQd8Qc4w || form == LgForm::kF32Qc4w;
  const double code_bytes = form == LgForm::kF32 ? 4.0 : int4 ? 0.5 : 1.0;
  const double scale_bytes = form == LgForm::kF32 ? 0.0 : 4.0;
  double b = 0;
  for (const LgPart& p : parts) b += double(p.rows) * (double(k) * code_bytes + scale_bytes);
  return b;
}

const char* lg_form_name(LgForm form) {
  switch (form) {
    case LgForm::kF32: return "f32";
    case LgForm::kQd8Qc8w: return "qd8-qc8w";
    case LgForm::kQd8Qc4w: return "qd8-qc4w";
    case LgForm::kF32Qc8w: return "f32-qc8w";
    case LgForm::kF32Qc4w: return "f32-qc4w";
  }
  return "?";
}

LgQuantization lg_form_quantization(LgForm form) {
  LgQuantization q;
  q.weight_levels = form == LgForm::kF32 ? 0 : form == LgForm::kQd8Qc4w || form == LgForm::kF32Qc4w ? 7 : 127;
  q.input = form == LgForm::kQd8Qc8w || form == LgForm::kQd8Qc4w ? LgQuantization::Input::kPerRow
                                                                  : LgQuantization::Input::kF32;
  return q;
}

void LgBuffer::Free::operator()(float* p) const noexcept { std::free(p); }

LgBuffer::LgBuffer(size_t n) : n_(n) {
  // Rounded up to whole cache lines; at least one line so data() is never null.
  const size_t bytes = ((std::max<size_t>(n, 1) * sizeof(float) + 63) / 64) * 64;
  p_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (!p_) throw std::bad_alloc();
}

namespace {

// Uniform floats in [-1, 1) from a 64-bit xorshift: fast enough for 200 MB of weights.
void fill_uniform(LgBuffer& b, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  float* p = b.data();
  for (size_t i = 0; i < b.size(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = float(int32_t(uint32_t(s >> 32))) * (1.0f / 2147483648.0f);
  }
}

}  // namespace

LgData::LgData(const LgCase& lg_case) : c(&lg_case) {
  // decode_e4096_m1 and _m8 read the same 201 MB weight: one copy, made on first use.
  static std::mutex mutex;
  static std::map<std::pair<int64_t, int64_t>, std::pair<std::weak_ptr<LgBuffer>, std::weak_ptr<LgBuffer>>> cache;
  const std::pair<int64_t, int64_t> key{lg_case.weight_rows(), lg_case.k};
  {
    std::lock_guard lock(mutex);
    auto& [w, b] = cache[key];
    auto shared_w = w.lock();
    auto shared_b = b.lock();
    if (!shared_w || !shared_b) {
      shared_w = std::make_shared<LgBuffer>(size_t(key.first * key.second));
      shared_b = std::make_shared<LgBuffer>(size_t(key.first));
      fill_uniform(*shared_w, 1);
      fill_uniform(*shared_b, 2);
      w = shared_w;
      b = shared_b;
    }
    weight = shared_w;
    bias = shared_b;
  }
  for (size_t i = 0; i < lg_case.input_rows.size(); ++i) {
    inputs.emplace_back(size_t(lg_case.input_rows[i] * lg_case.k));
    fill_uniform(inputs.back(), 3 + i);
  }
}

LgPartOutputs::LgPartOutputs(const LgCase& c) {
  for (const LgPart& p : c.parts) {
    out_.emplace_back(size_t(c.m_of(p) * p.rows));
    n_.push_back(p.rows);
  }
}

std::vector<LgGroup> lg_packed_groups(const LgCase& c) {
  std::vector<LgGroup> groups;
  for (size_t i = 0; i < c.parts.size(); ++i) {
    const LgPart& p = c.parts[i];
    if (!groups.empty() && groups.back().input == p.input &&
        groups.back().row_begin + groups.back().rows == p.row_begin) {
      groups.back().rows += p.rows;
      groups.back().parts.push_back(i);
    } else {
      groups.push_back({p.input, p.row_begin, p.rows, {i}});
    }
  }
  return groups;
}

void lg_fill_bias(float* out, int64_t m, int64_t n, int64_t ldc, const float* bias) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) out[i * ldc + j] = bias[j];
}

}  // namespace shapejit::bench

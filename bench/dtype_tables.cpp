// Conversion of the benchmark tables to the other table dtypes (see dtype_tables.hpp).
#include "dtype_tables.hpp"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "ref/float16.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::bench {
namespace {

constexpr size_t kAlign = 64;

// Byte offset at which data() starts so that it is 64-byte aligned.
size_t align_pad(const std::vector<uint8_t>& v) {
  const auto addr = reinterpret_cast<uintptr_t>(v.data());
  return (kAlign - addr % kAlign) % kAlign;
}

template <class Convert>
void halves(const float* src, int64_t n, uint8_t* dst, Convert convert) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = convert(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

}  // namespace

DtypeTable::DtypeTable(const Workload& w, shapejit_dtype dtype) : dtype_(dtype) {
  const int64_t rows = w.spec().rows, dim = w.spec().dim, n = rows * dim;
  const std::vector<float>& weights = w.per_sample_weights();
  if (dtype == SHAPEJIT_F16 || dtype == SHAPEJIT_BF16) {
    row_stride_ = dim;
    row_bytes_ = dim * 2;
    bytes_.resize(size_t(n * 2) + kAlign);
    pad_ = align_pad(bytes_);
    psw_.resize(weights.size() * 2);
    if (dtype == SHAPEJIT_F16) {
      halves(w.table(), n, bytes_.data() + pad_, ref::f32_to_f16);
      halves(weights.data(), int64_t(weights.size()), psw_.data(), ref::f32_to_f16);
    } else {
      halves(w.table(), n, bytes_.data() + pad_, ref::f32_to_bf16);
      halves(weights.data(), int64_t(weights.size()), psw_.data(), ref::f32_to_bf16);
    }
    return;
  }
  if (!is_quantized(dtype)) throw std::invalid_argument("dtype table: not a table dtype");
  const DType q = static_cast<DType>(dtype);
  row_bytes_ = rowwise_row_bytes(q, dim);
  row_stride_ = row_bytes_;
  const std::vector<uint8_t> packed = rowwise_prepack(q, w.table(), DType::kF32, rows, dim);
  bytes_.resize(packed.size() + kAlign);
  pad_ = align_pad(bytes_);
  std::memcpy(bytes_.data() + pad_, packed.data(), packed.size());
  psw_.resize(weights.size() * 4);
  std::memcpy(psw_.data(), weights.data(), psw_.size());
}

const DtypeTable& dtype_table_for(const Workload& w, shapejit_dtype dtype) {
  static std::mutex mutex;
  static std::map<std::pair<const Workload*, int>, std::unique_ptr<DtypeTable>> tables;
  std::lock_guard lock(mutex);
  auto& t = tables[{&w, int(dtype)}];
  if (!t) t = std::make_unique<DtypeTable>(w, dtype);
  return *t;
}

std::vector<float> widen_to_f32(const void* data, size_t n, shapejit_dtype dtype) {
  std::vector<float> f(n);
  if (dtype == SHAPEJIT_F32) {
    if (n > 0) std::memcpy(f.data(), data, n * 4);
    return f;
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h = 0;
    std::memcpy(&h, bytes + 2 * i, 2);
    f[i] = dtype == SHAPEJIT_F16 ? ref::f16_to_f32(h) : ref::bf16_to_f32(h);
  }
  return f;
}

}  // namespace shapejit::bench

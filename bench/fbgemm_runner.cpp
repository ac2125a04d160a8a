// FBGEMM peer of the embedding-bag benchmarks (see fbgemm_runner.hpp).
#include "fbgemm_runner.hpp"

#include <cstring>
#include <stdexcept>
#include <string>


#if defined(SHAPEJIT_BENCH_FBGEMM)
#include <fbgemm/FbgemmEmbedding.h>
#endif

namespace shapejit::bench {

namespace {

// Which of FBGEMM's kernel signatures a table dtype takes: f32 in and out, 16-bit in and out
// (f16 or bf16), packed bytes in and f32 out (8-bit and N-bit rows).
enum class KernelKind { kF32, kHalf, kPacked };

KernelKind kind_of(shapejit_dtype table) {
  if (table == SHAPEJIT_F32) return KernelKind::kF32;
  if (table == SHAPEJIT_F16 || table == SHAPEJIT_BF16) return KernelKind::kHalf;
  return KernelKind::kPacked;
}

}  // namespace

#if defined(SHAPEJIT_BENCH_FBGEMM)

const char* fbgemm_unsupported_reason(shapejit_dtype table, shapejit_mode mode) {
  if (mode == SHAPEJIT_MAX) return "FBGEMM's embedding kernels have no max mode";
  if (mode != SHAPEJIT_SUM && mode != SHAPEJIT_MEAN) return "FBGEMM's embedding kernels: sum and mean only";
  switch (table) {
    case SHAPEJIT_F32:
    case SHAPEJIT_F16:
    case SHAPEJIT_BF16:
    case SHAPEJIT_Q8:
    case SHAPEJIT_Q4:
    case SHAPEJIT_Q2: return nullptr;
    default: return "FBGEMM's embedding kernels take f32, f16, bf16 and 8/4/2-bit rowwise tables only";
  }
}

struct FbgemmKernel::Impl {
  KernelKind kind;
  fbgemm::EmbeddingSpMDMKernelSignature<float, int64_t, int64_t, float>::Type f32;
  fbgemm::EmbeddingSpMDMKernelSignature<uint16_t, int64_t, int64_t, uint16_t>::Type half;
  fbgemm::EmbeddingSpMDMKernelSignature<uint8_t, int64_t, int64_t, float>::Type packed;
};

FbgemmKernel::FbgemmKernel(shapejit_dtype table, int64_t dim, shapejit_mode mode, bool weighted)
    : impl_(new Impl) {
  if (const char* why = fbgemm_unsupported_reason(table, mode)) throw std::runtime_error(why);
  const bool mean = mode == SHAPEJIT_MEAN;
  // FBGEMM's defaults from here on: prefetch 16 rows ahead, weights by index position (not by
  // position in the bag), offsets rather than lengths.
  constexpr int kPrefetch = 16;
  constexpr bool kWeightPositional = false, kUseOffsets = true;
  impl_->kind = kind_of(table);
  switch (table) {
    case SHAPEJIT_F32:
      impl_->f32 = fbgemm::GenerateEmbeddingSpMDM<float, int64_t, int64_t, float>(dim, weighted, mean, kPrefetch,
                                                                                 kWeightPositional, kUseOffsets);
      break;
    case SHAPEJIT_F16:
    case SHAPEJIT_BF16: {
      const bool bf16 = table == SHAPEJIT_BF16;  // bf16 in and out; else float16 in and out
      impl_->half = fbgemm::GenerateEmbeddingSpMDM<uint16_t, int64_t, int64_t, uint16_t>(
          dim, weighted, mean, kPrefetch, kWeightPositional, kUseOffsets, /*is_bf16_out=*/bf16, /*is_bf16_in=*/bf16);
      output_dtype_ = table;
      break;
    }
    case SHAPEJIT_Q8:
      impl_->packed = fbgemm::GenerateEmbeddingSpMDM<uint8_t, int64_t, int64_t, float>(dim, weighted, mean, kPrefetch,
                                                                                      kWeightPositional, kUseOffsets);
      break;
    default:  // Q4, Q2
      impl_->packed = fbgemm::GenerateEmbeddingSpMDMNBit<int64_t, int64_t, float>(
          table == SHAPEJIT_Q4 ? 4 : 2, dim, weighted, mean, kPrefetch, kWeightPositional, kUseOffsets);
      break;
  }
}

FbgemmKernel::~FbgemmKernel() = default;

void FbgemmKernel::run(int64_t bags, int64_t num_indices, int64_t num_rows, const void* table, const int64_t* indices,
                       const int64_t* offsets, const float* weights, void* output) const {
  bool ok = false;
  switch (impl_->kind) {
    case KernelKind::kF32:
      ok = impl_->f32(bags, num_indices, num_rows, static_cast<const float*>(table), indices, offsets, weights,
                      static_cast<float*>(output));
      break;
    case KernelKind::kHalf:
      ok = impl_->half(bags, num_indices, num_rows, static_cast<const uint16_t*>(table), indices, offsets, weights,
                       static_cast<uint16_t*>(output));
      break;
    case KernelKind::kPacked:
      ok = impl_->packed(bags, num_indices, num_rows, static_cast<const uint8_t*>(table), indices, offsets, weights,
                         static_cast<float*>(output));
      break;
  }
  if (!ok)
    throw std::runtime_error("FBGEMM's embedding kernel failed (" + std::to_string(bags) + " bags, " +
                             std::to_string(num_indices) + " indices, " + std::to_string(num_rows) +
                             " rows): an index out of range or offsets it rejects");
}

#else  // built without FBGEMM's header

constexpr const char* kNoFbgemm = "this build has no FBGEMM (needs pip torch 2.x's libtorch)";

const char* fbgemm_unsupported_reason(shapejit_dtype, shapejit_mode) { return kNoFbgemm; }

struct FbgemmKernel::Impl {};

FbgemmKernel::FbgemmKernel(shapejit_dtype, int64_t, shapejit_mode, bool) { throw std::runtime_error(kNoFbgemm); }
FbgemmKernel::~FbgemmKernel() = default;
void FbgemmKernel::run(int64_t, int64_t, int64_t, const void*, const int64_t*, const int64_t*, const float*,
                       void*) const {
  throw std::runtime_error(kNoFbgemm);
}

#endif

FbgemmRunner::FbgemmRunner(const Workload& w, const DtypeTable* table, shapejit_mode mode, bool weighted)
    : w_(w),
      table_(table ? table->data() : w.table()),
      kernel_(table ? table->dtype() : SHAPEJIT_F32, w.spec().dim, mode, weighted),
      offsets_(w.offsets()) {
  offsets_.push_back(w.num_indices());  // FBGEMM reads offsets[bags] as the end of the last bag
  const shapejit_dtype dtype = table ? table->dtype() : SHAPEJIT_F32;
  if (weighted) {
    if (kind_of(dtype) == KernelKind::kHalf) {
      // The table's 16-bit weights widened: the values shapejit's kernels and reference multiply by.
      weights_ = widen_to_f32(table->per_sample_weights(), size_t(w.num_indices()), dtype);
    } else {
      weights_ = w.per_sample_weights();
    }
  }
  const size_t element_bytes = kernel_.output_dtype() == SHAPEJIT_F32 ? 4 : 2;
  output_.resize(size_t(w.spec().bags * w.spec().dim) * element_bytes);
}

void FbgemmRunner::run(int64_t set) {
  kernel_.run(w_.spec().bags, w_.num_indices(), w_.spec().rows, table_, w_.indices(set), offsets_.data(),
              weights_.empty() ? nullptr : weights_.data(), output_.data());
}

std::vector<float> FbgemmRunner::output_f32() const {
  const shapejit_dtype dtype = kernel_.output_dtype();
  return widen_to_f32(output_.data(), output_.size() / (dtype == SHAPEJIT_F32 ? 4 : 2), dtype);
}

}  // namespace shapejit::bench

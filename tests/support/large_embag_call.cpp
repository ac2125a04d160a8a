#include "support/large_embag_call.hpp"

#include <random>

#include "ref/embedding_bag.hpp"

namespace shapejit::test {

LargeEmbagCall::LargeEmbagCall(int64_t dim, int64_t bags, uint64_t seed) {
  constexpr int64_t kRows = 4096, kPerBag = 16;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  weight_.resize(size_t(kRows * dim));
  for (float& w : weight_) w = value(rng);
  std::uniform_int_distribution<int64_t> row(0, kRows - 1);
  indices_.resize(size_t(bags * kPerBag));
  for (int64_t& i : indices_) i = row(rng);
  for (int64_t b = 0; b < bags; ++b) offsets_.push_back(b * kPerBag);
  args_.weight = weight_.data();
  args_.weight_dtype = SHAPEJIT_F32;
  args_.num_rows = kRows;
  args_.dim = dim;
  args_.row_stride = dim;
  args_.indices = indices_.data();
  args_.index_dtype = SHAPEJIT_I64;
  args_.num_indices = int64_t(indices_.size());
  args_.offsets = offsets_.data();
  args_.offset_dtype = SHAPEJIT_I64;
  args_.num_offsets = int64_t(offsets_.size());
  args_.mode = SHAPEJIT_SUM;
  shapes_ = ref::embedding_bag_shapes(args_);
  want_ = std::make_unique<GuardedOutputs>(shapes_, 0x5A);
  ref::embedding_bag(args_, want_->data(EmbagOutput::kOutput), want_->data(EmbagOutput::kOffset2bag),
                     want_->data(EmbagOutput::kBagSize), want_->data(EmbagOutput::kMaxIndices));
}

std::string LargeEmbagCall::difference(const GuardedOutputs& got) const {
  return first_output_difference(*want_, got, SHAPEJIT_F32);
}

}  // namespace shapejit::test

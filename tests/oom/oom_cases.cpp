#include "oom/oom_cases.hpp"

#include <cstring>
#include <stdexcept>

namespace shapejit::test::oom {

const std::vector<EmbagVariant> kEmbagVariants = {
    {"sum", SHAPEJIT_SUM},
    {"sum, padding", SHAPEJIT_SUM, false, true},
    {"mean", SHAPEJIT_MEAN},
    {"mean, padding", SHAPEJIT_MEAN, false, true},
    {"max", SHAPEJIT_MAX},
    {"max, padding", SHAPEJIT_MAX, false, true},
    {"weighted sum", SHAPEJIT_SUM, true},
    {"weighted sum, padding", SHAPEJIT_SUM, true, true},
    {"sum, partial final offset (reference)", SHAPEJIT_SUM, false, false, true},
    {"mean, partial final offset (reference)", SHAPEJIT_MEAN, false, false, true},
};

namespace {
constexpr int64_t kRows = 997, kBags = 512, kBagLength = 8;
}  // namespace

EmbagInputs::EmbagInputs(const EmbagVariant& v, int64_t dim) {
  weight_.resize(size_t(kRows * dim));
  for (size_t i = 0; i < weight_.size(); ++i) weight_[i] = float(int64_t(i * 7919 % 61) - 30);
  const int64_t n = kBags * kBagLength;
  indices_.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) indices_[size_t(i)] = (i * 104729 + 13) % kRows;
  if (v.padding)  // every fifth position is the padding row 3
    for (int64_t i = 0; i < n; i += 5) indices_[size_t(i)] = 3;
  for (int64_t b = 0; b < kBags; ++b) offsets_.push_back(b * kBagLength);
  // The quirk needs include_last_offset with offsets[B] < N: the last bag stops 3 short.
  if (v.partial_final_offset) offsets_.push_back(n - 3);
  if (v.weighted) {
    per_sample_weights_.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) per_sample_weights_[size_t(i)] = float(i % 5) - 2.0f;
  }
  args_.weight = weight_.data();
  args_.weight_dtype = SHAPEJIT_F32;
  args_.num_rows = kRows;
  args_.dim = dim;
  args_.row_stride = dim;
  args_.indices = indices_.data();
  args_.index_dtype = SHAPEJIT_I64;
  args_.num_indices = n;
  args_.offsets = offsets_.data();
  args_.offset_dtype = SHAPEJIT_I64;
  args_.num_offsets = int64_t(offsets_.size());
  args_.per_sample_weights = v.weighted ? per_sample_weights_.data() : nullptr;
  args_.mode = v.mode;
  args_.has_padding_idx = v.padding;
  args_.padding_idx = 3;
  args_.include_last_offset = v.partial_final_offset;
  args_.aten_partial_final_offset = v.partial_final_offset;
}

shapejit_embedding_bag_shapes EmbagInputs::shapes() const {
  shapejit_embedding_bag_shapes s{};
  if (shapejit_embedding_bag_output_shapes(&args_, &s) != SHAPEJIT_OK)
    throw std::runtime_error(std::string("invalid test call: ") + shapejit_last_error());
  return s;
}

const std::vector<LinearVariant> kLinearVariants = {
    {"3 parts, own inputs", 3, false, false, 128},
    {"3 parts, own inputs, small", 3, false, false, 4},
    {"3 parts, shared input", 3, true, false, 128},
    {"6 parts, head-split and row-major, shared input", 6, true, true, 128},
    {"6 parts, head-split and row-major, own inputs, small", 6, false, true, 4},
    {"10 parts, own inputs", 10, false, false, 128},
    {"10 parts, head-split and row-major, shared input, small", 10, true, true, 4},
};

namespace {
constexpr int64_t kK = 48, kN = 64, kBatch = 2;

// Part p: row-major, or (head-split variants) heads of 16 (a vector or more: offset tables) and
// heads of 4 (narrower than a vector: a tile copied out) in turn.
shapejit_layout layout_of(const LinearVariant& v, int p) {
  if (!v.head_split || p % 3 == 0) return SHAPEJIT_LAYOUT_ROW_MAJOR;
  return p % 3 == 1 ? SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST : SHAPEJIT_LAYOUT_HEADS_BATCH_FIRST;
}
int64_t heads_of(const LinearVariant& v, int p) { return layout_of(v, p) == SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST ? 4 : 16; }
}  // namespace

unsigned char sentinel_byte(size_t position) { return static_cast<unsigned char>(position * 167 + 91); }

LinearCase::LinearCase(const LinearVariant& v) {
  const int64_t rows = kN * v.parts;
  weight_.resize(size_t(rows * kK));
  for (size_t i = 0; i < weight_.size(); ++i) weight_[i] = float(int64_t(i * 31 % 17) - 8) / 8.0f;
  bias_.resize(size_t(rows));
  for (size_t i = 0; i < bias_.size(); ++i) bias_[i] = float(int64_t(i % 7) - 3);
  std::vector<shapejit_linear_part_desc> parts(size_t(v.parts));
  for (int p = 0; p < v.parts; ++p) {
    shapejit_linear_part_desc& d = parts[size_t(p)];
    d.row_begin = p * kN;
    d.rows = kN;
    d.activation = p % 2 ? SHAPEJIT_ACTIVATION_RELU : SHAPEJIT_ACTIVATION_NONE;
    d.layout = layout_of(v, p);
    d.heads = heads_of(v, p);
  }
  shapejit_linear_group_desc desc{};
  desc.form = SHAPEJIT_WEIGHTS_PACKED;
  desc.weight = weight_.data();
  desc.weight_rows = rows;
  desc.k = kK;
  desc.weight_stride = kK;
  desc.bias = bias_.data();
  desc.bias_len = rows;
  desc.parts = parts.data();
  desc.num_parts = v.parts;
  if (shapejit_linear_group_create(&desc, &group_) != SHAPEJIT_OK)
    throw std::runtime_error(std::string("cannot create the test group: ") + shapejit_last_error());

  inputs_.resize(v.shared_input ? 1 : size_t(v.parts));
  for (size_t i = 0; i < inputs_.size(); ++i) {
    inputs_[i].resize(size_t(v.m * kK));
    for (size_t e = 0; e < inputs_[i].size(); ++e) inputs_[i][e] = float(int64_t((e + 3 * i) * 13 % 11) - 5) / 4.0f;
  }
  outputs_.resize(size_t(v.parts));
  for (int p = 0; p < v.parts; ++p) {
    outputs_[size_t(p)].resize(size_t(v.m * kN));
    const std::vector<float>& x = inputs_[v.shared_input ? 0 : size_t(p)];
    io_.push_back({x.data(), v.m, kK, kK, outputs_[size_t(p)].data(), kN, kBatch, v.m / kBatch});
  }
  reset_outputs();
}

LinearCase::~LinearCase() { shapejit_linear_group_destroy(group_); }

void LinearCase::reset_outputs() {
  size_t position = 0;
  for (std::vector<float>& y : outputs_) {
    unsigned char* bytes = reinterpret_cast<unsigned char*>(y.data());
    for (size_t b = 0; b < y.size() * sizeof(float); ++b) bytes[b] = sentinel_byte(position++);
  }
}

shapejit_status LinearCase::run() { return shapejit_linear_group_run(group_, io_.data(), int64_t(io_.size())); }

std::vector<unsigned char> LinearCase::output_bytes() const {
  std::vector<unsigned char> all;
  for (const std::vector<float>& y : outputs_) {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(y.data());
    all.insert(all.end(), bytes, bytes + y.size() * sizeof(float));
  }
  return all;
}

bool LinearCase::untouched() const {
  size_t position = 0;
  for (const std::vector<float>& y : outputs_) {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(y.data());
    for (size_t b = 0; b < y.size() * sizeof(float); ++b)
      if (bytes[b] != sentinel_byte(position++)) return false;
  }
  return true;
}

std::string SweepStats::summary() const {
  return std::to_string(attempts) + " values of k (" + std::to_string(out_of_memory) + " out of memory, " +
         std::to_string(absorbed) + " absorbed, then a clean call of " + std::to_string(allocations) +
         " allocations)";
}

}  // namespace shapejit::test::oom

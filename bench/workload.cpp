// Deterministic benchmark inputs (fixed seeds): the same bytes in every run and every process.
#include "workload.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <new>
#include <numeric>
#include <random>
#include <stdexcept>

namespace shapejit::bench {
namespace {

// splitmix64: fast enough to fill a 512 MB table in well under a second.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1) with 24 random bits: finite, no ties of zero in practice.
  float next_float() { return float(int64_t(next() >> 40) - (int64_t(1) << 23)) * 0x1p-23f; }
};

std::vector<int64_t> bag_lengths(const WorkloadSpec& spec) {
  std::vector<int64_t> len(size_t(spec.bags), spec.mean_len);
  if (spec.lengths == LengthDist::kFixed) return len;
  const int64_t total = spec.bags * spec.mean_len;
  double harmonic = 0;
  for (int64_t r = 1; r <= spec.bags; ++r) harmonic += 1.0 / double(r);
  int64_t assigned = 0;
  for (int64_t r = 1; r <= spec.bags; ++r) {
    len[size_t(r - 1)] = int64_t(std::floor(double(total) / (harmonic * double(r))));
    assigned += len[size_t(r - 1)];
  }
  for (int64_t r = 0; assigned < total; r = (r + 1) % spec.bags, ++assigned) ++len[size_t(r)];
  std::mt19937_64 rng(0x5eed2);
  std::shuffle(len.begin(), len.end(), rng);
  return len;
}

}  // namespace

std::string WorkloadSpec::name() const {
  const std::string len = (lengths == LengthDist::kZipf ? "zipf" : "") + std::to_string(mean_len);
  return std::to_string(rows) + "x" + std::to_string(dim) + "/" + std::to_string(bags) + "x" + len;
}

Workload::Workload(const WorkloadSpec& spec)
    : spec_(spec), num_indices_(spec.bags * spec.mean_len) {
  if (spec.rows <= 0 || spec.dim <= 0 || spec.bags <= 0 || spec.mean_len <= 0)
    throw std::invalid_argument("workload " + spec.name() + ": sizes must be positive");
  const size_t table_bytes = (size_t(spec.rows) * size_t(spec.dim) * sizeof(float) + 63) / 64 * 64;
  table_.reset(static_cast<float*>(std::aligned_alloc(64, table_bytes)));
  if (!table_) throw std::bad_alloc();
  SplitMix64 values{0x7ab1e ^ uint64_t(spec.rows) ^ (uint64_t(spec.dim) << 32)};
  for (int64_t i = 0; i < spec.rows * spec.dim; ++i) table_[size_t(i)] = values.next_float();

  offsets_.reserve(size_t(spec.bags));
  int64_t offset = 0;
  for (int64_t len : bag_lengths(spec)) {
    offsets_.push_back(offset);
    offset += len;
  }

  std::mt19937_64 rng(0x1d1ce5);
  if (spec.cold) {
    if (spec.rows < num_indices_)
      throw std::invalid_argument("cold workload " + spec.name() +
                                  ": fewer rows than one call's indices");
    std::vector<int64_t> perm(size_t(spec.rows));
    std::iota(perm.begin(), perm.end(), int64_t(0));
    std::shuffle(perm.begin(), perm.end(), rng);
    perm.resize(size_t(spec.rows / num_indices_ * num_indices_));
    index_sets_ = std::move(perm);
  } else {
    std::uniform_int_distribution<int64_t> row(0, spec.rows - 1);
    index_sets_.resize(size_t(num_indices_));
    for (auto& idx : index_sets_) idx = row(rng);
  }

  SplitMix64 w{0x3e1917};
  weights_.resize(size_t(num_indices_));
  for (auto& x : weights_) x = w.next_float();
}

Workload& workload_for(const WorkloadSpec& spec) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Workload>> cache;
  const std::string key = spec.name() + (spec.cold ? "/cold" : "/warm");
  std::lock_guard lock(mutex);
  auto& slot = cache[key];
  if (!slot) slot = std::make_unique<Workload>(spec);
  return *slot;
}

shapejit_embedding_bag_args embag_call_args(const Workload& w, int64_t set) {
  shapejit_embedding_bag_args a{};
  a.weight = w.table();
  a.weight_dtype = SHAPEJIT_F32;
  a.num_rows = w.spec().rows;
  a.dim = w.spec().dim;
  a.row_stride = w.spec().dim;
  a.indices = w.indices(set);
  a.index_dtype = SHAPEJIT_I64;
  a.num_indices = w.num_indices();
  a.offsets = w.offsets().data();
  a.offset_dtype = SHAPEJIT_I64;
  a.num_offsets = int64_t(w.offsets().size());
  a.mode = SHAPEJIT_SUM;
  return a;
}

}  // namespace shapejit::bench

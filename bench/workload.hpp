// Inputs of the embedding-bag benchmarks: one table, one or many index sets and their offsets,
// shared by every implementation and mode of a case so that all of them read the same bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "shapejit/shapejit.h"

namespace shapejit::bench {

/// How bag lengths are drawn.
enum class LengthDist : int {
  kFixed,  ///< every bag has `mean_len` indices
  kZipf,   ///< length of the bag of rank r proportional to 1/r, same total, bags shuffled
};

/// The data a case reads (mode and thread count are not part of it).
struct WorkloadSpec {
  int64_t rows = 4096;
  int64_t dim = 128;
  int64_t bags = 256;
  int64_t mean_len = 32;
  LengthDist lengths = LengthDist::kFixed;
  bool cold = false;  ///< successive calls read disjoint index sets that cycle through the table

  /// `<rows>x<dim>/<bags>x<len>` as in the benchmark names (`len` is `zipf32` for kZipf).
  std::string name() const;
};

/// A 64-byte aligned float buffer (rows start on cache lines when dim is a multiple of 16).
struct AlignedFree {
  void operator()(float* p) const noexcept { std::free(p); }
};
using AlignedFloats = std::unique_ptr<float[], AlignedFree>;

/// A std::vector allocator whose buffers start on a cache line. A plain vector of a few hundred
/// KiB comes from mmap 16 bytes into a page, so every 64-byte row load of it splits two lines
/// (seen: one call 9.2 us against 5.5 on the same data, FBGEMM's kernel alike).
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
};
template <typename T>
using CacheLineVector = std::vector<T, CacheLineAllocator<T>>;

/// The table, index sets, offsets and per-sample weights of one WorkloadSpec.
/// Warm workloads have one index set; cold ones have rows / (bags * mean_len) sets that
/// together are a permutation of all table rows, so a set's rows were last touched a whole
/// table ago (rows * dim * 4 bytes, far beyond the last-level cache) when it comes round again.
class Workload {
 public:
  explicit Workload(const WorkloadSpec& spec);

  const WorkloadSpec& spec() const { return spec_; }
  const float* table() const { return table_.get(); }
  int64_t num_indices() const { return num_indices_; }
  int64_t num_sets() const { return int64_t(index_sets_.size()) / num_indices_; }
  /// Index set `s` (num_indices() int64 values).
  const int64_t* indices(int64_t set) const { return index_sets_.data() + set * num_indices_; }
  /// Offsets, shared by every index set (bags() values, include_last_offset false).
  const std::vector<int64_t>& offsets() const { return offsets_; }
  /// One weight per index position (shared by every index set).
  const std::vector<float>& per_sample_weights() const { return weights_; }
  /// Bytes of table rows one call gathers (every index is a non-padding index here).
  double row_bytes_per_call() const { return double(num_indices_) * double(spec_.dim) * 4.0; }

  /// The set the next call uses: always 0 when warm; when cold, one cursor shared by every
  /// implementation, so no implementation ever meets rows another one touched recently.
  int64_t next_set() {
    return spec_.cold ? cursor_.fetch_add(1, std::memory_order_relaxed) % num_sets() : 0;
  }

 private:
  WorkloadSpec spec_;
  AlignedFloats table_;
  int64_t num_indices_ = 0;
  std::vector<int64_t> index_sets_;
  std::vector<int64_t> offsets_;
  std::vector<float> weights_;
  std::atomic<int64_t> cursor_{0};
};

/// The process-wide workload of a spec, built on first use (tables are large; benchmarks of
/// every implementation and mode share them).
Workload& workload_for(const WorkloadSpec& spec);

/// The C API arguments of index set `set` of `w`: its f32 table (stride D), int64 indices and
/// offsets, sum mode, no weights; benchmarks change what their case differs in.
shapejit_embedding_bag_args embag_call_args(const Workload& w, int64_t set);

}  // namespace shapejit::bench

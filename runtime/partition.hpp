// Splitting a call's bags into chunks of roughly equal work and running them on the engine.
// Each bag lands in exactly one chunk and is reduced there in index order, so results do not
// depend on the thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/engine_arena.hpp"
#include "runtime/function_ref.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {

/// The offsets of a validated call (int32 or int64, non-decreasing).
struct OffsetsView {
  const void* data = nullptr;
  DType dtype = DType::kI64;
  int64_t size = 0;  ///< len(offsets)
};

/// Tuning of the partitioner; work is counted in floats touched.
struct PartitionOptions {
  /// Chunks carry at least this much work; calls below twice it run on the calling thread.
  int64_t min_chunk_work = 32 * 1024;
  /// Chunks per engine thread, so a slow thread's tail is picked up by the others.
  int chunks_per_thread = 4;
  /// Work of a bag besides its rows: writing its output row (D) plus this constant, so many
  /// empty bags still cost something.
  int64_t bag_overhead = 16;
};

/// Work of bags [0, b) for every b in [0, num_bags], in O(1) each from the offsets:
/// bag b covers positions [offsets[b], end_b) and costs (end_b - offsets[b] + 1) * D + overhead.
class BagWork {
 public:
  BagWork(const OffsetsView& offsets, int64_t num_bags, int64_t num_indices, int64_t dim,
          int64_t bag_overhead);
  /// Work of bags [0, b).
  double prefix(int64_t b) const;
  /// Work of every bag.
  double total() const { return prefix(num_bags_); }
  /// Work of bags [begin, end).
  double range(int64_t begin, int64_t end) const { return prefix(end) - prefix(begin); }

 private:
  int64_t start(int64_t b) const;  ///< first position of bag b (end of the last bag for b == B)
  OffsetsView offsets_;
  int64_t num_bags_, num_indices_;
  double row_cost_, bag_cost_;
  int64_t first_;
};

/// Chunk boundaries 0 = c_0 < c_1 < ... < c_k = num_bags (k >= 1 when num_bags > 0; {0} when
/// there are no bags): at most max_chunks chunks, each of about total/k work and (but for
/// bags too large to split) at least min_chunk_work. A chunk's work exceeds total/k by at most
/// the work of one bag.
std::vector<int64_t> partition_bags(const OffsetsView& offsets, int64_t num_bags,
                                    int64_t num_indices, int64_t dim, int max_chunks,
                                    const PartitionOptions& options = {});

/// A non-owning reference to a callable body(bag_begin, bag_end).
using BagRangeFn = FunctionRef<void(int64_t, int64_t)>;

/// How one call's bags will run: on the calling thread in one piece (a call whose work is below
/// twice the minimum chunk, or an engine of one thread), or in chunks on the engine arena (the
/// calling thread joins in). Building it allocates all that running needs (chunk bounds, the
/// initialised arena), so a call builds it before writing any output: after that, run() does
/// not fail for want of memory (runtime/engine_arena.hpp, EngineTasks).
class BagSchedule {
 public:
  BagSchedule(const OffsetsView& offsets, int64_t num_bags, int64_t num_indices, int64_t dim,
              const PartitionOptions& options = {});
  /// Runs body over bags [0, num_bags), each bag in exactly one call. An exception thrown by
  /// body reaches the caller.
  void run(BagRangeFn body);

 private:
  int64_t num_bags_;
  std::vector<int64_t> bounds_;         // chunk boundaries when on the engine
  std::optional<EngineTasks> tasks_;    // empty: inline
};

/// BagSchedule(...).run(body).
void parallel_for_bags(const OffsetsView& offsets, int64_t num_bags, int64_t num_indices,
                       int64_t dim, BagRangeFn body, const PartitionOptions& options = {});

}  // namespace shapejit::rt

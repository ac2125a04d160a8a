// Splitting a call's bags into chunks of shrinking work and running them on the engine.
// Each bag lands in exactly one chunk and is reduced there in index order, so results do not
// depend on the thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "runtime/engine/engine_arena.hpp"
#include "runtime/engine/function_ref.hpp"
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
  /// Chunks carry at least this much work (but the last), and calls below twice it run on the
  /// calling thread. Measured on the 2-core AVX2 host (bench/embag_scaling_bench.cpp, D=64): a
  /// fork and join of the arena costs 0.2-0.3 us with its worker spinning, one thread gathers
  /// 16-19K floats a microsecond; 2 threads beat 1 by 1.2x from ~35K floats of work when calls
  /// come back to back, but only from ~70K when the worker has to come from elsewhere (calls
  /// between other work: 35K was 0.89x). 2 x 24K keeps 2 threads from being slower in both.
  int64_t min_chunk_work = 24 * 1024;
  /// Work of a bag besides its rows: writing its output row (D) plus this constant, so many
  /// empty bags still cost something.
  int64_t bag_overhead = 16;
};

/// The first index position of bag b of validated offsets: offsets[b], and for the bag after
/// the last offset the end of the indices, num_indices.
int64_t bag_start(const OffsetsView& offsets, int64_t b, int64_t num_indices);

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
  OffsetsView offsets_;
  int64_t num_bags_, num_indices_;
  double row_cost_, bag_cost_;
  int64_t first_;
};

/// Chunk boundaries 0 = c_0 < c_1 < ... < c_k = num_bags (k >= 1 when num_bags > 0; {0} when
/// there are no bags) for `threads` threads claiming the chunks in order (EngineTasks), sized
/// by guided self-scheduling: chunk j is about max(R_j / threads, min_chunk_work) of work, R_j
/// the work of bags [c_j, B), and ends at the bag boundary nearest that target (one bag at
/// least); the last chunk takes what is left. Chunks shrink geometrically, so there are few of
/// them (each costs a claim and a kernel entry), and threads that claim them in order finish
/// within about one small chunk of each other, also when one starts late: with 2 threads the
/// first takes half, the second the quarters, eighths, ... that add up to the other half.
/// threads <= 1 gives one chunk. A chunk's work differs from its target by less than the work
/// of one bag.
std::vector<int64_t> partition_bags(const OffsetsView& offsets, int64_t num_bags,
                                    int64_t num_indices, int64_t dim, int threads,
                                    const PartitionOptions& options = {});

/// The index positions [first, second) that the check of bags [bag_begin, bag_end) covers, for a
/// call whose check covers [0, check_end): from the first bag's offset to the next part's, the
/// first part from 0 and the last up to check_end, so the parts of consecutive ranges tile it.
std::pair<int64_t, int64_t> check_part(const OffsetsView& offsets, int64_t num_bags, int64_t num_indices,
                                       int64_t check_end, int64_t bag_begin, int64_t bag_end);

/// A non-owning reference to a callable body(bag_begin, bag_end).
using BagRangeFn = FunctionRef<void(int64_t, int64_t)>;
/// A non-owning reference to a check check(position_begin, position_end) of index positions,
/// true when they pass.
using PositionCheckFn = FunctionRef<bool(int64_t, int64_t)>;

/// How one call's bags will run: on the calling thread in one piece (a call whose work is below
/// twice the minimum chunk, or an engine of one thread), or in partition_bags chunks on the
/// engine arena (the calling thread joins in). Building it allocates all that running needs
/// (chunk bounds, the initialised arena), so a call builds it before writing any output: after
/// that, run() does not fail for want of memory (runtime/engine/engine_arena.hpp, EngineTasks).
class BagSchedule {
 public:
  BagSchedule(const OffsetsView& offsets, int64_t num_bags, int64_t num_indices, int64_t dim,
              const PartitionOptions& options = {});
  /// Runs body over bags [0, num_bags), each bag in exactly one call. An exception thrown by
  /// body reaches the caller.
  void run(BagRangeFn body);

  /// run(body), but only once check has passed over every index position in [0, check_end)
  /// (check_end 0: no check); returns false, having run no body, when a part failed. On the
  /// engine the check runs in the same region (EngineTasks gates), in one part per chunk: the
  /// positions its bags read (the first part from 0, the last up to check_end), so a runner's
  /// check tends to bring in the indices of a chunk it then runs, and a late runner checks less.
  bool run(int64_t check_end, PositionCheckFn check, BagRangeFn body);

 private:
  OffsetsView offsets_;
  int64_t num_bags_, num_indices_;
  std::vector<int64_t> bounds_;         // chunk boundaries when on the engine
  std::optional<EngineTasks> tasks_;    // empty: inline
};

/// One call of a group (GroupSchedule): its bags and the index positions [0, check_end) to check
/// before any call of the group writes (0: none).
struct GroupMember {
  OffsetsView offsets;
  int64_t num_bags = 0, num_indices = 0, dim = 0;
  int64_t check_end = 0;
};
/// check(member, position_begin, position_end): true when those index positions pass.
using GroupCheckFn = FunctionRef<bool(size_t, int64_t, int64_t)>;
/// body(member, bag_begin, bag_end).
using GroupBodyFn = FunctionRef<void(size_t, int64_t, int64_t)>;

/// BagSchedule for many calls at once: their bags laid end to end and cut into chunks by the
/// same guided rule over the work of all of them (partition_bags), a chunk that spans calls
/// being run as one piece per call; every call's check runs first, in the same region. A group
/// whose whole work is below twice the minimum chunk, or an engine of one thread, runs on the
/// calling thread. Like BagSchedule, building it allocates all that running needs.
class GroupSchedule {
 public:
  explicit GroupSchedule(std::span<const GroupMember> members, const PartitionOptions& options = {});
  /// Runs check over every member's positions [0, check_end), then, when all passed, body over
  /// every member's bags, each bag in exactly one piece; returns false, having run no body,
  /// when a check failed. An exception thrown by body reaches the caller.
  bool run(GroupCheckFn check, GroupBodyFn body);

 private:
  struct Piece {
    size_t member;
    int64_t begin, end;  // bags for a body, index positions for a check
  };
  std::vector<Piece> checks_, bodies_;
  std::optional<EngineTasks> tasks_;  // empty: inline
};

/// BagSchedule(...).run(body).
void parallel_for_bags(const OffsetsView& offsets, int64_t num_bags, int64_t num_indices,
                       int64_t dim, BagRangeFn body, const PartitionOptions& options = {});

}  // namespace shapejit::rt

// Work-balanced bag partitioning. The work of bags [0, b) is a closed form of offsets[b], so
// each chunk boundary is one binary search over the (non-decreasing) offsets: no pass over
// the indices and no allocation on the inline path.
#include "runtime/partition.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/engine_arena.hpp"

namespace shapejit::rt {

BagWork::BagWork(const OffsetsView& offsets, int64_t num_bags, int64_t num_indices, int64_t dim,
                 int64_t bag_overhead)
    : offsets_(offsets),
      num_bags_(std::max<int64_t>(num_bags, 0)),
      num_indices_(num_indices),
      row_cost_(static_cast<double>(dim)),
      // Writing the bag's output row costs about as much as reading one more row.
      bag_cost_(static_cast<double>(dim) + static_cast<double>(bag_overhead)),
      first_(num_bags_ > 0 ? bag_start(offsets, 0, num_indices) : 0) {}

int64_t bag_start(const OffsetsView& offsets, int64_t b, int64_t num_indices) {
  if (b >= offsets.size) return num_indices;
  return offsets.dtype == DType::kI32 ? static_cast<const int32_t*>(offsets.data)[b]
                                      : static_cast<const int64_t*>(offsets.data)[b];
}

double BagWork::prefix(int64_t b) const {
  // Doubles: positions x D can exceed int64 for absurd sizes, and balance needs no exactness.
  return static_cast<double>(bag_start(offsets_, b, num_indices_) - first_) * row_cost_ + static_cast<double>(b) * bag_cost_;
}

std::vector<int64_t> partition_bags(const OffsetsView& offsets, int64_t num_bags,
                                    int64_t num_indices, int64_t dim, int threads,
                                    const PartitionOptions& options) {
  std::vector<int64_t> bounds{0};
  if (num_bags <= 0) return bounds;
  const BagWork work(offsets, num_bags, num_indices, dim, options.bag_overhead);
  const double total = work.total();
  const double min_chunk = static_cast<double>(std::max<int64_t>(options.min_chunk_work, 1));
  const double share = 1.0 / static_cast<double>(std::max(threads, 1));
  while (threads > 1) {
    const int64_t lo = bounds.back() + 1;  // a chunk has one bag at least
    if (lo >= num_bags) break;
    const double done = work.prefix(bounds.back());
    const double target = done + std::max((total - done) * share, min_chunk);
    if (target >= total) break;
    // First boundary b in [lo, num_bags] whose prefix reaches the target ...
    int64_t first = lo, count = num_bags - lo + 1;
    while (count > 0) {
      const int64_t step = count / 2;
      if (work.prefix(first + step) < target) {
        first += step + 1;
        count -= step + 1;
      } else {
        count = step;
      }
    }
    // ... or the one before it, when that lands closer to the target.
    if (first > lo && target - work.prefix(first - 1) < work.prefix(first) - target) --first;
    if (first >= num_bags) break;
    bounds.push_back(first);
  }
  bounds.push_back(num_bags);
  return bounds;
}

BagSchedule::BagSchedule(const OffsetsView& offsets, int64_t num_bags, int64_t num_indices,
                         int64_t dim, const PartitionOptions& options)
    : offsets_(offsets), num_bags_(num_bags), num_indices_(num_indices) {
  if (num_bags <= 0) return;
  const int threads = engine_threads();
  const BagWork work(offsets, num_bags, num_indices, dim, options.bag_overhead);
  if (threads <= 1 || num_bags == 1 || work.total() < 2.0 * static_cast<double>(options.min_chunk_work))
    return;  // tiny call: no arena, no task, no allocation
  bounds_ = partition_bags(offsets, num_bags, num_indices, dim, threads, options);
  if (bounds_.size() > 2) tasks_.emplace(bounds_.size() - 1);
}

void BagSchedule::run(BagRangeFn body) {
  run(0, [](int64_t, int64_t) { return true; }, body);
}

bool BagSchedule::run(int64_t check_end, PositionCheckFn check, BagRangeFn body) {
  if (!tasks_) {
    if (check_end > 0 && !check(0, check_end)) return false;
    if (num_bags_ > 0) body(0, num_bags_);
    return true;
  }
  const size_t last = bounds_.size() - 2;
  const auto position = [&](size_t k) {  // where chunk k's part of the check starts
    if (k == 0) return int64_t{0};
    if (k > last) return check_end;
    return std::min(bag_start(offsets_, bounds_[k], num_indices_), check_end);
  };
  return tasks_->run(
      check_end > 0 ? last + 1 : 0,
      [&](size_t k) {
        const int64_t begin = position(k), end = position(k + 1);
        return begin >= end || check(begin, end);
      },
      [&](size_t k) { body(bounds_[k], bounds_[k + 1]); });
}

void parallel_for_bags(const OffsetsView& offsets, int64_t num_bags, int64_t num_indices,
                       int64_t dim, BagRangeFn body, const PartitionOptions& options) {
  BagSchedule(offsets, num_bags, num_indices, dim, options).run(body);
}

}  // namespace shapejit::rt

// Work-balanced bag partitioning. The work of bags [0, b) is a closed form of offsets[b], so
// each chunk boundary is one binary search over the (non-decreasing) offsets: no pass over
// the indices and no allocation on the inline path.
#include "runtime/engine/partition.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/engine/engine_arena.hpp"

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

namespace {

// Guided self-scheduling over bags [0, num_bags) whose work prefix is prefix(b) (non-decreasing,
// prefix(num_bags) == total): partition_bags' rule, for one call's bags or a group's.
template <class Prefix>
std::vector<int64_t> guided_bounds(int64_t num_bags, double total, const Prefix& prefix, int threads,
                                   const PartitionOptions& options) {
  std::vector<int64_t> bounds{0};
  if (num_bags <= 0) return bounds;
  const double min_chunk = static_cast<double>(std::max<int64_t>(options.min_chunk_work, 1));
  const double share = 1.0 / static_cast<double>(std::max(threads, 1));
  while (threads > 1) {
    const int64_t lo = bounds.back() + 1;  // a chunk has one bag at least
    if (lo >= num_bags) break;
    const double done = prefix(bounds.back());
    const double target = done + std::max((total - done) * share, min_chunk);
    if (target >= total) break;
    // First boundary b in [lo, num_bags] whose prefix reaches the target ...
    int64_t first = lo, count = num_bags - lo + 1;
    while (count > 0) {
      const int64_t step = count / 2;
      if (prefix(first + step) < target) {
        first += step + 1;
        count -= step + 1;
      } else {
        count = step;
      }
    }
    // ... or the one before it, when that lands closer to the target.
    if (first > lo && target - prefix(first - 1) < prefix(first) - target) --first;
    if (first >= num_bags) break;
    bounds.push_back(first);
  }
  bounds.push_back(num_bags);
  return bounds;
}

}  // namespace

std::vector<int64_t> partition_bags(const OffsetsView& offsets, int64_t num_bags,
                                    int64_t num_indices, int64_t dim, int threads,
                                    const PartitionOptions& options) {
  if (num_bags <= 0) return {0};
  const BagWork work(offsets, num_bags, num_indices, dim, options.bag_overhead);
  return guided_bounds(num_bags, work.total(), [&](int64_t b) { return work.prefix(b); }, threads, options);
}

std::pair<int64_t, int64_t> check_part(const OffsetsView& offsets, int64_t num_bags, int64_t num_indices,
                                       int64_t check_end, int64_t bag_begin, int64_t bag_end) {
  const auto position = [&](int64_t b) {
    if (b == 0) return int64_t{0};
    if (b >= num_bags) return check_end;
    return std::min(bag_start(offsets, b, num_indices), check_end);
  };
  return {position(bag_begin), position(bag_end)};
}

BagSchedule::BagSchedule(const OffsetsView& offsets, int64_t num_bags, int64_t num_indices,
                         int64_t dim, const PartitionOptions& options)
    : offsets_(offsets), num_bags_(num_bags), num_indices_(num_indices) {
  if (num_bags <= 1) return;  // nothing to split: no arena, no task, no allocation
  const int threads = engine_threads();
  if (threads <= 1) return;
  const BagWork work(offsets, num_bags, num_indices, dim, options.bag_overhead);
  if (work.total() < 2.0 * static_cast<double>(options.min_chunk_work)) return;  // tiny call
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
  return tasks_->run(
      check_end > 0 ? bounds_.size() - 1 : 0,
      [&](size_t k) {
        const auto [begin, end] = check_part(offsets_, num_bags_, num_indices_, check_end, bounds_[k], bounds_[k + 1]);
        return begin >= end || check(begin, end);
      },
      [&](size_t k) { body(bounds_[k], bounds_[k + 1]); });
}

GroupSchedule::GroupSchedule(std::span<const GroupMember> members, const PartitionOptions& options) {
  // The members' bags end to end: global bag g is bag g - first[m] of the member m whose range
  // holds it, and the work before it is base[m] plus that member's own prefix.
  std::vector<BagWork> works;
  std::vector<int64_t> first{0};
  std::vector<double> base{0.0};
  works.reserve(members.size());
  for (const GroupMember& m : members) {
    works.emplace_back(m.offsets, m.num_bags, m.num_indices, m.dim, options.bag_overhead);
    first.push_back(first.back() + std::max<int64_t>(m.num_bags, 0));
    base.push_back(base.back() + works.back().total());
  }
  const int64_t total_bags = first.back();
  const double total = base.back();
  const int threads = engine_threads();
  const bool inline_run = threads <= 1 || total < 2.0 * static_cast<double>(options.min_chunk_work);
  const auto member_of = [&](int64_t g) {  // the member holding global bag g (g < total_bags)
    return static_cast<size_t>(std::upper_bound(first.begin(), first.end(), g) - first.begin() - 1);
  };
  const auto prefix = [&](int64_t g) {
    if (g >= total_bags) return total;
    const size_t m = member_of(g);
    return base[m] + works[m].prefix(g - first[m]);
  };
  const std::vector<int64_t> bounds =
      inline_run ? std::vector<int64_t>{0, total_bags} : guided_bounds(total_bags, total, prefix, threads, options);
  for (size_t c = 0; c + 1 < bounds.size(); ++c)
    for (int64_t g = bounds[c]; g < bounds[c + 1];) {
      const size_t m = member_of(g);
      const int64_t end = std::min(bounds[c + 1], first[m + 1]);
      bodies_.push_back({m, g - first[m], end - first[m]});
      g = end;
    }
  // The checks: one per body piece (the positions its bags read, as BagSchedule's gates), and
  // the whole range of a member without bags.
  for (const Piece& p : bodies_) {
    const GroupMember& m = members[p.member];
    if (m.check_end <= 0) continue;
    const auto [begin, end] = check_part(m.offsets, m.num_bags, m.num_indices, m.check_end, p.begin, p.end);
    if (begin < end) checks_.push_back({p.member, begin, end});
  }
  for (size_t m = 0; m < members.size(); ++m)
    if (members[m].num_bags <= 0 && members[m].check_end > 0) checks_.push_back({m, 0, members[m].check_end});
  if (!inline_run && bodies_.size() > 1) tasks_.emplace(bodies_.size());
}

bool GroupSchedule::run(GroupCheckFn check, GroupBodyFn body) {
  const auto run_check = [&](size_t k) { return check(checks_[k].member, checks_[k].begin, checks_[k].end); };
  const auto run_body = [&](size_t k) { body(bodies_[k].member, bodies_[k].begin, bodies_[k].end); };
  if (!tasks_) {
    for (size_t k = 0; k < checks_.size(); ++k)
      if (!run_check(k)) return false;
    for (size_t k = 0; k < bodies_.size(); ++k) run_body(k);
    return true;
  }
  return tasks_->run(checks_.size(), run_check, run_body);
}

void parallel_for_bags(const OffsetsView& offsets, int64_t num_bags, int64_t num_indices,
                       int64_t dim, BagRangeFn body, const PartitionOptions& options) {
  BagSchedule(offsets, num_bags, num_indices, dim, options).run(body);
}

}  // namespace shapejit::rt

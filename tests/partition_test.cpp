// Bag partitioning and the engine arena: chunks cover every bag exactly once, are balanced by
// work (not bag count) also for power-law bag lengths, small calls stay on the calling thread,
// and resizing the engine is safe while other threads run.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <oneapi/tbb/info.h>

#include "runtime/engine/engine_arena.hpp"
#include "runtime/engine/partition.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"
#include "support/embag_cases.hpp"

namespace {

using shapejit::DType;
using shapejit::rt::OffsetsView;
using shapejit::rt::PartitionOptions;

// Offsets of bags with the given lengths (len(offsets) == bags; the last bag ends at N).
struct Bags {
  std::vector<int64_t> offsets;
  int64_t n = 0;
  OffsetsView view() const { return {offsets.data(), DType::kI64, int64_t(offsets.size())}; }
  int64_t count() const { return int64_t(offsets.size()); }
  int64_t length(int64_t b) const {
    return (b + 1 < count() ? offsets[size_t(b + 1)] : n) - offsets[size_t(b)];
  }
};

Bags bags_of(const std::vector<int64_t>& lengths) {
  Bags b;
  for (int64_t len : lengths) {
    b.offsets.push_back(b.n);
    b.n += len;
  }
  return b;
}

std::vector<int64_t> power_law_lengths(std::mt19937_64& rng, int64_t bags) {
  std::vector<int64_t> v;
  std::uniform_real_distribution<double> u(1e-4, 1.0);
  for (int64_t b = 0; b < bags; ++b)
    v.push_back(static_cast<int64_t>(std::min(5e4, std::pow(u(rng), -1.0 / 1.1))) - 1);
  return v;
}

// Restores the engine's default size when a test ends.
struct EngineThreads {
  explicit EngineThreads(int n) { shapejit::rt::set_engine_threads(n); }
  ~EngineThreads() { shapejit::rt::set_engine_threads(0); }
};

// Checks the invariants of one partition for `threads` and returns its chunk count: every bag
// in exactly one non-empty chunk, each chunk within one bag's work of its target
// max(rest / threads, min_chunk_work), the last one no more than its target.
int64_t check_partition(const Bags& bags, int64_t dim, int threads, const PartitionOptions& opt) {
  const std::vector<int64_t> bounds =
      shapejit::rt::partition_bags(bags.view(), bags.count(), bags.n, dim, threads, opt);
  REQUIRE(bounds.size() >= 2);
  CHECK(bounds.front() == 0);
  CHECK(bounds.back() == bags.count());
  for (size_t k = 1; k < bounds.size(); ++k) REQUIRE(bounds[k] > bounds[k - 1]);  // no empty chunk
  const int64_t chunks = int64_t(bounds.size()) - 1;
  if (threads <= 1) CHECK(chunks == 1);

  const shapejit::rt::BagWork work(bags.view(), bags.count(), bags.n, dim, opt.bag_overhead);
  double max_bag = 0;
  for (int64_t b = 0; b < bags.count(); ++b) max_bag = std::max(max_bag, work.range(b, b + 1));
  for (int64_t k = 0; k < chunks && threads > 1; ++k) {
    const double rest = work.range(bounds[size_t(k)], bags.count());
    const double target = std::max(rest / threads, double(opt.min_chunk_work));
    const double w = work.range(bounds[size_t(k)], bounds[size_t(k + 1)]);
    CAPTURE(k);
    if (k + 1 == chunks) {
      CHECK(w <= target + max_bag + 1e-6);
    } else {
      CHECK(std::fabs(w - target) <= max_bag + 1e-6);
    }
  }
  return chunks;
}

// Two threads of equal speed claim the chunks in order, the second starting `late` work units
// after the first; returns when each finishes.
std::pair<double, double> simulate_two(const shapejit::rt::BagWork& work,
                                       const std::vector<int64_t>& bounds, double late) {
  double t[2] = {0, late};
  for (size_t k = 0; k + 1 < bounds.size(); ++k) {
    const int who = t[0] <= t[1] ? 0 : 1;  // the thread that is free first claims next
    t[who] += work.range(bounds[k], bounds[k + 1]);
  }
  return {t[0], t[1]};
}

}  // namespace

TEST_CASE("partition: the work of a bag is (length + 1) * D + overhead") {
  const Bags bags = bags_of({3, 0, 5});
  const shapejit::rt::BagWork w(bags.view(), 3, bags.n, 4, 16);
  CHECK(w.range(0, 1) == 4 * 4 + 16);
  CHECK(w.range(1, 2) == 1 * 4 + 16);
  CHECK(w.range(2, 3) == 6 * 4 + 16);
  CHECK(w.total() == (8 + 3) * 4 + 3 * 16);
  // include_last_offset: offsets[B] ends the last bag.
  const std::vector<int32_t> off32{0, 2, 7};
  const shapejit::rt::BagWork last(OffsetsView{off32.data(), DType::kI32, 3}, 2, 9, 1, 0);
  CHECK(last.total() == 7 + 2);
}

TEST_CASE("partition: chunks cover [0, B) exactly once and follow their targets, incl. power-law bags") {
  const uint64_t seed = shapejit::test::test_seed(0x5eed);
  MESSAGE("seed " << seed);
  std::mt19937_64 rng(seed);
  PartitionOptions opt;
  opt.min_chunk_work = 256;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t count = std::uniform_int_distribution<int64_t>(1, 3000)(rng);
    std::vector<int64_t> lengths;
    const int shape = trial % 4;
    if (shape == 0) lengths.assign(size_t(count), 32);
    if (shape == 1) lengths = power_law_lengths(rng, count);
    if (shape == 2) lengths.assign(size_t(count), 0);  // empty bags still cost something
    if (shape == 3) {                                  // one giant bag among small ones
      lengths.assign(size_t(count), 1);
      lengths[size_t(count / 2)] = 100000;
    }
    const int64_t dim = std::uniform_int_distribution<int64_t>(1, 300)(rng);
    const int threads = std::uniform_int_distribution<int>(1, 64)(rng);
    CAPTURE(trial);
    CAPTURE(count);
    CAPTURE(dim);
    CAPTURE(threads);
    check_partition(bags_of(lengths), dim, threads, opt);
  }
}

TEST_CASE("partition: few chunks, and two threads claiming them finish together, one late or not") {
  std::mt19937_64 rng(shapejit::test::test_seed(42));
  for (const bool power_law : {false, true}) {
    const Bags bags = power_law ? bags_of(power_law_lengths(rng, 4096))
                                : bags_of(std::vector<int64_t>(4096, 32));
    PartitionOptions opt;
    opt.min_chunk_work = 16 * 1024;
    const int64_t chunks = check_partition(bags, 128, 2, opt);
    const std::vector<int64_t> bounds =
        shapejit::rt::partition_bags(bags.view(), bags.count(), bags.n, 128, 2, opt);
    const shapejit::rt::BagWork work(bags.view(), bags.count(), bags.n, 128, opt.bag_overhead);
    double max_bag = 0;
    for (int64_t b = 0; b < bags.count(); ++b) max_bag = std::max(max_bag, work.range(b, b + 1));
    // Halving a chunk: about log2(total / min) chunks, not total / min.
    const double expected = std::log2(work.total() / double(opt.min_chunk_work)) + 2;
    CAPTURE(power_law);
    MESSAGE(chunks << " chunks for " << work.total() << " floats of work");
    CHECK(double(chunks) <= expected);
    // However late the second thread starts (up to all the work), the two end within one
    // small chunk (the minimum, or the largest bag) of each other, or the late one runs nothing.
    for (const double late_share : {0.0, 0.01, 0.1, 0.3, 0.6}) {
      const auto [a, b] = simulate_two(work, bounds, late_share * work.total());
      CAPTURE(late_share);
      const double idle_end = late_share * work.total();
      if (b > idle_end) CHECK(std::fabs(a - b) <= std::max(double(opt.min_chunk_work), max_bag) * 2 + 1e-6);
    }
  }
}

TEST_CASE("partition: the minimum grain bounds the chunks; one thread or no bags give no split") {
  const Bags bags = bags_of(std::vector<int64_t>(100, 10));  // work 100 * (11 * 8 + 16)
  PartitionOptions opt;
  opt.min_chunk_work = 1000000;
  CHECK(shapejit::rt::partition_bags(bags.view(), 100, bags.n, 8, 2, opt) == std::vector<int64_t>{0, 100});
  opt.min_chunk_work = 100 * (11 * 8 + 16) / 4;  // a quarter of the work
  CHECK(shapejit::rt::partition_bags(bags.view(), 100, bags.n, 8, 64, opt) ==
        std::vector<int64_t>{0, 25, 50, 75, 100});
  CHECK(shapejit::rt::partition_bags(bags.view(), 100, bags.n, 8, 1, opt) == std::vector<int64_t>{0, 100});
  CHECK(shapejit::rt::partition_bags(bags.view(), 0, 0, 8, 64, opt) == std::vector<int64_t>{0});
  // Above the minimum, 2 threads: half of what is left each time (the nearest bag boundary).
  opt.min_chunk_work = 1;
  const auto halving = shapejit::rt::partition_bags(bags.view(), 100, bags.n, 8, 2, opt);
  CHECK(std::vector<int64_t>(halving.begin(), halving.begin() + 4) == std::vector<int64_t>{0, 50, 75, 88});
}

TEST_CASE("parallel_for_bags: a small call runs once, inline, without the arena") {
  EngineThreads engine(4);
  const Bags bags = bags_of(std::vector<int64_t>(64, 4));  // 64 * (5 * 16 + 16) floats of work
  int calls = 0;
  std::thread::id where;
  shapejit::rt::parallel_for_bags(bags.view(), 64, bags.n, 16, [&](int64_t b, int64_t e) {
    ++calls;
    where = std::this_thread::get_id();
    CHECK(b == 0);
    CHECK(e == 64);
  });
  CHECK(calls == 1);
  CHECK(where == std::this_thread::get_id());
  // One engine thread keeps even a large call inline.
  shapejit::rt::set_engine_threads(1);
  const Bags big = bags_of(std::vector<int64_t>(4096, 64));
  calls = 0;
  shapejit::rt::parallel_for_bags(big.view(), 4096, big.n, 128, [&](int64_t, int64_t) { ++calls; });
  CHECK(calls == 1);
}

TEST_CASE("parallel_for_bags: every bag exactly once for 1-4 threads, power-law lengths") {
  std::mt19937_64 rng(shapejit::test::test_seed(7));
  const Bags bags = bags_of(power_law_lengths(rng, 5000));
  for (int threads = 1; threads <= 4; ++threads) {
    EngineThreads engine(threads);
    CHECK(shapejit::rt::engine_threads() == threads);
    std::vector<std::atomic<int>> seen(size_t(bags.count()));
    std::atomic<int> chunks{0};
    PartitionOptions opt;
    opt.min_chunk_work = 1024;
    shapejit::rt::parallel_for_bags(
        bags.view(), bags.count(), bags.n, 32,
        [&](int64_t b, int64_t e) {
          ++chunks;
          for (int64_t k = b; k < e; ++k) seen[size_t(k)].fetch_add(1);
        },
        opt);
    CAPTURE(threads);
    CHECK(std::all_of(seen.begin(), seen.end(), [](const std::atomic<int>& s) { return s.load() == 1; }));
    const auto bounds =
        shapejit::rt::partition_bags(bags.view(), bags.count(), bags.n, 32, threads, opt);
    CHECK(chunks.load() == (threads == 1 ? 1 : int(bounds.size()) - 1));
    if (threads > 1) CHECK(chunks.load() > 1);
  }
}

TEST_CASE("parallel_for_bags: an exception in the body reaches the caller") {
  EngineThreads engine(2);
  const Bags bags = bags_of(std::vector<int64_t>(1000, 100));
  CHECK_THROWS_AS(shapejit::rt::parallel_for_bags(bags.view(), 1000, bags.n, 64,
                                                  [&](int64_t b, int64_t) {
                                                    if (b > 0) throw shapejit::Error(shapejit::Status::kInternalError, "boom");
                                                  }),
                  shapejit::Error);
}

TEST_CASE("group schedule: every member's bags exactly once, its checks tile [0, check_end) first") {
  std::mt19937_64 rng(shapejit::test::test_seed(11));
  // Members of power-law bags, one without bags but with positions to check, one tiny.
  std::vector<Bags> bags{bags_of(power_law_lengths(rng, 3000)), bags_of({}), bags_of({3}),
                         bags_of(power_law_lengths(rng, 800))};
  bags[1].n = 5;
  std::vector<shapejit::rt::GroupMember> members;
  for (const Bags& b : bags) members.push_back({b.view(), b.count(), b.n, 16, b.n});
  members[2].check_end = 0;  // a member whose indices were checked already
  for (int threads = 1; threads <= 3; ++threads) {
    EngineThreads engine(threads);
    PartitionOptions opt;
    opt.min_chunk_work = 2048;
    for (bool fail : {false, true}) {
      std::vector<std::vector<std::atomic<int>>> seen, checked;
      for (const Bags& b : bags) {
        seen.emplace_back(size_t(b.count()));
        checked.emplace_back(size_t(b.n));
      }
      std::atomic<bool> body_ran{false}, body_before_check_end{false};
      std::atomic<int64_t> positions_left{0};
      for (const auto& m : members) positions_left += m.check_end;
      shapejit::rt::GroupSchedule schedule(members, opt);
      const bool ok = schedule.run(
          [&](size_t m, int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) checked[m][size_t(i)].fetch_add(1);
            positions_left -= end - begin;
            return !(fail && m == 3 && end == bags[3].n);  // the last member's last part fails
          },
          [&](size_t m, int64_t begin, int64_t end) {
            body_ran = true;
            if (positions_left.load() != 0) body_before_check_end = true;
            for (int64_t b = begin; b < end; ++b) seen[m][size_t(b)].fetch_add(1);
          });
      CAPTURE(threads);
      CAPTURE(fail);
      CHECK(ok == !fail);
      CHECK(!body_before_check_end);
      if (fail) {
        CHECK(!body_ran);
        continue;
      }
      for (size_t m = 0; m < bags.size(); ++m) {
        CAPTURE(m);
        CHECK(std::all_of(seen[m].begin(), seen[m].end(), [](const std::atomic<int>& s) { return s.load() == 1; }));
        const int want = members[m].check_end > 0 ? 1 : 0;
        CHECK(std::all_of(checked[m].begin(), checked[m].end(),
                          [&](const std::atomic<int>& s) { return s.load() == want; }));
      }
    }
  }
}

TEST_CASE("engine: thread count through the C and C++ API, defaults and limits") {
  const int def = shapejit::rt::default_num_threads();
  CHECK(def >= 1);
  CHECK(shapejit_set_num_threads(3) == SHAPEJIT_OK);
  CHECK(shapejit_get_num_threads() == 3);
  CHECK(shapejit::num_threads() == 3);
  shapejit::set_num_threads(-5);
  CHECK(shapejit::num_threads() == def);
  CHECK(shapejit_set_num_threads(shapejit::rt::kMaxEngineThreads + 1) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("1025") != std::string::npos);
  CHECK(shapejit::num_threads() == def);  // a rejected size changes nothing
  CHECK_THROWS_AS(shapejit::set_num_threads(100000), shapejit::Error);
  CHECK(shapejit_set_num_threads(0) == SHAPEJIT_OK);
  CHECK(shapejit_get_num_threads() == def);
  if (std::getenv("SHAPEJIT_NUM_THREADS") == nullptr)
    CHECK(def == std::max(1, tbb::info::default_concurrency()));
}

TEST_CASE("engine: resizing while other threads run calls is safe and results stay whole") {
  std::mt19937_64 rng(shapejit::test::test_seed(11));
  const Bags bags = bags_of(power_law_lengths(rng, 3000));
  std::atomic<bool> stop{false};
  std::atomic<int64_t> bad{0}, calls{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      while (!stop.load()) {
        std::vector<int> seen(size_t(bags.count()), 0);
        std::mutex m;
        PartitionOptions opt;
        opt.min_chunk_work = 512;
        shapejit::rt::parallel_for_bags(
            bags.view(), bags.count(), bags.n, 16,
            [&](int64_t b, int64_t e) {
              std::lock_guard lock(m);
              for (int64_t k = b; k < e; ++k) ++seen[size_t(k)];
            },
            opt);
        if (!std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; })) ++bad;
        ++calls;
      }
    });
  }
  for (int round = 0; round < 200; ++round) shapejit::rt::set_engine_threads(1 + round % 4);
  while (calls.load() < 30) std::this_thread::yield();
  stop = true;
  for (auto& t : callers) t.join();
  shapejit::rt::set_engine_threads(0);
  MESSAGE(calls.load() << " calls ran during 200 resizes");
  CHECK(bad.load() == 0);
}

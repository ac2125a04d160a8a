// Thread safety of the C ABI: more threads than cores call embedding_bag at once on a mix of
// shapes already compiled and shapes compiled under the contention itself, run and build linear
// groups, and read each its own last error, while another thread keeps resizing the engine and
// moving the code-memory bound. Every result must equal the single-threaded reference. CI runs
// this file again under ThreadSanitizer (tools/test.sh, build-tsan/; see tests/tsan.supp).
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ref/embedding_bag.hpp"
#include "shapejit/shapejit.h"
#include "support/embag_cases.hpp"

namespace {

using shapejit::test::EmbagCase;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;

constexpr uint64_t kDefaultSeed = 0x57E55;
constexpr int kWorkers = 12;  // the machines this runs on have 2-4 cores

// SHAPEJIT_STRESS_ROUNDS overrides the calls per worker (sanitizer builds use fewer).
int rounds() {
  if (const char* text = std::getenv("SHAPEJIT_STRESS_ROUNDS"); text && *text) return std::max(1, std::atoi(text));
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  return 80;
#else
  return 200;
#endif
}

// A case with its single-threaded reference outputs.
struct Expected {
  EmbagCase c;
  shapejit_embedding_bag_shapes shapes{};
  std::unique_ptr<GuardedOutputs> want;
};

std::string compare(const Expected& e, const GuardedOutputs& got) {
  if (std::string g = got.check_guards(); !g.empty()) return g;
  for (EmbagOutput which : shapejit::test::kAllEmbagOutputs) {
    const auto x = got.bytes(which), y = e.want->bytes(which);
    if (std::memcmp(x.data(), y.data(), x.size()) == 0) continue;
    if (which != EmbagOutput::kOutput) return std::string(shapejit::test::output_name(which)) + " differs";
    for (size_t i = 0; i < x.size() / 4; ++i) {
      float p, q;
      std::memcpy(&p, x.data() + i * 4, 4);
      std::memcpy(&q, y.data() + i * 4, 4);
      if (std::memcmp(&p, &q, 4) != 0 && !(std::isnan(p) && std::isnan(q)))
        return "output[" + std::to_string(i) + "] = " + std::to_string(p) + ", reference " + std::to_string(q);
    }
  }
  return "";
}

std::vector<Expected> make_cases(uint64_t seed, int64_t count, bool large = false) {
  shapejit::test::EmbagCaseOptions o;
  o.max_dim = 300;
  o.max_table_elements = 1 << 14;
  o.max_indices = large ? 4096 : 512;
  o.max_output_elements = large ? 1 << 16 : 1 << 14;
  std::vector<Expected> v;
  for (int64_t k = 0; k < count; ++k) {
    Expected e;
    e.c = shapejit::test::make_embag_case(seed, k, o);
    const shapejit_embedding_bag_args a = e.c.to_args();
    e.shapes = shapejit::ref::embedding_bag_shapes(a);
    e.want = std::make_unique<GuardedOutputs>(e.shapes, 0x5A);
    shapejit::ref::embedding_bag(a, e.want->data(EmbagOutput::kOutput), e.want->data(EmbagOutput::kOffset2bag),
                                 e.want->data(EmbagOutput::kBagSize), e.want->data(EmbagOutput::kMaxIndices));
    v.push_back(std::move(e));
  }
  return v;
}

// Failures from worker threads, reported on the main thread (doctest is not thread-safe).
class Failures {
 public:
  void add(std::string text) {
    std::lock_guard lock(mutex_);
    if (texts_.size() < 5) texts_.push_back(std::move(text));
    ++count_;
  }
  void report() {
    for (const auto& t : texts_) FAIL_CHECK(t);
    CHECK(count_ == 0);
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> texts_;
  int count_ = 0;
};

// A small linear group (two parts sharing one input) and its single-threaded output.
struct Group {
  std::vector<float> w, b, x;
  shapejit_linear_part_desc parts[2]{};
  shapejit_linear_group_desc desc{};
  int64_t m = 19, k = 37, n0 = 24, n1 = 13;

  Group() {
    w.resize(size_t((n0 + n1) * k));
    b.resize(size_t(n0 + n1));
    x.resize(size_t(m * k));
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 7 % 13) - 6) / 8.0f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 5) - 2);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 5 % 11) - 5) / 4.0f;
    parts[0].row_begin = 0;
    parts[0].rows = n0;
    parts[0].activation = SHAPEJIT_ACTIVATION_RELU;
    parts[1].row_begin = n0;
    parts[1].rows = n1;
    parts[1].activation = SHAPEJIT_ACTIVATION_GELU;
    parts[1].has_scale = 1;
    parts[1].scale = 0.25f;
    desc.form = SHAPEJIT_WEIGHTS_PACKED;
    desc.weight = w.data();
    desc.weight_rows = n0 + n1;
    desc.k = k;
    desc.weight_stride = k;
    desc.bias = b.data();
    desc.bias_len = n0 + n1;
    desc.parts = parts;
    desc.num_parts = 2;
  }

  // Runs `group` into y0/y1; returns the status.
  shapejit_status run(const shapejit_linear_group* group, std::vector<float>& y0, std::vector<float>& y1) const {
    y0.assign(size_t(m * n0), -7.0f);
    y1.assign(size_t(m * n1), -7.0f);
    const shapejit_linear_group_io io[2] = {{x.data(), m, k, k, y0.data(), n0, 0, 0},
                                            {x.data(), m, k, k, y1.data(), n1, 0, 0}};
    return shapejit_linear_group_run(group, io, 2);
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST_CASE("stress: many threads call the C ABI at once (new and cached shapes, resizes, limits)") {
  const uint64_t seed = shapejit::test::test_seed(kDefaultSeed);
  const int per_worker = rounds();
  MESSAGE("stress: seed " << seed << " (SHAPEJIT_TEST_SEED replays), " << kWorkers << " workers x " << per_worker
                          << " calls, hardware threads " << std::thread::hardware_concurrency());
  // Half the shapes are compiled before the threads start; the rest first meet the cache
  // under contention. The seed mixes in a counter so repeated runs in one process see new keys.
  static std::atomic<uint64_t> run_counter{0};
  std::vector<Expected> cases = make_cases(seed + 1000003 * run_counter++, 48);
  REQUIRE(shapejit_set_num_threads(1) == SHAPEJIT_OK);
  for (size_t i = 0; i < cases.size() / 2; ++i) {
    GuardedOutputs out(cases[i].shapes, 0xCD);
    REQUIRE(out.run(cases[i].c.to_args()) == SHAPEJIT_OK);
    REQUIRE_MESSAGE(compare(cases[i], out).empty(), cases[i].c.describe());
  }
  const Group g;
  shapejit_linear_group* shared_group = nullptr;
  REQUIRE(shapejit_linear_group_create(&g.desc, &shared_group) == SHAPEJIT_OK);
  std::vector<float> want0, want1;
  REQUIRE(g.run(shared_group, want0, want1) == SHAPEJIT_OK);

  Failures failures;
  std::atomic<int> running{kWorkers};
  std::atomic<int64_t> embag_calls{0}, group_runs{0}, error_checks{0}, changes{0};
  // The chaos thread: resizes the engine and moves the code bound while the workers run.
  std::thread chaos([&] {
    std::mt19937 rng{unsigned(seed)};
    const int32_t sizes[] = {1, 2, 3, 4, 8, 0};
    while (running.load() > 0) {
      if (shapejit_set_num_threads(sizes[rng() % 6]) != SHAPEJIT_OK) failures.add("set_num_threads failed");
      if (rng() % 4 == 0 && shapejit_set_code_memory_limit(rng() % 2 ? 0 : -1) != SHAPEJIT_OK)
        failures.add("set_code_memory_limit failed");
      shapejit_kernel_cache_stats s{};
      if (shapejit_get_kernel_cache_stats(&s) != SHAPEJIT_OK || s.kernels < 0 || s.code_bytes < 0)
        failures.add("get_kernel_cache_stats failed");
      if (shapejit_get_num_threads() < 1) failures.add("get_num_threads < 1");
      ++changes;
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> workers;
  for (int t = 0; t < kWorkers; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng{unsigned(seed) * 31u + unsigned(t)};
      for (int r = 0; r < per_worker; ++r) {
        const int what = int(rng() % 10);
        if (what < 7) {  // an embedding bag, cached or new
          const Expected& e = cases[rng() % cases.size()];
          GuardedOutputs out(e.shapes, 0xCD, /*null_when_empty=*/r % 2 == 0);
          if (out.run(e.c.to_args()) != SHAPEJIT_OK) {
            failures.add(std::string("embedding_bag failed: ") + shapejit_last_error() + "\n" + e.c.describe());
          } else if (std::string diff = compare(e, out); !diff.empty()) {
            failures.add("thread " + std::to_string(t) + ": " + diff + "\n" + e.c.describe());
          }
          ++embag_calls;
        } else if (what < 9) {  // the shared group, or a group of this thread's own
          std::vector<float> y0, y1;
          shapejit_linear_group* own = nullptr;
          const bool fresh = what == 8;
          if (fresh && shapejit_linear_group_create(&g.desc, &own) != SHAPEJIT_OK) {
            failures.add(std::string("linear_group_create failed: ") + shapejit_last_error());
            continue;
          }
          if (g.run(fresh ? own : shared_group, y0, y1) != SHAPEJIT_OK)
            failures.add(std::string("linear_group_run failed: ") + shapejit_last_error());
          else if (!same_bits(y0, want0) || !same_bits(y1, want1))
            failures.add("thread " + std::to_string(t) + ": a linear group's output differs from the single-threaded run");
          shapejit_linear_group_destroy(own);
          ++group_runs;
        } else {  // an error naming this thread's own bad index: last_error is per thread
          const int64_t bad = 1000 + t * 100 + r;
          const std::vector<int64_t> idx = {0, bad}, off = {0};
          const float table[4] = {};
          shapejit_embedding_bag_args a{};
          a.weight = table;
          a.num_rows = 2;
          a.dim = 2;
          a.row_stride = 2;
          a.indices = idx.data();
          a.index_dtype = SHAPEJIT_I64;
          a.num_indices = 2;
          a.offsets = off.data();
          a.offset_dtype = SHAPEJIT_I64;
          a.num_offsets = 1;
          float out[2] = {};
          if (shapejit_embedding_bag(&a, out, nullptr, nullptr, nullptr) != SHAPEJIT_INVALID_ARGUMENT)
            failures.add("an out-of-range index was not rejected");
          std::this_thread::yield();  // let other threads set their own errors in between
          if (std::string(shapejit_last_error()).find(std::to_string(bad)) == std::string::npos)
            failures.add("thread " + std::to_string(t) + ": last_error lost its message: " + shapejit_last_error());
          ++error_checks;
        }
      }
      --running;
    });
  }
  for (auto& w : workers) w.join();
  chaos.join();
  shapejit_linear_group_destroy(shared_group);
  shapejit_set_num_threads(0);
  shapejit_set_code_memory_limit(-1);
  MESSAGE("stress: " << embag_calls.load() << " embedding bags, " << group_runs.load() << " linear-group runs, " << error_checks.load()
                     << " per-thread error checks, " << changes.load() << " engine resizes / limit changes meanwhile");
  failures.report();
}

// The generic kernel is C++ (instrumented), unlike generated code: with the code bound at 0,
// calls large enough to be split run their chunks on the engine's TBB workers, so a missing
// happens-before between a worker's writes and the caller's reads would show up here.
TEST_CASE("stress: generic kernels split across the engine arena, from many threads at once") {
  const uint64_t seed = shapejit::test::test_seed(kDefaultSeed) ^ 0x6E6E;
  std::vector<Expected> cases = make_cases(seed, 16, /*large=*/true);
  int64_t split = 0;
  for (const Expected& e : cases) split += int64_t(e.c.indices.size()) * e.c.dim >= 2 * 32 * 1024;
  REQUIRE(shapejit_set_code_memory_limit(0) == SHAPEJIT_OK);
  REQUIRE(shapejit_set_num_threads(4) == SHAPEJIT_OK);
  Failures failures;
  std::vector<std::thread> workers;
  const int per_worker = std::max(4, rounds() / 8);
  for (int t = 0; t < 8; ++t) {
    workers.emplace_back([&, t] {
      for (int r = 0; r < per_worker; ++r) {
        const Expected& e = cases[size_t(t * 7 + r) % cases.size()];
        GuardedOutputs out(e.shapes, 0xCD);
        if (out.run(e.c.to_args()) != SHAPEJIT_OK)
          failures.add(std::string("embedding_bag failed: ") + shapejit_last_error());
        else if (std::string diff = compare(e, out); !diff.empty())
          failures.add("thread " + std::to_string(t) + ": " + diff + "\n" + e.c.describe());
      }
    });
  }
  for (auto& w : workers) w.join();
  shapejit_set_code_memory_limit(-1);
  shapejit_set_num_threads(0);
  MESSAGE("stress (generic): 8 threads x " << per_worker << " calls over 16 cases, " << split
                                            << " of them large enough to be split across the arena");
  failures.report();
}

}  // namespace

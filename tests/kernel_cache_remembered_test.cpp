// The calling thread's last kernel in front of the cache (EmbagKernelCache::get_remembered,
// rt::embag_kernel_for): it answers repeated lookups without the map, and never outlives what it
// remembers: another or a re-created cache, another key (a capped ISA is another key), a fallback
// at the code bound; and other threads and thread counts see their own correct kernels.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "jit/embag_codegen.hpp"
#include "ref/embedding_bag.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/engine/isa_select.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "runtime/embag/validate.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"

namespace {

using shapejit::jit::EmbagKernelArgs;
using shapejit::jit::EmbagKernelFn;
using shapejit::jit::EmbagKey;
using shapejit::jit::GeneratedEmbagKernel;
using shapejit::jit::Isa;
using shapejit::rt::EmbagKernelCache;

void kernel_one(const EmbagKernelArgs*) {}
void kernel_two(const EmbagKernelArgs*) {}

// A compiler that counts its calls and answers every key with one function.
struct CountingCompiler {
  std::atomic<int> calls{0};
  EmbagKernelFn fn;
  explicit CountingCompiler(EmbagKernelFn f) : fn(f) {}
  shapejit::rt::EmbagCompileFn compile() {
    return [this](const EmbagKey&, asmjit::JitRuntime&, const shapejit::jit::CodeAdmission& admit) {
      ++calls;
      if (!admit(100)) return GeneratedEmbagKernel{nullptr, 100};
      return GeneratedEmbagKernel{fn, 100};
    };
  }
};

std::atomic<int> g_resolves{0};
EmbagKey counting_resolve(const EmbagKey& k) {
  ++g_resolves;
  return k;
}

EmbagKey avx2_key(int64_t dim) {
  EmbagKey k;
  k.isa = Isa::kAvx2;
  k.dim = dim;
  return k;
}

}  // namespace

TEST_CASE("remembered kernel: a repeated lookup skips resolve and the map but counts its hit") {
  CountingCompiler compiler(&kernel_one);
  EmbagKernelCache cache(compiler.compile());
  g_resolves = 0;
  const auto first = cache.get_remembered(avx2_key(8), counting_resolve);
  for (int i = 0; i < 5; ++i) CHECK((cache.get_remembered(avx2_key(8), counting_resolve).fn() == first.fn()));
  CHECK((first.fn() == &kernel_one));
  CHECK(compiler.calls == 1);
  CHECK(g_resolves == 1);
  CHECK(cache.stats().hits == 5);  // as five get() calls would count
  // Another key is another lookup; coming back to the first one is one more.
  CHECK(cache.get_remembered(avx2_key(16), counting_resolve).key().dim == 16);
  CHECK(cache.get_remembered(avx2_key(8), counting_resolve).key().dim == 8);
  CHECK(g_resolves == 3);
  CHECK(compiler.calls == 2);
}

TEST_CASE("remembered kernel: a re-created cache at the same address never serves the old kernel") {
  CountingCompiler one(&kernel_one), two(&kernel_two);
  std::optional<EmbagKernelCache> cache;
  cache.emplace(one.compile());
  const void* address = &*cache;
  CHECK((cache->get_remembered(avx2_key(8), counting_resolve).fn() == &kernel_one));
  cache.reset();  // the cache and its code are gone ("cleared")
  cache.emplace(two.compile());
  REQUIRE(&*cache == address);  // same storage: only the epoch tells them apart
  CHECK((cache->get_remembered(avx2_key(8), counting_resolve).fn() == &kernel_two));
  CHECK(two.calls == 1);
  // Two live caches asked in turn each answer with their own kernel.
  EmbagKernelCache other(one.compile());
  for (int i = 0; i < 3; ++i) {
    CHECK((other.get_remembered(avx2_key(8), counting_resolve).fn() == &kernel_one));
    CHECK((cache->get_remembered(avx2_key(8), counting_resolve).fn() == &kernel_two));
  }
}

TEST_CASE("remembered kernel: a generic fallback at the code bound is not remembered") {
  CountingCompiler compiler(&kernel_one);
  EmbagKernelCache cache(compiler.compile(), 0);  // no code fits
  for (int i = 0; i < 3; ++i) CHECK(cache.get_remembered(avx2_key(8), counting_resolve).generic());
  CHECK(cache.stats().generic_fallbacks == 3);  // every lookup counted, none answered from memory
  cache.set_code_limit_bytes(1 << 20);
  const auto compiled = cache.get_remembered(avx2_key(8), counting_resolve);
  CHECK_FALSE(compiled.generic());
  CHECK((compiled.fn() == &kernel_one));
  CHECK(compiler.calls == 1);
}

namespace {

// An f32 sum call on `dim` columns of a 37-row table: 5 bags over 13 indices, or (`bags` > 5)
// that many bags of 32 indices, enough work for the engine to split across its threads.
struct SmallCall {
  std::vector<float> table, out, expected;
  std::vector<int64_t> idx, off, bag_size, max_idx, o2b;
  shapejit_embedding_bag_args a{};
  explicit SmallCall(int64_t dim, uint64_t seed = 5, int64_t bags = 5) {
    std::mt19937_64 rng(seed);
    table.resize(size_t(37 * dim));
    for (float& v : table) v = float(int(rng() % 17) - 8);
    const int64_t n = bags > 5 ? bags * 32 : 13;
    for (int64_t i = 0; i < n; ++i) idx.push_back(int64_t(rng() % 37));
    if (bags > 5)
      for (int64_t b = 0; b < bags; ++b) off.push_back(32 * b);
    else
      off = {0, 2, 2, 7, 9};
    a.weight = table.data();
    a.weight_dtype = SHAPEJIT_F32;
    a.num_rows = 37;
    a.dim = dim;
    a.row_stride = dim;
    a.indices = idx.data();
    a.index_dtype = SHAPEJIT_I64;
    a.num_indices = n;
    a.offsets = off.data();
    a.offset_dtype = SHAPEJIT_I64;
    a.num_offsets = bags;
    a.mode = SHAPEJIT_SUM;
    out.assign(size_t(bags * dim), -1.0f);
    expected.assign(out.size(), -2.0f);
    bag_size.assign(size_t(bags), 0);
    max_idx.assign(size_t(bags), 0);
    o2b.assign(size_t(n), 0);
    std::vector<int64_t> b(static_cast<size_t>(bags)), m(static_cast<size_t>(bags)), o(static_cast<size_t>(n));
    shapejit::ref::embedding_bag(a, expected.data(), o.data(), b.data(), m.data());
  }
  bool run_matches() {
    std::fill(out.begin(), out.end(), -1.0f);
    if (shapejit_embedding_bag(&a, out.data(), o2b.data(), bag_size.data(), max_idx.data()) != SHAPEJIT_OK)
      return false;
    return out == expected;
  }
};

}  // namespace

TEST_CASE("remembered kernel: a capped ISA is another key, through the API's lookup") {
  SmallCall call(24);
  const shapejit::rt::EmbagCallPlan plan = shapejit::rt::plan_embedding_bag(call.a);
  const Isa best = shapejit::rt::selected_isa();
  const auto before = shapejit::rt::embag_kernel_for(plan, best);
  CHECK(call.run_matches());
  {
    shapejit::rt::ScopedIsaOverride cap(Isa::kScalar);
    const auto capped = shapejit::rt::embag_kernel_for(plan, shapejit::rt::selected_isa());
    CHECK(capped.key().isa == Isa::kScalar);
    CHECK(capped.generic());
    CHECK(call.run_matches());
  }
  const auto after = shapejit::rt::embag_kernel_for(plan, shapejit::rt::selected_isa());
  CHECK(after.key() == before.key());
  CHECK((after.fn() == before.fn()));
  CHECK(call.run_matches());
  if (best == Isa::kScalar) MESSAGE("no generator ISA on this host: both lookups are the generic kernel");
}

TEST_CASE("remembered kernel: threads and thread counts each get correct results") {
  const int saved = shapejit_get_num_threads();
  SmallCall narrow(8, 1), wide(40, 2), big(64, 3, 256);
  for (int threads : {1, 2, 1, 3}) {
    REQUIRE(shapejit_set_num_threads(threads) == SHAPEJIT_OK);
    for (int i = 0; i < 3; ++i) {
      CHECK(narrow.run_matches());
      CHECK(big.run_matches());  // split across the engine's threads when it has several
      CHECK(wide.run_matches());
    }
  }
  // Four callers, each alternating two keys (every call replaces its thread's memory).
  std::atomic<int> mismatches{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t)
    pool.emplace_back([&, t] {
      SmallCall a(8 + 8 * t, 10 + uint64_t(t)), b(20 + 4 * t, 20 + uint64_t(t));
      for (int i = 0; i < 200; ++i)
        if (!a.run_matches() || !b.run_matches()) ++mismatches;
    });
  for (auto& th : pool) th.join();
  CHECK(mismatches == 0);
  REQUIRE(shapejit_set_num_threads(saved) == SHAPEJIT_OK);
}

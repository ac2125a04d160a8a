// The kernel cache with an injected compiler: one compilation per key under concurrent askers,
// failures reported and never cached, statistics, the code-memory bound, and handles.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "jit/embag_codegen.hpp"
#include "runtime/embag/embag_generic_kernel.hpp"
#include "runtime/engine/isa_select.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"

namespace {

using shapejit::jit::EmbagKernelArgs;
using shapejit::jit::EmbagKey;
using shapejit::jit::GeneratedEmbagKernel;
using shapejit::jit::Isa;
using shapejit::rt::EmbagKernelCache;

// Stand-in "generated" kernels: C++ functions that leave a mark the test can see.
void kernel_a(const EmbagKernelArgs* a) { static_cast<float*>(a->output)[0] = 1.0f; }
void kernel_b(const EmbagKernelArgs* a) { static_cast<float*>(a->output)[0] = 2.0f; }

EmbagKey key_with_dim(int64_t dim) {
  EmbagKey k;
  k.isa = Isa::kAvx2;
  k.dim = dim;
  return k;
}

// A compiler that counts its calls, can be slowed down, fail on demand and report any size.
struct FakeCompiler {
  std::atomic<int> calls{0};
  std::atomic<int> fail_next{0};  // how many of the next calls throw
  std::chrono::milliseconds delay{0};
  size_t code_bytes = 1000;

  shapejit::rt::EmbagCompileFn fn() {
    return [this](const EmbagKey& key, asmjit::JitRuntime&,
                  const shapejit::jit::CodeAdmission& admit) -> GeneratedEmbagKernel {
      ++calls;
      std::this_thread::sleep_for(delay);
      if (fail_next.load() > 0) {
        --fail_next;
        throw shapejit::Error(shapejit::Status::kUnsupported, "fake: cannot compile " + key.name());
      }
      if (!admit(code_bytes)) return {nullptr, code_bytes};  // as the real generator: add nothing
      return {key.dim % 2 ? &kernel_a : &kernel_b, code_bytes};
    };
  }
};

float run(const shapejit::rt::EmbagKernelHandle& h) {
  float out = 0.0f;
  EmbagKernelArgs args{};
  args.output = &out;
  h(args);
  return out;
}

// Asks for `key` from `threads` threads released at the same moment.
std::vector<std::string> ask_concurrently(EmbagKernelCache& cache, const EmbagKey& key, int threads,
                                          std::vector<shapejit::jit::EmbagKernelFn>* fns = nullptr) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::string> errors(static_cast<size_t>(threads));
  std::vector<shapejit::jit::EmbagKernelFn> got(static_cast<size_t>(threads), nullptr);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ++ready;
      while (!go.load()) std::this_thread::yield();
      try {
        got[size_t(t)] = cache.get(key).fn();
      } catch (const shapejit::Error& e) {
        errors[size_t(t)] = e.what();
      }
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  go = true;
  for (auto& th : pool) th.join();
  if (fns) *fns = got;
  return errors;
}

}  // namespace

TEST_CASE("kernel cache: 8 threads asking for one key at once compile it exactly once") {
  FakeCompiler compiler;
  compiler.delay = std::chrono::milliseconds(100);
  EmbagKernelCache cache(compiler.fn());
  std::vector<shapejit::jit::EmbagKernelFn> fns;
  const auto errors = ask_concurrently(cache, key_with_dim(7), 8, &fns);
  for (const auto& e : errors) CHECK(e.empty());
  CHECK(compiler.calls.load() == 1);
  for (auto fn : fns) CHECK((fn == &kernel_a));
  const auto s = cache.stats();
  CHECK(s.misses == 1);
  CHECK(s.hits == 7);
  CHECK(s.compilations == 1);
  CHECK(s.kernels == 1);
  CHECK(s.code_bytes == 1000);
  CHECK(s.compile_time_ns >= 100'000'000);  // the compiler slept 100 ms
  // Later lookups are hits without compiling.
  CHECK((cache.get(key_with_dim(7)).fn() == &kernel_a));
  CHECK(compiler.calls.load() == 1);
  CHECK(cache.stats().hits == 8);
}

TEST_CASE("kernel cache: a slow compilation does not block lookups of other keys") {
  FakeCompiler compiler;
  EmbagKernelCache cache(compiler.fn());
  cache.get(key_with_dim(1));  // cached before the slow one starts
  compiler.delay = std::chrono::milliseconds(400);
  std::thread slow([&] { cache.get(key_with_dim(2)); });
  while (compiler.calls.load() < 2) std::this_thread::yield();  // the slow compilation runs
  const auto t0 = std::chrono::steady_clock::now();
  CHECK((cache.get(key_with_dim(1)).fn() == &kernel_a));
  const auto s = cache.stats();
  const auto waited = std::chrono::steady_clock::now() - t0;
  slow.join();
  CHECK(s.misses == 2);  // the slow one was in flight while we looked
  CHECK(s.compilations == 1);
  CHECK(waited < std::chrono::milliseconds(200));
}

TEST_CASE("kernel cache: cost of a cached lookup and of a handle call") {
  FakeCompiler compiler;
  EmbagKernelCache cache(compiler.fn());
  const EmbagKey key = key_with_dim(128);
  const auto h = cache.get(key);
  constexpr int kRounds = 200000;
  auto t0 = std::chrono::steady_clock::now();
  int generic = 0;
  for (int i = 0; i < kRounds; ++i) generic += cache.get(key).generic() ? 1 : 0;
  const double lookup_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kRounds;
  float out = 0;
  EmbagKernelArgs args{};
  args.output = &out;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; ++i) h(args);
  const double call_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kRounds;
  MESSAGE("cached lookup " << lookup_ns << " ns, handle call " << call_ns << " ns");
  CHECK(generic == 0);
  CHECK(out == 2.0f);
}

TEST_CASE("kernel cache: a failed compilation reaches every waiter, is not cached, and is retried") {
  FakeCompiler compiler;
  compiler.delay = std::chrono::milliseconds(50);
  compiler.fail_next = 1;
  EmbagKernelCache cache(compiler.fn());
  const EmbagKey key = key_with_dim(8);
  const auto errors = ask_concurrently(cache, key, 8);
  for (const auto& e : errors) CHECK(e == "fake: cannot compile " + key.name());
  CHECK(compiler.calls.load() == 1);
  auto s = cache.stats();
  CHECK(s.failed_compilations == 1);
  CHECK(s.compilations == 0);
  CHECK(s.kernels == 0);
  CHECK(s.code_bytes == 0);

  // The next lookup compiles again and succeeds.
  const auto h = cache.get(key);
  CHECK((h.fn() == &kernel_b));
  CHECK_FALSE(h.generic());
  CHECK(compiler.calls.load() == 2);
  s = cache.stats();
  CHECK(s.failed_compilations == 1);
  CHECK(s.compilations == 1);
  CHECK(s.misses == 2);
}

TEST_CASE("kernel cache: every failure arrives as shapejit::Error with a status") {
  const EmbagKey key = key_with_dim(3);
  auto status_of = [&](shapejit::rt::EmbagCompileFn fn) {
    EmbagKernelCache cache(std::move(fn));
    try {
      cache.get(key);
    } catch (const shapejit::Error& e) {
      CHECK(std::string(e.what()).find(key.name()) != std::string::npos);
      CHECK(cache.stats().failed_compilations == 1);
      return e.status();
    }
    return shapejit::Status::kOk;
  };
  using shapejit::Status;
  CHECK(status_of([](const EmbagKey&, asmjit::JitRuntime&, const shapejit::jit::CodeAdmission&) -> GeneratedEmbagKernel {
          throw std::runtime_error("asmjit said no");
        }) == Status::kInternalError);
  CHECK(status_of([](const EmbagKey&, asmjit::JitRuntime&, const shapejit::jit::CodeAdmission&) -> GeneratedEmbagKernel {
          throw std::bad_alloc();
        }) == Status::kOutOfMemory);
  CHECK(status_of([](const EmbagKey&, asmjit::JitRuntime&, const shapejit::jit::CodeAdmission&) -> GeneratedEmbagKernel {
          return {nullptr, 0};  // never cache a null function
        }) == Status::kInternalError);
  CHECK(status_of([](const EmbagKey&, asmjit::JitRuntime&, const shapejit::jit::CodeAdmission&) -> GeneratedEmbagKernel {
          throw 42;
        }) == Status::kInternalError);
  // Code added without asking the limit, or of another size than admitted, is a broken generator.
  CHECK(status_of([](const EmbagKey&, asmjit::JitRuntime&, const shapejit::jit::CodeAdmission&) -> GeneratedEmbagKernel {
          return {&kernel_a, 100};
        }) == Status::kInternalError);
  CHECK(status_of([](const EmbagKey&, asmjit::JitRuntime&, const shapejit::jit::CodeAdmission& admit) -> GeneratedEmbagKernel {
          admit(100);
          return {&kernel_a, 200};
        }) == Status::kInternalError);
}

TEST_CASE("kernel cache: beyond the code bound new keys run the generic kernel") {
  FakeCompiler compiler;
  EmbagKernelCache cache(compiler.fn(), 2500);
  for (int64_t d = 1; d <= 2; ++d) CHECK_FALSE(cache.get(key_with_dim(d)).generic());
  CHECK(cache.stats().code_bytes == 2000);

  // A third 1000-byte kernel would pass the bound: refused before anything is emitted.
  const EmbagKey third = key_with_dim(3);
  const auto h = cache.get(third);
  CHECK(h.generic());
  CHECK((h.fn() == shapejit::rt::generic_embag_kernel(third)));
  CHECK(compiler.calls.load() == 2);
  auto s = cache.stats();
  CHECK(s.generic_fallbacks == 1);
  CHECK(s.kernels == 2);
  CHECK(s.code_bytes == 2000);
  CHECK(s.code_limit_bytes == 2500);
  // Compiled keys are still served; the fallback is not cached, so raising the bound helps.
  CHECK((cache.get(key_with_dim(2)).fn() == &kernel_b));
  cache.set_code_limit_bytes(1 << 20);
  CHECK_FALSE(cache.get(third).generic());
  CHECK(compiler.calls.load() == 3);
  // A bound of zero compiles nothing new.
  cache.set_code_limit_bytes(0);
  CHECK(cache.get(key_with_dim(5)).generic());
  CHECK(cache.stats().generic_fallbacks == 2);
  cache.set_code_limit_bytes(-1);
  CHECK(cache.stats().code_limit_bytes == shapejit::rt::default_code_limit_bytes());
}

TEST_CASE("kernel cache: a kernel larger than the room left is refused after emission, and only once") {
  FakeCompiler compiler;
  compiler.code_bytes = 100;
  EmbagKernelCache cache(compiler.fn(), 600);
  CHECK_FALSE(cache.get(key_with_dim(1)).generic());  // the estimate is now 100 bytes
  compiler.code_bytes = 1000;                         // fits the estimate, not the room left
  CHECK(cache.get(key_with_dim(2)).generic());
  CHECK(compiler.calls.load() == 2);
  auto s = cache.stats();
  CHECK(s.code_bytes == 100);
  CHECK(s.kernels == 1);
  CHECK(s.generic_fallbacks == 1);
  CHECK(s.failed_compilations == 0);
  // The estimate learnt the 1000 bytes: the same key is refused without being emitted again.
  CHECK(cache.get(key_with_dim(2)).generic());
  CHECK(compiler.calls.load() == 2);
  CHECK(cache.stats().generic_fallbacks == 2);
  // A failed compilation releases its reservation: the room is whole for the next key.
  compiler.code_bytes = 500;
  cache.set_code_limit_bytes(100 + 1000);
  compiler.fail_next = 1;
  CHECK_THROWS_AS(cache.get(key_with_dim(3)), shapejit::Error);
  CHECK_FALSE(cache.get(key_with_dim(3)).generic());
  CHECK(cache.stats().code_bytes == 600);
}

TEST_CASE("kernel cache: a stream of distinct shapes keeps code memory bounded") {
  FakeCompiler compiler;
  compiler.code_bytes = 4096;
  EmbagKernelCache cache(compiler.fn(), 100 * 4096);
  for (int64_t d = 1; d <= 2000; ++d) cache.get(key_with_dim(d));
  const auto s = cache.stats();
  CHECK(s.kernels == 100);
  CHECK(s.code_bytes <= s.code_limit_bytes);
  CHECK(s.generic_fallbacks == 1900);
}

TEST_CASE("kernel cache: scalar and dim-0 keys get the generic kernel without compiling") {
  FakeCompiler compiler;
  EmbagKernelCache cache(compiler.fn());
  EmbagKey scalar = key_with_dim(64);
  scalar.isa = Isa::kScalar;
  CHECK(cache.get(scalar).generic());
  CHECK(cache.get(key_with_dim(0)).generic());
  CHECK(compiler.calls.load() == 0);
  EmbagKey f16 = scalar;
  f16.table = shapejit::DType::kF16;
  CHECK_THROWS_AS(cache.get(f16), shapejit::Error);
}

TEST_CASE("kernel cache: a handle is fetched once and called without a lookup") {
  FakeCompiler compiler;
  EmbagKernelCache cache(compiler.fn());
  const shapejit::rt::EmbagKernelHandle empty;
  CHECK_FALSE(empty);
  const auto a = cache.get(key_with_dim(9));
  const auto b = cache.get(key_with_dim(10));
  REQUIRE(a);
  CHECK(a.key() == key_with_dim(9));
  const auto before = cache.stats();
  for (int i = 0; i < 1000; ++i) {
    CHECK(run(a) == 1.0f);
    CHECK(run(b) == 2.0f);
  }
  const auto after = cache.stats();
  CHECK(after.hits == before.hits);  // calls through a handle never touch the map
  CHECK(after.misses == before.misses);
}

TEST_CASE("kernel cache: statistics and the code bound through the public API") {
  shapejit_kernel_cache_stats s{};
  CHECK(shapejit_get_kernel_cache_stats(&s) == SHAPEJIT_OK);
  CHECK(s.code_limit_bytes == shapejit::rt::default_code_limit_bytes());
  CHECK(shapejit_get_kernel_cache_stats(nullptr) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("stats") != std::string::npos);

  CHECK(shapejit_set_code_memory_limit(12345) == SHAPEJIT_OK);
  CHECK(shapejit::kernel_cache_stats().code_limit_bytes == 12345);
  shapejit::set_code_memory_limit(-1);
  CHECK(shapejit::kernel_cache_stats().code_limit_bytes == shapejit::rt::default_code_limit_bytes());
  // The process's counters are both caches' (a test that ran linear groups earlier in this
  // process, as the one-process qemu run does in some orders, left gemm hits).
  CHECK(shapejit::kernel_cache_stats().hits ==
        shapejit::rt::embag_kernel_cache().stats().hits + shapejit::rt::gemm_kernel_cache().stats().hits);
}

TEST_CASE("kernel cache: the real generator compiles a key of the selected ISA once") {
  const Isa isa = shapejit::rt::selected_isa();
  if (isa == Isa::kScalar) {
    MESSAGE("no JIT ISA on this host; skipped");
    return;
  }
  EmbagKernelCache cache;  // default compiler: jit::generate_embag_kernel
  EmbagKey key = key_with_dim(128);
  key.isa = isa;
  const auto h = cache.get(key);
  CHECK(h);
  CHECK_FALSE(h.generic());
  const auto s = cache.stats();
  CHECK(s.compilations == 1);
  CHECK(s.code_bytes > 0);
  MESSAGE(key.name() << ": " << s.code_bytes << " bytes in " << s.compile_time_ns / 1000 << " us");
  CHECK((cache.get(key).fn() == h.fn()));
}

namespace {

// Keys of the selected ISA that differ only in their prefetch distance: one code size each,
// so "a limit worth N kernels" is exact.
std::vector<EmbagKey> same_size_keys(Isa isa, int count) {
  std::vector<EmbagKey> keys;
  for (int p = 1; p <= count; ++p) {
    EmbagKey k = key_with_dim(64);
    k.isa = isa;
    k.prefetch = p;
    keys.push_back(k);
  }
  return keys;
}

// Bytes of `key`'s code, emitted into a CodeHolder (no code memory is taken).
int64_t emitted_bytes(const EmbagKey& key) {
  asmjit::JitRuntime rt;
  asmjit::CodeHolder code;
  code.init(rt.environment());
  shapejit::jit::emit_embag_kernel(key, code);
  return int64_t(code.codeSize());
}

// Each of `keys.size()` threads asks for its own key, all released at the same moment.
void ask_each_concurrently(EmbagKernelCache& cache, const std::vector<EmbagKey>& keys, std::vector<bool>* generic) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  generic->assign(keys.size(), false);
  std::vector<char> got(keys.size(), 0);
  std::vector<std::thread> pool;
  for (size_t t = 0; t < keys.size(); ++t) {
    pool.emplace_back([&, t] {
      ++ready;
      while (!go.load()) std::this_thread::yield();
      got[t] = cache.get(keys[t]).generic() ? 1 : 0;
    });
  }
  while (ready.load() < int(keys.size())) std::this_thread::yield();
  go = true;
  for (auto& th : pool) th.join();
  for (size_t t = 0; t < keys.size(); ++t) (*generic)[t] = got[t] != 0;
}

}  // namespace

TEST_CASE("kernel cache: 16 threads compiling new shapes never hold more code than the limit") {
  const Isa isa = shapejit::rt::selected_isa();
  if (isa == Isa::kScalar) {
    MESSAGE("no JIT ISA on this host; skipped");
    return;
  }
  constexpr int kThreads = 16;
  const std::vector<EmbagKey> keys = same_size_keys(isa, kThreads);
  int64_t smallest = emitted_bytes(keys[0]);
  for (const EmbagKey& k : keys) smallest = std::min(smallest, emitted_bytes(k));
  // A limit of one byte fits no kernel; a limit short of N + 1 of the smallest fits at most N.
  for (const int worth : {0, 1, 3}) {
    const int64_t limit = worth == 0 ? 1 : worth * smallest + smallest - 1;
    CAPTURE(limit);
    for (int round = 0; round < 5; ++round) {
      EmbagKernelCache cache({}, limit);  // the real generator
      std::vector<bool> generic;
      ask_each_concurrently(cache, keys, &generic);
      const auto s = cache.stats();
      CHECK(s.code_bytes <= limit);
      CHECK(s.kernels <= worth);
      CHECK(s.kernels + s.generic_fallbacks == kThreads);
      int compiled = 0;
      for (bool g : generic) compiled += g ? 0 : 1;
      CHECK(compiled == s.kernels);
    }
  }
}

TEST_CASE("kernel cache: overlapping compilations share a limit worth N kernels, and fill it afterwards") {
  FakeCompiler compiler;
  compiler.delay = std::chrono::milliseconds(20);  // all 16 compilations overlap
  EmbagKernelCache cache(compiler.fn(), 4 * 1000);
  std::vector<EmbagKey> keys;
  for (int64_t d = 1; d <= 16; ++d) keys.push_back(key_with_dim(d));
  std::vector<bool> generic;
  ask_each_concurrently(cache, keys, &generic);
  auto s = cache.stats();
  CHECK(s.code_bytes <= 4000);
  CHECK(s.kernels >= 1);
  CHECK(s.kernels <= 4);
  CHECK(s.kernels + s.generic_fallbacks == 16);
  // One at a time, new keys compile until exactly four kernels fill the limit.
  for (int64_t d = 17; d <= 24; ++d) cache.get(key_with_dim(d));
  s = cache.stats();
  CHECK(s.kernels == 4);
  CHECK(s.code_bytes == 4000);
}

// Bounded resources: the JIT code bound holds under a stream of thousands of distinct shapes
// (code bytes bounded, resident memory flat, results right); byte counts that overflow int64,
// int32 offsets at and past 2^31 - 1, and allocations that cannot succeed end in clean errors.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ref/embedding_bag.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SJ_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SJ_SANITIZED 1
#endif
#endif

namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

int64_t resident_bytes() {
  long pages_total = 0, pages_resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  REQUIRE(f != nullptr);
  REQUIRE(std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) == 2);
  std::fclose(f);
  return int64_t(pages_resident) * sysconf(_SC_PAGESIZE);
}

shapejit_kernel_cache_stats cache_stats() {
  shapejit_kernel_cache_stats s{};
  REQUIRE(shapejit_get_kernel_cache_stats(&s) == SHAPEJIT_OK);
  return s;
}

// qemu-user (the AVX2 suite, and every AArch64 run here) runs generated code 20-50x slower: skip
// the 2^31-index call there.
bool emulated_cpu() {
#if !defined(__x86_64__)
  return true;  // AArch64 builds are tested under qemu-aarch64
#else
  unsigned r[12] = {};
  for (unsigned i = 0; i < 3; ++i) __get_cpuid(0x80000002 + i, &r[i * 4], &r[i * 4 + 1], &r[i * 4 + 2], &r[i * 4 + 3]);
  char brand[49] = {};
  std::memcpy(brand, r, 48);
  return std::strstr(brand, "QEMU") != nullptr;
#endif
}

// A sum call over `rows` rows of `dim` columns: two bags, rows {0, last} and {1}.
struct SmallCall {
  std::vector<float> table;
  std::vector<int64_t> idx = {0, 3, 1}, off = {0, 2};
  shapejit_embedding_bag_args a{};
  explicit SmallCall(int64_t dim, shapejit_mode mode) : table(size_t(4 * dim)) {
    for (size_t i = 0; i < table.size(); ++i) table[i] = float(int(i % 13) - 6);
    a.weight = table.data();
    a.num_rows = 4;
    a.dim = dim;
    a.row_stride = dim;
    a.indices = idx.data();
    a.index_dtype = SHAPEJIT_I64;
    a.num_indices = 3;
    a.offsets = off.data();
    a.offset_dtype = SHAPEJIT_I64;
    a.num_offsets = 2;
    a.mode = mode;
  }
};

TEST_CASE("resources: 3,000 distinct shapes under a small code bound keep code and RSS bounded") {
  constexpr int64_t kShapes = 3000;
  REQUIRE(shapejit_set_num_threads(1) == SHAPEJIT_OK);
  const shapejit_kernel_cache_stats before = cache_stats();
  // Room for about a hundred new kernels beyond what earlier tests in this process compiled.
  const int64_t kLimit = before.code_bytes + 256 * 1024;
  REQUIRE(shapejit_set_code_memory_limit(kLimit) == SHAPEJIT_OK);
  int64_t rss_warm = 0, max_kernel = 0, prev_code = before.code_bytes, prev_kernels = before.kernels;
  int64_t wrong = 0;
  std::vector<float> out, want;
  std::vector<int64_t> ints(8);
  for (int64_t k = 0; k < kShapes; ++k) {
    // Distinct keys: every width 1..1000, in each of three modes.
    const int64_t dim = 1 + k / 3;
    const shapejit_mode mode = static_cast<shapejit_mode>(k % 3);
    SmallCall c(dim, mode);
    out.assign(size_t(2 * dim), -1.0f);
    want.assign(size_t(2 * dim), -2.0f);
    std::vector<int64_t> max_got(size_t(2 * dim)), max_want(size_t(2 * dim));
    std::vector<int64_t> ints_want(8);
    REQUIRE(shapejit_embedding_bag(&c.a, out.data(), ints.data(), ints.data() + 3, max_got.data()) == SHAPEJIT_OK);
    shapejit::ref::embedding_bag(c.a, want.data(), ints_want.data(), ints_want.data() + 3, max_want.data());
    if (std::memcmp(out.data(), want.data(), out.size() * 4) != 0 || max_got != max_want) ++wrong;
    const shapejit_kernel_cache_stats s = cache_stats();
    if (s.kernels > prev_kernels) max_kernel = std::max(max_kernel, (s.code_bytes - prev_code) / (s.kernels - prev_kernels));
    prev_code = s.code_bytes;
    prev_kernels = s.kernels;
    if (k == 300) rss_warm = resident_bytes();
  }
  const shapejit_kernel_cache_stats after = cache_stats();
  const int64_t rss_end = resident_bytes();
  MESSAGE("resources: " << kShapes << " shapes, limit " << kLimit << " B: code " << before.code_bytes << " -> "
                        << after.code_bytes << " B, kernels " << before.kernels << " -> " << after.kernels
                        << ", generic fallbacks +" << after.generic_fallbacks - before.generic_fallbacks
                        << ", largest kernel " << max_kernel << " B, RSS after 300 shapes " << rss_warm / 1024
                        << " KiB, at the end " << rss_end / 1024 << " KiB");
  CHECK(wrong == 0);
  CHECK(after.code_limit_bytes == kLimit);
  // Compiling stops at the bound: a kernel is compiled only when it fits whole.
  CHECK(after.code_bytes <= kLimit);
  CHECK(after.kernels > before.kernels);  // it did compile up to the bound
  CHECK(after.generic_fallbacks - before.generic_fallbacks > kShapes / 2);
#if !defined(SJ_SANITIZED)  // sanitizer allocators keep freed memory in quarantine
  CHECK_MESSAGE(rss_end - rss_warm < 8 * 1024 * 1024, "RSS grew by " << (rss_end - rss_warm) / 1024 << " KiB");
#endif
  // Limit 0 compiles nothing new, and the default comes back.
  REQUIRE(shapejit_set_code_memory_limit(0) == SHAPEJIT_OK);
  const int64_t kernels0 = cache_stats().kernels;
  SmallCall c(4099, SHAPEJIT_SUM);
  std::vector<float> o(2 * 4099);
  std::vector<int64_t> z(4);
  CHECK(shapejit_embedding_bag(&c.a, o.data(), nullptr, z.data(), z.data() + 2) == SHAPEJIT_OK);
  CHECK(cache_stats().kernels == kernels0);
  REQUIRE(shapejit_set_code_memory_limit(-1) == SHAPEJIT_OK);
  CHECK(cache_stats().code_limit_bytes > kLimit);
  shapejit_set_num_threads(0);
}

TEST_CASE("resources: sizes whose byte counts overflow int64 are rejected before anything is read") {
  const float table[4] = {};
  const int64_t idx[2] = {0, 0}, off[2] = {0, 1};
  auto call = [&](int64_t rows, int64_t dim, int64_t stride, int64_t n, int64_t len) {
    shapejit_embedding_bag_args a{};
    a.weight = table;
    a.num_rows = rows;
    a.dim = dim;
    a.row_stride = stride;
    a.indices = idx;
    a.index_dtype = SHAPEJIT_I64;
    a.num_indices = n;
    a.offsets = off;
    a.offset_dtype = SHAPEJIT_I64;
    a.num_offsets = len;
    shapejit_embedding_bag_shapes s{};
    const shapejit_status st = shapejit_embedding_bag_output_shapes(&a, &s);
    const std::string msg = shapejit_last_error();
    CHECK(shapejit_embedding_bag(&a, nullptr, nullptr, nullptr, nullptr) == st);
    return std::pair(st, msg);
  };
  struct Case {
    int64_t rows, dim, stride, n, len;
    const char* what;
  };
  const Case cases[] = {
      {int64_t{1} << 40, 1, int64_t{1} << 30, 2, 2, "weight rows x stride x 4"},
      {2, int64_t{1} << 61, int64_t{1} << 61, 2, 2, "weight row of 2^61 floats"},
      {2, 1, kI64Max, 2, 2, "stride INT64_MAX"},
      {2, int64_t{1} << 40, int64_t{1} << 40, 2, int64_t{1} << 30, "output offsets x dim x 8"},
      {2, 1, 1, int64_t{1} << 61, 2, "indices x 8"},
      {2, 1, 1, kI64Max, 2, "indices INT64_MAX"},
      {2, 1, 1, 2, kI64Max, "offsets INT64_MAX"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const auto result = call(c.rows, c.dim, c.stride, c.n, c.len);
    CHECK(result.first == SHAPEJIT_INVALID_ARGUMENT);
    CHECK_MESSAGE(result.second.find("overflow") != std::string::npos, result.second);
  }
  // The linear group: a weight, an input and a head-split output whose byte counts overflow.
  shapejit_linear_part_desc part{};
  part.rows = 1;
  shapejit_linear_group_desc d{};
  d.form = SHAPEJIT_WEIGHTS_PACKED;
  d.weight = table;
  d.weight_rows = int64_t{1} << 40;
  d.k = 1;
  d.weight_stride = int64_t{1} << 30;
  d.parts = &part;
  d.num_parts = 1;
  shapejit_linear_group* g = nullptr;
  CHECK(shapejit_linear_group_create(&d, &g) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("overflow") != std::string::npos);
  CHECK(g == nullptr);
  d.weight_rows = 1;
  d.weight_stride = 1;
  REQUIRE(shapejit_linear_group_create(&d, &g) == SHAPEJIT_OK);
  float y[4] = {};
  const shapejit_linear_group_io io{table, int64_t{1} << 40, 1, int64_t{1} << 30, y, 1, 0, 0};
  CHECK(shapejit_linear_group_run(g, &io, 1) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("overflow") != std::string::npos);
  shapejit_linear_group_destroy(g);
}

TEST_CASE("resources: int32 offsets past 2^31 - 1 are rejected, and INT32_MAX itself works") {
  const float table[8] = {1, 1, 2, 2, 3, 3, 4, 4};
  const int32_t kMax32 = std::numeric_limits<int32_t>::max(), kMin32 = std::numeric_limits<int32_t>::min();
  const int32_t idx[3] = {0, 1, 2};
  for (const std::vector<int32_t>& off : std::vector<std::vector<int32_t>>{
           {0, kMax32}, {0, kMin32}, {0, 2, kMax32}, {0, kMax32 - 1, kMax32}, {kMax32}, {kMin32, 0}, {0, -1}}) {
    CAPTURE(off.back());
    shapejit_embedding_bag_args a{};
    a.weight = table;
    a.num_rows = 4;
    a.dim = 2;
    a.row_stride = 2;
    a.indices = idx;
    a.index_dtype = SHAPEJIT_I32;
    a.num_indices = 3;
    a.offsets = off.data();
    a.offset_dtype = SHAPEJIT_I32;
    a.num_offsets = int64_t(off.size());
    float out[8] = {};
    CHECK(shapejit_embedding_bag(&a, out, nullptr, out + 6, out + 7) == SHAPEJIT_INVALID_ARGUMENT);
  }

#if defined(SJ_SANITIZED)
  MESSAGE("the 2^31-index call is skipped under sanitizers (about 3 s natively, a minute instrumented)");
  return;
#endif
  if (emulated_cpu()) {
    MESSAGE("the 2^31-index call is skipped on an emulated CPU (too slow)");
    return;
  }
  // Valid: N = 2^31 - 1 int32 indices and offsets {0, N - 1, N}, the last one INT32_MAX. The
  // index array is the kernel's zero page (transparent huge pages, so validation reads 8 GiB
  // without faulting in 8 GiB), except its last element, which points at row 3.
  const int64_t n = kMax32;
  const size_t bytes = size_t(n) * 4;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  madvise(mem, bytes, MADV_HUGEPAGE);
  auto* indices = static_cast<int32_t*>(mem);
  indices[n - 1] = 3;
  const int32_t off[3] = {0, kMax32 - 1, kMax32};
  shapejit_embedding_bag_args a{};
  a.weight = table;
  a.num_rows = 4;
  a.dim = 2;
  a.row_stride = 2;
  a.indices = indices;
  a.index_dtype = SHAPEJIT_I32;
  a.num_indices = n;
  a.offsets = off;
  a.offset_dtype = SHAPEJIT_I32;
  a.num_offsets = 3;
  float out[6] = {-1, -1, -1, -1, -1, -1};
  int32_t bag_size[3] = {-1, -1, -1}, max_indices[3] = {-1, -1, -1};
  shapejit_embedding_bag_shapes s{};
  REQUIRE(shapejit_embedding_bag_output_shapes(&a, &s) == SHAPEJIT_OK);
  CHECK(s.output_rows == 3);
  CHECK(s.offset2bag_len == 0);  // sum without padding: no [N] output to write
  REQUIRE(shapejit_embedding_bag(&a, out, nullptr, bag_size, max_indices) == SHAPEJIT_OK);
  // 2^31 - 2 ones in f32 saturate at 2^24 (adding 1 to 2^24 rounds back to 2^24).
  CHECK(out[0] == 16777216.0f);
  CHECK(out[1] == 16777216.0f);
  CHECK(out[2] == 4.0f);
  CHECK(out[3] == 4.0f);
  CHECK(out[4] == 0.0f);
  CHECK(out[5] == 0.0f);
  CHECK(bag_size[0] == 0);
  munmap(mem, bytes);
}

TEST_CASE("resources: allocations that cannot succeed give OUT_OF_MEMORY") {
#if defined(SJ_SANITIZED)
  MESSAGE("skipped under sanitizers: their allocators abort on impossible sizes instead of failing");
#else
  // The C++ allocating overload: a valid call whose output is 2^44 floats (64 TiB).
  shapejit::EmbeddingBagCall call;
  call.weight.rows = 0;
  call.weight.dim = int64_t{1} << 44;
  const std::vector<int64_t> none, off = {0};
  call.indices = shapejit::IndexView(none);
  call.offsets = shapejit::IndexView(off);
  try {
    (void)shapejit::embedding_bag(call);
    FAIL("an output of 2^44 floats was allocated");
  } catch (const shapejit::Error& e) {
    CHECK(e.status() == shapejit::Status::kOutOfMemory);
    MESSAGE("allocating overload: " << std::string(e.what()));
  }
  // A linear group whose packed weight would need 2^48 bytes (beyond the address space).
  const float w[4] = {1, 2, 3, 4};
  shapejit_linear_part_desc part{};
  part.rows = int64_t{1} << 44;
  shapejit_linear_group_desc d{};
  d.form = SHAPEJIT_WEIGHTS_PACKED;
  d.weight = w;
  d.weight_rows = part.rows;
  d.k = 4;
  d.weight_stride = 4;
  d.parts = &part;
  d.num_parts = 1;
  shapejit_linear_group* g = nullptr;
  const shapejit_status st = shapejit_linear_group_create(&d, &g);
  CHECK_MESSAGE(st == SHAPEJIT_OUT_OF_MEMORY, shapejit_last_error());
  CHECK(g == nullptr);
  MESSAGE("huge linear group: " << std::string(shapejit_last_error()));
#endif
}

}  // namespace

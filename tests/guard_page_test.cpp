// Indices are never trusted: ASan cannot see reads inside generated code, so these tests put
// PROT_NONE pages around the table (and around the index and offset arrays) and go through
// the C ABI. A rejected input that reached a row, or a kernel that read past a row's last
// column (masked AVX2/AVX-512 tails, the stride gap of the last row, prefetches past the last
// index), faults and the test crashes with the CAPTUREd shape.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <asmjit/core.h>

#include "jit/embag_codegen.hpp"
#include "ref/embedding_bag.hpp"
#include "ref/float16.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/embag/widen_weights.hpp"
#include "runtime/engine/isa_select.hpp"
#include "runtime/embag/prefetch_policy.hpp"
#include "shapejit/shapejit.h"
#include "support/embag_cases.hpp"
#include "support/host_isas.hpp"

namespace {

using shapejit::jit::Isa;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;

/// Where the bytes sit inside their pages.
enum class Edge { kEnd, kStart };

// `bytes` of memory between two PROT_NONE pages, ending exactly at the second (kEnd) or
// starting exactly after the first (kStart).
class FencedBuffer {
 public:
  FencedBuffer(size_t bytes, Edge edge) : bytes_(bytes) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t data_pages = (bytes + page - 1) / page + (bytes == 0 ? 1 : 0);
    map_bytes_ = (data_pages + 2) * page;
    void* m = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    map_ = static_cast<std::byte*>(m);
    REQUIRE(mprotect(map_, page, PROT_NONE) == 0);
    REQUIRE(mprotect(map_ + (data_pages + 1) * page, page, PROT_NONE) == 0);
    data_ = edge == Edge::kStart ? map_ + page : map_ + (data_pages + 1) * page - bytes;
  }
  ~FencedBuffer() { munmap(map_, map_bytes_); }
  FencedBuffer(const FencedBuffer&) = delete;
  FencedBuffer& operator=(const FencedBuffer&) = delete;

  template <class T>
  T* as() { return reinterpret_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  std::byte* map_ = nullptr;
  std::byte* data_ = nullptr;
  size_t map_bytes_ = 0, bytes_ = 0;
};

// A table of `rows` rows, `stride` floats apart, whose last row ends at its last column: the
// stride gap of the last row (if any) lies in the protected page.
struct FencedTable {
  int64_t rows, dim, stride;
  FencedBuffer mem;
  FencedTable(int64_t rows_, int64_t dim_, int64_t stride_, Edge edge)
      : rows(rows_), dim(dim_), stride(stride_), mem(size_t(((rows_ - 1) * stride_ + dim_) * 4), edge) {
    float* w = mem.as<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < stride && r * stride + c < (rows - 1) * stride + dim; ++c)
        w[r * stride + c] = c < dim ? float((r * 7 + c * 3) % 11 - 5) : std::numeric_limits<float>::quiet_NaN();
  }
};

// Integer arrays at the end (or start) of their pages, so reading one element too many faults.
struct FencedInts {
  FencedBuffer mem;
  FencedInts(const std::vector<int64_t>& v, shapejit_dtype dtype, Edge edge)
      : mem(v.size() * (dtype == SHAPEJIT_I32 ? 4 : 8), edge) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (dtype == SHAPEJIT_I32) mem.as<int32_t>()[i] = int32_t(v[i]);
      else mem.as<int64_t>()[i] = v[i];
    }
  }
};

struct Variant {
  shapejit_mode mode;
  bool weighted, padding;
  const char* name;
};
constexpr Variant kVariants[] = {{SHAPEJIT_SUM, false, false, "sum"},
                                 {SHAPEJIT_SUM, true, false, "weighted sum"},
                                 {SHAPEJIT_MEAN, false, false, "mean"},
                                 {SHAPEJIT_MAX, false, false, "max"},
                                 {SHAPEJIT_SUM, false, true, "sum+padding"},
                                 // products rounded first (ATen's loop): a masked multiply reads the tail
                                 {SHAPEJIT_SUM, true, true, "weighted sum+padding"},
                                 {SHAPEJIT_MAX, false, true, "max+padding"}};

// The ISAs to pin: every generated ISA the host runs, then scalar (the reference path).
std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kNeon, Isa::kScalar})
    if (shapejit::rt::host_supports(isa)) v.push_back(isa);
  return v;
}

std::vector<int64_t> dims() {
  std::vector<int64_t> d;
  for (int64_t D = 1; D <= 70; ++D) d.push_back(D);
  for (int64_t D : {79, 80, 81, 127, 128, 129, 255, 257, 300, 511, 1000, 1025}) d.push_back(D);
  return d;
}

// Bags that all read the last row (at its page end) and row 0, with prefetches past the end.
const std::vector<int64_t> kLastRowIndices = {2, 0, 2, 2, 1, 2, 2};
const std::vector<int64_t> kLastRowOffsets = {0, 1, 3, 3, 6};

// The call of variant `v` over the kLastRowIndices-shaped bags in `idx` and `off`.
shapejit_embedding_bag_args last_row_call(const FencedTable& t, const FencedInts& idx, const FencedInts& off,
                                          shapejit_dtype dt, const Variant& v, const float* psw) {
  shapejit_embedding_bag_args a{};
  a.weight = const_cast<FencedTable&>(t).mem.as<float>();
  a.weight_dtype = SHAPEJIT_F32;
  a.num_rows = t.rows;
  a.dim = t.dim;
  a.row_stride = t.stride;
  a.indices = const_cast<FencedInts&>(idx).mem.as<void>();
  a.index_dtype = dt;
  a.num_indices = int64_t(kLastRowIndices.size());
  a.offsets = const_cast<FencedInts&>(off).mem.as<void>();
  a.offset_dtype = dt;
  a.num_offsets = int64_t(kLastRowOffsets.size());
  a.mode = v.mode;
  a.per_sample_weights = v.weighted ? psw : nullptr;
  a.has_padding_idx = v.padding;
  a.padding_idx = 0;  // row 0: the last row is still read
  return a;
}

// Runs one call through the C ABI and through the reference; "" when every output matches
// (NaN-ness exact, NaN bits free) and no guard changed.
std::string run_valid(const FencedTable& t, const FencedInts& idx, const FencedInts& off, shapejit_dtype dt,
                      const Variant& v, const float* psw) {
  const shapejit_embedding_bag_args a = last_row_call(t, idx, off, dt, v, psw);
  shapejit_embedding_bag_shapes s{};
  if (shapejit_embedding_bag_output_shapes(&a, &s) != SHAPEJIT_OK) return shapejit_last_error();
  GuardedOutputs got(s, 0xCD), want(s, 0x5A);
  if (got.run(a) != SHAPEJIT_OK) return shapejit_last_error();
  shapejit::ref::embedding_bag(a, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                               want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
  if (std::string g = got.check_guards(); !g.empty()) return g;
  for (EmbagOutput which : shapejit::test::kAllEmbagOutputs) {
    const auto x = got.bytes(which), y = want.bytes(which);
    if (which != EmbagOutput::kOutput) {
      if (std::memcmp(x.data(), y.data(), x.size()) != 0) return std::string(shapejit::test::output_name(which)) + " differs";
      continue;
    }
    for (size_t e = 0; e < x.size() / 4; ++e) {
      float p, q;
      std::memcpy(&p, x.data() + e * 4, 4);
      std::memcpy(&q, y.data() + e * 4, 4);
      if (std::memcmp(&p, &q, 4) != 0 && !(std::isnan(p) && std::isnan(q)))
        return "output[" + std::to_string(e) + "] = " + std::to_string(p) + ", reference " + std::to_string(q);
    }
  }
  return "";
}

TEST_CASE("guard pages: valid calls on the last row never read past it (every D, every ISA and mode)") {
  REQUIRE(shapejit_set_num_threads(1) == SHAPEJIT_OK);
  const float psw[] = {0.5f, -1.0f, 2.0f, 1.0f, 3.0f, -0.25f, 1.5f};
  int64_t calls = 0;
  for (Isa isa : isas()) {
    shapejit::rt::ScopedIsaOverride pin(isa);
    for (int64_t D : dims()) {
      for (int64_t gap : {0, 1, 3, 16}) {  // gap > 0: the last row's stride gap lies past the page
        const FencedTable table(3, D, D + gap, Edge::kEnd);
        for (shapejit_dtype dt : {SHAPEJIT_I64, SHAPEJIT_I32}) {
          const FencedInts idx(kLastRowIndices, dt, Edge::kEnd), off(kLastRowOffsets, dt, Edge::kEnd);
          for (const Variant& v : kVariants) {
            if (gap == 16 && dt == SHAPEJIT_I32 && v.padding) continue;  // keep the count moderate
            CAPTURE(shapejit::jit::isa_name(isa));
            CAPTURE(D);
            CAPTURE(gap);
            CAPTURE(v.name);
            CAPTURE(shapejit::test::dtype_name(dt));
            const std::string diff = run_valid(table, idx, off, dt, v, psw);
            CHECK_MESSAGE(diff.empty(), diff);
            ++calls;
          }
        }
      }
    }
  }
  MESSAGE("guard pages: " << calls << " valid calls ending at a PROT_NONE page, no fault");
  shapejit_set_num_threads(0);
}

// The calls above use 3-row tables, which stay in cache and get no software prefetch. A table
// beyond the private cache takes the prefetching loops (on AVX2, prefetch after each row's
// adds, then the clamped copy near the last index): their reads ahead must stay within the
// fenced indices, and the last row within its page.
TEST_CASE("guard pages: prefetching kernels on a table beyond the private cache") {
  if (std::getenv("SHAPEJIT_PREFETCH_DISTANCE")) {
    MESSAGE("SKIPPED: SHAPEJIT_PREFETCH_DISTANCE is set and fixes the distance for every call");
    return;
  }
  REQUIRE(shapejit_set_num_threads(1) == SHAPEJIT_OK);
  const float psw[] = {0.5f, -1.0f, 2.0f, 1.0f, 3.0f, -0.25f, 1.5f};
  int64_t calls = 0;
  for (Isa isa : isas()) {
    if (isa == Isa::kScalar) continue;  // the reference path has no prefetch
    shapejit::rt::ScopedIsaOverride pin(isa);
    for (int64_t D : {8, 32, 64, 128, 257}) {
      const int64_t rows = shapejit::rt::private_cache_bytes() / (D * 4) + 1;  // extent > L2
      const FencedTable table(rows, D, D, Edge::kEnd);
      std::vector<int64_t> indices = kLastRowIndices;
      for (int64_t& i : indices) i = i == 2 ? rows - 1 : i;  // the last row, at the page end
      for (shapejit_dtype dt : {SHAPEJIT_I64, SHAPEJIT_I32}) {
        const FencedInts idx(indices, dt, Edge::kEnd), off(kLastRowOffsets, dt, Edge::kEnd);
        for (const Variant& v : kVariants) {
          CAPTURE(shapejit::jit::isa_name(isa));
          CAPTURE(D);
          CAPTURE(v.name);
          CAPTURE(shapejit::test::dtype_name(dt));
          // The case this test is for.
          CHECK(shapejit::rt::make_embag_key(last_row_call(table, idx, off, dt, v, psw), isa).prefetch > 0);
          const std::string diff = run_valid(table, idx, off, dt, v, psw);
          CHECK_MESSAGE(diff.empty(), diff);
          ++calls;
        }
      }
    }
  }
  MESSAGE("guard pages: " << calls << " prefetching calls ending at a PROT_NONE page, no fault");
  shapejit_set_num_threads(0);
}

// A rejected call must not touch the table: it sits between two PROT_NONE pages (touching
// the start for negative indices, the end for indices >= n), and a fault crashes the test.
struct Rejection {
  std::vector<int64_t> indices, offsets;
  bool include_last_offset = false;
  bool has_padding = false;
  int64_t padding_idx = 0;
  const char* what;
};

std::vector<Rejection> rejections(int64_t n) {
  const int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  std::vector<Rejection> r;
  for (int64_t bad : {n, n + 1, n + 1000, int64_t{1} << 32, int64_t{1} << 40, kMax, int64_t(-1), -n, -n - 1,
                      int64_t(std::numeric_limits<int32_t>::min()), kMin}) {
    r.push_back({{bad, 0, 1}, {0, 2}, false, false, 0, "bad index first"});
    r.push_back({{0, 1, n - 1, bad}, {0, 2}, false, false, 0, "bad index last"});
    r.push_back({{n - 1, bad, n - 1}, {0, 1, 3}, true, false, 0, "bad index, include_last_offset"});
    r.push_back({{0, bad, 1}, {0, 1}, false, true, bad, "bad index equal to a bad padding_idx"});
    r.push_back({{0, n - 1, bad}, {0, 3}, false, true, 0, "bad index with valid padding"});
  }
  r.push_back({{0, 1}, {0, 3}, false, false, 0, "offset past N"});
  r.push_back({{0, 1}, {1, 2}, false, false, 0, "offsets[0] != 0"});
  r.push_back({{0, 1, 2}, {0, 2, 1}, false, false, 0, "decreasing offsets"});
  r.push_back({{0, 1, 2}, {0, -1}, false, false, 0, "negative offset"});
  r.push_back({{0, 1, 2}, {0, kMax}, false, false, 0, "huge offset"});
  r.push_back({{0, 1, 2}, {0, kMin}, false, false, 0, "most negative offset"});
  r.push_back({{0, 1, 2}, {0, 1}, true, false, 0, "partial final offset"});
  r.push_back({{0, 1, 2}, {}, false, false, 0, "no offsets for N > 0"});
  r.push_back({{0, 1}, {0, 1}, false, true, n, "padding_idx = n"});
  r.push_back({{0, 1}, {0, 1}, false, true, -n - 1, "padding_idx = -n - 1"});
  return r;
}

// int32 storage would truncate a wider value into a different (possibly valid) one.
bool fits_i32(const Rejection& r) {
  auto fits = [](int64_t v) { return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(); };
  return std::all_of(r.indices.begin(), r.indices.end(), fits) && std::all_of(r.offsets.begin(), r.offsets.end(), fits);
}

TEST_CASE("guard pages: rejected indices, offsets and padding never touch the table") {
  REQUIRE(shapejit_set_num_threads(1) == SHAPEJIT_OK);
  int64_t calls = 0;
  for (Isa isa : isas()) {
    shapejit::rt::ScopedIsaOverride pin(isa);
    for (int64_t D : {1, 5, 16, 17, 33, 100}) {
      for (Edge edge : {Edge::kEnd, Edge::kStart}) {
        const int64_t n = 4;
        const FencedTable table(n, D, D + (D % 3), edge);
        for (const Rejection& rj : rejections(n)) {
          for (shapejit_dtype dt : {SHAPEJIT_I64, SHAPEJIT_I32}) {
            if (dt == SHAPEJIT_I32 && !fits_i32(rj)) continue;
            const FencedInts idx(rj.indices, dt, edge), off(rj.offsets, dt, edge);
            for (const Variant& v : kVariants) {
              if (v.padding != rj.has_padding) continue;
              std::vector<float> psw(rj.indices.size(), 1.0f);
              shapejit_embedding_bag_args a{};
              a.weight = const_cast<FencedTable&>(table).mem.as<float>();
              a.weight_dtype = SHAPEJIT_F32;
              a.num_rows = n;
              a.dim = D;
              a.row_stride = table.stride;
              a.indices = idx.mem.bytes() ? const_cast<FencedInts&>(idx).mem.as<void>() : nullptr;
              a.index_dtype = dt;
              a.num_indices = int64_t(rj.indices.size());
              a.offsets = off.mem.bytes() ? const_cast<FencedInts&>(off).mem.as<void>() : nullptr;
              a.offset_dtype = dt;
              a.num_offsets = int64_t(rj.offsets.size());
              a.mode = v.mode;
              a.per_sample_weights = v.weighted ? psw.data() : nullptr;
              a.has_padding_idx = rj.has_padding;
              a.padding_idx = rj.padding_idx;
              a.include_last_offset = rj.include_last_offset;
              // Outputs for the call as if it were valid (at least one bag of D columns).
              shapejit_embedding_bag_shapes s{};
              s.output_rows = 4;
              s.output_cols = D;
              s.index_out_dtype = dt;
              s.offset2bag_len = 8;
              s.bag_size_len = 4;
              s.max_indices_rows = 4;
              s.max_indices_cols = D;
              GuardedOutputs out(s, 0xCD);
              CAPTURE(shapejit::jit::isa_name(isa));
              CAPTURE(D);
              CAPTURE(rj.what);
              CAPTURE(rj.indices.back());
              CAPTURE(v.name);
              CAPTURE(shapejit::test::dtype_name(dt));
              const shapejit_status status = out.run(a);
              CHECK(status == SHAPEJIT_INVALID_ARGUMENT);
              CHECK(out.untouched());
              CHECK(out.check_guards().empty());
              ++calls;
            }
          }
        }
      }
    }
  }
  MESSAGE("guard pages: " << calls << " rejected calls, none touched the fenced table");
  shapejit_set_num_threads(0);
}

// Calls of more than a few indices leave the range check to the run (runtime/embag/validate.hpp,
// IndexRangeCheck::kByRunner), which on two threads checks them chunk by chunk inside the
// kernels' region. A bad index anywhere must still stop every kernel before it reads a row.
TEST_CASE("guard pages: a large call's index check (in the parallel region) rejects before touching the table") {
  const int64_t n = 4, D = 16, bags = 128, len = 32;  // 64K floats of work: two threads run it in chunks
  std::vector<int64_t> offsets(static_cast<size_t>(bags));
  for (int64_t b = 0; b < bags; ++b) offsets[size_t(b)] = b * len;
  int64_t calls = 0;
  for (int threads : {1, 2}) {
    REQUIRE(shapejit_set_num_threads(threads) == SHAPEJIT_OK);
    for (Isa isa : isas()) {
      shapejit::rt::ScopedIsaOverride pin(isa);
      for (Edge edge : {Edge::kEnd, Edge::kStart}) {
        const FencedTable table(n, D, D, edge);
        for (int64_t bad : {n, int64_t(-1), int64_t{1} << 40}) {
          for (int64_t at : {int64_t{0}, bags * len / 2 + 3, bags * len - 1}) {
            std::vector<int64_t> indices(size_t(bags * len));
            for (size_t i = 0; i < indices.size(); ++i) indices[i] = int64_t(i % size_t(n));
            indices[size_t(at)] = bad;
            for (shapejit_dtype dt : {SHAPEJIT_I64, SHAPEJIT_I32}) {
              if (dt == SHAPEJIT_I32 && bad > std::numeric_limits<int32_t>::max()) continue;
              const FencedInts idx(indices, dt, edge), off(offsets, dt, edge);
              shapejit_embedding_bag_args a{};
              a.weight = const_cast<FencedTable&>(table).mem.as<float>();
              a.weight_dtype = SHAPEJIT_F32;
              a.num_rows = n;
              a.dim = D;
              a.row_stride = table.stride;
              a.indices = const_cast<FencedInts&>(idx).mem.as<void>();
              a.index_dtype = dt;
              a.num_indices = bags * len;
              a.offsets = const_cast<FencedInts&>(off).mem.as<void>();
              a.offset_dtype = dt;
              a.num_offsets = bags;
              a.mode = SHAPEJIT_SUM;
              indices[size_t(at)] = 0;  // the shapes of the call as if it were valid
              const FencedInts valid_idx(indices, dt, edge);
              indices[size_t(at)] = bad;
              shapejit_embedding_bag_args valid = a;
              valid.indices = const_cast<FencedInts&>(valid_idx).mem.as<void>();
              shapejit_embedding_bag_shapes s{};
              REQUIRE(shapejit_embedding_bag_output_shapes(&valid, &s) == SHAPEJIT_OK);
              GuardedOutputs out(s, 0xCD);
              CAPTURE(threads);
              CAPTURE(shapejit::jit::isa_name(isa));
              CAPTURE(bad);
              CAPTURE(at);
              CAPTURE(shapejit::test::dtype_name(dt));
              CHECK(out.run(a) == SHAPEJIT_INVALID_ARGUMENT);
              CHECK(std::string(shapejit_last_error()).find(std::to_string(at)) != std::string::npos);
              CHECK(out.untouched());
              CHECK(out.check_guards().empty());
              ++calls;
            }
          }
        }
      }
    }
  }
  MESSAGE("guard pages: " << calls << " rejected calls of " << bags * len << " indices at 1 and 2 threads, none touched the table");
  shapejit_set_num_threads(0);
}

// The vectorised index check (validate.cpp's target clones: the host's own, whatever ISA is
// pinned) on arrays of every length past the inline limit through two unrolled rounds, ending at
// (or starting right after) a protected page: a load past the last index faults. Validation only.
TEST_CASE("guard pages: the index range check reads no index outside the array (lengths 17..80)") {
  const int64_t offsets_v[1] = {0};
  int64_t calls = 0;
  for (shapejit_dtype dt : {SHAPEJIT_I64, SHAPEJIT_I32}) {
    for (Edge edge : {Edge::kEnd, Edge::kStart}) {
      const FencedInts off(std::vector<int64_t>(offsets_v, offsets_v + 1), dt, edge);
      for (int64_t n = 17; n <= 80; ++n) {
        std::vector<int64_t> indices(size_t(n), 999);
        for (int64_t bad_at : {int64_t(-1), n - 1}) {  // -1: all valid
          if (bad_at >= 0) indices[size_t(bad_at)] = 1000;
          const FencedInts idx(indices, dt, edge);
          static float table[4] = {};
          shapejit_embedding_bag_args a{};
          a.weight = table;
          a.weight_dtype = SHAPEJIT_F32;
          a.num_rows = 1000;
          a.dim = 1;
          a.row_stride = 1;
          a.indices = const_cast<FencedInts&>(idx).mem.as<void>();
          a.index_dtype = dt;
          a.num_indices = n;
          a.offsets = const_cast<FencedInts&>(off).mem.as<void>();
          a.offset_dtype = dt;
          a.num_offsets = 1;
          a.mode = SHAPEJIT_SUM;
          shapejit_embedding_bag_shapes s{};
          CAPTURE(n);
          CAPTURE(bad_at);
          CAPTURE(shapejit::test::dtype_name(dt));
          CHECK(shapejit_embedding_bag_output_shapes(&a, &s) == (bad_at < 0 ? SHAPEJIT_OK : SHAPEJIT_INVALID_ARGUMENT));
          ++calls;
        }
      }
    }
  }
  MESSAGE("guard pages: " << calls << " index checks of 17..80 indices at both edges, none read outside its array");
}

// A table may declare more rows than an int32 index can name; a negative int32 index must
// still be rejected (read as unsigned it is below 2^32, hence below such a row count). The table
// starts right after a protected page, so reading row -1 faults. Found by the fuzzer.
TEST_CASE("guard pages: negative int32 indices are rejected even for tables of more than 2^32 rows") {
  REQUIRE(shapejit_set_num_threads(1) == SHAPEJIT_OK);
  int64_t calls = 0;
  for (Isa isa : isas()) {
    shapejit::rt::ScopedIsaOverride pin(isa);
    for (int64_t declared_rows : {int64_t{1} << 31, (int64_t{1} << 32) + 1, int64_t{1} << 40}) {
      for (int64_t bad : {int64_t(-1), int64_t(-2), int64_t(std::numeric_limits<int32_t>::min())}) {
        const int64_t D = 16;
        const FencedTable table(4, D, D, Edge::kStart);
        const FencedInts idx({0, bad, 3}, SHAPEJIT_I32, Edge::kEnd), off({0, 1}, SHAPEJIT_I32, Edge::kEnd);
        shapejit_embedding_bag_args a{};
        a.weight = const_cast<FencedTable&>(table).mem.as<float>();
        a.num_rows = declared_rows;  // only rows 0..3 exist; valid indices never go further
        a.dim = D;
        a.row_stride = D;
        a.indices = const_cast<FencedInts&>(idx).mem.as<void>();
        a.index_dtype = SHAPEJIT_I32;
        a.num_indices = 3;
        a.offsets = const_cast<FencedInts&>(off).mem.as<void>();
        a.offset_dtype = SHAPEJIT_I32;
        a.num_offsets = 2;
        shapejit_embedding_bag_shapes s{};
        s.output_rows = 2;
        s.output_cols = D;
        s.index_out_dtype = SHAPEJIT_I32;
        s.bag_size_len = 2;
        s.max_indices_rows = 2;
        s.max_indices_cols = 1;
        GuardedOutputs out(s, 0xCD);
        CAPTURE(shapejit::jit::isa_name(isa));
        CAPTURE(declared_rows);
        CAPTURE(bad);
        CHECK(out.run(a) == SHAPEJIT_INVALID_ARGUMENT);
        CHECK(std::string(shapejit_last_error()).find("indices[1]") != std::string::npos);
        CHECK(out.untouched());
        ++calls;
      }
    }
  }
  MESSAGE("guard pages: " << calls << " negative int32 indices against tables of >= 2^31 declared rows, all rejected");
  shapejit_set_num_threads(0);
}

// The fence itself works: reading one float past the table's end faults (in a child process,
// so the test survives), and so does reading one before a start-aligned table.
TEST_CASE("guard pages: the fence faults one element past the end and before the start") {
  for (Edge edge : {Edge::kEnd, Edge::kStart}) {
    FencedTable t(2, 5, 7, edge);
    const volatile float* p = edge == Edge::kEnd ? t.mem.as<float>() + (t.stride + t.dim) : t.mem.as<float>() - 1;
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // Quietly: the test framework's (and a sanitizer's) fault report would read as a failure.
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      signal(SIGSEGV, SIG_DFL);
      (void)*p;
      _exit(0);  // reached only if the read did not fault
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    // A plain build dies of SIGSEGV; a sanitizer's handler reports the fault and exits non-zero.
    const bool faulted = WIFSIGNALED(status) ? WTERMSIG(status) == SIGSEGV : WEXITSTATUS(status) != 0;
    CHECK_MESSAGE(faulted, "reading past the fence did not fault (status " << status << ")");
  }
}

}  // namespace

// ---- Table dtypes ------------------------------------------------------------------------------

namespace {

// Bytes of a row of `table` (the packed row for quantized tables) and its stride unit.
int64_t dtype_row_bytes(shapejit_dtype t, int64_t d) {
  switch (t) {
    case SHAPEJIT_F16:
    case SHAPEJIT_BF16: return 2 * d;
    case SHAPEJIT_Q8: return d + 8;
    case SHAPEJIT_Q4: return (d + 1) / 2 + 4;
    case SHAPEJIT_Q2: return (d + 3) / 4 + 4;
    default: return 4 * d;
  }
}

// Three rows of `table`, `gap` bytes (quantized) or elements (f16/bf16) of stride beyond the
// row, whose last row's last byte (the bias of a quantized row) is the page's last byte.
struct FencedDtypeTable {
  shapejit_dtype dtype;
  int64_t dim, stride_units, stride_bytes;
  FencedBuffer mem;
  FencedDtypeTable(shapejit_dtype t, int64_t d, int64_t gap)
      : dtype(t), dim(d),
        stride_units(t == SHAPEJIT_F16 || t == SHAPEJIT_BF16 ? d + gap : dtype_row_bytes(t, d) + gap),
        stride_bytes(t == SHAPEJIT_F16 || t == SHAPEJIT_BF16 ? 2 * (d + gap) : dtype_row_bytes(t, d) + gap),
        mem(size_t(2 * stride_bytes + dtype_row_bytes(t, d)), Edge::kEnd) {
    auto* p = mem.as<unsigned char>();
    for (size_t b = 0; b < mem.bytes(); ++b) p[b] = static_cast<unsigned char>((b * 37 + 11) % 251);
    for (int64_t r = 0; r < 3; ++r) {
      unsigned char* row = p + r * stride_bytes;
      if (t == SHAPEJIT_F16 || t == SHAPEJIT_BF16) {  // small integers (the random bytes may be NaN)
        for (int64_t c = 0; c < d; ++c) {
          const float v = float((r * 7 + c * 3) % 11 - 5);
          const uint16_t h = t == SHAPEJIT_F16 ? shapejit::ref::f32_to_f16(v) : shapejit::ref::f32_to_bf16(v);
          std::memcpy(row + 2 * c, &h, 2);
        }
        continue;
      }
      const int64_t codes = dtype_row_bytes(t, d) - (t == SHAPEJIT_Q8 ? 8 : 4);
      const float scale = 0.25f * float(r + 1), bias = -1.5f + float(r);
      if (t == SHAPEJIT_Q8) {
        std::memcpy(row + codes, &scale, 4);
        std::memcpy(row + codes + 4, &bias, 4);
      } else {
        const uint16_t hs = shapejit::ref::f32_to_f16(scale), hb = shapejit::ref::f32_to_f16(bias);
        std::memcpy(row + codes, &hs, 2);
        std::memcpy(row + codes + 2, &hb, 2);
      }
    }
  }
};

struct DtypeVariant {
  shapejit_mode mode;
  shapejit_dtype psw;  // SHAPEJIT_I32: no weights
  bool padding, pruned;
};

std::vector<DtypeVariant> dtype_variants(shapejit_dtype t) {
  const bool q = t == SHAPEJIT_Q8 || t == SHAPEJIT_Q4 || t == SHAPEJIT_Q2;
  const shapejit_dtype w = q ? SHAPEJIT_F32 : t;
  std::vector<DtypeVariant> v{{SHAPEJIT_SUM, SHAPEJIT_I32, false, false}, {SHAPEJIT_SUM, w, false, false},
                              {SHAPEJIT_MEAN, SHAPEJIT_I32, false, false}, {SHAPEJIT_MAX, SHAPEJIT_I32, true, false}};
  if (t == SHAPEJIT_Q4 || t == SHAPEJIT_Q2) v.push_back({SHAPEJIT_SUM, SHAPEJIT_F16, true, false});
  if (q) v.push_back({SHAPEJIT_MAX, SHAPEJIT_I32, false, true}), v.push_back({SHAPEJIT_SUM, w, true, true});
  return v;
}

std::string run_valid_dtype(const FencedDtypeTable& t, const FencedInts& idx, const FencedInts& off, shapejit_dtype dt,
                            const DtypeVariant& v, shapejit_dtype out, const void* psw) {
  static const int32_t kMapping[] = {2, -1, 2, 0, 1};  // indices 0..2 (and 3, 4) of the pruned form
  shapejit_embedding_bag_args a{};
  a.weight = const_cast<FencedDtypeTable&>(t).mem.as<void>();
  a.weight_dtype = t.dtype;
  a.num_rows = 3;
  a.dim = t.dim;
  a.row_stride = t.stride_units;
  a.indices = const_cast<FencedInts&>(idx).mem.as<void>();
  a.index_dtype = dt;
  a.num_indices = int64_t(kLastRowIndices.size());
  a.offsets = const_cast<FencedInts&>(off).mem.as<void>();
  a.offset_dtype = dt;
  a.num_offsets = int64_t(kLastRowOffsets.size());
  a.mode = v.mode;
  a.per_sample_weights = v.psw != SHAPEJIT_I32 ? psw : nullptr;
  a.has_padding_idx = v.padding;
  a.padding_idx = 1;  // the last row is still read
  shapejit_embedding_bag_ex_args e{};
  shapejit_embedding_bag_ex_init(&e, &a);
  e.output_dtype = out;
  if (v.psw != SHAPEJIT_I32) e.per_sample_weights_dtype = v.psw;
  if (v.pruned) e.compressed_indices_mapping = kMapping, e.mapping_len = 5;
  shapejit_embedding_bag_shapes s{};
  if (shapejit_embedding_bag_ex_output_shapes(&e, &s) != SHAPEJIT_OK) return shapejit_last_error();
  GuardedOutputs got(s, 0xCD, false, out), want(s, 0x5A, false, out);
  if (got.run(e) != SHAPEJIT_OK) return shapejit_last_error();
  shapejit::ref::embedding_bag(e, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                               want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
  return shapejit::test::first_output_difference(want, got, out);
}

}  // namespace

TEST_CASE("guard pages: f16, bf16 and packed Q8/Q4/Q2 rows whose last byte ends the page (every D, ISA, mode)") {
  REQUIRE(shapejit_set_num_threads(1) == SHAPEJIT_OK);
  // The weights end at a PROT_NONE page too: the kernels read f32 and bf16 weights, the plan
  // widens f16 ones (runtime/embag/widen_weights.hpp), and neither may read past the last.
  const float kWeights[] = {0.5f, -1.0f, 2.0f, 1.0f, 3.0f, -0.25f, 1.5f};
  FencedBuffer fence32(sizeof kWeights, Edge::kEnd), fence_f16(7 * 2, Edge::kEnd), fence_bf16(7 * 2, Edge::kEnd);
  float* psw32 = fence32.as<float>();
  uint16_t *psw_f16 = fence_f16.as<uint16_t>(), *psw_bf16 = fence_bf16.as<uint16_t>();
  for (int i = 0; i < 7; ++i) {
    psw32[i] = kWeights[i];
    psw_f16[i] = shapejit::ref::f32_to_f16(kWeights[i]), psw_bf16[i] = shapejit::ref::f32_to_bf16(kWeights[i]);
  }
  int64_t calls = 0;
  for (Isa isa : isas()) {
    shapejit::rt::ScopedIsaOverride pin(isa);
    for (shapejit_dtype t : {SHAPEJIT_F16, SHAPEJIT_BF16, SHAPEJIT_Q8, SHAPEJIT_Q4, SHAPEJIT_Q2}) {
      int64_t last = 0;
      for (int64_t raw : dims()) {
        const int64_t D = t == SHAPEJIT_Q4 ? raw + raw % 2 : t == SHAPEJIT_Q2 ? (raw + 3) / 4 * 4 : raw;
        if (D == last) continue;
        last = D;
        for (int64_t gap : {0, 3}) {
          const FencedDtypeTable table(t, D, gap);
          for (shapejit_dtype dt : {SHAPEJIT_I64, SHAPEJIT_I32}) {
            const FencedInts idx(kLastRowIndices, dt, Edge::kEnd), off(kLastRowOffsets, dt, Edge::kEnd);
            for (const DtypeVariant& v : dtype_variants(t)) {
              const bool q = t == SHAPEJIT_Q8 || t == SHAPEJIT_Q4 || t == SHAPEJIT_Q2;
              for (shapejit_dtype out : {SHAPEJIT_F32, SHAPEJIT_F16, SHAPEJIT_BF16}) {
                if (q ? (dt == SHAPEJIT_I32 && out != SHAPEJIT_F32) : out != t) continue;
                const void* psw = v.psw == SHAPEJIT_F16 ? static_cast<const void*>(psw_f16)
                                  : v.psw == SHAPEJIT_BF16 ? static_cast<const void*>(psw_bf16)
                                                           : static_cast<const void*>(psw32);
                CAPTURE(shapejit::jit::isa_name(isa));
                CAPTURE(shapejit::test::dtype_name(t));
                CAPTURE(D);
                CAPTURE(gap);
                CAPTURE(shapejit::test::mode_name(v.mode));
                CAPTURE(shapejit::test::dtype_name(v.psw));  // i32: no weights
                CAPTURE(v.padding);
                CAPTURE(v.pruned);
                CAPTURE(shapejit::test::dtype_name(out));
                CAPTURE(shapejit::test::dtype_name(dt));
                const std::string diff = run_valid_dtype(table, idx, off, dt, v, out, psw);
                CHECK_MESSAGE(diff.empty(), diff);
                ++calls;
              }
            }
          }
        }
      }
    }
  }
  MESSAGE("guard pages: " << calls << " valid calls on f16/bf16/Q8/Q4/Q2 tables ending at a PROT_NONE page, no fault");
  shapejit_set_num_threads(0);
}

// offset2bag is filled a bag at a time in vector stores (EmbagSkeleton::emit_offset2bag_fill),
// the last one overlapping back from the bag's end. With offset2bag between PROT_NONE pages, a
// bag of every length around the register widths that ends the array (or starts it) must be
// written without a store past either end.
TEST_CASE("guard pages: offset2bag filled in vector stores stays within its array (every ISA, both edges)") {
  constexpr int64_t kOther = 5, kLongest = 2 * 16 + 1, dim = 16;
  const std::vector<float> table(size_t(4 * dim), 1.0f);
  int64_t calls = 0;
  for (Isa isa : shapejit::test::host_isas()) {
    asmjit::JitRuntime rt;
    for (shapejit::DType ids : {shapejit::DType::kI32, shapejit::DType::kI64}) {
      const size_t id_bytes = ids == shapejit::DType::kI32 ? 4 : 8;
      for (int variant = 0; variant < 3; ++variant) {  // the modes that write offset2bag
        shapejit::jit::EmbagKey key;
        key.isa = isa;
        key.dim = dim;
        key.mode = variant == 0 ? shapejit::Mode::kMean : variant == 1 ? shapejit::Mode::kMax : shapejit::Mode::kSum;
        key.padding = variant == 2;
        key.index = key.offset = ids;
        key.prefetch = 0;
        const auto kernel = shapejit::jit::generate_embag_kernel(key, rt);
        for (Edge edge : {Edge::kEnd, Edge::kStart}) {
          for (int64_t len = 0; len <= kLongest; ++len) {
            // The bag of `len` indices ends the array (kEnd) or starts it (kStart).
            const int64_t first = edge == Edge::kEnd ? kOther : len, n = kOther + len;
            std::vector<int64_t> idx(size_t(n), 1), off{0, first};
            FencedInts indices(idx, ids == shapejit::DType::kI32 ? SHAPEJIT_I32 : SHAPEJIT_I64, Edge::kEnd);
            FencedInts offsets(off, ids == shapejit::DType::kI32 ? SHAPEJIT_I32 : SHAPEJIT_I64, Edge::kEnd);
            FencedBuffer o2b(size_t(n) * id_bytes, edge);
            std::vector<float> out(size_t(2 * dim));
            std::vector<int64_t> bag_size(2), max_indices(size_t(2 * dim));
            shapejit::jit::EmbagKernelArgs a{};
            a.weight = table.data();
            a.row_stride_bytes = dim * 4;
            a.dim = dim;
            a.indices = indices.mem.as<void>();
            a.offsets = offsets.mem.as<void>();
            a.num_offsets = 2;
            a.num_indices = n;
            a.padding_idx = 3;  // never among the indices
            a.bag_begin = 0;
            a.bag_end = 2;
            a.output = out.data();
            a.offset2bag = o2b.as<void>();
            a.bag_size = bag_size.data();
            a.max_indices = max_indices.data();
            shapejit::test::note_direct_run(isa);
            kernel.fn(&a);
            ++calls;
            for (int64_t i = 0; i < n; ++i) {
              const int64_t got = id_bytes == 4 ? o2b.as<int32_t>()[i] : o2b.as<int64_t>()[i];
              const int64_t want = i < first ? 0 : 1;
              if (got != want) {
                FAIL_CHECK(key.name() << ", bag of " << len << (edge == Edge::kEnd ? " ending" : " starting")
                                      << " the array: offset2bag[" << i << "] = " << got << ", want " << want);
                break;
              }
            }
          }
        }
        rt.release(kernel.fn);
      }
    }
  }
  MESSAGE("guard pages: " << calls << " offset2bag fills against a PROT_NONE page, no fault");
}

TEST_CASE("guard pages: f16 weights widened from either edge of a page, every length to 40") {
  int64_t runs = 0;
  for (const Edge edge : {Edge::kEnd, Edge::kStart})
    for (int64_t n = 1; n <= 40; ++n) {
      CAPTURE(n);
      FencedBuffer words(size_t(n) * 2, edge);
      uint16_t* w = words.as<uint16_t>();
      for (int64_t i = 0; i < n; ++i) w[i] = uint16_t(0x3C00 + 37 * i);  // 1.0 and up
      std::vector<float> wide(static_cast<size_t>(n));
      shapejit::rt::widen_f16_weights(w, n, wide.data());
      for (int64_t i = 0; i < n; ++i) CHECK(wide[size_t(i)] == shapejit::ref::f16_to_f32(w[i]));
      ++runs;
    }
  MESSAGE("guard pages: " << runs << " f16 weight widenings against a PROT_NONE page, no fault");
}

// shapejit_demo: runs the seed workload (4096 x 128 f32 table, 256 bags x 32 int64 indices,
// sum) and a few other modes through the library, and prints time, GB/s of gathered rows and
// whether every output is bitwise equal to the scalar reference.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ref/embedding_bag.hpp"
#include "shapejit/shapejit.h"

namespace {

struct Case {
  const char* name;
  shapejit_mode mode;
  int64_t dim;
  bool weighted;
  bool padding;
};

struct Outputs {
  std::vector<float> out;
  std::vector<int64_t> o2b, bag, maxi;
  explicit Outputs(const shapejit_embedding_bag_shapes& s)
      : out(size_t(s.output_rows * s.output_cols)), o2b(size_t(s.offset2bag_len)), bag(size_t(s.bag_size_len)),
        maxi(size_t(s.max_indices_rows * s.max_indices_cols)) {}
  bool operator==(const Outputs& o) const {
    return out.size() == o.out.size() && std::memcmp(out.data(), o.out.data(), out.size() * 4) == 0 &&
           o2b == o.o2b && bag == o.bag && maxi == o.maxi;
  }
};

template <class F>
double best_us(F&& f, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main() {
  const int64_t rows = 4096, bags = 256, len = 32;
  std::mt19937_64 rng(42);
  std::vector<int64_t> indices(size_t(bags * len)), offsets(size_t(bags), 0);
  for (auto& i : indices) i = int64_t(rng() % uint64_t(rows));
  for (int64_t b = 0; b < bags; ++b) offsets[size_t(b)] = b * len;
  std::vector<float> psw(indices.size());
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (auto& w : psw) w = uni(rng);

  const Case cases[] = {{"seed: sum d128", SHAPEJIT_SUM, 128, false, false},
                        {"mean d128", SHAPEJIT_MEAN, 128, false, false},
                        {"weighted sum d128", SHAPEJIT_SUM, 128, true, false},
                        {"max d128", SHAPEJIT_MAX, 128, false, false},
                        {"sum d64 + padding", SHAPEJIT_SUM, 64, false, true},
                        {"max d300", SHAPEJIT_MAX, 300, false, false}};
  std::printf("%-20s %12s %10s %12s %10s %s\n", "case", "shapejit us", "GB/s", "reference us", "speed-up",
              "bitwise equal to reference");
  bool all_equal = true;
  for (const Case& c : cases) {
    std::vector<float> table(size_t(rows * c.dim));
    for (auto& x : table) x = uni(rng);
    shapejit_embedding_bag_args a{};
    a.weight = table.data();
    a.weight_dtype = SHAPEJIT_F32;
    a.num_rows = rows;
    a.dim = a.row_stride = c.dim;
    a.indices = indices.data();
    a.index_dtype = SHAPEJIT_I64;
    a.num_indices = int64_t(indices.size());
    a.offsets = offsets.data();
    a.offset_dtype = SHAPEJIT_I64;
    a.num_offsets = bags;
    a.mode = c.mode;
    a.per_sample_weights = c.weighted ? psw.data() : nullptr;
    a.has_padding_idx = c.padding;
    a.padding_idx = 7;
    shapejit_embedding_bag_shapes s{};
    if (shapejit_embedding_bag_output_shapes(&a, &s) != SHAPEJIT_OK) {
      std::printf("%s: %s\n", c.name, shapejit_last_error());
      return 1;
    }
    Outputs lib(s), ref(s);
    const double lib_us = best_us([&] { shapejit_embedding_bag(&a, lib.out.data(), lib.o2b.data(), lib.bag.data(), lib.maxi.data()); }, 200);
    const double ref_us = best_us([&] { shapejit::ref::embedding_bag(a, ref.out.data(), ref.o2b.data(), ref.bag.data(), ref.maxi.data()); }, 20);
    const bool equal = lib == ref;
    all_equal = all_equal && equal;
    const double gbps = double(indices.size()) * double(c.dim) * 4.0 / (lib_us * 1e3);
    std::printf("%-20s %12.1f %10.1f %12.1f %9.1fx %s\n", c.name, lib_us, gbps, ref_us, ref_us / lib_us,
                equal ? "yes" : "NO");
  }
  std::printf("(table %lld rows, %lld bags x %lld int64 indices, 1 thread unless SHAPEJIT_NUM_THREADS is set; "
              "best of repeated calls)\n", (long long)rows, (long long)bags, (long long)len);
  return all_equal ? 0 : 1;
}

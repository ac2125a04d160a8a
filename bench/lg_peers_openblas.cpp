// OpenBLAS peers of the linear-group benchmark (libopenblas-dev, built with SHAPEJIT_BENCH_OPENBLAS).
//
// openblas_3x      one cblas_sgemm per part on the part's slice of the packed weight (what a
//                  framework does after splitting in_proj_weight), each into its own output.
// openblas_packed  one cblas_sgemm per group of parts sharing an input and contiguous weight
//                  rows (self-attention: one call with N = 3E; cross-attention: q, then k and v
//                  together), into one [M, N_group] output; not registered when no part shares.
// Bias: broadcast into the output rows, then beta = 1 (ATen's addmm does the same).
//
// Kernel choice: OpenBLAS 0.3.21 takes this Zen 5 CPU for Haswell (AVX2 kernels), and the
// build machine's environment even sets OPENBLAS_CORETYPE=Haswell. OpenBLAS reads the variable
// once, while the library initialises (before main; libtorch loads it too), so a constructor
// below re-executes the benchmark binary with OPENBLAS_CORETYPE=SkylakeX (its AVX-512 kernels)
// when the host has AVX-512F/BW/DQ/VL and the variable says otherwise. Another core can be
// asked for with SHAPEJIT_BENCH_OPENBLAS_CORETYPE=<name> (empty: keep OPENBLAS_CORETYPE as is).
// The core in use is printed in the implementation summary.
#include "lg_peers_common.hpp"
#include "jit/host_features.hpp"

#if defined(SHAPEJIT_BENCH_OPENBLAS)
#include <cblas.h>
#include <strings.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#endif

namespace shapejit::bench {

#if defined(SHAPEJIT_BENCH_OPENBLAS)
namespace {

// Runs from .init_array, after the shared libraries' own constructors (so OpenBLAS has already
// picked its core) and before main; glibc passes argc, argv and envp to these functions.
void reexec_with_coretype(int /*argc*/, char** argv, char** /*envp*/) {
  if (argv == nullptr || std::getenv("SHAPEJIT_BENCH_REEXECED") != nullptr) return;
  const char* wanted = std::getenv("SHAPEJIT_BENCH_OPENBLAS_CORETYPE");
  if (wanted == nullptr) {
#if defined(__x86_64__)
    if (!jit::host_runs(jit::Isa::kAvx512)) return;  // the engine's rule; safe before main
    wanted = "SkylakeX";
#else
    return;  // OpenBLAS's own choice is right off x86
#endif
  }
  const char* current = std::getenv("OPENBLAS_CORETYPE");
  if (*wanted == '\0' || (current != nullptr && strcasecmp(current, wanted) == 0)) return;
  setenv("OPENBLAS_CORETYPE", wanted, 1);
  setenv("SHAPEJIT_BENCH_REEXECED", "1", 1);  // never a second time, whatever happens
  execv("/proc/self/exe", argv);
  std::perror("shapejit_bench: re-exec with OPENBLAS_CORETYPE set failed; OpenBLAS keeps its core");
}

[[gnu::section(".init_array"), gnu::used]] void (*const kReexecWithCoretype)(int, char**, char**) =
    &reexec_with_coretype;

class OpenblasImpl final : public LgImpl {
 public:
  OpenblasImpl(const LgData& data, bool packed) : d_(data) {
    const LgCase& c = *data.c;
    if (packed) {
      groups_ = lg_packed_groups(c);
    } else {
      for (size_t i = 0; i < c.parts.size(); ++i)
        groups_.push_back({c.parts[i].input, c.parts[i].row_begin, c.parts[i].rows, {i}});
    }
    for (const LgGroup& g : groups_) group_out_.emplace_back(size_t(c.input_rows[size_t(g.input)] * g.rows));
    // Where each part's rows land: its own buffer (3x) or its columns of the group's buffer.
    part_loc_.resize(c.parts.size());
    for (size_t gi = 0; gi < groups_.size(); ++gi)
      for (size_t p : groups_[gi].parts) part_loc_[p] = gi;
  }

  void activate(int threads) override { openblas_set_num_threads(threads); }

  void run() override {
    const LgCase& c = *d_.c;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      const LgGroup& g = groups_[gi];
      const int64_t m = c.input_rows[size_t(g.input)];
      float* y = group_out_[gi].data();
      lg_fill_bias(y, m, g.rows, g.rows, d_.bias->data() + g.row_begin);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(m), blasint(g.rows), blasint(c.k), 1.0f,
                  d_.inputs[size_t(g.input)].data(), blasint(c.k), d_.weight->data() + g.row_begin * c.k,
                  blasint(c.k), 1.0f, y, blasint(g.rows));
    }
  }

  const float* out_row(size_t part, int64_t m) const override {
    const LgGroup& g = groups_[part_loc_[part]];
    return group_out_[part_loc_[part]].data() + m * g.rows + (d_.c->parts[part].row_begin - g.row_begin);
  }

  std::string info() const override {
    return std::string("core ") + openblas_get_corename() + ", " + std::to_string(groups_.size()) + " sgemm";
  }

 private:
  const LgData& d_;
  std::vector<LgGroup> groups_;
  std::vector<LgBuffer> group_out_;
  std::vector<size_t> part_loc_;
};

}  // namespace

std::unique_ptr<LgImpl> make_openblas_3x(const LgData& data, int) {
  return std::make_unique<OpenblasImpl>(data, false);
}
std::unique_ptr<LgImpl> make_openblas_packed(const LgData& data, int) {
  return std::make_unique<OpenblasImpl>(data, true);
}
bool openblas_applies(const LgCase&, int) { return true; }
bool openblas_packed_applies(const LgCase& c, int) { return lg_packed_groups(c).size() < c.parts.size(); }

#else

std::unique_ptr<LgImpl> make_openblas_3x(const LgData&, int) { return nullptr; }
std::unique_ptr<LgImpl> make_openblas_packed(const LgData&, int) { return nullptr; }
bool openblas_applies(const LgCase&, int) { return false; }
bool openblas_packed_applies(const LgCase&, int) { return false; }

#endif

}  // namespace shapejit::bench

// XNNPACK peer of the linear-group benchmark (libxnnpack-dev + libpthreadpool-dev, built with
// SHAPEJIT_BENCH_XNNPACK).
//
// xnnpack_3x: one fully-connected operator per part, created once from the part's slice of the
// packed weight ([N_p, K] is XNNPACK's [output_channels, input_channels] kernel layout, packed by
// XNNPACK at creation) with its bias slice, set up once for the case's batch size and buffers;
// the run is three xnn_run_operator calls. One thread runs on the caller (no pthreadpool), more
// use a pthreadpool of that size (set up again when the thread count changes, untimed).
// xnnpack_3x/<case>/t1/qd8-qc8w: the row names why this XNNPACK has no quantized peer.
#include "lg_peers_common.hpp"

#if defined(SHAPEJIT_BENCH_XNNPACK)
#include <pthreadpool.h>
#include <xnnpack.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <map>
#include <stdexcept>
#include <vector>
#endif

namespace shapejit::bench {

#if defined(SHAPEJIT_BENCH_XNNPACK)
namespace {

void check(xnn_status status, const char* what) {
  if (status != xnn_status_success)
    throw std::runtime_error(std::string("XNNPACK ") + what + " failed with status " + std::to_string(int(status)));
}

// "" when a small fully-connected operator runs in a forked child, else why not. With pip
// torch's libtorch linked in (the ATen rows), Debian's XNNPACK was seen to pick AVX-512 kernels
// on an AVX2 host and die of SIGILL; the probe turns that into an `unavailable` row instead of
// ending the whole benchmark.
std::string probe_in_child() {
  const pid_t pid = fork();
  if (pid < 0) return "";  // no probe possible: run it
  if (pid == 0) {
    std::vector<float> w(16 * 16, 0.5f), x(16, 1.0f), y(16);
    xnn_operator_t op = nullptr;
    const bool ok = xnn_initialize(nullptr) == xnn_status_success &&
                    xnn_create_fully_connected_nc_f32(16, 16, 16, 16, w.data(), nullptr, -INFINITY, INFINITY, 0,
                                                      &op) == xnn_status_success &&
                    xnn_setup_fully_connected_nc_f32(op, 1, x.data(), y.data(), nullptr) == xnn_status_success &&
                    xnn_run_operator(op, nullptr) == xnn_status_success && y[0] == 8.0f;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return "";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFSIGNALED(status))
    return std::string("unavailable: XNNPACK died of ") + strsignal(WTERMSIG(status)) +
           " running a 16x16 fully-connected operator in a probe process (with pip torch's libtorch linked "
           "in, this Debian XNNPACK has picked AVX-512 kernels on an AVX2 host)";
  return "unavailable: XNNPACK gave a wrong or failed result on a 16x16 probe";
}

class XnnpackImpl final : public LgImpl {
 public:
  explicit XnnpackImpl(const LgData& data) : d_(data), outs_(*data.c) {
    static const std::string probe = probe_in_child();
    if (!probe.empty()) throw std::runtime_error(probe);
    static const xnn_status init = xnn_initialize(nullptr);
    check(init, "xnn_initialize");
    const LgCase& c = *data.c;
    for (const LgPart& p : c.parts) {
      xnn_operator_t op = nullptr;
      check(xnn_create_fully_connected_nc_f32(size_t(c.k), size_t(p.rows), size_t(c.k), size_t(p.rows),
                                              data.part_weight(p), data.part_bias(p), -INFINITY, INFINITY,
                                              0, &op),
            "xnn_create_fully_connected_nc_f32");
      ops_.push_back(op);
    }
  }
  ~XnnpackImpl() override {
    for (xnn_operator_t op : ops_) xnn_delete_operator(op);
    for (auto& [threads, pool] : pools_)
      if (pool != nullptr) pthreadpool_destroy(pool);
  }
  XnnpackImpl(const XnnpackImpl&) = delete;
  XnnpackImpl& operator=(const XnnpackImpl&) = delete;

  // The setup binds batch size, buffers and thread pool; it is redone only when the thread
  // count changes (one thread: no pool, the caller computes).
  void activate(int threads) override {
    if (threads == active_threads_) return;
    auto [it, inserted] = pools_.try_emplace(threads, nullptr);
    if (inserted && threads > 1) it->second = pthreadpool_create(size_t(threads));
    pool_ = it->second;
    const LgCase& c = *d_.c;
    for (size_t i = 0; i < ops_.size(); ++i)
      check(xnn_setup_fully_connected_nc_f32(ops_[i], size_t(c.m_of(c.parts[i])), d_.part_input(c.parts[i]),
                                             outs_.part(i), pool_),
            "xnn_setup_fully_connected_nc_f32");
    active_threads_ = threads;
  }

  void run() override {
    for (xnn_operator_t op : ops_) check(xnn_run_operator(op, pool_), "xnn_run_operator");
  }

  const float* out_row(size_t part, int64_t m) const override { return outs_.row(part, m); }

 private:
  const LgData& d_;
  LgPartOutputs outs_;
  std::vector<xnn_operator_t> ops_;
  std::map<int, pthreadpool_t> pools_;
  pthreadpool_t pool_ = nullptr;
  int active_threads_ = 0;
};

}  // namespace

std::unique_ptr<LgImpl> make_xnnpack_3x(const LgData& data, int) {
  return std::make_unique<XnnpackImpl>(data);
}
bool xnnpack_applies(const LgCase&, int) { return true; }

// The quantized row reports why it has no figure: this XNNPACK (Debian's 2022 snapshot) has no
// fully-connected operator the qd8-qc8w form can be compared with.
std::unique_ptr<LgImpl> make_xnnpack_qd8(const LgData&, int) {
  throw std::runtime_error(
      "unavailable: this XNNPACK (Debian's 2022 snapshot) has no dynamic (qd8) or per-channel (qc8) "
      "fully-connected operator; its qs8/qu8 one is statically quantized (one weight scale, int8 output "
      "requantized with a scale fixed at creation), which computes neither per-channel weights nor f32 outputs");
}
bool xnnpack_qd8_applies(const LgCase&, int) { return true; }

#else

std::unique_ptr<LgImpl> make_xnnpack_3x(const LgData&, int) { return nullptr; }
bool xnnpack_applies(const LgCase&, int) { return false; }
std::unique_ptr<LgImpl> make_xnnpack_qd8(const LgData&, int) { return nullptr; }
bool xnnpack_qd8_applies(const LgCase&, int) { return false; }

#endif

}  // namespace shapejit::bench

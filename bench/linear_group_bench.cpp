// Linear-group benchmarks: shapejit's LinearGroup (jit) against oneDNN, OpenBLAS, libxsmm and
// XNNPACK on the q/k/v in-projections of attention, and against the FMA peak and the DRAM read
// bandwidth of the machine, side by side in one process.
//
// Names: linear_group/<impl>/<case>/t<threads>
//   impl  jit              shapejit::LinearGroup (public C++ API), packed form, one call
//         onednn           bench/lg_peers_onednn.cpp     (matmul primitives, packed groups)
//         openblas_3x      bench/lg_peers_openblas.cpp   (one sgemm per part)
//         openblas_packed  bench/lg_peers_openblas.cpp   (one sgemm per packed group)
//         libxsmm_3x       bench/lg_peers_libxsmm.cpp    (small shapes only, t1)
//         xnnpack_3x       bench/lg_peers_xnnpack.cpp    (one fully-connected operator per part)
//   case  tiny_cross_e16   the seed's cross-attention: E=16, q from 5 rows with W[0:E], k and v
//                          from 7 memory rows with W[E:3E]
//         self_e768_m128   self-attention: one input [128, 768], N = 3 x 768
//         self_e1024_m512  one input [512, 1024], N = 3 x 1024
//         decode_e4096_m1  one input [1, 4096], N = 3 x 4096: 201 MB of weights per call, 6x the
//         decode_e4096_m8  L3, so every call streams them from DRAM (m1 and m8 share one copy)
// Quantized rows, 1 thread, on tiny_cross_e16, self_e768_m128 and decode_e4096_m1:
//   linear_group/<impl>/<case>/t1/<form>
//   form  qd8-qc8w, qd8-qc4w  dynamic int8 inputs (per row) x int8 / int4 per-channel weights
//         f32-qc8w, f32-qc4w  f32 inputs x int8 / int4 per-channel weights (weight-only)
//   impl  jit              our LinearGroup in that form (q-spec.md's C++ API: LinearGroupDesc::quant,
//                          weights quantized at build time); a build whose API lacks the forms
//                          reports the rows unavailable. Until the engine has quantized kernels,
//                          the group runs the scalar reference: the row's info says so (the
//                          engine's reference_linear_groups counter rose while it was built)
//         onednn           qd8-qc8w only: bench/lg_peers_onednn.cpp (u8 x s8 matmul, the
//                          input quantized per tensor inside the timed call)
//         xnnpack_3x       qd8-qc8w only: reports why Debian's XNNPACK has no such operator
// Decode rows count the bytes of the form's weights (codes and per-channel scales).
// Plus the limits: linear_group/fma_peak/zmm/t{1,2} and fma_peak/ymm/t1 (bench/fma_peak.cpp: 12
// independent FMA chains per thread) and linear_group/read_peak/dram/t{1,2} (a 256 MiB streaming
// read split over the threads).
// Every part computes Y_p = X_p W_p^T + b_p into its own row-major output (bias included for
// every implementation; see lg_peers_common.hpp).
//
// Timing: as for every row of shapejit_bench (bench_main.cpp), --benchmark_repetitions
// repetitions with random interleaving, so the repetitions of all implementations of a case are
// spread over the same stretch of the run, and a row's time is its fastest repetition's wall
// time per call. The untimed part of a benchmark applies the thread count and makes one warm-up
// call (skipped when a call takes 0.5 s or more: the scalar fallback). Each row sets plain
// per-call counters that the reporter turns into figures and ratios (linear_group_rows.cpp):
//   flops       2 * M_p * N_p * K summed over parts         -> GFLOPs = flops / time
//   peak_flops  measured_fma_peak(threads), flop/s           -> vs_peak = GFLOPs / peak
//   bytes       (decode rows) weight bytes read per call     -> GBps = bytes / time
//   read_bw     (decode rows) measured_read_bandwidth(threads) -> vs_bw = GBps / bandwidth
// where peak and bandwidth are the larger of that counter (best of several short bursts in this
// process, on first use) and the GFLOPs / GBps of the fma_peak/zmm / read_peak/dram row of the
// same thread count in this run, so that neither ratio is flattered by an unlucky measurement;
// and vs_best_peer = time of the fastest peer row of the same case and thread count / time
// (1.0 on the best peer itself, > 1 when faster than every peer), empty when a filter dropped
// every peer of the case.
//
// Every implementation is built once per case (weights packed or reordered, primitives made,
// kernels dispatched) and checked once, before its first timing, against a double-precision
// reference on three rows of every part with the tolerance of split-gemm-semantics.md; a
// mismatch fails the row. Built implementations stay alive for the whole run (random
// interleaving comes back to every case), about 2.4 GB of resident memory in all.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fma_peak.hpp"
#include "lg_peers_common.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::bench {
namespace {

// ---- The cases --------------------------------------------------------------------------

LgCase self_case(const char* name, int64_t e, int64_t m) {
  return LgCase{name, e, {m}, {{0, 0, e}, {0, e, e}, {0, 2 * e, e}}};
}

const std::vector<LgCase>& cases() {
  static const std::vector<LgCase> all = {
      LgCase{"tiny_cross_e16", 16, {5, 7}, {{0, 0, 16}, {1, 16, 16}, {1, 32, 16}}},
      self_case("self_e768_m128", 768, 128),
      self_case("self_e1024_m512", 1024, 512),
      self_case("decode_e4096_m1", 4096, 1),
      self_case("decode_e4096_m8", 4096, 8),
  };
  return all;
}

// The weight-streaming cases, which report GB/s of weights and the ratio to the read bandwidth.
bool is_decode(const LgCase& c) {
  for (int64_t m : c.input_rows)
    if (m > 8) return false;
  return c.k >= 1024;
}

// ---- The jit implementation: shapejit's public API ------------------------------------------

// Whether this build's C++ API has the quantized forms (q-spec.md: LinearGroupDesc::quant). The
// bench builds against the API before and after they land; without them the rows say so.
template <class Desc>
constexpr bool kHasLinearQuant = requires(Desc d) { d.quant; };

template <class Desc>
void set_linear_quant(Desc& desc, LgForm form) {
  if constexpr (kHasLinearQuant<Desc>) {
    desc.quant = static_cast<decltype(desc.quant)>(int(form));  // LinearQuant's values are LgForm's
  } else if (form != LgForm::kF32) {
    throw std::runtime_error(std::string("unavailable: this build's LinearGroupDesc has no quant field (the ") +
                             lg_form_name(form) + " form of q-spec.md is not implemented yet)");
  }
}

class JitImpl final : public LgImpl {
 public:
  JitImpl(const LgData& data, LgForm form)
      : form_(form), reference_before_(kernel_cache_stats().reference_linear_groups), group_(describe(data, form)),
        reference_after_(kernel_cache_stats().reference_linear_groups), outs_(*data.c) {
    const LgCase& c = *data.c;
    for (size_t i = 0; i < c.parts.size(); ++i) {
      inputs_.push_back(LinearInput{data.part_input(c.parts[i]), c.m_of(c.parts[i]), c.k, 0});
      outputs_.push_back(LinearOutput{outs_.part(i), 0, 0, 0});
    }
  }
  void activate(int threads) override { shapejit::set_num_threads(threads); }
  void run() override { group_.run(inputs_, outputs_); }
  const float* out_row(size_t part, int64_t m) const override { return outs_.row(part, m); }
  LgQuantization quantization() const override { return lg_form_quantization(form_); }
  // Whether building the group made the engine fall back to its scalar reference (no kernel for
  // the form on this host, or the code-memory limit): the row then times the reference.
  std::string info() const override {
    if (reference_after_ == reference_before_) return "generated kernels";
    return "SCALAR REFERENCE, no generated kernel (engine stats: reference_linear_groups " +
           std::to_string(reference_before_) + " -> " + std::to_string(reference_after_) + ")";
  }

 private:
  static LinearGroupDesc describe(const LgData& data, LgForm form) {
    const LgCase& c = *data.c;
    std::vector<LinearPart> parts;
    for (const LgPart& p : c.parts) {
      LinearPart part;
      part.row_begin = p.row_begin;
      part.rows = p.rows;
      parts.push_back(part);
    }
    LinearGroupDesc desc = LinearGroupDesc::packed(
        data.weight->data(), c.weight_rows(), c.k, std::span<const float>(data.bias->data(), size_t(c.weight_rows())),
        std::move(parts));
    set_linear_quant(desc, form);  // the weights are quantized at build time (no codes given)
    return desc;
  }
  LgForm form_;
  int64_t reference_before_;
  LinearGroup group_;
  int64_t reference_after_;
  LgPartOutputs outs_;
  std::vector<LinearInput> inputs_;
  std::vector<LinearOutput> outputs_;
};

template <LgForm kForm>
std::unique_ptr<LgImpl> make_jit(const LgData& data, int) {
  return std::make_unique<JitImpl>(data, kForm);
}
bool jit_applies(const LgCase&, int) { return true; }

// ---- The implementation table --------------------------------------------------------------

struct ImplSpec {
  const char* name;
  LgApplies applies;
  LgFactory make;
  bool per_thread_count;  ///< built separately for every thread count (plans for it)
  LgForm form = LgForm::kF32;

  /// `<impl>` for f32, `<impl>/<form>` for a quantized form: the key of its state and info.
  std::string id() const { return form == LgForm::kF32 ? name : std::string(name) + "/" + lg_form_name(form); }
};

const std::vector<ImplSpec>& impls() {
  static const std::vector<ImplSpec> all = {
      {"jit", jit_applies, make_jit<LgForm::kF32>, false},
      {"onednn", onednn_applies, make_onednn, true},
      {"openblas_3x", openblas_applies, make_openblas_3x, false},
      {"openblas_packed", openblas_packed_applies, make_openblas_packed, false},
      {"libxsmm_3x", libxsmm_applies, make_libxsmm_3x, false},
      {"xnnpack_3x", xnnpack_applies, make_xnnpack_3x, false},
      // The quantized rows (1 thread, quantized_case()).
      {"jit", jit_applies, make_jit<LgForm::kQd8Qc8w>, false, LgForm::kQd8Qc8w},
      {"jit", jit_applies, make_jit<LgForm::kQd8Qc4w>, false, LgForm::kQd8Qc4w},
      {"jit", jit_applies, make_jit<LgForm::kF32Qc8w>, false, LgForm::kF32Qc8w},
      {"jit", jit_applies, make_jit<LgForm::kF32Qc4w>, false, LgForm::kF32Qc4w},
      {"onednn", onednn_qd8_applies, make_onednn_qd8, true, LgForm::kQd8Qc8w},
      {"xnnpack_3x", xnnpack_qd8_applies, make_xnnpack_qd8, false, LgForm::kQd8Qc8w},
  };
  return all;
}

// The cases the quantized rows run on: the three targets (a large GEMM, weight-streaming
// decode, and the seed's tiny shape where call overhead counts).
bool quantized_case(const LgCase& c) {
  return c.name == "tiny_cross_e16" || c.name == "self_e768_m128" || c.name == "decode_e4096_m1";
}

// ---- Per-case state: data, reference rows, built implementations -----------------------------

std::mutex g_info_mutex;
std::map<std::string, std::string> g_infos;

void record_info(const std::string& key, const std::string& info) {
  if (info.empty()) return;
  std::lock_guard lock(g_info_mutex);
  g_infos[key] = info;
}

// The reference of one output row: values and the tolerance of each element.
struct RefRow {
  size_t part;
  int64_t m;
  std::vector<double> value, bound;
  std::vector<double> magnitude;  ///< sum_k |x w| + |b| of each element
};

// A built implementation and how long its first (checked) call took.
struct Built {
  std::unique_ptr<LgImpl> impl;
  double first_call_seconds = 0;
};

class CaseState {
 public:
  explicit CaseState(const LgCase& c) : data_(c) { make_reference(); }

  // The implementation for (impl, threads), built and checked on first use; a build or check
  // failure is remembered and rethrown on every later use.
  Built& impl(const ImplSpec& spec, int threads) {
    const std::pair<std::string, int> key{spec.id(), spec.per_thread_count ? threads : 0};
    if (auto it = errors_.find(key); it != errors_.end()) throw std::runtime_error(it->second);
    auto& slot = impls_[key];
    if (!slot.impl) {
      try {
        auto built = spec.make(data_, threads);
        if (!built) throw std::runtime_error(std::string(spec.name) + " is not built into this binary");
        built->activate(threads);
        const auto start = std::chrono::steady_clock::now();
        built->run();
        slot.first_call_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const std::string error = check(spec.id().c_str(), *built);
        record_info(std::string(spec.name) + "/" + data_.c->name +
                        (spec.per_thread_count ? "/t" + std::to_string(threads) : "") +
                        (spec.form != LgForm::kF32 ? std::string("/") + lg_form_name(spec.form) : ""),
                    built->info() + error);
        slot.impl = std::move(built);
      } catch (const std::exception& e) {
        errors_[key] = e.what();
        impls_.erase(key);
        throw;
      }
    }
    return slot;
  }

 private:
  void make_reference() {
    const LgCase& c = *data_.c;
    for (size_t p = 0; p < c.parts.size(); ++p) {
      const LgPart& part = c.parts[p];
      const int64_t m_rows = c.m_of(part);
      std::vector<int64_t> rows = {0, m_rows / 2, m_rows - 1};
      rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
      for (int64_t m : rows) {
        RefRow r{p, m, std::vector<double>(size_t(part.rows)), std::vector<double>(size_t(part.rows)),
                 std::vector<double>(size_t(part.rows))};
        const float* x = data_.part_input(part) + m * c.k;
        for (int64_t n = 0; n < part.rows; ++n) {
          const float* w = data_.part_weight(part) + n * c.k;
          const double b = data_.part_bias(part)[n];
          double sum = 0, magnitude = std::fabs(b);
          for (int64_t k = 0; k < c.k; ++k) {
            sum += double(x[k]) * double(w[k]);
            magnitude += std::fabs(double(x[k]) * double(w[k]));
          }
          sum += b;
          // split-gemm-semantics.md: 2 K 2^-24 (sum |x w| + |b|) + one ulp of the result.
          const float f = float(sum);
          r.value[size_t(n)] = sum;
          r.magnitude[size_t(n)] = magnitude;
          r.bound[size_t(n)] = 2.0 * double(c.k) * std::ldexp(1.0, -24) * magnitude +
                               double(std::nextafter(std::fabs(f), INFINITY) - std::fabs(f));
        }
        refs_.push_back(std::move(r));
      }
    }
  }

  // Bounds the extra distance from the f32 result that quantizing brings, for rounding to nearest
  // within steps of dw (weights, per channel) and dx (inputs): sum_k |x| dw + |w| dx + dw dx. The
  // steps are taken a little wide (a weight is off by at most half a step; an input by up to a
  // whole one where its zero point rounds it into the clamp).
  double quantization_error(const LgQuantization& q, const RefRow& r, size_t n) const {
    const LgCase& c = *data_.c;
    const LgPart& part = c.parts[r.part];
    const float* x = data_.part_input(part) + r.m * c.k;
    const float* w = data_.part_weight(part) + int64_t(n) * c.k;
    double dw = 0, dx = 0;
    if (q.weight_levels > 0) {
      double amax = 0;
      for (int64_t k = 0; k < c.k; ++k) amax = std::max(amax, std::fabs(double(w[k])));
      dw = 0.51 * amax / q.weight_levels;
    }
    if (q.input != LgQuantization::Input::kF32) {
      const bool whole = q.input == LgQuantization::Input::kPerTensor;
      const float* first = whole ? data_.part_input(part) : x;
      const int64_t count = whole ? c.m_of(part) * c.k : c.k;
      double lo = 0, hi = 0;
      for (int64_t i = 0; i < count; ++i) {
        lo = std::min(lo, double(first[i]));
        hi = std::max(hi, double(first[i]));
      }
      dx = 1.01 * (hi - lo) / q.input_levels;
    }
    double e = 0;
    for (int64_t k = 0; k < c.k; ++k) e += std::fabs(double(x[k])) * dw + std::fabs(double(w[k])) * dx + dw * dx;
    return e;
  }

  // Checks the rows of refs_ and returns, for a quantized implementation, its largest distance
  // from the f32 result next to the bound (for the row's info).
  std::string check(const char* impl_name, const LgImpl& impl) const {
    const LgQuantization q = impl.quantization();
    const bool quantized = q.weight_levels > 0 || q.input != LgQuantization::Input::kF32;
    const double eps = std::ldexp(1.0, -24);
    double worst = 0, worst_bound = 0;
    for (const RefRow& r : refs_) {
      const float* y = impl.out_row(r.part, r.m);
      for (size_t n = 0; n < r.value.size(); ++n) {
        double bound = r.bound[n];
        if (quantized) {
          // The f32 bound on the quantized products, plus the epilogue's few roundings.
          const double qe = quantization_error(q, r, n);
          bound += qe + (2.0 * double(data_.c->k) + 8.0) * eps * (r.magnitude[n] + qe);
        }
        const double err = std::fabs(double(y[n]) - r.value[n]);
        if (err > worst) {
          worst = err;
          worst_bound = bound;
        }
        if (err <= bound) continue;
        char msg[320];
        std::snprintf(msg, sizeof msg, "%s on %s: part %zu row %lld column %zu is %.9g, reference %.9g (tolerance %.3g%s)",
                      impl_name, data_.c->name.c_str(), r.part, static_cast<long long>(r.m), n, double(y[n]),
                      r.value[n], bound, quantized ? ", f32 bound plus the quantization bound" : "");
        throw std::runtime_error(msg);
      }
    }
    if (!quantized) return {};
    char text[160];
    std::snprintf(text, sizeof text, "; checked rows: max |y - f32 result| %.3g, bound there %.3g", worst, worst_bound);
    return text;
  }

  LgData data_;
  std::vector<RefRow> refs_;
  std::map<std::pair<std::string, int>, Built> impls_;
  std::map<std::pair<std::string, int>, std::string> errors_;
};

CaseState& state_for(const LgCase& c) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<CaseState>> states;
  std::lock_guard lock(mutex);
  auto& s = states[c.name];
  if (!s) s = std::make_unique<CaseState>(c);
  return *s;
}

// ---- Benchmarks ---------------------------------------------------------------------------

void run_linear_group(benchmark::State& state, const LgCase& c, const ImplSpec& spec, int threads) {
  try {
    const Built& built = state_for(c).impl(spec, threads);
    LgImpl& impl = *built.impl;
    impl.activate(threads);
    // Untimed: brings this case's data back into the caches after other benchmarks ran. Calls
    // of a second or more (the scalar fallback) gain nothing measurable from it.
    if (built.first_call_seconds < 0.5) impl.run();
    for (auto _ : state) {
      impl.run();
      benchmark::ClobberMemory();
    }
    state.counters["flops"] = c.flops();
    state.counters["peak_flops"] = measured_fma_peak(threads);
    if (is_decode(c)) {
      state.counters["bytes"] = c.weight_bytes(spec.form);
      state.counters["read_bw"] = measured_read_bandwidth(threads);
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void run_fma_peak(benchmark::State& state, FmaWidth width, int threads) {
  if (!fma_peak_supported(width)) {
    state.SkipWithError("the host lacks the ISA of this FMA loop");
    return;
  }
  constexpr int64_t kIterations = 1 << 20;  // ~1.5 ms per thread at the zmm peak
  float sink = fma_peak_parallel(width, kIterations, threads);
  for (auto _ : state) {
    sink += fma_peak_parallel(width, kIterations, threads);
    benchmark::DoNotOptimize(sink);
  }
  state.counters["flops"] = threads * fma_peak_flops(width, kIterations);
  state.counters["peak_flops"] = measured_fma_peak(threads);
}

void run_read_peak(benchmark::State& state, int threads) {
  const ReadBuffer buffer;  // 256 MiB, touched before timing
  float sink = 0;
  for (auto _ : state) {
    sink += buffer.read_all(threads);
    benchmark::DoNotOptimize(sink);
  }
  state.counters["bytes"] = double(buffer.bytes());
  state.counters["read_bw"] = measured_read_bandwidth(threads);
}

double min_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

void finish(benchmark::internal::Benchmark* b) {
  b->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond);
}

bool register_all() {
  for (int threads : {1, 2}) {
    const std::string t = "/t" + std::to_string(threads);
    finish(benchmark::RegisterBenchmark(("linear_group/fma_peak/zmm" + t).c_str(), [threads](benchmark::State& s) {
      run_fma_peak(s, FmaWidth::kZmm, threads);
    }));
    if (threads == 1)
      finish(benchmark::RegisterBenchmark("linear_group/fma_peak/ymm/t1",
                                          [](benchmark::State& s) { run_fma_peak(s, FmaWidth::kYmm, 1); }));
    finish(benchmark::RegisterBenchmark(("linear_group/read_peak/dram" + t).c_str(),
                                        [threads](benchmark::State& s) { run_read_peak(s, threads); }));
  }
  for (int threads : {1, 2})
    for (const LgCase& c : cases())
      for (const ImplSpec& spec : impls()) {
        if (!spec.applies(c, threads)) continue;
        if (spec.form != LgForm::kF32 && (threads != 1 || !quantized_case(c))) continue;
        std::string name = std::string("linear_group/") + spec.name + "/" + c.name + "/t" + std::to_string(threads);
        if (spec.form != LgForm::kF32) name += std::string("/") + lg_form_name(spec.form);
        finish(benchmark::RegisterBenchmark(name.c_str(), [&c, &spec, threads](benchmark::State& s) {
          run_linear_group(s, c, spec, threads);
        }));
      }
  return true;
}

[[maybe_unused]] const bool kRegistered = register_all();

}  // namespace

std::map<std::string, std::string> lg_impl_infos() {
  std::lock_guard lock(g_info_mutex);
  return g_infos;
}

}  // namespace shapejit::bench

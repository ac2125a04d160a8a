// gemm_microkernel_rate: multiply-accumulates per core cycle of one generated GEMM microkernel,
// for each operand form at the tile the packing would choose (gemm_max_mr at the ISA's panel
// width), its panel and rows resident in cache: the inner loop's throughput, not a GEMM's.
// Cycles come from a calibration loop of dependent adds (one per cycle), so the figure holds
// whatever the clock does.
//
// With --panels P (and --mr M) the kernel streams P consecutive panels instead, as a decode step
// does (M = 1: the weight bytes are the cost): it then prints the weight bytes read per second.
//
//   gemm_microkernel_rate [--isa avx2|avx512] [--k 768] [--dot] [--panels P] [--mr M]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <asmjit/x86.h>

#include "jit/gemm_codegen.hpp"
#include "jit/gemm_kernel.hpp"
#include "jit/gemm_quant_panel.hpp"
#include "jit/host_features.hpp"

namespace {

using namespace shapejit::jit;
using Clock = std::chrono::steady_clock;

// Core cycles per nanosecond: a chain of dependent adds runs at one per cycle.
double cycles_per_ns() {
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    uint64_t x = 0;
    const uint64_t n = 200'000'000;
    const auto t0 = Clock::now();
    for (uint64_t i = 0; i < n / 8; ++i)
      asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                   "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                   : "+r"(x));
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    best = std::max(best, double(n) / ns);
  }
  return best;
}

const char* form_name(GemmQuant q) {
  switch (q) {
    case GemmQuant::kF32: return "f32";
    case GemmQuant::kQd8Qc8w: return "qd8-qc8w";
    case GemmQuant::kQd8Qc4w: return "qd8-qc4w";
    case GemmQuant::kF32Qc8w: return "f32-qc8w";
    case GemmQuant::kF32Qc4w: return "f32-qc4w";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  Isa isa = Isa::kAvx2;
  int64_t k = 768;
  bool dot = false;
  int64_t panels = 1;
  int mr_flag = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--isa" && i + 1 < argc) isa = *parse_isa(argv[++i]);
    else if (a == "--k" && i + 1 < argc) k = std::atoll(argv[++i]);
    else if (a == "--dot") dot = true;
    else if (a == "--panels" && i + 1 < argc) panels = std::max<int64_t>(1, std::atoll(argv[++i]));
    else if (a == "--mr" && i + 1 < argc) mr_flag = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: gemm_microkernel_rate [--isa avx2|avx512] [--k K] [--dot] [--panels P] [--mr M]\n");
      return 2;
    }
  }
  if (!host_runs(isa)) {
    std::printf("skipped: this host does not run %s code\n", std::string(isa_name(isa)).c_str());
    return 0;
  }
  const double cpn = cycles_per_ns();
  std::printf("host %s, %.2f cycles/ns, K=%lld, %lld panel(s)\n", host_cpu_name().c_str(), cpn, (long long)k,
              (long long)panels);
  std::printf("%-10s %-36s %10s %12s %10s %14s\n", "form", "kernel", "ns/call", "MAC/cycle", "GB/s", "vs f32");
  asmjit::JitRuntime rt;
  double f32_rate = 0;
  for (GemmQuant q : {GemmQuant::kF32, GemmQuant::kQd8Qc8w, GemmQuant::kQd8Qc4w, GemmQuant::kF32Qc8w,
                      GemmQuant::kF32Qc4w}) {
    GemmKey key;
    key.isa = isa;
    key.k = k;
    key.quant = q;
    key.dot = dot && gemm_quantized_input(q);
    key.nc = int(isa_traits(isa).gemm_panel_vectors * key.lanes());
    key.mr = mr_flag > 0 ? mr_flag : gemm_max_mr(isa, key.nv(), q, key.dot);
    key.bias = true;
    const GeneratedGemmKernel gen = generate_gemm_kernel(key, rt);
    const int64_t pb = gemm_panel_bytes(key), kp = gemm_padded_k(key);
    std::vector<uint8_t> storage(size_t(pb * panels + 64), 0);
    uint8_t* first = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
    std::vector<int8_t> codes(size_t(key.nc * k));
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = int8_t(int(i * 7 % 15) - 7);
    std::vector<float> ws(size_t(key.nc), 0.01f), bias(size_t(key.nc), 0.5f);
    for (int64_t pi = 0; pi < panels; ++pi) {
      void* panel = first + pi * pb;
      if (q == GemmQuant::kF32) {
        float* p = static_cast<float*>(panel);
        for (int64_t i = 0; i < (k + 1) * gemm_panel_width(key); ++i) p[i] = 0.001f * float(i % 13);
      } else {
        pack_quant_panel(key, codes.data(), k, key.nc, ws.data(), bias.data(), panel);
      }
    }
    const int64_t lda = gemm_quantized_input(q) ? kp : k * 4;
    std::vector<uint8_t> x(size_t(key.mr * lda));
    for (size_t i = 0; i < x.size(); ++i) x[i] = gemm_quantized_input(q) ? uint8_t(i * 31) : 0;
    if (!gemm_quantized_input(q))
      for (int64_t i = 0; i < key.mr * k; ++i) reinterpret_cast<float*>(x.data())[i] = 0.01f * float(i % 17);
    std::vector<float> xs(size_t(key.mr), 0.02f), y(size_t(key.mr * key.nc * panels));
    std::vector<int32_t> xz(size_t(key.mr), 128);
    GemmKernelArgs args{};
    args.a = reinterpret_cast<const float*>(x.data());
    args.lda = lda;
    args.b = reinterpret_cast<const float*>(first);
    args.panels = panels;
    args.c = y.data();
    args.ldc = key.nc * 4 * panels;
    args.x_scale = xs.data();
    args.x_zero = xz.data();
    const int calls = int(std::max<int64_t>(20, 20000 / panels));
    for (int i = 0; i < calls / 10 + 1; ++i) gen.fn(&args);
    double best = 1e30;
    for (int rep = 0; rep < 7; ++rep) {
      const auto t0 = Clock::now();
      for (int i = 0; i < calls; ++i) gen.fn(&args);
      best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / calls);
    }
    const double macs = double(key.mr) * key.nc * double(k) * double(panels);
    const double rate = macs / (best * cpn);
    if (q == GemmQuant::kF32) f32_rate = rate;
    const double gbps = double(gemm_panel_bytes(key)) * double(panels) / best;
    std::printf("%-10s %-36s %10.1f %12.2f %10.2f %13.2fx\n", form_name(q), key.name().c_str(), best, rate, gbps,
                rate / f32_rate);
  }
  return 0;
}

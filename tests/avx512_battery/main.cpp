// avx512_battery: runs the reduced AVX-512 battery (battery.hpp) and says what ran.
//   avx512_battery [--isa avx512|avx2] [--shard I/N] [--only embag|wide_ids|dtypes|linear]
//   avx512_battery --probe [--isa ...]: only say whether this CPU runs the ISA (the engine's rule,
//                  support/host_isas.hpp), exit 0 if it does, else 3; tools/avx512_stage.sh asks it.
// Ends with the test suites' line saying which ISAs executed generated code
// (support/generated_code_report.hpp). Exit status: 0 when every comparison passed; 1 on any
// mismatch; 2 on bad usage; 3 when the CPU cannot run the ISA, no kernel of it ran, or
// SHAPEJIT_REQUIRE_ISAS names an ISA that executed no generated code (the battery runs one ISA:
// avx512 unless --isa says otherwise).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "battery.hpp"
#include "support/embag_cases.hpp"
#include "support/generated_code_report.hpp"
#include "support/host_isas.hpp"

namespace {

using namespace shapejit::test::avx512_battery;
using shapejit::jit::Isa;

int usage(const char* why) {
  std::fprintf(stderr, "avx512_battery: %s\nusage: avx512_battery [--probe] [--isa avx512|avx2] [--shard I/N] "
                       "[--only embag|wide_ids|dtypes|linear]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  options.seed = shapejit::test::test_seed(0xa5e12b);
  std::string only;
  bool probe = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--isa" && i + 1 < argc) {
      const auto isa = shapejit::jit::parse_isa(argv[++i]);
      if (!isa || (*isa != Isa::kAvx512 && *isa != Isa::kAvx2)) return usage("--isa takes avx512 or avx2");
      options.isa = *isa;
    } else if (arg == "--shard" && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%d/%d", &options.shard, &options.shards) != 2 || options.shards < 1 ||
          options.shard < 0 || options.shard >= options.shards)
        return usage("--shard takes I/N with 0 <= I < N");
    } else if (arg == "--probe") {
      probe = true;
    } else if (arg == "--only" && i + 1 < argc) {
      only = argv[++i];
      if (only != "embag" && only != "wide_ids" && only != "dtypes" && only != "linear")
        return usage("unknown family for --only");
    } else {
      return usage(("unknown argument: " + std::string(arg)).c_str());
    }
  }
  const std::string isa(shapejit::jit::isa_name(options.isa));
  if (!shapejit::test::host_has(options.isa)) {
    std::printf("avx512 battery: %sthis CPU cannot run %s code (%s)\n", probe ? "" : "FAILED: ", isa.c_str(),
                shapejit::test::host_unsupported_reason(options.isa).c_str());
    return 3;
  }
  if (probe) {
    std::printf("avx512 battery: this CPU runs %s code\n", isa.c_str());
    return 0;
  }
  std::printf("avx512 battery: isa %s, seed %llu (replay: SHAPEJIT_TEST_SEED=%llu), shard %d/%d\n", isa.c_str(),
              static_cast<unsigned long long>(options.seed), static_cast<unsigned long long>(options.seed),
              options.shard, options.shards);
  std::fflush(stdout);
  shapejit::test::start_counting();

  struct Family {
    const char* name;
    std::function<Tally(const Options&)> run;
  };
  const Family families[] = {{"embag", run_embag},
                             {"wide_ids", run_embag_wide_ids},
                             {"dtypes", run_embag_dtypes},
                             {"linear", run_linear_groups}};
  Tally total;
  for (const Family& f : families) {
    if (!only.empty() && only != f.name) continue;
    Tally t;
    try {
      t = f.run(options);
    } catch (const std::exception& e) {
      t.fail(options, f.name, std::string("exception: ") + e.what());
    }
    // No timings: under Bochs the guest's clock says nothing about the host's.
    std::printf("avx512 battery: %-8s %5lld %s kernels, %6lld cases, %9lld elements, %lld failed\n", f.name,
                static_cast<long long>(t.kernels), isa.c_str(), static_cast<long long>(t.cases),
                static_cast<long long>(t.checked), static_cast<long long>(t.failures));
    std::fflush(stdout);
    total.kernels += t.kernels, total.cases += t.cases, total.failures += t.failures, total.checked += t.checked;
  }

  int status = total.failures > 0 ? 1 : 0;
  const shapejit::test::IsaTally executed = shapejit::test::counted();
  std::printf("%s\n", shapejit::test::summary_line(executed).c_str());
  if (total.kernels == 0 || executed[options.isa].runs == 0) {
    std::printf("avx512 battery: FAILED: no %s kernel ran\n", isa.c_str());
    status = 3;
  }
  const char* required = std::getenv("SHAPEJIT_REQUIRE_ISAS");
  for (const std::string& unmet : shapejit::test::unmet_requirements(executed, required ? required : "")) {
    std::printf("avx512 battery: FAILED: %s\n", unmet.c_str());
    status = 3;
  }
  std::printf("avx512 battery: isa %s ran %lld kernels in %lld cases (%lld output elements compared)\n", isa.c_str(),
              static_cast<long long>(total.kernels), static_cast<long long>(total.cases),
              static_cast<long long>(total.checked));
  std::printf("avx512 battery: %lld passed, %lld failed\n", static_cast<long long>(total.cases - total.failures),
              static_cast<long long>(total.failures));
  return status;
}

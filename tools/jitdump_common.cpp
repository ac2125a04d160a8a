#include "tools/jitdump_common.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <memory>

#include "jit/host_features.hpp"
#include "runtime/engine/isa_select.hpp"
#include "runtime/engine/jit_memory.hpp"
#include "shapejit/shapejit.hpp"
#include "tools/jitdump_listing.hpp"

namespace shapejit::tools {
namespace {

using jit::Isa;

asmjit::Arch arch_of(Isa isa) {
  return jit::isa_traits(isa).family == jit::IsaFamily::kA64 ? asmjit::Arch::kAArch64 : asmjit::Arch::kX64;
}

// "avx512|avx2|neon" (sep "|") or "avx512, avx2, neon": the ISAs with generated code.
std::string generated_isa_names(const char* sep) {
  std::string names;
  for (Isa isa : jit::generated_isas()) names += (names.empty() ? "" : sep) + std::string(jit::isa_name(isa));
  return names;
}

const char* arch_name(asmjit::Arch arch) {
  return arch == asmjit::Arch::kAArch64 ? "AArch64" : arch == asmjit::Arch::kX64 ? "x86-64" : "this";
}

// Times of repeated code generation; the first separately, since it pays for cold caches.
struct Timing {
  double first_us = 0;
  double median_us = 0;
  int runs = 0;
};

// Calls `generate` `runs` times (at least once): first and median wall times.
Timing time_runs(int runs, const std::function<void()>& generate) {
  using Clock = std::chrono::steady_clock;
  Timing t;
  t.runs = std::max(runs, 1);
  std::vector<double> us;
  for (int i = 0; i < t.runs; ++i) {
    const auto start = Clock::now();
    generate();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  t.first_us = us.front();
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  t.median_us = n % 2 ? us[n / 2] : (us[n / 2 - 1] + us[n / 2]) / 2;
  return t;
}

std::string format_us(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f us", us);
  return buf;
}

}  // namespace

CLI::Validator one_of(std::initializer_list<const char*> names) {
  return one_of(std::vector<std::string>(names.begin(), names.end()));
}

CLI::Validator one_of(std::vector<std::string> allowed) {
  std::string set = "{";
  for (size_t i = 0; i < allowed.size(); ++i) set += (i ? ", " : "") + allowed[i];
  set += "}";
  return CLI::Validator(
      [allowed, set](std::string& value) -> std::string {
        if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return "";
        return value + " not in " + set;
      },
      set);
}

CLI::Validator int_in(int64_t lo, int64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& value) -> std::string {
        int64_t v = 0;
        const char* end = value.data() + value.size();
        const auto [ptr, ec] = std::from_chars(value.data(), end, v);
        if (ec != std::errc() || ptr != end) return value + " is not an integer";
        if (v < lo || v > hi) return value + " is not in " + range;
        return "";
      },
      range);
}

CLI::Validator positive_int() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        int64_t v = 0;
        const char* end = value.data() + value.size();
        const auto [ptr, ec] = std::from_chars(value.data(), end, v);
        if (ec != std::errc() || ptr != end) return value + " is not an integer";
        if (v < 1) return value + " is not a positive integer";
        return "";
      },
      "INT >= 1");
}

CodeTarget target_for(Isa isa) {
  CodeTarget t;
  t.isa = isa;
  const asmjit::Environment host = asmjit::Environment::host();
  const asmjit::Arch arch = arch_of(isa);
  t.cross = host.arch() != arch;
  // Same architecture: the host environment, so emitted bytes equal what the JIT would produce.
  // Another one: that architecture with the Linux ABI (SysV on x86-64, AAPCS64 on AArch64).
  t.environment = t.cross ? asmjit::Environment(arch, asmjit::SubArch::kUnknown, asmjit::Vendor::kUnknown,
                                                asmjit::Platform::kLinux, asmjit::PlatformABI::kGNU)
                          : host;
  const std::string why = jit::isa_unsupported_reason(jit::host_features(), isa);
  t.runnable = !t.cross && why.empty();
  if (t.runnable) {
    t.note = "runs on this host";
  } else if (t.cross) {
    t.note = std::string("cross-emitted for ") + arch_name(arch) + " on this " + arch_name(host.arch()) +
             " host; not executable here";
  } else {
    t.note = "emitted only, not executable here: " + why;
  }
  return t;
}

Isa default_isa() {
  const rt::IsaSelection& sel = rt::process_isa_selection();
  if (sel.isa != Isa::kScalar) return sel.isa;
  throw Error(Status::kUnsupported, "no --isa given and the engine selects no generated ISA here (" +
                                        sel.to_string() + "); pass --isa " + generated_isa_names("|"));
}

CLI::Validator isa_choice() {
  std::vector<std::string> names;
  for (Isa isa : jit::generated_isas()) names.emplace_back(jit::isa_name(isa));
  return one_of(std::move(names));
}

std::string isa_help() {
  std::string s = "Instruction set: " + generated_isa_names(", ") +
                  ". Default: what the engine selects here (best supported, capped by SHAPEJIT_ISA";
  const rt::IsaSelection& sel = rt::process_isa_selection();
  s += sel.isa == Isa::kScalar ? "; here none)" : "; here " + std::string(jit::isa_name(sel.isa)) + ")";
  s += ". An ISA this host cannot run is emitted without running (neon on x86-64 is cross-emitted).";
  return s;
}

namespace {

// Emission into a CodeHolder for `target`'s environment: no executable memory, so it works for
// any ISA of any architecture, and the bytes do not depend on where a JitRuntime maps them.
size_t emit_into_code_holder(const KernelSource& kernel, const CodeTarget& target, asmjit::Logger* logger) {
  asmjit::CodeHolder code;
  if (asmjit::Error err = code.init(target.environment))
    throw Error(Status::kInternalError,
                kernel.name + ": CodeHolder::init failed: " + asmjit::DebugUtils::errorAsString(err));
  if (logger) code.setLogger(logger);
  kernel.emit(code);
  code.flatten();
  code.resolveUnresolvedLinks();
  return code.codeSize();
}

std::string timing_text(const Timing& t, const char* what) {
  return format_us(t.median_us) + " median of " + std::to_string(t.runs) + " " + what + " (first " +
         format_us(t.first_us) + "; logging off)";
}

void print_listing(const std::string& listing) {
  print_field("listing", "asmjit; machine code after ';'");
  std::fputs(listing.c_str(), stdout);
}

}  // namespace

void add_dump_options(CLI::App& app, DumpOptions& options) {
  app.add_option("--runs", options.runs, "Generations timed; the median and the first are reported (default 9)")
      ->check(int_in(1, 1000));
  app.add_flag("--no-listing", options.no_listing, "Print the summary only, without the assembly listing");
  app.add_flag("--golden", options.golden,
               "Print only what any host reproduces byte for byte (name, ISA, code size, listing with called "
               "functions by name; emitted into a CodeHolder, no timings): the format of tests/golden/*.txt");
}

void dump_kernel(const KernelSource& kernel, const DumpOptions& options) {
  const CodeTarget target = target_for(kernel.isa);
  asmjit::StringLogger logger;
  logger.addFlags(listing_flags());
  asmjit::Logger* listing_logger = options.no_listing ? nullptr : &logger;

  if (options.golden) {
    // Only what every host reproduces byte for byte: no timings, no host notes.
    const size_t code_bytes = emit_into_code_holder(kernel, target, &logger);
    print_field("kernel", kernel.name);
    print_field("isa", std::string(jit::isa_name(kernel.isa)));
    print_field("code size", std::to_string(code_bytes) + " bytes");
    print_listing(format_listing(logger.data(), AddressStyle::kSymbolic));
    return;
  }

  size_t code_bytes = 0;
  std::string time_label, time_value;
  if (target.runnable) {
    // The engine's W^X runtime (runtime/engine/jit_memory.hpp), so the compile time is the engine's.
    const std::unique_ptr<asmjit::JitRuntime> runtime = rt::make_jit_runtime();
    asmjit::JitRuntime& rt = *runtime;
    // Timed runs come first and without the logger, whose formatting would dominate the time.
    const Timing t = time_runs(options.runs, [&] { kernel.generate(rt, nullptr); });
    code_bytes = kernel.generate(rt, listing_logger);
    time_label = "compile time";
    time_value = timing_text(t, "generations into a JitRuntime");
  } else {
    const Timing t = time_runs(options.runs, [&] { emit_into_code_holder(kernel, target, nullptr); });
    code_bytes = emit_into_code_holder(kernel, target, listing_logger);
    time_label = "emit time";
    time_value = timing_text(t, "emissions into a CodeHolder") + "; " + (target.cross ? "cross-emitted" : "emitted only");
  }
  print_field("kernel", kernel.name);
  print_field("isa", std::string(jit::isa_name(kernel.isa)) + " (" + target.note + ")");
  print_field("code size", std::to_string(code_bytes) + " bytes");
  print_field(time_label, time_value);
  if (listing_logger) print_listing(format_listing(logger.data(), AddressStyle::kAnnotate));
}

void print_field(const std::string& label, const std::string& value) {
  std::printf("%-13s %s\n", label.c_str(), value.c_str());
}

}  // namespace shapejit::tools

// jitdump's shared plumbing: the subcommand contract, CLI validators with plain messages,
// where code for an ISA can be produced on this host, listing capture and timing.
#pragma once

#include <asmjit/core.h>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "jit/isa.hpp"

namespace shapejit::tools {

/// Exit codes: 0 success, 1 generation failed (shapejit::Error), 2 bad command line.
enum class ExitCode : int { kOk = 0, kGenerationFailed = 1, kUsage = 2 };

/// A command-line mistake found after CLI11's parse (e.g. a rule across two flags).
/// main() prints it like a CLI11 error and exits with ExitCode::kUsage.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One registered subcommand: its CLI11 app and the action run when it was given.
struct Command {
  CLI::App* app = nullptr;
  std::function<void()> run;
};

/// Validator accepting exactly one of `names`; rejects with "avg not in {sum, mean, max}".
CLI::Validator one_of(std::initializer_list<const char*> names);
CLI::Validator one_of(std::vector<std::string> names);
/// Validator for an integer in [lo, hi]; rejects with "0 is not in [1, 1048576]".
CLI::Validator int_in(int64_t lo, int64_t hi);
/// Validator for an integer >= 1 whose upper bound is left to the kernel-key rule (so a flag
/// accepts exactly what the same field of --key does); rejects with "0 is not a positive integer".
CLI::Validator positive_int();

/// How code for an ISA is produced here: generated into a JitRuntime (runnable on this host)
/// or emitted into a CodeHolder for an environment the host cannot run.
struct CodeTarget {
  jit::Isa isa = jit::Isa::kAvx512;
  bool runnable = false;            ///< the host can execute this ISA's code
  bool cross = false;               ///< another architecture than the host's (AArch64 on x86-64)
  asmjit::Environment environment;  ///< what the CodeHolder is initialised with when emitting
  std::string note;                 ///< "runs on this host", "cross-emitted for AArch64 ...", ...
};

/// Where and how code for `isa` is produced on this host.
CodeTarget target_for(jit::Isa isa);

/// The ISA used when --isa is absent: the engine's selection on this host (best supported,
/// capped by SHAPEJIT_ISA). Throws shapejit::Error when no generated ISA runs here.
jit::Isa default_isa();

/// Text of the --isa help, naming the default this host would use.
std::string isa_help();
/// Accepts the name of an ISA with generated code (jit::generated_isas).
CLI::Validator isa_choice();

/// One kernel as jitdump drives it; each operation's subcommand fills this from its key.
struct KernelSource {
  std::string name;  ///< canonical key name
  jit::Isa isa = jit::Isa::kAvx512;
  /// Emits the kernel into a CodeHolder initialised for the ISA's architecture.
  std::function<void(asmjit::CodeHolder&)> emit;
  /// Generates it into the runtime (logging to the logger when not null), releases it again
  /// and returns its code size in bytes.
  std::function<size_t(asmjit::JitRuntime&, asmjit::Logger*)> generate;
};

/// The KernelSource of any key (with `name()` and `isa`) and its generator's two entry points,
/// `emit(key, code)` and `generate(key, runtime, logger)` returning {fn, code_bytes}.
template <class Key, class Emit, class Generate>
KernelSource kernel_source(const Key& key, Emit emit, Generate generate) {
  KernelSource kernel;
  kernel.name = key.name();
  kernel.isa = key.isa;
  kernel.emit = [key, emit](asmjit::CodeHolder& code) { emit(key, code); };
  kernel.generate = [key, generate](asmjit::JitRuntime& rt, asmjit::Logger* logger) {
    const auto generated = generate(key, rt, logger);
    rt.release(generated.fn);
    return generated.code_bytes;
  };
  return kernel;
}

/// How a kernel is shown.
struct DumpOptions {
  int runs = 9;             ///< timed generations (median and first are printed)
  bool no_listing = false;  ///< summary only
  bool golden = false;      ///< only host-independent output: no timings, always emitted
};

/// Adds --runs, --no-listing and --golden (shared by every kernel subcommand) to `app`.
void add_dump_options(CLI::App& app, DumpOptions& options);

/// Prints the summary (kernel, ISA, code size, compile or emit time) and the listing. The
/// host's ISAs are generated into a JitRuntime; others are emitted into a CodeHolder.
/// Throws shapejit::Error when generation fails.
void dump_kernel(const KernelSource& kernel, const DumpOptions& options);

/// Prints one "label      value" line of the summary (fixed-width label column).
void print_field(const std::string& label, const std::string& value);

}  // namespace shapejit::tools

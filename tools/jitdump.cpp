// jitdump: shows the machine code shapejit generates for a kernel key (canonical name, ISA,
// code size, compile time and the asmjit listing with machine bytes). Each operation is one
// subcommand, registered in main() below; argument parsing is CLI11's.
//
// Exit codes: 0 success, 1 the generator failed (shapejit::Error), 2 bad command line.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "jit/host_features.hpp"
#include "runtime/engine/isa_select.hpp"
#include "shapejit/shapejit.hpp"
#include "tools/jitdump_common.hpp"
#include "tools/jitdump_embag.hpp"
#include "tools/jitdump_linear.hpp"

namespace shapejit::tools {
namespace {

using jit::Isa;

void list_isas() {
  // The engine's host-feature rule (jit/host_features.hpp) decides every line below.
  const jit::HostFeatures& host = jit::host_features();
  const std::string cpu = jit::host_cpu_name();
  print_field("host", std::string(host.x86 ? "x86-64" : host.arm ? "AArch64" : "unknown architecture") + ", " +
                          (cpu.empty() ? "unnamed CPU" : cpu));
  for (Isa isa : jit::generated_isas()) {
    const std::string why = jit::isa_unsupported_reason(host, isa);
    const CodeTarget target = target_for(isa);
    std::string text = why.empty() ? "runs here" : (target.cross ? "cross-emit only: " : "emit only: ") + why;
    print_field(std::string(jit::isa_name(isa)), text + "  [needs " + jit::isa_requirement(isa) + "]");
  }
  const rt::IsaSelection& sel = rt::process_isa_selection();
  print_field("default --isa", sel.isa == Isa::kScalar ? std::string("none (the engine selects scalar, which has no generated code)")
                                                       : std::string(jit::isa_name(sel.isa)));
  print_field("engine", sel.to_string());
}

Command add_list_isas_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand(
      "list-isas",
      "List the instruction sets kernels are generated for, whether this host can run each (and if "
      "not, why), and the ISA chosen when --isa is absent (SHAPEJIT_ISA caps it).");
  return {app, [] { list_isas(); }};
}

int run_main(int argc, char** argv) {
  CLI::App app("jitdump: show the machine code shapejit generates for a kernel key", "jitdump");
  // --help explains every subcommand and flag at once; `jitdump <command> --help` shows one.
  app.set_help_flag();
  app.set_help_all_flag("--help,-h", "Print this help (every command and its flags) and exit");
  // At most one command; "none" is reported by run_main itself, so an unknown word reads as
  // "not expected: frobnicate" rather than CLI11's bare "A subcommand is required".
  app.require_subcommand(0, 1);
  app.get_formatter()->column_width(36);
  app.footer(
      "\nExit codes: 0 success, 1 code generation failed, 2 bad command line.\n"
      "Environment: SHAPEJIT_ISA=avx512|avx2|neon|scalar caps the default ISA.");

  // ---- Subcommands: one registration per operation ------------------------------------------
  std::vector<Command> commands;
  commands.push_back(add_embedding_bag_command(app));
  // linear-group microkernels (issue 4 item 6). A new operation adds its registration here and
  // its tools/jitdump_<op>.{hpp,cpp}, which tools/CMakeLists.txt picks up by itself.
  commands.push_back(add_linear_group_command(app));
  commands.push_back(add_list_isas_command(app));
  // ---------------------------------------------------------------------------------------------

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help requests exit 0; every real parse error is a usage error (2), whatever CLI11's code.
    return app.exit(e) == 0 ? int(ExitCode::kOk) : int(ExitCode::kUsage);
  }
  try {
    if (app.get_subcommands().empty()) {
      std::string names;
      for (const Command& command : commands) names += (names.empty() ? "" : ", ") + command.app->get_name();
      throw UsageError("jitdump: give a command: " + names);
    }
    for (const Command& command : commands)
      if (command.app->parsed()) command.run();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\nRun with --help for more information.\n", e.what());
    return int(ExitCode::kUsage);
  } catch (const Error& e) {
    std::fprintf(stderr, "jitdump: error: %s\n", e.what());
    return int(ExitCode::kGenerationFailed);
  }
  return int(ExitCode::kOk);
}

}  // namespace
}  // namespace shapejit::tools

int main(int argc, char** argv) { return shapejit::tools::run_main(argc, argv); }

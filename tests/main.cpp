// The main of every doctest binary: runs the tests, then says which ISAs executed generated code
// and applies SHAPEJIT_REQUIRE_ISAS (support/generated_code_report.hpp). Two more modes serve
// ctest entries (tests/CMakeLists.txt):
//   shapejit_tests [doctest options]                        the tests
//   shapejit_tests --isa-tally-check FILE                   sums FILE, closing a ctest run
//   shapejit_tests --exec-if-host-runs ISA PROGRAM ARGS...  runs PROGRAM when this host runs ISA
//                                                           code, else exits 77 (skipped)
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <string_view>

#include "support/generated_code_report.hpp"

namespace {

constexpr int kSkipped = 77;  // the SKIP_RETURN_CODE of the ctest entries that use it

int exec_if_host_runs(const char* isa_name, char** program) {
  const auto isa = shapejit::jit::parse_isa(isa_name);
  if (!isa) {
    std::fprintf(stderr, "--exec-if-host-runs: %s is not an ISA name\n", isa_name);
    return 2;
  }
  if (const std::string why = shapejit::test::host_unsupported_reason(*isa); !why.empty()) {
    std::printf("skipped: this host does not run %s code (%s)\n", isa_name, why.c_str());
    return kSkipped;
  }
  std::fflush(stdout);
  execv(program[0], program);
  std::perror(program[0]);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "--isa-tally-check")
    return shapejit::test::check_tally_file(argv[2]);
  if (argc >= 4 && std::string_view(argv[1]) == "--exec-if-host-runs") return exec_if_host_runs(argv[2], argv + 3);
  shapejit::test::start_counting();
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) return status;  // --help, --list-test-cases, ...: no tests ran
  return shapejit::test::finish_report(status);
}

// Engine statistics beyond the kernel cache's own counters: linear groups that run the scalar
// reference are counted (and said once under SHAPEJIT_VERBOSE=1), and the C struct grows by
// appended fields without the 0.1 entry point ever writing past the nine fields it had.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/engine/isa_select.hpp"
#include "runtime/linear_group/linear_group_pack.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"
#include "support/one_part_group.hpp"

namespace {

int64_t reference_groups() { return shapejit::kernel_cache_stats().reference_linear_groups; }

using shapejit::test::OnePartGroup;

}  // namespace

TEST_CASE("engine stats: a linear group on the scalar reference is counted, a JIT one is not") {
  const shapejit::jit::Isa isa = shapejit::rt::selected_isa();
  const bool jit = shapejit::rt::gemm_isa_supported(isa);
  int64_t before = reference_groups();
  {
    const OnePartGroup g(3, 5);
    g.check_one_row();
    CHECK(reference_groups() == before + (jit ? 0 : 1));
  }
  before = reference_groups();
  {
    const shapejit::rt::ScopedIsaOverride pin(shapejit::jit::Isa::kScalar);  // no GEMM generator
    const OnePartGroup g(3, 5);
    g.check_one_row();
    CHECK(reference_groups() == before + 1);
  }
  if (!jit) return;
  // K beyond every GEMM generator (panel rows addressed by 32-bit displacements): the
  // selected ISA has a generator, but not for this shape.
  before = reference_groups();
  const OnePartGroup wide(1, (int64_t{1} << 22) + 1);
  wide.check_one_row();
  CHECK(reference_groups() == before + 1);
}

TEST_CASE("engine stats: SHAPEJIT_VERBOSE=1 says once why a linear group runs the reference") {
  const char* inherited = std::getenv("SHAPEJIT_VERBOSE");
  // Once per process: if verbose was on before this test, an earlier group may have said it.
  const bool fresh = inherited == nullptr || std::string(inherited) != "1";
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // single-threaded from here: no engine parallelism on the reference path
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    setenv("SHAPEJIT_VERBOSE", "1", 1);
    try {
      const shapejit::rt::ScopedIsaOverride pin(shapejit::jit::Isa::kScalar);
      float w[4] = {1, 2, 3, 4};
      shapejit_linear_part_desc part{};
      part.rows = 2;
      const shapejit_linear_group_desc desc{SHAPEJIT_WEIGHTS_PACKED, w, 2, 2, 2, nullptr, 0, &part, 1};
      for (int i = 0; i < 3; ++i) {
        shapejit_linear_group* g = nullptr;
        if (shapejit_linear_group_create(&desc, &g) != SHAPEJIT_OK) _exit(2);
        shapejit_linear_group_destroy(g);
      }
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string err;
  char buf[4096];
  for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, size_t(got));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CAPTURE(err);
  size_t said = 0;
  for (size_t at = 0; (at = err.find("runs the double-precision scalar reference", at)) != std::string::npos; ++at)
    ++said;
  CHECK(said <= 1);
  if (fresh) {
    CHECK(said == 1);
    CHECK(err.find("no GEMM generator for ISA scalar") != std::string::npos);
  }
}

TEST_CASE("engine stats: the 0.1 call writes nine fields; the sized call fills what the caller has") {
  const shapejit::KernelCacheStats want = shapejit::kernel_cache_stats();
  constexpr unsigned char kGuard = 0xA5;
  // Nine fields in a buffer with guard bytes after them, as a caller built against 0.1 has.
  unsigned char old_caller[9 * 8 + 16];
  std::memset(old_caller, kGuard, sizeof old_caller);
  REQUIRE(shapejit_get_kernel_cache_stats(reinterpret_cast<shapejit_kernel_cache_stats*>(old_caller)) == SHAPEJIT_OK);
  for (size_t i = 9 * 8; i < sizeof old_caller; ++i) CHECK(old_caller[i] == kGuard);
  int64_t limit = 0;
  std::memcpy(&limit, old_caller + 8 * 8, 8);
  CHECK(limit == want.code_limit_bytes);

  shapejit_kernel_cache_stats s;
  std::memset(&s, kGuard, sizeof s);
  REQUIRE(shapejit_get_kernel_cache_stats_sized(&s, sizeof s) == SHAPEJIT_OK);
  CHECK(s.reference_linear_groups == reference_groups());
  CHECK(s.code_limit_bytes == want.code_limit_bytes);
  // A caller with a larger (newer) struct keeps the fields this library does not know.
  unsigned char newer[sizeof(shapejit_kernel_cache_stats) + 16];
  std::memset(newer, kGuard, sizeof newer);
  REQUIRE(shapejit_get_kernel_cache_stats_sized(reinterpret_cast<shapejit_kernel_cache_stats*>(newer), sizeof newer) ==
          SHAPEJIT_OK);
  for (size_t i = sizeof(shapejit_kernel_cache_stats); i < sizeof newer; ++i) CHECK(newer[i] == kGuard);
  // Smaller than 0.1's struct, or no struct: rejected, nothing written.
  std::memset(&s, kGuard, sizeof s);
  CHECK(shapejit_get_kernel_cache_stats_sized(&s, 8 * 8) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("stats_size is 64") != std::string::npos);
  CHECK(reinterpret_cast<const unsigned char*>(&s)[0] == kGuard);
  CHECK(shapejit_get_kernel_cache_stats_sized(nullptr, sizeof s) == SHAPEJIT_INVALID_ARGUMENT);
}

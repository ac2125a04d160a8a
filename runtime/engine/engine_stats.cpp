// Engine counters kept beside the kernel cache's; see engine_stats.hpp.
#include "runtime/engine/engine_stats.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace shapejit::rt {
namespace {

std::atomic<int64_t> g_reference_linear_groups{0};
std::atomic<bool> g_reference_noted{false};

}  // namespace

bool verbose_requested() {
  const char* v = std::getenv("SHAPEJIT_VERBOSE");
  return v != nullptr && std::string_view(v) == "1";
}

void note_reference_linear_group(const std::string& why) {
  g_reference_linear_groups.fetch_add(1, std::memory_order_relaxed);
  if (verbose_requested() && !g_reference_noted.exchange(true, std::memory_order_relaxed))
    std::fprintf(stderr,
                 "shapejit: a linear group runs the double-precision scalar reference (much slower "
                 "than generated code): %s; counted in reference_linear_groups, said only once\n",
                 why.c_str());
}

int64_t reference_linear_groups() { return g_reference_linear_groups.load(std::memory_order_relaxed); }

}  // namespace shapejit::rt

// The pthread_atfork handlers of runtime/engine/fork_handlers.hpp: the order of the locks lives here.
#include "runtime/engine/fork_handlers.hpp"
#include "runtime/profiling/perf_jitdump.hpp"

#include <pthread.h>

#include <new>

namespace shapejit::rt {
namespace {

void prepare() {
  engine_fork_prepare();
  kernel_cache_fork_prepare();
  perf_jitdump_fork_prepare();
}

void parent() {
  perf_jitdump_fork_parent();
  kernel_cache_fork_parent();
  engine_fork_parent();
}

void child() {
  perf_jitdump_fork_child();
  kernel_cache_fork_child();
  engine_fork_child();
}

}  // namespace

bool install_fork_handlers() {
  static const bool installed = [] {
    if (::pthread_atfork(prepare, parent, child) != 0) throw std::bad_alloc();  // ENOMEM is its only error
    return true;
  }();
  return installed;
}

}  // namespace shapejit::rt

// Compiled only into libshapejit.so (shapejit_core is linked whole around it).
//
// Debian's libasmjit.a is built without -fPIC. Every relocation in it resolves inside the
// library once its symbols are hidden (--exclude-libs), except one: globals.cpp reads libc's
// `stderr` through a PC32 relocation, which a shared object cannot carry. So the shared
// library defines a hidden `stderr` of its own and points it at libc's stream before any
// other initialiser runs.
#include <dlfcn.h>

extern "C" {
__attribute__((visibility("hidden"))) void* stderr = nullptr;  // NOLINT: deliberately shadows libc's
}

namespace {
__attribute__((constructor(101))) void bind_libc_stderr() {
  // RTLD_DEFAULT skips hidden symbols, so this finds libc's `stderr` (a FILE*).
  if (void* libc_stderr = dlsym(RTLD_DEFAULT, "stderr")) stderr = *static_cast<void**>(libc_stderr);
}
}  // namespace

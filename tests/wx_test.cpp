// W^X: generated code is never writable and executable at once. asmjit 1.9's default
// JitRuntime maps its blocks rwx (shown below, which also proves the check can fail), so the
// engine creates its runtimes through runtime/jit_memory (dual mapping, or write-then-protect
// when no dual mapping can be made). The check reads /proc/self/maps.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asmjit/core.h>
#if defined(__x86_64__)
#include <asmjit/x86.h>
#elif defined(__aarch64__)
#include <asmjit/arm/a64assembler.h>
#endif

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/engine/isa_select.hpp"
#include "runtime/engine/jit_memory.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "shapejit/shapejit.h"

namespace {

using shapejit::rt::CodeMemoryScheme;

struct Mapping {
  uintptr_t lo = 0, hi = 0;
  std::string perms, name;
  bool writable() const { return perms.size() >= 2 && perms[1] == 'w'; }
  bool executable() const { return perms.size() >= 3 && perms[2] == 'x'; }
  std::string text() const {
    std::ostringstream os;
    os << std::hex << lo << "-" << hi << " " << perms << " " << name;
    return os.str();
  }
};

std::vector<Mapping> read_maps() {
  std::vector<Mapping> maps;
  std::ifstream in("/proc/self/maps");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    Mapping m;
    std::string range, offset, dev, inode;
    ls >> range >> m.perms >> offset >> dev >> inode;
    std::getline(ls, m.name);
    m.name.erase(0, m.name.find_first_not_of(' '));
    const size_t dash = range.find('-');
    m.lo = std::stoull(range.substr(0, dash), nullptr, 16);
    m.hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    maps.push_back(m);
  }
  return maps;
}

// Every mapping that is writable and executable at once, one per line ("" when none).
std::string wx_mappings() {
  std::string bad;
  for (const Mapping& m : read_maps())
    if (m.writable() && m.executable()) bad += m.text() + "\n";
  return bad;
}

std::optional<Mapping> mapping_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (const Mapping& m : read_maps())
    if (a >= m.lo && a < m.hi) return m;
  return std::nullopt;
}

using Fn = int (*)();

// Adds `int f() { return value; }` to the runtime (nullptr when adding fails).
Fn add_constant_function(asmjit::JitRuntime& rt, int value) {
  asmjit::CodeHolder code;
  code.init(rt.environment());
#if defined(__x86_64__)
  asmjit::x86::Assembler a(&code);
  a.mov(asmjit::x86::eax, value);
  a.ret();
#elif defined(__aarch64__)
  asmjit::a64::Assembler a(&code);
  a.mov(asmjit::a64::w0, value);
  a.ret(asmjit::a64::x30);
#endif
  Fn fn = nullptr;
  return rt.add(&fn, &code) == asmjit::kErrorOk ? fn : nullptr;
}

std::vector<CodeMemoryScheme> schemes() {
  std::vector<CodeMemoryScheme> s = {CodeMemoryScheme::kWriteThenProtect};
  if (shapejit::rt::dual_mapping_available()) s.push_back(CodeMemoryScheme::kDualMapping);
  return s;
}

TEST_CASE("W^X: asmjit's default JitRuntime maps rwx, and the check sees it") {
  const bool os_enforces = asmjit::Support::test(asmjit::VirtMem::hardenedRuntimeInfo().flags,
                                                 asmjit::VirtMem::HardenedRuntimeFlags::kEnabled);
  if (os_enforces) {
    MESSAGE("the OS enforces W^X itself; asmjit's default allocator cannot map rwx here");
    return;
  }
  asmjit::JitRuntime plain;
  const Fn fn = add_constant_function(plain, 7);
  REQUIRE(bool(fn));
  CHECK(fn() == 7);
  const auto m = mapping_of(reinterpret_cast<const void*>(fn));
  REQUIRE(m.has_value());
  CHECK_MESSAGE((m->writable() && m->executable()), "asmjit's default mapping is " << m->text());
  CHECK(wx_mappings().find(m->text()) != std::string::npos);
}

TEST_CASE("W^X: both schemes run code from pages that are executable but not writable") {
  const std::string scheme_name = shapejit::rt::default_code_memory_scheme() == CodeMemoryScheme::kDualMapping
                                      ? "dual mapping"
                                      : "write-then-protect";
  MESSAGE("default scheme here: " << scheme_name);
  for (CodeMemoryScheme scheme : schemes()) {
    CAPTURE(int(scheme));
    auto rt = shapejit::rt::make_jit_runtime(scheme);
    std::vector<Fn> fns;
    for (int i = 0; i < 40; ++i) {
      fns.push_back(add_constant_function(*rt, 1000 + i));
      REQUIRE(bool(fns.back()));
    }
    for (int i = 0; i < 40; ++i) CHECK(fns[size_t(i)]() == 1000 + i);
    for (Fn fn : fns) {
      const auto m = mapping_of(reinterpret_cast<const void*>(fn));
      REQUIRE(m.has_value());
      CHECK_MESSAGE((m->executable() && !m->writable()), m->text());
    }
    CHECK_MESSAGE(wx_mappings().empty(), wx_mappings());
    // Released code goes away (write-then-protect unmaps its pages right away).
    for (size_t i = 0; i < fns.size(); i += 2) CHECK(rt->release(fns[i]) == asmjit::kErrorOk);
    if (scheme == CodeMemoryScheme::kWriteThenProtect) {
      const auto m = mapping_of(reinterpret_cast<const void*>(fns[0]));
      CHECK_MESSAGE((!m || !m->executable()), m->text());
    }
    for (size_t i = 1; i < fns.size(); i += 2) CHECK(fns[i]() == 1000 + int(i));
  }
}

// asmjit falls back from memfd to shm_open to a file in /tmp; all of them need a descriptor.
// With none left (as in a sandbox that refuses them), the runtime must still add W^X code.
TEST_CASE("W^X: a failing dual mapping falls back to write-then-protect") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto rt = shapejit::rt::make_jit_runtime(CodeMemoryScheme::kDualMapping);
    rlimit saved{};
    getrlimit(RLIMIT_NOFILE, &saved);
    rlimit none = saved;
    none.rlim_cur = 0;
    setrlimit(RLIMIT_NOFILE, &none);
    const Fn fn = add_constant_function(*rt, 42);
    setrlimit(RLIMIT_NOFILE, &saved);
    if (fn == nullptr) _exit(1);
    if (fn() != 42) _exit(2);
    const auto m = mapping_of(reinterpret_cast<const void*>(fn));
    if (!m || !m->executable() || m->writable()) _exit(3);
    if (m->name.find("memfd") != std::string::npos) _exit(4);  // it really took the fallback
    if (!wx_mappings().empty()) _exit(5);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, "child check " << WEXITSTATUS(status)
                                                         << " failed (1 no code, 2 wrong result, 3 not r-x, "
                                                            "4 not the fallback, 5 an rwx mapping)");
}

TEST_CASE("W^X: the engine's kernels (embedding bags on every ISA, a linear group) are never rwx") {
  using shapejit::jit::Isa;
  std::vector<const void*> kernels;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kNeon}) {
    if (!shapejit::rt::host_supports(isa)) continue;
    shapejit::rt::ScopedIsaOverride pin(isa);
    for (int64_t dim : {1, 16, 33, 128, 300}) {
      for (shapejit_mode mode : {SHAPEJIT_SUM, SHAPEJIT_MEAN, SHAPEJIT_MAX}) {
        std::vector<float> table(size_t(3 * dim), 1.0f), out(size_t(2 * dim));
        const int64_t idx[] = {0, 2, 1}, off[] = {0, 1};
        std::vector<int64_t> ints(16);
        shapejit_embedding_bag_args a{};
        a.weight = table.data();
        a.num_rows = 3;
        a.dim = dim;
        a.row_stride = dim;
        a.indices = idx;
        a.index_dtype = SHAPEJIT_I64;
        a.num_indices = 3;
        a.offsets = off;
        a.offset_dtype = SHAPEJIT_I64;
        a.num_offsets = 2;
        a.mode = mode;
        std::vector<int64_t> max_indices(size_t(2 * dim));
        REQUIRE(shapejit_embedding_bag(&a, out.data(), ints.data(), ints.data() + 4, max_indices.data()) ==
                SHAPEJIT_OK);
        CHECK(out[0] == 1.0f);  // bag 0 is row 0 alone in every mode
        shapejit::jit::EmbagKey key;
        key.isa = isa;
        key.dim = dim;
        key.mode = static_cast<shapejit::Mode>(mode);
        const auto handle = shapejit::rt::embag_kernel_cache().get(key);
        if (!handle.generic()) kernels.push_back(reinterpret_cast<const void*>(handle.fn()));
      }
    }
  }
  // A linear group compiles its own microkernels into a runtime it owns.
  const int64_t m = 5, k = 19, n = 21;
  std::vector<float> w(size_t(n * k), 0.5f), x(size_t(m * k), 1.0f), y(size_t(m * n));
  shapejit_linear_part_desc part{};
  part.rows = n;
  part.activation = SHAPEJIT_ACTIVATION_GELU;
  shapejit_linear_group_desc desc{};
  desc.form = SHAPEJIT_WEIGHTS_PACKED;
  desc.weight = w.data();
  desc.weight_rows = n;
  desc.k = k;
  desc.weight_stride = k;
  desc.parts = &part;
  desc.num_parts = 1;
  shapejit_linear_group* group = nullptr;
  REQUIRE(shapejit_linear_group_create(&desc, &group) == SHAPEJIT_OK);
  const shapejit_linear_group_io io{x.data(), m, k, k, y.data(), n, 0, 0};
  REQUIRE(shapejit_linear_group_run(group, &io, 1) == SHAPEJIT_OK);

  MESSAGE("W^X: " << kernels.size() << " embedding-bag kernels checked, plus a linear group");
  for (const void* p : kernels) {
    const auto mp = mapping_of(p);
    REQUIRE(mp.has_value());
    CHECK_MESSAGE((mp->executable() && !mp->writable()), mp->text());
  }
  CHECK_MESSAGE(wx_mappings().empty(), "writable and executable mappings:\n" << wx_mappings());
  shapejit_linear_group_destroy(group);
}

}  // namespace

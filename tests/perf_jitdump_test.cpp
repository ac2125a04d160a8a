// The jitdump (SHAPEJIT_PERF_JITDUMP=1): the file a compilation writes, read back with a reader
// written from perf's specification: header, one JIT_CODE_LOAD per kernel with its canonical name,
// address and exact code bytes, the executable marker mapping perf records, concurrent writers,
// forked children and planted links. tests/perf/perf_record_test.cpp runs the real perf on it.
#include <doctest/doctest.h>

#include <elf.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "jit/embag_kernel.hpp"
#include "jit/gemm_kernel.hpp"
#include "perf/jitdump_reader.hpp"
#include "runtime/engine/isa_select.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "runtime/linear_group/linear_group_pack.hpp"
#include "runtime/profiling/perf_jitdump.hpp"
#include "runtime/profiling/perf_map.hpp"
#include "shapejit/shapejit.hpp"

namespace {

namespace fs = std::filesystem;
using shapejit::jit::EmbagKey;
using shapejit::jit::Isa;
using shapejit::test::Jitdump;
using shapejit::test::read_jitdump;

// Redirects the dump into a fresh directory for one test and closes it afterwards. A process
// profiled with SHAPEJIT_PERF_JITDUMP=1 keeps its own dump: the tests then do not run.
struct ScopedDump {
  fs::path dir;
  ScopedDump() {
    char tmpl[] = "/tmp/shapejit-jitdump-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    shapejit::rt::perf_jitdump_close();
    shapejit::rt::set_perf_jitdump_dir(dir.string());
    shapejit::rt::set_perf_jitdump_enabled(true);
  }
  ~ScopedDump() {
    shapejit::rt::perf_jitdump_close();
    shapejit::rt::set_perf_jitdump_enabled(std::nullopt);
    shapejit::rt::set_perf_jitdump_dir(std::nullopt);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  fs::path file(pid_t pid = ::getpid()) const { return dir / ("jit-" + std::to_string(pid) + ".dump"); }
  Jitdump read(pid_t pid = ::getpid()) const {
    std::string error;
    std::optional<Jitdump> d = read_jitdump(file(pid).string(), error);
    INFO(error);
    REQUIRE(d.has_value());
    return *d;
  }
};

bool profiled_run() {
  const char* v = std::getenv("SHAPEJIT_PERF_JITDUMP");
  if (v == nullptr || !shapejit::rt::perf_map_env_enabled(v, "SHAPEJIT_PERF_JITDUMP")) return false;
  MESSAGE("SHAPEJIT_PERF_JITDUMP is set: this process's own dump is left alone, the test does not run");
  return true;
}

// True when /proc/self/maps has an executable mapping of `path`.
bool mapped_executable(const fs::path& path) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos || line.substr(slash) != path.string()) continue;
    const size_t perms = line.find(' ') + 1;
    if (line[perms + 2] == 'x') return true;
  }
  return false;
}

EmbagKey key_of(Isa isa, int64_t dim, shapejit::Mode mode) {
  EmbagKey k;
  k.isa = isa;
  k.dim = dim;
  k.mode = mode;
  return k;
}

}  // namespace

TEST_CASE("perf jitdump: header, one code-load record per compiled kernel with its name and exact bytes") {
  const Isa isa = shapejit::rt::selected_isa();
  if (profiled_run()) return;
  if (isa == Isa::kScalar) {
    MESSAGE("no JIT ISA on this host: nothing is compiled, nothing to dump");
    return;
  }
  ScopedDump scope;
  const uint64_t t0 = shapejit::rt::perf_jitdump_timestamp();
  shapejit::rt::EmbagKernelCache cache;  // private: every key compiles
  const std::vector<EmbagKey> keys = {key_of(isa, 1, shapejit::Mode::kSum), key_of(isa, 128, shapejit::Mode::kMean),
                                      key_of(isa, 163, shapejit::Mode::kMax)};
  std::vector<shapejit::rt::EmbagKernelHandle> handles;
  for (const EmbagKey& k : keys) handles.push_back(cache.get(k));
  for (const EmbagKey& k : keys) cache.get(k);  // hits record nothing
  REQUIRE(shapejit::rt::perf_jitdump_path() == scope.file().string());
  CHECK(mapped_executable(scope.file()));  // the marker perf records
  const Jitdump d = scope.read();          // read while open: perf inject may run before exit
  const uint64_t t1 = shapejit::rt::perf_jitdump_timestamp();

  CHECK(d.header.magic == 0x4A695444u);
  CHECK(d.header.version == 1);
  CHECK(d.header.total_size == 40);
#if defined(__x86_64__)
  CHECK(d.header.elf_mach == EM_X86_64);
#elif defined(__aarch64__)
  CHECK(d.header.elf_mach == EM_AARCH64);
#endif
  CHECK(d.header.pad == 0);
  CHECK(d.header.pid == uint32_t(::getpid()));
  CHECK(d.header.flags == 0);
  CHECK(d.header.timestamp >= t0);
  REQUIRE(d.records.size() == keys.size());
  uint64_t last = d.header.timestamp, total = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& r = d.records[i];
    CAPTURE(r.name);
    CHECK(r.id == 0);
    CHECK(r.name == keys[i].name());
    CHECK(r.total_size == 16 + 40 + r.name.size() + 1 + r.code_size);
    CHECK(r.pid == uint32_t(::getpid()));
    CHECK(r.tid == uint32_t(::syscall(SYS_gettid)));  // compiled on this thread
    CHECK(r.vma == reinterpret_cast<uintptr_t>(handles[i].fn()));
    CHECK(r.code_addr == r.vma);
    CHECK(r.code_index == i);
    CHECK(r.timestamp >= last);  // CLOCK_MONOTONIC, in order
    CHECK(r.timestamp <= t1);
    last = r.timestamp;
    REQUIRE(r.code_size > 0);
    REQUIRE(r.code.size() == r.code_size);
    CHECK(std::memcmp(r.code.data(), reinterpret_cast<const void*>(r.vma), r.code.size()) == 0);
    total += r.code_size;
  }
  CHECK(int64_t(total) == cache.stats().code_bytes);

  shapejit::rt::perf_jitdump_close();
  CHECK_FALSE(mapped_executable(scope.file()));
  const Jitdump closed = scope.read();
  REQUIRE(closed.records.size() == keys.size() + 1);
  CHECK(closed.records.back().id == 3);  // JIT_CODE_CLOSE
  CHECK(closed.records.back().total_size == 16);
}

TEST_CASE("perf jitdump: disabled writes nothing; a linear group's kernels get gemm names") {
  if (profiled_run()) return;
  ScopedDump scope;
  shapejit::rt::set_perf_jitdump_enabled(false);
  const Isa isa = shapejit::rt::selected_isa();
  if (isa != Isa::kScalar) {
    shapejit::rt::EmbagKernelCache cache;
    cache.get(key_of(isa, 19, shapejit::Mode::kSum));
  }
  CHECK_FALSE(fs::exists(scope.file()));
  CHECK(shapejit::rt::perf_jitdump_path().empty());

  if (!shapejit::rt::gemm_isa_supported(isa)) return;
  shapejit::rt::set_perf_jitdump_enabled(true);
  // A cached kernel writes no record, and tests that ran earlier in this process (the whole
  // binary in one process under qemu) may have compiled any group's: widths are tried in turn
  // until a group compiles kernels of its own.
  for (int64_t e = 24; e < 24 + 2 * 32; e += 2) {
    CAPTURE(e);
    const int64_t kernels_before = shapejit::kernel_cache_stats().kernels;
    std::vector<float> weight(size_t(2 * e * e), 0.5f), bias(size_t(2 * e), 0.0f);
    std::vector<shapejit::LinearPart> parts(2);
    for (int p = 0; p < 2; ++p) {
      parts[size_t(p)].row_begin = p * e;
      parts[size_t(p)].rows = e;
    }
    const shapejit::LinearGroup group(shapejit::LinearGroupDesc::packed(weight.data(), 2 * e, e, bias, parts));
    if (shapejit::kernel_cache_stats().kernels > kernels_before) break;
  }
  const Jitdump d = scope.read();
  REQUIRE_FALSE(d.records.empty());
  for (const auto& r : d.records) {
    CAPTURE(r.name);
    const auto key = shapejit::jit::parse_gemm_key(r.name);
    REQUIRE(key.has_value());
    CHECK(key->name() == r.name);
    CHECK(std::memcmp(r.code.data(), reinterpret_cast<const void*>(r.vma), r.code.size()) == 0);
  }
}

TEST_CASE("perf jitdump: concurrent records stay whole, with unique code indices") {
  if (profiled_run()) return;
  ScopedDump scope;
  constexpr int kThreads = 6, kEach = 40;
  // Fake "kernels": distinct byte patterns of distinct lengths, so a torn record shows.
  std::vector<std::vector<unsigned char>> code(kThreads * kEach);
  for (size_t i = 0; i < code.size(); ++i) code[i].assign(17 + i % 50, static_cast<unsigned char>(i));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int j = 0; j < kEach; ++j) {
        const size_t i = size_t(t * kEach + j);
        shapejit::rt::perf_map_record(code[i].data(), code[i].size(), "fake." + std::to_string(i));
      }
    });
  for (auto& th : threads) th.join();
  const Jitdump d = scope.read();
  REQUIRE(d.records.size() == code.size());
  std::set<uint64_t> indices;
  std::set<uint32_t> tids;
  for (const auto& r : d.records) {
    CAPTURE(r.name);
    REQUIRE(r.name.rfind("fake.", 0) == 0);
    const size_t i = std::stoul(r.name.substr(5));
    REQUIRE(i < code.size());
    CHECK(r.code == code[i]);
    CHECK(r.vma == reinterpret_cast<uintptr_t>(code[i].data()));
    indices.insert(r.code_index);
    tids.insert(r.tid);
  }
  CHECK(indices.size() == code.size());
  CHECK(*indices.rbegin() == code.size() - 1);
  CHECK(tids.size() == size_t(kThreads));
}

TEST_CASE("perf jitdump: a forked child writes its own jit-<pid>.dump; the parent's is untouched") {
  if (profiled_run()) return;
  ScopedDump scope;
  static const unsigned char parent_code[] = {0xc3}, child_code[] = {0x90, 0xc3};
  shapejit::rt::perf_map_record(parent_code, sizeof parent_code, "parent.kernel");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    shapejit::rt::perf_map_record(child_code, sizeof child_code, "child.kernel");
    ::_exit(shapejit::rt::perf_jitdump_path().find("/jit-" + std::to_string(::getpid()) + ".dump") ==
                    std::string::npos
                ? 1
                : 0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  const Jitdump mine = scope.read();
  REQUIRE(mine.records.size() == 1);
  CHECK(mine.records[0].name == "parent.kernel");
  const Jitdump theirs = scope.read(child);
  CHECK(theirs.header.pid == uint32_t(child));
  REQUIRE(theirs.records.size() == 1);
  CHECK(theirs.records[0].name == "child.kernel");
  CHECK(theirs.records[0].pid == uint32_t(child));
  CHECK(theirs.records[0].code_index == 0);
}

TEST_CASE("perf jitdump: a symbolic link or hard link at the dump's path is never written through") {
  if (profiled_run()) return;
  static const unsigned char code[] = {0xc3};
  for (const bool hard : {false, true}) {
    CAPTURE(hard);
    ScopedDump scope;
    const fs::path victim = scope.dir / "victim";
    std::ofstream(victim) << "precious\n";
    if (hard) fs::create_hard_link(victim, scope.file());
    else fs::create_symlink(victim, scope.file());
    shapejit::rt::perf_map_record(code, sizeof code, "planted");  // reports on stderr, once
    CHECK(shapejit::rt::perf_jitdump_path().empty());
    std::ifstream in(victim);
    CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "precious\n");
  }
}

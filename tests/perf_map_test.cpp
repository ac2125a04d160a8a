// The perf map (SHAPEJIT_PERF_MAP=1): line format, the environment switch, and the entries the
// kernel cache appends for real compilations: executable address, size, canonical name.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "jit/embag_kernel.hpp"
#include "jit/gemm_kernel.hpp"
#include "runtime/engine/isa_select.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "runtime/linear_group/linear_group_pack.hpp"
#include "runtime/profiling/perf_map.hpp"
#include "shapejit/shapejit.hpp"

namespace {

using shapejit::jit::EmbagKey;
using shapejit::jit::Isa;
using shapejit::rt::EmbagKernelCache;

struct MapEntry {
  uint64_t start = 0, size = 0;
  std::string name;
};

// Parses `START SIZE name` strictly: lower-case hex without 0x, one space, a non-empty name.
std::optional<MapEntry> parse_line(const std::string& line) {
  const size_t a = line.find(' ');
  const size_t b = a == std::string::npos ? a : line.find(' ', a + 1);
  if (b == std::string::npos || a == 0 || b == a + 1 || b + 1 >= line.size()) return std::nullopt;
  auto hex = [](const std::string& s, uint64_t& v) {
    if (s.empty() || s.size() > 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
    v = std::stoull(s, nullptr, 16);
    return true;
  };
  MapEntry e;
  if (!hex(line.substr(0, a), e.start) || !hex(line.substr(a + 1, b - a - 1), e.size)) return std::nullopt;
  e.name = line.substr(b + 1);
  return e;
}

// The lines appended to this process's map since `from` bytes.
std::vector<std::string> lines_after(uintmax_t from) {
  std::ifstream in(shapejit::rt::perf_map_path());
  in.seekg(std::streamoff(from));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

uintmax_t map_size() {
  std::error_code ec;
  const auto n = std::filesystem::file_size(shapejit::rt::perf_map_path(), ec);
  return ec ? 0 : n;
}

// True when [start, start + size) lies inside one executable mapping of this process.
bool in_executable_mapping(uint64_t start, uint64_t size) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    std::istringstream fields(line);
    std::string range, perms;
    fields >> range >> perms;
    const size_t dash = range.find('-');
    const uint64_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const uint64_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (start >= lo && start + size <= hi) return perms.size() >= 3 && perms[2] == 'x';
  }
  return false;
}

// Enables the map for one test and removes the file afterwards if the test created it, so a
// profiling run of this binary (SHAPEJIT_PERF_MAP=1) keeps its own map.
struct ScopedPerfMap {
  bool existed = std::filesystem::exists(shapejit::rt::perf_map_path());
  uintmax_t start = map_size();
  explicit ScopedPerfMap(bool on) { shapejit::rt::set_perf_map_enabled(on); }
  ~ScopedPerfMap() {
    shapejit::rt::set_perf_map_enabled(std::nullopt);
    if (!existed) std::filesystem::remove(shapejit::rt::perf_map_path());
  }
};

EmbagKey key_of(Isa isa, int64_t dim, shapejit::Mode mode, shapejit::DType index) {
  EmbagKey k;
  k.isa = isa;
  k.dim = dim;
  k.mode = mode;
  k.index = index;
  k.offset = index;
  return k;
}

}  // namespace

TEST_CASE("perf map: a line is `START SIZE name` in bare lower-case hex") {
  using shapejit::rt::perf_map_line;
  CHECK(perf_map_line(reinterpret_cast<const void*>(uintptr_t{0x7f00deadbeef}), 0x1a0,
                      "embag.avx512.f32.d128.sum.i64.o64") == "7f00deadbeef 1a0 embag.avx512.f32.d128.sum.i64.o64\n");
  CHECK(perf_map_line(nullptr, 0, "x") == "0 0 x\n");
  CHECK(perf_map_line(reinterpret_cast<const void*>(uintptr_t{16}), 255, "a\nb") == "10 ff a_b\n");
  CHECK(shapejit::rt::perf_map_path() == "/tmp/perf-" + std::to_string(getpid()) + ".map");
}

TEST_CASE("perf map: SHAPEJIT_PERF_MAP values") {
  using shapejit::rt::perf_map_env_enabled;
  for (const char* on : {"1", "true", "TRUE", "yes", "On"}) {
    CAPTURE(on);
    CHECK(perf_map_env_enabled(on));
  }
  CHECK_FALSE(perf_map_env_enabled(nullptr));
  for (const char* off : {"", "0", "false", "no", "OFF", "2", "enable"}) {  // the last two warn
    CAPTURE(off);
    CHECK_FALSE(perf_map_env_enabled(off));
  }
}

TEST_CASE("perf map: each compiled embedding-bag kernel is appended once with its address, size and name") {
  const Isa isa = shapejit::rt::selected_isa();
  if (isa == Isa::kScalar) {
    MESSAGE("no JIT ISA on this host: nothing is compiled, nothing to map");
    return;
  }
  ScopedPerfMap scope(true);
  EmbagKernelCache cache;  // private, so every key below really compiles
  using shapejit::DType;
  using shapejit::Mode;
  const std::vector<EmbagKey> keys = {key_of(isa, 1, Mode::kSum, DType::kI64), key_of(isa, 128, Mode::kMean, DType::kI32),
                                      key_of(isa, 163, Mode::kMax, DType::kI64), key_of(isa, 300, Mode::kSum, DType::kI32)};
  std::vector<shapejit::rt::EmbagKernelHandle> handles;
  for (const EmbagKey& k : keys) handles.push_back(cache.get(k));
  for (const EmbagKey& k : keys) cache.get(k);  // hits add nothing

  const std::vector<std::string> lines = lines_after(scope.start);
  REQUIRE(lines.size() == keys.size());
  uint64_t total = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    CAPTURE(lines[i]);
    const std::optional<MapEntry> e = parse_line(lines[i]);
    REQUIRE(e.has_value());
    CHECK(e->name == keys[i].name());
    const auto parsed = shapejit::jit::parse_embag_key(e->name);  // canonical: the name round-trips
    REQUIRE(parsed.has_value());
    CHECK((*parsed == keys[i]));
    CHECK(e->start == reinterpret_cast<uintptr_t>(handles[i].fn()));
    CHECK(e->size > 0);
    CHECK(e->size < (uint64_t{1} << 20));  // one kernel, not a runtime's whole arena
    CHECK(e->start >= 4096);
    CHECK(e->start + e->size < (uint64_t{1} << 48));  // user space
    CHECK(in_executable_mapping(e->start, e->size));
    total += e->size;
  }
  CHECK(int64_t(total) == cache.stats().code_bytes);
}

TEST_CASE("perf map: disabled appends nothing, and a failed compilation is never mapped") {
  const Isa isa = shapejit::rt::selected_isa();
  {
    ScopedPerfMap scope(false);
    EmbagKernelCache cache;
    if (isa != Isa::kScalar) cache.get(key_of(isa, 17, shapejit::Mode::kSum, shapejit::DType::kI64));
    CHECK(lines_after(scope.start).empty());
  }
  ScopedPerfMap scope(true);
  EmbagKernelCache failing([](const EmbagKey& key, asmjit::JitRuntime&,
                              const shapejit::jit::CodeAdmission&) -> shapejit::jit::GeneratedEmbagKernel {
    throw shapejit::Error(shapejit::Status::kUnsupported, "fake: cannot compile " + key.name());
  });
  CHECK_THROWS_AS(failing.get(key_of(Isa::kAvx2, 9, shapejit::Mode::kSum, shapejit::DType::kI64)), shapejit::Error);
  CHECK(lines_after(scope.start).empty());
}

TEST_CASE("perf map: the public API's cache maps the kernels it compiles") {
  if (shapejit::rt::selected_isa() == Isa::kScalar) return;
  ScopedPerfMap scope(true);
  const int64_t rows = 10, dim = 211;  // a width no other test file uses
  std::vector<float> table(size_t(rows * dim), 0.5f);
  std::vector<int64_t> indices = {1, 2, 3, 9}, offsets = {0, 2};
  shapejit::EmbeddingBagCall call;
  call.weight = {table.data(), shapejit::DType::kF32, rows, dim, dim};
  call.indices = indices;
  call.offsets = offsets;
  const int64_t before = shapejit::kernel_cache_stats().compilations;
  const shapejit::EmbeddingBagResult r = shapejit::embedding_bag(call);
  CHECK(r.output[0] == 1.0f);
  const bool compiled = shapejit::kernel_cache_stats().compilations > before;
  const std::vector<std::string> lines = lines_after(scope.start);
  if (!compiled) {  // an earlier test in this process compiled the key already
    CHECK(lines.empty());
    return;
  }
  REQUIRE(lines.size() == 1);
  const std::optional<MapEntry> e = parse_line(lines[0]);
  REQUIRE(e.has_value());
  const auto key = shapejit::jit::parse_embag_key(e->name);
  REQUIRE(key.has_value());
  CHECK(key->dim == dim);
  CHECK(key->isa == shapejit::rt::selected_isa());
  CHECK(in_executable_mapping(e->start, e->size));
}

// Linear-group kernels are generated at pack time (runtime/linear_group/linear_group_pack.cpp).
TEST_CASE("perf map: a linear group's kernels are appended with canonical gemm names") {
  if (!shapejit::rt::gemm_isa_supported(shapejit::rt::selected_isa())) return;  // no GEMM JIT here
  ScopedPerfMap scope(true);
  const int64_t e = 40;
  std::vector<float> weight(size_t(3 * e * e), 0.25f), bias(size_t(3 * e), 1.0f);
  std::vector<shapejit::LinearPart> parts(3);
  for (int p = 0; p < 3; ++p) {
    parts[size_t(p)].row_begin = p * e;
    parts[size_t(p)].rows = e;
  }
  const shapejit::LinearGroup group(shapejit::LinearGroupDesc::packed(weight.data(), 3 * e, e, bias, parts));
  const std::vector<std::string> lines = lines_after(scope.start);
  REQUIRE_FALSE(lines.empty());
  for (const std::string& line : lines) {
    CAPTURE(line);
    const std::optional<MapEntry> entry = parse_line(line);
    REQUIRE(entry.has_value());
    const auto key = shapejit::jit::parse_gemm_key(entry->name);
    REQUIRE(key.has_value());
    CHECK(key->name() == entry->name);
    CHECK(entry->size > 0);
    CHECK(in_executable_mapping(entry->start, entry->size));  // the group (and its code) is alive
  }
}

namespace {

// A file for the planted names to point at, removed with the test.
struct VictimFile {
  std::string path = "/tmp/shapejit-perf-map-victim-" + std::to_string(getpid());
  VictimFile() { std::ofstream(path) << "precious\n"; }
  ~VictimFile() { std::filesystem::remove(path); }
  std::string contents() const {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

// Records one entry with the map enabled and nothing at its path but what `plant` puts there.
// False when this process already has a real map (a profiling run): it is left alone.
bool record_over(const std::function<void(const std::string& map)>& plant) {
  const std::string map = shapejit::rt::perf_map_path();
  if (std::filesystem::exists(std::filesystem::symlink_status(map))) return false;
  plant(map);
  shapejit::rt::set_perf_map_enabled(true);
  shapejit::rt::perf_map_record(reinterpret_cast<const void*>(uintptr_t{0x1000}), 16, "embag.planted");
  shapejit::rt::set_perf_map_enabled(std::nullopt);
  return true;
}

}  // namespace

TEST_CASE("perf map: a symbolic link or hard link planted at the map's path is never written through") {
  const std::string map = shapejit::rt::perf_map_path();
  {
    VictimFile victim;
    const bool ran = record_over([&](const std::string& at) { std::filesystem::create_symlink(victim.path, at); });
    if (!ran) {
      MESSAGE("this process already has a perf map; not planting over it");
      return;
    }
    CHECK(victim.contents() == "precious\n");
    CHECK(std::filesystem::is_symlink(std::filesystem::symlink_status(map)));  // still the planted link
    std::filesystem::remove(map);
  }
  {
    VictimFile victim;
    REQUIRE(record_over([&](const std::string& at) { std::filesystem::create_hard_link(victim.path, at); }));
    CHECK(victim.contents() == "precious\n");
    std::filesystem::remove(map);
  }
  // With nothing planted, the map is created for this user only and written.
  REQUIRE(record_over([](const std::string&) {}));
  const auto perms = std::filesystem::status(map).permissions();
  CHECK((perms & (std::filesystem::perms::group_all | std::filesystem::perms::others_all)) ==
        std::filesystem::perms::none);
  CHECK(lines_after(0) == std::vector<std::string>{"1000 10 embag.planted"});
  std::filesystem::remove(map);
}

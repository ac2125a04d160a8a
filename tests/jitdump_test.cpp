// jitdump end to end: runs the built tool with good and bad command lines (exit codes, message
// text), checks listings for the instructions each mode must use, and compares the golden
// listings in tests/golden/ so codegen changes show up in review.
//
// Regenerate the golden files after an intended codegen change:
//   SHAPEJIT_UPDATE_GOLDEN=1 build/tests/shapejit_tests -tc='jitdump: golden*'
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef SHAPEJIT_JITDUMP
#define SHAPEJIT_JITDUMP ""  // jitdump not built (SHAPEJIT_BUILD_TOOLS=OFF): the cases skip
#endif
#ifndef SHAPEJIT_JITDUMP_LAUNCHER
#define SHAPEJIT_JITDUMP_LAUNCHER ""
#endif
#ifndef SHAPEJIT_GOLDEN_DIR
#define SHAPEJIT_GOLDEN_DIR ""
#endif

namespace {

namespace fs = std::filesystem;

constexpr const char* kJitdump = SHAPEJIT_JITDUMP;
constexpr const char* kLauncher = SHAPEJIT_JITDUMP_LAUNCHER;  // the emulator when cross-compiled
constexpr const char* kGoldenDir = SHAPEJIT_GOLDEN_DIR;
constexpr bool kNoJitdump = kJitdump[0] == '\0';

// Fixed keys whose listings are checked in as tests/golden/<key>.txt: the seed workload, max with
// a tail and padding, the AVX2 masked-tail path with mean and 32-bit types, weighted FMA with
// mixed types and a non-default prefetch distance.
const std::vector<std::string> kGoldenKeys{
    "embag.avx512.f32.d128.sum.i64.o64",
    "embag.avx512.f32.d20.max.i64.o64.pad",
    "embag.avx2.f32.d20.mean.i32.o32.head",
    "embag.avx2.f32.d13.max.i64.o32",
    "embag.avx512.f32.d37.sum.i32.o64.w.pf4",
    // Table dtypes (X86TableOps): 4-bit sum at the speed target's width; 2-bit on AVX-512 with
    // f16 weights (scale and bias weighted once per row, then add and fma), a tail, pruning and
    // an f16 output; 8-bit max with a bf16 output.
    "embag.avx2.q4.d128.sum.i64.o64",
    "embag.avx512.q2.d36.sum.i32.o32.wf16.pruned.outf16",
    "embag.avx2.q8.d20.max.i64.o64.pad.outbf16",
    // NEON, cross-emitted on x86-64 hosts: max with a tail and 32-bit types.
    "embag.neon.f32.d13.max.i32.o32",
    // Max without index outputs: no ids, counts or offset2bag.
    "embag.avx2.f32.d13.max.i64.o32.noidx",
    // Linear-group microkernels: bias, SLEEF gelu (its address shown by name) and scale on
    // AVX-512; relu and the offset-table store on AVX2.
    "gemm.avx512.4x32.k3.bias.gelu.scale",
    "gemm.avx2.3x24.k5.relu.tab",
    // Quantized forms: qd8 int8 widened to 16 bits on AVX2 (K padded to 12), qd8 int4 with
    // vpdpbusd on AVX-512 (nibbles as 16 x code, shifted back before the correction), and the
    // weight-only int4 form with an odd K (its last byte row's high codes unread); on AVX-512 a
    // decode tile, whose spare register holds the int4 table, loaded at each panel's start
    // (after the previous panel's gelu call).
    "gemm.avx2.2x16.k9.qd8qc8w.bias",
    "gemm.avx512.2x32.k12.qd8qc4w.relu.dot",
    "gemm.avx2.2x16.k3.f32qc4w.bias",
    "gemm.avx512.1x32.k5.f32qc4w.bias.gelu",
};

// The subcommand that dumps a key: embedding-bag for embag.*, linear-group for gemm.*.
std::string command_for(const std::string& key) {
  return key.rfind("gemm.", 0) == 0 ? "linear-group" : "embedding-bag";
}

struct Result {
  int exit_code = -1;
  std::string out, err;
  std::string command;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs jitdump with `args` (and `env` assignments such as "SHAPEJIT_ISA=avx2") through the shell;
// stdout is read from the pipe, stderr from a temporary file.
Result run_jitdump(const std::vector<std::string>& args, const std::string& env = "") {
  Result r;
  std::string err_template = (fs::temp_directory_path() / "jitdump_test_XXXXXX").string();
  const int fd = mkstemp(err_template.data());
  REQUIRE_MESSAGE(fd >= 0, "mkstemp failed for " << err_template);
  close(fd);
  r.command = env.empty() ? "" : env + " ";
  if (kLauncher[0] != '\0') r.command += std::string(kLauncher) + " ";
  r.command += quote(kJitdump);
  for (const std::string& a : args) {
    r.command += ' ';
    r.command += quote(a);
  }
  std::string shell = r.command;
  shell += " 2>";
  shell += quote(err_template);
  FILE* pipe = popen(shell.c_str(), "r");
  REQUIRE_MESSAGE(pipe != nullptr, "popen failed: " << r.command);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = slurp(err_template);
  fs::remove(err_template);
  return r;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The value of a summary line "label        value", or "" when absent.
std::string field(const std::string& out, const std::string& label) {
  for (const std::string& line : lines_of(out))
    if (line.rfind(label + " ", 0) == 0) {
      const size_t start = line.find_first_not_of(' ', label.size());
      return start == std::string::npos ? "" : line.substr(start);
    }
  return "";
}

// Everything after the "listing" summary line.
std::string listing_of(const std::string& out) {
  const size_t at = out.find("\nlisting ");
  if (at == std::string::npos) return "";
  const size_t body = out.find('\n', at + 1);
  return body == std::string::npos ? "" : out.substr(body + 1);
}

// True when some instruction line of `listing` starts with `mnemonic` (or with one of the
// alternatives in "a|b").
bool has_mnemonic(const std::string& listing, const std::string& mnemonic) {
  if (const size_t bar = mnemonic.find('|'); bar != std::string::npos)
    return has_mnemonic(listing, mnemonic.substr(0, bar)) || has_mnemonic(listing, mnemonic.substr(bar + 1));
  for (const std::string& line : lines_of(listing))
    if (line.rfind(mnemonic + " ", 0) == 0 || line == mnemonic) return true;
  return false;
}

// A runs-and-succeeds check that shows the command and its stderr on failure.
Result run_ok(const std::vector<std::string>& args, const std::string& env = "") {
  Result r = run_jitdump(args, env);
  INFO("command: " << r.command << "\nstderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  return r;
}

// A diff-friendly report of the first difference between two texts, with context.
std::string describe_difference(const std::string& expected, const std::string& actual) {
  const std::vector<std::string> e = lines_of(expected), a = lines_of(actual);
  size_t i = 0;
  while (i < e.size() && i < a.size() && e[i] == a[i]) ++i;
  std::ostringstream s;
  s << "first difference at line " << i + 1 << " (expected " << e.size() << " lines, actual " << a.size()
    << " lines)\n";
  for (size_t k = i >= 3 ? i - 3 : 0; k < i; ++k) s << "    " << e[k] << "\n";
  s << "  - " << (i < e.size() ? e[i] : "(end of file)") << "\n";
  s << "  + " << (i < a.size() ? a[i] : "(end of output)") << "\n";
  size_t differing = 0;
  for (size_t k = 0; k < std::max(e.size(), a.size()); ++k)
    differing += k >= e.size() || k >= a.size() || e[k] != a[k];
  s << "  (" << differing << " lines differ position by position)\n";
  return s.str();
}

bool update_golden() {
  const char* v = std::getenv("SHAPEJIT_UPDATE_GOLDEN");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace

TEST_SUITE("jitdump" * doctest::skip(kNoJitdump)) {

TEST_CASE("jitdump: --help explains every command and flag") {
  const Result r = run_ok({"--help"});
  for (const std::string word : {"embedding-bag", "linear-group", "list-isas", "--key", "--nc", "--act", "--dim", "--mode", "--index", "--offset",
                           "--table", "--weighted", "--padding", "--isa", "--prefetch", "--k-split", "--runs",
                           "--no-listing", "--golden", "Exit codes"}) {
    CAPTURE(word);
    CHECK(r.out.find(word) != std::string::npos);
  }
  CHECK(run_ok({"embedding-bag", "--help"}).out.find("--weighted") != std::string::npos);
}

TEST_CASE("jitdump: bad command lines exit 2 with a message naming the flag, value and rule") {
  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Bad> cases{
      {{"embedding-bag", "--dim", "128", "--mode", "avg"}, "--mode: avg not in {sum, mean, max}"},
      {{"embedding-bag", "--dim", "0"}, "--dim: 0 is not a positive integer"},
      {{"embedding-bag", "--dim", "12x"}, "--dim: 12x is not an integer"},
      {{"embedding-bag", "--dim", "8", "--index", "i16"}, "--index: i16 not in {i32, i64}"},
      {{"embedding-bag", "--dim", "8", "--offset", "u64"}, "--offset: u64 not in {i32, i64}"},
      {{"embedding-bag", "--dim", "8", "--isa", "sse4"}, "--isa: sse4 not in {avx512, avx2, neon}"},
      {{"embedding-bag", "--dim", "8", "--prefetch", "-1"}, "--prefetch: -1 is not in [0, 1048576]"},
      {{"embedding-bag", "--dim", "8", "--runs", "0"}, "--runs: 0 is not in [1, 1000]"},
      {{"embedding-bag", "--dim", "8", "--mode", "max", "--weighted"},
       "--weighted: per-sample weights are only allowed with --mode sum, not --mode max"},
      {{"embedding-bag", "--dim", "8", "--mode", "mean", "-w"},
       "--weighted: per-sample weights are only allowed with --mode sum, not --mode mean"},
      {{"embedding-bag", "--key", "embag.avx512.f32.d128.sum.i64"}, "is not a canonical kernel name"},
      {{"embedding-bag", "--key", "embag.avx512.f32.d128.max.i64.o64.w"},
       "is weighted (.w) in max mode; per-sample weights are only allowed in sum mode"},
      {{"embedding-bag", "--key", "embag.avx512.f32.d128.sum.i64.o64", "--dim", "4"}, "drop --dim or drop --key"},
      {{"embedding-bag"}, "give --dim D"},
      {{"embedding-bag", "--dim", "8", "--bogus"}, "--bogus"},
      {{"embedding-bag", "--dim"}, "--dim"},
      {{}, "give a command: embedding-bag"},
      {{"frobnicate"}, "not expected: frobnicate"},
  };
  for (const Bad& bad : cases) {
    const Result r = run_jitdump(bad.args);
    INFO("command: " << r.command << "\nstderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(bad.message) != std::string::npos);
    CHECK(r.err.find("--help") != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("jitdump: a generator error exits 1 with the generator's message") {
  // No generator exists for the scalar family (its kernel is C++), so this stays an error; but
  // scalar code runs on every host, so the message must not blame the host.
  const std::vector<std::vector<std::string>> scalar_keys{
      {"embedding-bag", "--key", "embag.scalar.f32.d8.sum.i64.o64"}, {"linear-group", "--key", "gemm.scalar.1x8.k4"}};
  for (const std::vector<std::string>& args : scalar_keys) {
    const Result r = run_jitdump(args);
    INFO("command: " << r.command << "\nstderr: " << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.rfind("jitdump: error: " + args[2] + ": no ", 0) == 0);
    CHECK(r.err.find("generator for ISA scalar") != std::string::npos);
    CHECK(r.err.find("cannot run") == std::string::npos);
    CHECK(r.out.empty());
  }
  // A tile wider than the generators take (5 AVX2 vectors): the generator's own rule.
  const Result wide = run_jitdump({"linear-group", "--k", "8", "--nc", "40", "--isa", "avx2", "--golden"});
  INFO("stderr: " << wide.err);
  CHECK(wide.exit_code == 1);
  CHECK(wide.err.rfind("jitdump: error: gemm.avx2.1x40.k8: nc 40 needs 1..4 vectors", 0) == 0);
}

TEST_CASE("jitdump: --dim accepts exactly the widths a key's d<D> may have") {
  // Wider than 2^20 (the old --dim bound) but within the generators' limit: flags and --key both
  // produce the kernel.
  const Result flags = run_ok({"embedding-bag", "--dim", "2000000", "--isa", "avx2", "--golden", "--no-listing"});
  CHECK(field(flags.out, "kernel") == "embag.avx2.f32.d2000000.sum.i64.o64");
  CHECK(run_ok({"embedding-bag", "--key", "embag.avx2.f32.d2000000.sum.i64.o64", "--golden", "--no-listing"}).out ==
        flags.out);
  // Past the generators' limit: both are usage errors with the same reason.
  const Result too_wide_flags = run_jitdump({"embedding-bag", "--dim", "16777217", "--isa", "avx2"});
  const Result too_wide_key = run_jitdump({"embedding-bag", "--key", "embag.avx2.f32.d16777217.sum.i64.o64"});
  INFO("flags: " << too_wide_flags.err << "key: " << too_wide_key.err);
  CHECK(too_wide_flags.exit_code == 2);
  CHECK(too_wide_key.exit_code == 2);
  const std::string reason = "no generator takes this kernel: dim 16777217 is outside [1, 16777216]";
  CHECK(too_wide_flags.err.find(reason) != std::string::npos);
  CHECK(too_wide_key.err.find(reason) != std::string::npos);
}

TEST_CASE("jitdump: the summary names the kernel, ISA, code size and time, then the listing") {
  const Result r = run_ok({"embedding-bag", "--key", "embag.avx512.f32.d128.sum.i64.o64", "--runs", "3"});
  CHECK(field(r.out, "kernel") == "embag.avx512.f32.d128.sum.i64.o64");
  CHECK(field(r.out, "isa").rfind("avx512 (", 0) == 0);
  const std::string size = field(r.out, "code size");
  CHECK(std::atoi(size.c_str()) > 0);
  CHECK(size.find(" bytes") != std::string::npos);
  const std::string time = field(r.out, "compile time") + field(r.out, "emit time");
  CHECK(time.find(" us median of 3 ") != std::string::npos);
  const std::string listing = listing_of(r.out);
  CHECK(listing.find("; 62") != std::string::npos);  // machine bytes (EVEX prefix 0x62)
  CHECK(has_mnemonic(listing, "ret"));

  const Result quiet = run_ok({"embedding-bag", "--dim", "128", "--isa", "avx512", "--no-listing"});
  CHECK(field(quiet.out, "kernel") == "embag.avx512.f32.d128.sum.i64.o64");
  CHECK(listing_of(quiet.out).empty());
}

TEST_CASE("jitdump: flags and --key name the same kernel") {
  const Result flags = run_ok({"embedding-bag", "--dim", "128", "--mode", "max", "--index", "i32", "--offset",
                               "i64", "--padding", "--isa", "avx2", "--prefetch", "8", "--golden"});
  CHECK(field(flags.out, "kernel") == "embag.avx2.f32.d128.max.i32.o64.pad.pf8");
  const Result key = run_ok({"embedding-bag", "--key", "embag.avx2.f32.d128.max.i32.o64.pad.pf8", "--golden"});
  CHECK(key.out == flags.out);
  CHECK(field(run_ok({"embedding-bag", "-d", "5", "-w", "--isa", "avx512", "--golden"}).out, "kernel") ==
        "embag.avx512.f32.d5.sum.i64.o64.w");
  const Result lean = run_ok({"embedding-bag", "-d", "40", "-m", "mean", "--no-index-outputs", "--isa", "avx2",
                              "--golden"});
  CHECK(field(lean.out, "kernel") == "embag.avx2.f32.d40.mean.i64.o64.noidx");
  CHECK(run_ok({"embedding-bag", "--key", "embag.avx2.f32.d40.mean.i64.o64.noidx", "--golden"}).out == lean.out);
}

TEST_CASE("jitdump: listings use the instructions each mode and ISA needs") {
  struct Expect {
    std::string key;
    std::vector<std::string> present, absent;
  };
  const std::vector<Expect> cases{
      {"embag.avx512.f32.d128.sum.i64.o64", {"vaddps", "prefetcht0", "vzeroupper"}, {"vmaskmovps"}},
      // D = 13 leaves a tail of 5 floats: a k-mask on AVX-512; on AVX2 a masked move or
      // partial (xmm / scalar) loads, never a k register or a zmm.
      {"embag.avx512.f32.d13.sum.i64.o64", {"vaddps", "kmovw"}, {"vmaskmovps"}},
      {"embag.avx2.f32.d13.sum.i64.o64", {"vaddps", "vmaskmovps|vmovss"}, {"kmovw"}},
      // Weighted sum is one FMA per row; mean divides by the count, never a reciprocal.
      {"embag.avx512.f32.d64.sum.i64.o64.w", {"vfmadd231ps"}, {}},
      {"embag.avx2.f32.d64.sum.i64.o64.w", {"vfmadd231ps"}, {}},
      {"embag.avx512.f32.d64.mean.i64.o64", {"vdivps"}, {"vrcp14ps", "vrcpps", "vmulps"}},
      {"embag.avx2.f32.d64.mean.i64.o64", {"vdivps"}, {"vrcpps", "vmulps"}},
      // Max compares (strict >) and blends values and row ids under the compare result.
      {"embag.avx512.f32.d64.max.i64.o64", {"vcmpps"}, {}},
      {"embag.avx2.f32.d64.max.i64.o64", {"vcmpps", "vblendvps"}, {}},
      {"embag.avx512.f32.d64.sum.i64.o64.pf0", {"vaddps"}, {"prefetcht0"}},
      // Without index outputs max is vmaxps alone: no compare, no id blend or widening.
      {"embag.avx2.f32.d64.max.i64.o64.noidx", {"vmaxps"}, {"vcmpps", "vblendvps", "vpmovzxdq"}},
      {"embag.avx512.f32.d64.max.i64.o64.noidx", {"vmaxps"}, {"vcmpps", "vmovdqa32", "vpmovzxdq"}},
  };
  for (const Expect& c : cases) {
    const Result r = run_ok({"embedding-bag", "--key", c.key, "--golden"});
    const std::string listing = listing_of(r.out);
    INFO("key: " << c.key << "\nlisting:\n" << listing);
    for (const std::string& m : c.present) {
      CAPTURE(m);
      CHECK(has_mnemonic(listing, m));
    }
    for (const std::string& m : c.absent) {
      CAPTURE(m);
      CHECK_FALSE(has_mnemonic(listing, m));
    }
  }
  // AVX-512 max merges under the compare's k-mask.
  const std::string max512 =
      listing_of(run_ok({"embedding-bag", "--key", "embag.avx512.f32.d64.max.i64.o64", "--golden"}).out);
  CHECK(max512.find("{k") != std::string::npos);
}

TEST_CASE("jitdump: linear-group checks its flags and shows the microkernel") {
  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Bad> cases{
      {{"linear-group"}, "give --k K"},
      {{"linear-group", "--k", "0"}, "--k: 0 is not in [1, 16777216]"},
      {{"linear-group", "--k", "8", "--act", "tanh"}, "--act: tanh not in {none, relu, gelu, gelu_tanh, silu}"},
      {{"linear-group", "--k", "8", "--store", "col"}, "--store: col not in {row-major, table}"},
      {{"linear-group", "--k", "8", "--isa", "avx512", "--mr", "9"},
       "--mr: 9 rows do not fit: a 48-column tile (3 vectors) leaves registers for at most 8 rows on avx512"},
      // 13 vectors leave no row: the --nc default mr would be 0 (once named "gemm.avx2.0x100").
      {{"linear-group", "--k", "16", "--nc", "100", "--isa", "avx2"},
       "--nc: a 100-column tile (13 vectors) leaves registers for no row on avx2; use fewer columns"},
      {{"linear-group", "--key", "gemm.avx512.8x48"}, "is not a canonical kernel name"},
      {{"linear-group", "--key", "gemm.avx512.8x48.k8", "--k", "3"}, "drop --k or drop --key"},
  };
  for (const Bad& bad : cases) {
    const Result r = run_jitdump(bad.args);
    INFO("command: " << r.command << "\nstderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(bad.message) != std::string::npos);
    CHECK(r.out.empty());
  }

  // Defaults: three vectors of columns and the most rows the register budget allows.
  const Result dflt = run_ok({"linear-group", "--k", "768", "--bias", "--isa", "avx512", "--golden"});
  CHECK(field(dflt.out, "kernel") == "gemm.avx512.8x48.k768.bias");
  const Result flags = run_ok({"linear-group", "--k", "16", "--nc", "16", "--mr", "5", "--bias", "--scale",
                               "--store", "table", "--isa", "avx2", "--golden"});
  CHECK(field(flags.out, "kernel") == "gemm.avx2.5x16.k16.bias.scale.tab");
  CHECK(run_ok({"linear-group", "--key", "gemm.avx2.5x16.k16.bias.scale.tab", "--golden"}).out == flags.out);

  // Broadcast A, FMA B; gelu calls SLEEF, named in the listing rather than by its address.
  const std::string fma = listing_of(run_ok({"linear-group", "--key", "gemm.avx512.8x48.k16", "--golden"}).out);
  CHECK(has_mnemonic(fma, "vfmadd231ps"));
  CHECK(has_mnemonic(fma, "vbroadcastss"));
#if defined(__x86_64__)  // elsewhere x86 code is only cross-emitted, with no SLEEF address to name
  const Result gelu = run_ok({"linear-group", "--key", "gemm.avx512.4x32.k3.bias.gelu", "--runs", "1"});
  CHECK(listing_of(gelu.out).find("; -> Sleef_") != std::string::npos);
  const Result gelu_golden = run_ok({"linear-group", "--key", "gemm.avx512.4x32.k3.bias.gelu", "--golden"});
  CHECK(listing_of(gelu_golden.out).find(", Sleef_") != std::string::npos);
#endif
}

TEST_CASE("jitdump: a GEMM kernel is named <mr>x<nc> with at least one row, whatever --nc is") {
  for (const std::string isa : {"avx512", "avx2", "neon"})
    for (const std::string nc : {"1", "8", "48", "64", "100", "4096"}) {
      const Result r = run_jitdump({"linear-group", "--k", "4", "--nc", nc, "--isa", isa, "--golden", "--no-listing"});
      INFO("command: " << r.command << "\nstdout: " << r.out << "stderr: " << r.err);
      CHECK((r.out + r.err).find(".0x") == std::string::npos);  // once "gemm.avx2.0x100.k4"
      if (r.exit_code != 0) continue;  // a usage or generator error naming the rule
      const std::string name = field(r.out, "kernel"), prefix = "gemm." + isa + ".";
      REQUIRE(name.rfind(prefix, 0) == 0);
      CHECK(std::atoi(name.c_str() + prefix.size()) >= 1);
      CHECK(name.find("x" + nc + ".k4") != std::string::npos);
    }
}

TEST_CASE("jitdump: the JIT listing equals the emitted one, and emission is reproducible") {
  // The default path generates into a JitRuntime when the host runs the ISA; --golden emits into
  // a CodeHolder. Equal text means the goldens show exactly what the engine runs.
  for (const std::string key :
       {"embag.avx512.f32.d20.max.i64.o64.pad", "embag.avx2.f32.d20.mean.i32.o32.head", "gemm.avx2.3x24.k5.relu.tab"}) {
    CAPTURE(key);
    const Result jit = run_ok({command_for(key), "--key", key, "--runs", "1"});
    const Result emitted = run_ok({command_for(key), "--key", key, "--golden"});
    CHECK(listing_of(jit.out) == listing_of(emitted.out));
    CHECK(field(jit.out, "code size") == field(emitted.out, "code size"));
    CHECK(run_ok({command_for(key), "--key", key, "--golden"}).out == emitted.out);
  }
}

TEST_CASE("jitdump: list-isas explains each ISA and the default follows it and SHAPEJIT_ISA") {
  const Result r = run_ok({"list-isas"});
  CHECK(r.out.find("cannot run") == std::string::npos);
  for (const std::string cap : {"scalar", "avx2", "neon", "bogus"})
    CHECK(run_ok({"list-isas"}, "SHAPEJIT_ISA=" + cap).out.find("cannot run") == std::string::npos);
  for (const std::string isa : {"avx512", "avx2", "neon"}) {
    CAPTURE(isa);
    const std::string line = field(r.out, isa);
    CHECK((line.rfind("runs here", 0) == 0 || line.find("only: ") != std::string::npos));
    CHECK(line.find("[needs ") != std::string::npos);
  }
  const std::string def = field(r.out, "default --isa");
  INFO("list-isas:\n" << r.out);
  REQUIRE(!def.empty());
  if (def.rfind("none", 0) == 0) return;  // no generated ISA runs on this host
  const Result dflt = run_ok({"embedding-bag", "--dim", "16", "--no-listing"});
  CHECK(field(dflt.out, "kernel") == "embag." + def + ".f32.d16.sum.i64.o64");
  if (field(r.out, "avx2").rfind("runs here", 0) == 0) {
    const Result capped = run_ok({"embedding-bag", "--dim", "16", "--no-listing"}, "SHAPEJIT_ISA=avx2");
    CHECK(field(capped.out, "kernel") == "embag.avx2.f32.d16.sum.i64.o64");
  }
}

TEST_CASE("jitdump: --isa neon cross-emits AArch64 code on x86-64 hosts") {
  const Result r = run_ok({"embedding-bag", "--dim", "20", "--isa", "neon", "--runs", "1"});
  INFO("stdout:\n" << r.out);
  CHECK(field(r.out, "kernel") == "embag.neon.f32.d20.sum.i64.o64");
#if defined(__x86_64__)
  CHECK(field(r.out, "isa").find("cross-emitted for AArch64") != std::string::npos);
  CHECK(field(r.out, "emit time").find("cross-emitted") != std::string::npos);
#endif
  const std::string sum = listing_of(r.out);
  CHECK(has_mnemonic(sum, "fadd"));
  CHECK(has_mnemonic(sum, "ret"));
  CHECK_FALSE(has_mnemonic(sum, "vaddps"));
  // Max compares (strict >) and selects under the compare result.
  const std::string max =
      listing_of(run_ok({"embedding-bag", "--key", "embag.neon.f32.d13.max.i32.o32", "--golden"}).out);
  CHECK(has_mnemonic(max, "fcmgt"));
}

TEST_CASE("jitdump: golden listings of fixed keys are unchanged") {
  REQUIRE(kGoldenDir[0] != '\0');
  for (const std::string& key : kGoldenKeys) {
    CAPTURE(key);
#if !defined(__x86_64__)
    // x86 kernels that call SLEEF embed its x86 address, which only an x86-64 host has.
    if (key.rfind("gemm.avx", 0) == 0 &&
        (key.find(".gelu") != std::string::npos || key.find(".silu") != std::string::npos)) {
      MESSAGE("skipped on this host (x86 SLEEF addresses): " << key);
      continue;
    }
#endif
    const Result r = run_ok({command_for(key), "--key", key, "--golden"});
    const fs::path golden = fs::path(kGoldenDir) / (key + ".txt");
    if (update_golden()) {
      fs::create_directories(golden.parent_path());
      std::ofstream file(golden, std::ios::binary);
      file << r.out;
      REQUIRE_MESSAGE(file.good(), "cannot write " << golden.string());
      MESSAGE("SHAPEJIT_UPDATE_GOLDEN=1: rewrote " << golden.string());
      continue;
    }
    const std::string expected = fs::exists(golden) ? slurp(golden) : std::string();
    if (expected == r.out) continue;
    // Keep the actual listing next to the build so `diff -u` shows the whole change.
    const fs::path actual = fs::current_path() / "golden-actual" / (key + ".txt");
    fs::create_directories(actual.parent_path());
    std::ofstream(actual, std::ios::binary) << r.out;
    // (built as std::string: doctest prints a bare const char* as a pointer)
    std::ostringstream msg;
    msg << "golden listing " << golden.string()
        << (fs::exists(golden) ? " differs from jitdump's output\n" : " is missing\n")
        << describe_difference(expected, r.out) << "review: diff -u " << golden.string() << " "
        << actual.string() << "\n"
        << "if the codegen change is intended, regenerate all golden files with\n"
        << "  SHAPEJIT_UPDATE_GOLDEN=1 <build>/tests/shapejit_tests -tc='jitdump: golden*'\n"
        << "or this one with\n  " << kJitdump << " " << command_for(key) << " --key " << key << " --golden > "
        << golden.string();
    FAIL_CHECK(msg.str());
  }
}

}  // TEST_SUITE

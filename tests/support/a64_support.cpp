#include "support/a64_support.hpp"

#include <unistd.h>

#include <asmjit/arm/a64assembler.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace shapejit::test::neon {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream s(text);
  for (std::string line; std::getline(s, line);) out.push_back(line);
  return out;
}

std::string first_word(const std::string& line) {
  const size_t b = line.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return line.substr(b, line.find_first_of(" \t", b) - b);
}

}  // namespace

Emitted emit_a64(const std::function<void(asmjit::CodeHolder&)>& emit) {
  asmjit::CodeHolder code;
  code.init(asmjit::Environment(asmjit::Arch::kAArch64));
  asmjit::StringLogger logger;
  code.setLogger(&logger);
  emit(code);
  code.flatten();
  code.resolveUnresolvedLinks();
  const asmjit::CodeBuffer& buf = code.textSection()->buffer();
  return {logger.data(), std::vector<uint8_t>(buf.data(), buf.data() + buf.size())};
}

std::vector<std::string> listing_mnemonics(const std::string& listing) {
  std::vector<std::string> m;
  for (const std::string& line : lines_of(listing)) {
    const std::string w = first_word(line);
    if (w.empty() || w.back() == ':' || w == "align" || w == ".word") continue;
    m.push_back(w);
  }
  return m;
}

bool has(const std::vector<std::string>& mnemonics, const std::string& m) {
  for (const std::string& x : mnemonics)
    if (x == m) return true;
  return false;
}

std::optional<Decoded> objdump_a64(const std::vector<uint8_t>& bytes) {
  if (std::system("command -v aarch64-linux-gnu-objdump >/dev/null 2>&1") != 0) return std::nullopt;
  static int serial = 0;
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("shapejit_a64_" + std::to_string(getpid()) + "_" + std::to_string(serial++) + ".bin");
  std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  const std::string cmd = "aarch64-linux-gnu-objdump -D -b binary -m aarch64 " + file.string();
  Decoded d;
  if (FILE* pipe = popen(cmd.c_str(), "r")) {
    std::array<char, 4096> chunk{};
    while (size_t n = fread(chunk.data(), 1, chunk.size(), pipe)) d.text.append(chunk.data(), n);
    pclose(pipe);
  }
  std::filesystem::remove(file);
  // objdump lines: "  offset:\tword \tmnemonic\toperands".
  for (const std::string& line : lines_of(d.text)) {
    const size_t t1 = line.find('\t');
    if (line.find(':') == std::string::npos || t1 == std::string::npos) continue;
    const size_t t2 = line.find('\t', t1 + 1);
    if (t2 == std::string::npos) continue;
    ++d.words;
    // asmjit logs a wide `mov` immediate as one line for its movz + movk sequence.
    const std::string m = first_word(line.substr(t2 + 1));
    if (m != "nop" && m != "movk") d.mnemonics.push_back(m);
  }
  return d;
}

namespace {

std::array<uint64_t, kSavedGp + kSavedFp> g_after{};
bool g_probed = false;

uint64_t pattern(int r) { return 0x5EED000000000000ull ^ (uint64_t(r) * 0x0101010101ull) ^ (uint64_t(r) << 40); }

}  // namespace

#if defined(__aarch64__)

ProbeFn wrap_with_register_probe(asmjit::JitRuntime& rt, const void* kernel) {
  using namespace asmjit;
  CodeHolder code;
  code.init(rt.environment());
  a64::Assembler a(&code);
  const int frame = 16 + 8 * (kSavedGp + kSavedFp);  // x29/x30 + the saved registers = 160
  a.stp(a64::x29, a64::x30, a64::ptr_pre(a64::sp, -frame));
  a.mov(a64::x29, a64::sp);
  for (int i = 0; i < kSavedGp; i += 2) a.stp(a64::x(19 + i), a64::x(20 + i), a64::ptr(a64::sp, 16 + 8 * i));
  for (int i = 0; i < kSavedFp; i += 2)
    a.stp(a64::d(8 + i), a64::d(9 + i), a64::ptr(a64::sp, 16 + 8 * (kSavedGp + i)));
  for (int i = 0; i < kSavedGp; ++i) a.mov(a64::x(19 + i), Imm(pattern(19 + i)));
  for (int i = 0; i < kSavedFp; ++i) {
    a.mov(a64::x9, Imm(pattern(8 + i)));
    a.fmov(a64::d(8 + i), a64::x9);
  }
  a.mov(a64::x16, Imm(reinterpret_cast<uint64_t>(kernel)));
  a.blr(a64::x16);  // x0 still holds the argument
  a.mov(a64::x9, Imm(reinterpret_cast<uint64_t>(g_after.data())));
  for (int i = 0; i < kSavedGp; ++i) a.str(a64::x(19 + i), a64::ptr(a64::x9, 8 * i));
  for (int i = 0; i < kSavedFp; ++i) a.str(a64::d(8 + i), a64::ptr(a64::x9, 8 * (kSavedGp + i)));
  a.mov(a64::x10, Imm(1));
  a.mov(a64::x9, Imm(reinterpret_cast<uint64_t>(&g_probed)));
  a.strb(a64::w10, a64::ptr(a64::x9));
  for (int i = 0; i < kSavedGp; i += 2) a.ldp(a64::x(19 + i), a64::x(20 + i), a64::ptr(a64::sp, 16 + 8 * i));
  for (int i = 0; i < kSavedFp; i += 2)
    a.ldp(a64::d(8 + i), a64::d(9 + i), a64::ptr(a64::sp, 16 + 8 * (kSavedGp + i)));
  a.ldp(a64::x29, a64::x30, a64::ptr_post(a64::sp, frame));
  a.ret(a64::x30);
  ProbeFn fn = nullptr;
  return rt.add(&fn, &code) == kErrorOk ? fn : nullptr;
}

#else

ProbeFn wrap_with_register_probe(asmjit::JitRuntime&, const void*) { return nullptr; }

#endif

std::string take_probe_report() {
  std::string report;
  if (!g_probed) report = "the probe did not run";
  for (int i = 0; i < kSavedGp && g_probed; ++i)
    if (g_after[size_t(i)] != pattern(19 + i)) report += " x" + std::to_string(19 + i);
  for (int i = 0; i < kSavedFp && g_probed; ++i)
    if (g_after[size_t(kSavedGp + i)] != pattern(8 + i)) report += " d" + std::to_string(8 + i);
  if (g_probed && !report.empty()) report = "callee-saved registers changed:" + report;
  g_probed = false;
  g_after.fill(0);
  return report;
}

}  // namespace shapejit::test::neon

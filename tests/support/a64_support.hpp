// Helpers of the NEON generator tests (embag_neon_test.cpp, linear_group_neon_test.cpp): the
// mnemonics of a cross-emitted listing, binutils' decoding of the same bytes, and (on AArch64)
// a wrapper that checks a generated function keeps AAPCS64's callee-saved registers.
#pragma once

#include <asmjit/core.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace shapejit::test::neon {

/// A kernel cross-emitted for AArch64: asmjit's listing and the flat code bytes.
struct Emitted {
  std::string listing;
  std::vector<uint8_t> bytes;
};

/// Runs `emit` on a CodeHolder initialised for AArch64 (whatever the host) with a logger.
Emitted emit_a64(const std::function<void(asmjit::CodeHolder&)>& emit);

/// Mnemonics of an asmjit listing in order: labels and `align` dropped, and a hand-encoded
/// `.word` counted as the instruction its preceding comment line names (prfm).
std::vector<std::string> listing_mnemonics(const std::string& listing);

/// True when `mnemonics` contains `m`.
bool has(const std::vector<std::string>& mnemonics, const std::string& m);

/// aarch64-linux-gnu-objdump's mnemonics for `bytes` (alignment nops and the movk halves of wide
/// `mov` immediates dropped, as asmjit's listing shows them) and the number of 4-byte words it
/// decoded; nullopt when the tool is not installed.
struct Decoded {
  std::vector<std::string> mnemonics;
  size_t words = 0;
  std::string text;  ///< objdump's whole output, for failure messages
};
std::optional<Decoded> objdump_a64(const std::vector<uint8_t>& bytes);

/// The registers AAPCS64 makes callee-saved: x19-x28 and d8-d15 (the low halves of v8-v15).
inline constexpr int kSavedGp = 10, kSavedFp = 8;

/// A `void(const void*)` function that loads a distinct pattern into x19-x28 and d8-d15, calls
/// `kernel` with its own argument, and records what those registers hold afterwards (restoring
/// the caller's values itself). Only on AArch64 hosts; nullptr elsewhere.
using ProbeFn = void (*)(const void*);
ProbeFn wrap_with_register_probe(asmjit::JitRuntime& rt, const void* kernel);

/// "" when the last probed call left every callee-saved register as the probe set it, else the
/// registers that changed. Resets the record.
std::string take_probe_report();

}  // namespace shapejit::test::neon

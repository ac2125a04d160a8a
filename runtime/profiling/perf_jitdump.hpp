// Profiler visibility, second form: Linux perf's jitdump. With SHAPEJIT_PERF_JITDUMP=1 every
// compiled kernel is appended to <dir>/jit-<pid>.dump as a JIT_CODE_LOAD record (name, address,
// code bytes). `perf record -k 1` sees the file through a marker mapping, and `perf inject --jit`
// turns each record into a small ELF that covers the kernel's addresses, so `perf report` names
// kernels whatever mapping holds their code (the dual-mapped memfd perf does not match with the
// perf map). <dir> is SHAPEJIT_PERF_JITDUMP_DIR, else $HOME/.debug/jit (created), else the cwd.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shapejit::rt {

/// The on-disk layout (perf's tools/perf/Documentation/jitdump-specification.txt), all fields in
/// this host's byte order.
namespace jitdump {
inline constexpr uint32_t kMagic = 0x4A695444;  // "JiTD" read as a native u32
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kHeaderBytes = 40;      // magic..flags
inline constexpr uint32_t kRecordHeaderBytes = 16;  // id, total_size, timestamp
inline constexpr uint32_t kCodeLoadFixedBytes = 40;  // pid, tid, vma, code_addr, code_size, code_index
inline constexpr uint32_t kCodeLoad = 0;           // record id JIT_CODE_LOAD
inline constexpr uint32_t kCodeClose = 3;          // record id JIT_CODE_CLOSE
}  // namespace jitdump

/// Whether kernels are recorded: a set_perf_jitdump_enabled() override, else
/// SHAPEJIT_PERF_JITDUMP (read once; the values of SHAPEJIT_PERF_MAP).
bool perf_jitdump_enabled();

/// Overrides the environment (tests); nullopt returns to it.
void set_perf_jitdump_enabled(std::optional<bool> enabled);

/// Overrides the directory (tests); nullopt returns to the environment. Takes effect when the
/// next dump file is opened (after perf_jitdump_close()).
void set_perf_jitdump_dir(std::optional<std::string> dir);

/// The directory the next dump file goes to (see the file comment).
std::string perf_jitdump_dir();

/// The dump file this process writes, or "" when none is open.
std::string perf_jitdump_path();

/// The timestamp of records: CLOCK_MONOTONIC in ns, the clock of `perf record -k 1`.
uint64_t perf_jitdump_timestamp();

/// Appends one kernel when enabled, opening the file (and mapping its marker) on first use and
/// again in a forked child, which needs a file named by its own pid. Thread-safe: one record is
/// one write() under a lock. Never throws; a failure is reported once on stderr and then the
/// dump stays off, so a profiler aid never fails a compilation.
void perf_jitdump_record(const void* start, size_t size, std::string_view name) noexcept;

/// Appends JIT_CODE_CLOSE, closes the file and unmaps its marker (tests; a process may just
/// exit). The next record opens a new file.
void perf_jitdump_close() noexcept;

/// Its part of the engine's fork handlers (runtime/engine/fork_handlers.hpp): hold the writer's
/// lock across fork(), release it in the parent, give the child a fresh one.
void perf_jitdump_fork_prepare();
void perf_jitdump_fork_parent();
void perf_jitdump_fork_child();

}  // namespace shapejit::rt

// Profiler visibility: Linux perf's JIT symbol map. With SHAPEJIT_PERF_MAP=1 every compiled
// kernel is appended to /tmp/perf-<pid>.map as `START SIZE name` (hex, no 0x), so `perf report`
// shows `embag.avx512.f32.d128.sum.i64.o64` instead of an anonymous address. perf applies the
// map only to anonymous executable mappings; code in the dual-mapped memfd (runtime/
// jit_memory.hpp) needs the jitdump (runtime/profiling/perf_jitdump.hpp, docs/profiling.md).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace shapejit::rt {

/// True when `value` (of the environment variable `variable`) names an enabled value ("1",
/// "true", "yes", "on"); any other non-off value is reported on stderr.
bool perf_map_env_enabled(const char* value, const char* variable = "SHAPEJIT_PERF_MAP");

/// Whether kernels are recorded: a set_perf_map_enabled() override, else SHAPEJIT_PERF_MAP
/// (read once).
bool perf_map_enabled();

/// Overrides the environment (tests); nullopt returns to it.
void set_perf_map_enabled(std::optional<bool> enabled);

/// The map file of this process: /tmp/perf-<pid>.map.
std::string perf_map_path();

/// One map line: `START SIZE name\n` with START and SIZE in lower-case hex without 0x.
/// Characters perf would misread (newlines) are replaced by '_'.
std::string perf_map_line(const void* start, size_t size, std::string_view name);

/// The hook every compilation calls: forwards to perf_jitdump_record() (which checks its own
/// switch), then appends one kernel to the map when enabled. Never throws: a profiler aid must
/// not fail a compilation, so a file that cannot be written is reported once on stderr and then
/// ignored. The map is created with mode 0600, and a symbolic link, a hard-linked name or a file
/// of another user at its path is refused, never written through.
void perf_map_record(const void* start, size_t size, std::string_view name) noexcept;

}  // namespace shapejit::rt

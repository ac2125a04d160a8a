// The perf map writer. Each record opens the file with O_APPEND and writes its line in one
// write(), so lines from several threads (or a forked child, which gets its own pid and file)
// never interleave; compilations are rare enough that the open/close costs nothing.
#include "runtime/profiling/perf_map.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/profiling/perf_jitdump.hpp"

namespace shapejit::rt {
namespace {

// -1: follow the environment; 0 / 1: overridden.
std::atomic<int> g_override{-1};
std::atomic<bool> g_reported_failure{false};

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != b[i]) return false;
  return true;
}

bool env_enabled_once() {
  static const bool enabled = [] {
    const char* value = std::getenv("SHAPEJIT_PERF_MAP");
    return perf_map_env_enabled(value);
  }();
  return enabled;
}

void append_hex(std::string& out, uint64_t v) {
  char buf[17];
  const int n = std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  out.append(buf, size_t(n));
}

void report_failure_once(const std::string& path, const std::string& why) {
  if (g_reported_failure.exchange(true)) return;
  std::fprintf(stderr, "shapejit: SHAPEJIT_PERF_MAP: cannot append to %s (%s); kernels are not mapped\n",
               path.c_str(), why.c_str());
}

// /tmp is shared with every local user, who may plant the name before we create it: a symlink
// or a hard link would make us append to a file of their choosing (a victim's dotfile), a file
// of theirs would collect our code addresses. So the last component is never followed, and
// only a plain file of our own with no other name is appended to. The mode keeps the addresses
// (an ASLR leak) from other users; perf, run by the same user or root, still reads them.
int open_map_file(const std::string& path, std::string& why) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    why = errno == ELOOP ? "it is a symbolic link, which is never followed" : std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) why = std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) why = "it is not a regular file";
  else if (st.st_uid != ::geteuid()) why = "it belongs to another user";
  else if (st.st_nlink != 1) why = "it has other names (hard links)";
  else return fd;
  ::close(fd);
  return -1;
}

}  // namespace

bool perf_map_env_enabled(const char* value, const char* variable) {
  if (value == nullptr) return false;
  const std::string_view v(value);
  for (std::string_view on : {"1", "true", "yes", "on"})
    if (equals_ignoring_case(v, on)) return true;
  bool known_off = v.empty();
  for (std::string_view off : {"0", "false", "no", "off"}) known_off = known_off || equals_ignoring_case(v, off);
  if (!known_off)  // a typo must not silently leave the profile anonymous
    std::fprintf(stderr, "shapejit: %s=%s is not 1/0 (true/false); left disabled\n", variable, value);
  return false;
}

bool perf_map_enabled() {
  const int o = g_override.load(std::memory_order_relaxed);
  return o < 0 ? env_enabled_once() : o == 1;
}

void set_perf_map_enabled(std::optional<bool> enabled) {
  g_override.store(enabled ? int(*enabled) : -1, std::memory_order_relaxed);
}

std::string perf_map_path() { return "/tmp/perf-" + std::to_string(::getpid()) + ".map"; }

std::string perf_map_line(const void* start, size_t size, std::string_view name) {
  std::string line;
  line.reserve(name.size() + 36);
  append_hex(line, reinterpret_cast<uintptr_t>(start));
  line += ' ';
  append_hex(line, size);
  line += ' ';
  for (char c : name) line += (c == '\n' || c == '\r') ? '_' : c;
  line += '\n';
  return line;
}

void perf_map_record(const void* start, size_t size, std::string_view name) noexcept {
  perf_jitdump_record(start, size, name);
  if (!perf_map_enabled()) return;
  try {
    const std::string path = perf_map_path();
    const std::string line = perf_map_line(start, size, name);
    std::string why;
    const int fd = open_map_file(path, why);
    if (fd < 0) {
      report_failure_once(path, why);
      return;
    }
    // O_APPEND moves to the end and writes in one step; the loop only covers a short write.
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        report_failure_once(path, std::strerror(n < 0 ? errno : EIO));
        break;
      }
      p += n;
      left -= size_t(n);
    }
    ::close(fd);
  } catch (...) {  // out of memory for the line: the kernel still works, only unnamed
  }
}

}  // namespace shapejit::rt

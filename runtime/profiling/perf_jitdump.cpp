// The jitdump writer. One lock guards the file: records are rare (one per compilation) and must
// not interleave, and the code index perf uses to name its per-kernel ELF files must be unique.
#include "runtime/profiling/perf_jitdump.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "runtime/profiling/perf_map.hpp"

namespace shapejit::rt {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kElfMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kElfMachine = EM_AARCH64;
#else
constexpr uint32_t kElfMachine = EM_NONE;
#endif

struct DumpState {
  std::mutex mutex;
  int fd = -1;
  pid_t pid = 0;  // the process the open file is named for
  void* marker = nullptr;
  size_t marker_bytes = 0;
  std::string path;
  uint64_t next_index = 0;
  bool failed = false;  // reported once; no further attempts
  std::optional<std::string> dir_override;
};

DumpState& state() {
  static DumpState* s = new DumpState;  // never destroyed: kernels may compile during exit
  return *s;
}

std::atomic<int> g_override{-1};  // -1: follow the environment; 0 / 1: overridden

bool env_enabled_once() {
  static const bool enabled = [] {
    return perf_map_env_enabled(std::getenv("SHAPEJIT_PERF_JITDUMP"), "SHAPEJIT_PERF_JITDUMP");
  }();
  return enabled;
}

// A record assembled in a buffer of its final size, so it reaches the file in one write().
struct Bytes {
  std::vector<unsigned char> b;
  size_t at = 0;
  explicit Bytes(size_t n) : b(n) {}
  template <class T>
  void put(T v) {
    std::memcpy(b.data() + at, &v, sizeof v);
    at += sizeof v;
  }
  void put_bytes(const void* p, size_t n) {
    if (n > 0) std::memcpy(b.data() + at, p, n);
    at += n;
  }
};

bool write_all(int fd, const unsigned char* p, size_t n, std::string& why) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      why = std::strerror(w < 0 ? errno : EIO);
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

void fail_locked(DumpState& s, const std::string& what, const std::string& why) {
  if (s.fd >= 0) ::close(s.fd);
  s.fd = -1;
  if (s.failed) return;
  s.failed = true;
  std::fprintf(stderr, "shapejit: SHAPEJIT_PERF_JITDUMP: %s (%s); kernels are not dumped\n", what.c_str(),
               why.c_str());
}

// mkdir -p with mode 0700 for the components it creates.
bool make_dirs(const std::string& dir, std::string& why) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string prefix = dir.substr(0, i);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      why = "cannot create " + prefix + ": " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

// Opens <dir>/jit-<pid>.dump, writes the file header and maps the marker. The name is fixed by
// perf (inject matches `jit-<pid>.dump` against the pid of the mapping), so a stale file of an
// earlier process with the same pid is truncated; a symbolic link or another user's file there
// is refused, as for the perf map.
bool open_locked(DumpState& s) {
  std::string why;
  const std::string dir = s.dir_override ? *s.dir_override : perf_jitdump_dir();
  if (!make_dirs(dir, why)) {
    fail_locked(s, "no directory " + dir, why);
    return false;
  }
  const pid_t pid = ::getpid();
  const std::string path = dir + "/jit-" + std::to_string(pid) + ".dump";
  // Truncated only after the checks, so a planted hard link never loses its contents.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    fail_locked(s, "cannot create " + path,
                errno == ELOOP ? "it is a symbolic link, which is never followed" : std::strerror(errno));
    return false;
  }
  s.fd = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) why = std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) why = "it is not a regular file";
  else if (st.st_uid != ::geteuid()) why = "it belongs to another user";
  else if (st.st_nlink != 1) why = "it has other names (hard links)";
  else if (::ftruncate(fd, 0) != 0) why = std::strerror(errno);
  if (!why.empty()) {
    fail_locked(s, "refusing " + path, why);
    return false;
  }
  Bytes header(jitdump::kHeaderBytes);
  header.put<uint32_t>(jitdump::kMagic);
  header.put<uint32_t>(jitdump::kVersion);
  header.put<uint32_t>(jitdump::kHeaderBytes);
  header.put<uint32_t>(kElfMachine);
  header.put<uint32_t>(0);  // pad
  header.put<uint32_t>(uint32_t(pid));
  header.put<uint64_t>(perf_jitdump_timestamp());
  header.put<uint64_t>(0);  // flags: timestamps are CLOCK_MONOTONIC, not the arch counter
  if (!write_all(fd, header.b.data(), header.b.size(), why)) {
    fail_locked(s, "cannot write " + path, why);
    return false;
  }
  // perf records only executable mappings (without --data): this one is how `perf record` learns
  // the dump's path. It is never touched, so mapping a page past the file's end is harmless.
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  void* marker = ::mmap(nullptr, page, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
  if (marker == MAP_FAILED) {
    fail_locked(s, "cannot map " + path + " executable (perf would never see it; a noexec mount?)",
                std::strerror(errno));
    return false;
  }
  s.marker = marker;
  s.marker_bytes = page;
  s.pid = pid;
  s.path = path;
  s.next_index = 0;
  return true;
}

void close_locked(DumpState& s) {
  if (s.fd >= 0) ::close(s.fd);
  if (s.marker != nullptr) ::munmap(s.marker, s.marker_bytes);
  s.fd = -1;
  s.marker = nullptr;
  s.path.clear();
}

Bytes record(uint32_t id, size_t total) {
  Bytes r(total);
  r.put<uint32_t>(id);
  r.put<uint32_t>(uint32_t(total));
  r.put<uint64_t>(perf_jitdump_timestamp());
  return r;
}

}  // namespace

bool perf_jitdump_enabled() {
  const int o = g_override.load(std::memory_order_relaxed);
  return o < 0 ? env_enabled_once() : o == 1;
}

void set_perf_jitdump_enabled(std::optional<bool> enabled) {
  g_override.store(enabled ? int(*enabled) : -1, std::memory_order_relaxed);
}

void set_perf_jitdump_dir(std::optional<std::string> dir) {
  DumpState& s = state();
  std::lock_guard lock(s.mutex);
  s.dir_override = std::move(dir);
  s.failed = false;  // a new directory deserves a new attempt (and a new report)
}

std::string perf_jitdump_dir() {
  const char* dir = std::getenv("SHAPEJIT_PERF_JITDUMP_DIR");
  if (dir != nullptr && *dir) return dir;
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home) return std::string(home) + "/.debug/jit";
  return ".";
}

std::string perf_jitdump_path() {
  DumpState& s = state();
  std::lock_guard lock(s.mutex);
  return s.fd >= 0 && s.pid == ::getpid() ? s.path : std::string();
}

uint64_t perf_jitdump_timestamp() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

void perf_jitdump_record(const void* start, size_t size, std::string_view name) noexcept {
  if (!perf_jitdump_enabled()) return;
  DumpState& s = state();
  try {
    std::lock_guard lock(s.mutex);
    if (s.fd >= 0 && s.pid != ::getpid()) {  // forked: the inherited file belongs to the parent
      close_locked(s);
      s.failed = false;
    }
    if (s.fd < 0 && (s.failed || !open_locked(s))) return;
    // Record: header, pid, tid, vma, code_addr, code_size, code_index, name + NUL, code bytes.
    const size_t total = jitdump::kRecordHeaderBytes + jitdump::kCodeLoadFixedBytes + name.size() + 1 + size;
    Bytes r = record(jitdump::kCodeLoad, total);
    const auto addr = uint64_t(reinterpret_cast<uintptr_t>(start));
    r.put<uint32_t>(uint32_t(s.pid));
    r.put<uint32_t>(uint32_t(::syscall(SYS_gettid)));
    r.put<uint64_t>(addr);  // vma: the address samples hit
    r.put<uint64_t>(addr);  // code_addr: where the bytes below live (the same executable view)
    r.put<uint64_t>(uint64_t(size));
    r.put<uint64_t>(s.next_index);
    for (char c : name) r.put<char>(c == '\0' ? '_' : c);  // perf reads the name up to a NUL
    r.put<char>('\0');
    r.put_bytes(start, size);
    std::string why;
    if (!write_all(s.fd, r.b.data(), r.b.size(), why)) {
      fail_locked(s, "cannot append to " + s.path, why);
      return;
    }
    ++s.next_index;
  } catch (...) {  // out of memory for the record: the kernel still works, only unnamed
  }
}

// The lock is held across fork() so that the child never inherits it taken by a thread it does
// not have (the child gets a fresh one: runtime/engine/fork_handlers.hpp); the child's first record then
// opens a file of its own (the pid check above).
void perf_jitdump_fork_prepare() { state().mutex.lock(); }
void perf_jitdump_fork_parent() { state().mutex.unlock(); }
void perf_jitdump_fork_child() { new (&state().mutex) std::mutex(); }

void perf_jitdump_close() noexcept {
  DumpState& s = state();
  std::lock_guard lock(s.mutex);
  if (s.fd >= 0 && s.pid == ::getpid()) {
    try {
      const Bytes r = record(jitdump::kCodeClose, jitdump::kRecordHeaderBytes);
      std::string why;
      write_all(s.fd, r.b.data(), r.b.size(), why);  // best effort: perf reads a dump without it too
    } catch (...) {
    }
  }
  close_locked(s);
  s.failed = false;
}

}  // namespace shapejit::rt

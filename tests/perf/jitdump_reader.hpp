// A strict reader of perf's jitdump files, written from the specification (not from the writer in
// runtime/profiling/perf_jitdump.cpp), for the format test and the real-perf test.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace shapejit::test {

struct JitdumpHeader {
  uint32_t magic = 0, version = 0, total_size = 0, elf_mach = 0, pad = 0, pid = 0;
  uint64_t timestamp = 0, flags = 0;
};

struct JitdumpRecord {
  uint32_t id = 0, total_size = 0;
  uint64_t timestamp = 0;
  // JIT_CODE_LOAD (id 0) only:
  uint32_t pid = 0, tid = 0;
  uint64_t vma = 0, code_addr = 0, code_size = 0, code_index = 0;
  std::string name;
  std::vector<unsigned char> code;
};

struct Jitdump {
  JitdumpHeader header;
  std::vector<JitdumpRecord> records;
};

namespace detail {
template <class T>
bool take(const std::vector<unsigned char>& b, size_t& at, size_t end, T& v) {
  if (at + sizeof v > end) return false;
  std::memcpy(&v, b.data() + at, sizeof v);
  at += sizeof v;
  return true;
}
}  // namespace detail

/// Parses the whole file; `error` says where it stops making sense (nullopt then).
inline std::optional<Jitdump> read_jitdump(const std::string& path, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open " + path;
    return std::nullopt;
  }
  const std::vector<unsigned char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  using detail::take;
  Jitdump d;
  JitdumpHeader& h = d.header;
  size_t at = 0;
  const size_t n = b.size();
  if (!take(b, at, n, h.magic) || !take(b, at, n, h.version) || !take(b, at, n, h.total_size) ||
      !take(b, at, n, h.elf_mach) || !take(b, at, n, h.pad) || !take(b, at, n, h.pid) ||
      !take(b, at, n, h.timestamp) || !take(b, at, n, h.flags)) {
    error = "file header truncated: " + std::to_string(n) + " bytes";
    return std::nullopt;
  }
  if (h.total_size < at || h.total_size > n) {
    error = "header total_size " + std::to_string(h.total_size) + " outside the file";
    return std::nullopt;
  }
  at = h.total_size;
  while (at < n) {
    const size_t start = at;
    JitdumpRecord r;
    if (!take(b, at, n, r.id) || !take(b, at, n, r.total_size) || !take(b, at, n, r.timestamp)) {
      error = "record header truncated at offset " + std::to_string(start);
      return std::nullopt;
    }
    const size_t end = start + r.total_size;
    if (r.total_size < 16 || end > n) {
      error = "record at offset " + std::to_string(start) + " has total_size " + std::to_string(r.total_size) +
              " (file: " + std::to_string(n) + " bytes)";
      return std::nullopt;
    }
    if (r.id == 0) {
      if (!take(b, at, end, r.pid) || !take(b, at, end, r.tid) || !take(b, at, end, r.vma) ||
          !take(b, at, end, r.code_addr) || !take(b, at, end, r.code_size) || !take(b, at, end, r.code_index)) {
        error = "code-load record at offset " + std::to_string(start) + " truncated";
        return std::nullopt;
      }
      const auto* nul = static_cast<const unsigned char*>(std::memchr(b.data() + at, 0, end - at));
      if (nul == nullptr) {
        error = "code-load record at offset " + std::to_string(start) + ": name not NUL-terminated";
        return std::nullopt;
      }
      r.name.assign(reinterpret_cast<const char*>(b.data() + at), size_t(nul - (b.data() + at)));
      at = size_t(nul - b.data()) + 1;
      if (end - at != r.code_size) {
        error = "code-load record " + r.name + ": " + std::to_string(end - at) + " code bytes, code_size " +
                std::to_string(r.code_size);
        return std::nullopt;
      }
      r.code.assign(b.begin() + std::ptrdiff_t(at), b.begin() + std::ptrdiff_t(end));
    }
    at = end;
    d.records.push_back(std::move(r));
  }
  return d;
}

}  // namespace shapejit::test

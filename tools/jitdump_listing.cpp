#include "tools/jitdump_listing.hpp"

#include <dlfcn.h>

#include <charconv>
#include <cstdint>
#include <string_view>

namespace shapejit::tools {
namespace {

// The exported function starting exactly at `address` in this process ("" when none): generated
// code reaches external functions through `mov reg, imm64; call reg`.
std::string symbol_at(uint64_t address) {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(address), &info) == 0 || info.dli_sname == nullptr) return "";
  if (reinterpret_cast<uint64_t>(info.dli_saddr) != address) return "";
  return info.dli_sname;
}

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// One logged line: "<instruction><padding>; <machine bytes>" (the bytes part may be absent).
std::string format_line(std::string_view line, AddressStyle style) {
  line = trim_right(line);
  const size_t semi = line.find(';');
  std::string instr(trim_right(line.substr(0, semi)));
  std::string bytes(semi == std::string_view::npos ? std::string_view() : line.substr(semi + 1));
  if (!bytes.empty() && bytes.front() == ' ') bytes.erase(0, 1);

  // Immediates are printed in decimal; an address is a token of digits above 2^32.
  std::string symbol;
  size_t token_at = 0, token_len = 0;
  for (size_t i = 0; i < instr.size();) {
    size_t j = i;
    while (j < instr.size() && instr[j] >= '0' && instr[j] <= '9') ++j;
    const bool starts_token = i == 0 || instr[i - 1] == ' ' || instr[i - 1] == ',';
    const bool ends_token = j == instr.size() || instr[j] == ',' || instr[j] == ' ';
    if (j - i >= 10 && starts_token && ends_token) {
      uint64_t value = 0;
      const auto [ptr, ec] = std::from_chars(instr.data() + i, instr.data() + j, value);
      if (ec == std::errc() && value > 0xFFFFFFFFull) symbol = symbol_at(value);
      if (!symbol.empty()) {
        token_at = i;
        token_len = j - i;
        break;
      }
    }
    i = j > i ? j : i + 1;
  }
  if (symbol.empty()) return std::string(line);

  if (style == AddressStyle::kAnnotate) return std::string(line) + " ; -> " + symbol;
  // Symbolic: the name instead of the number, and the imm64 (the instruction's last 8 bytes)
  // shown as unknown, keeping the logger's column for the bytes.
  const size_t column = semi;
  instr.replace(token_at, token_len, symbol);
  if (bytes.size() >= 16) bytes.replace(bytes.size() - 16, 16, std::string(16, '.'));
  std::string out = instr;
  out.append(out.size() < column ? column - out.size() : 1, ' ');
  return out + "; " + bytes;
}

}  // namespace

asmjit::FormatFlags listing_flags() {
  return asmjit::FormatFlags::kMachineCode | asmjit::FormatFlags::kExplainImms;
}

std::string format_listing(const std::string& logger_text, AddressStyle style) {
  std::string out;
  out.reserve(logger_text.size());
  size_t start = 0;
  while (start < logger_text.size()) {
    size_t end = logger_text.find('\n', start);
    if (end == std::string::npos) end = logger_text.size();
    out += format_line(std::string_view(logger_text).substr(start, end - start), style);
    out += '\n';
    start = end + 1;
  }
  return out;
}

}  // namespace shapejit::tools

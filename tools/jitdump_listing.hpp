// Turning asmjit's logger text into jitdump's listing: tidy lines and name the functions that
// generated code calls through absolute addresses (SLEEF's vector math, for example).
#pragma once

#include <asmjit/core.h>

#include <string>

namespace shapejit::tools {

/// Format flags of every listing: machine bytes and explained immediates (compare predicates,
/// shuffle masks), so a reader sees both encoding and meaning.
asmjit::FormatFlags listing_flags();

/// How absolute addresses in a listing are shown.
enum class AddressStyle {
  kAnnotate,  ///< keep the number, append "; -> symbol" (what ran on this host)
  kSymbolic,  ///< replace number and its 8 immediate bytes by the symbol, so the text does not
              ///< depend on where this process loaded the library (golden listings)
};

/// The logger's text with trailing blanks removed from every line, and every 64-bit immediate
/// that is the address of a named function shown per `style`.
std::string format_listing(const std::string& logger_text, AddressStyle style);

}  // namespace shapejit::tools

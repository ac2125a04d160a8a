#include "runtime/engine/last_error.hpp"

namespace shapejit::rt {
namespace {
thread_local std::string t_last_error;
// Whether t_last_error holds a message. Every successful call clears the error, so that path
// tests this flag (trivial: no thread_local initialisation guard, no string access) and
// touches the string only after a failure.
constinit thread_local bool t_has_error = false;
}  // namespace

void set_last_error(const std::string& message) {
  t_last_error = message;
  t_has_error = true;
}
void clear_last_error() {
  if (t_has_error) [[unlikely]] {
    t_last_error.clear();
    t_has_error = false;
  }
}
const char* last_error() { return t_has_error ? t_last_error.c_str() : ""; }

}  // namespace shapejit::rt

extern "C" const char* shapejit_last_error(void) { return shapejit::rt::last_error(); }

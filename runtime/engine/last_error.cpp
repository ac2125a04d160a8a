#include "runtime/engine/last_error.hpp"

namespace shapejit::rt {
namespace {
thread_local std::string t_last_error;
}

void set_last_error(const std::string& message) { t_last_error = message; }
void clear_last_error() { t_last_error.clear(); }
const char* last_error() { return t_last_error.c_str(); }

}  // namespace shapejit::rt

extern "C" const char* shapejit_last_error(void) { return shapejit::rt::last_error(); }

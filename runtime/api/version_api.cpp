// The version and status-text entry points of the C ABI, and their C++ forms. The numbers are
// compiled in from version.h, so the library reports the version it was built as, whatever
// header its caller was compiled with.
#include "runtime/engine/c_enum.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"

namespace {

// Every status's fixed text; any other int gets the last line. Indexed by the int, not the enum:
// a C caller may pass a value no enumerator has (see runtime/engine/c_enum.hpp).
const char* status_text(int64_t status) {
  switch (status) {
    case SHAPEJIT_OK: return "ok";
    case SHAPEJIT_INVALID_ARGUMENT:
      return "invalid argument: the call broke one of its rules (shapejit_last_error() names which)";
    case SHAPEJIT_UNSUPPORTED: return "unsupported: a valid request this build or CPU cannot run";
    case SHAPEJIT_OUT_OF_MEMORY: return "out of memory";
    case SHAPEJIT_INTERNAL_ERROR: return "internal error: a shapejit bug (please report it)";
    default: return "unknown status: a value outside shapejit_status";
  }
}

}  // namespace

extern "C" {

int32_t shapejit_version(void) { return SHAPEJIT_VERSION; }

const char* shapejit_version_string(void) { return SHAPEJIT_VERSION_STRING; }

const char* shapejit_status_string(shapejit_status status) {
  return status_text(shapejit::rt::c_enum_value(status));
}

}  // extern "C"

namespace shapejit {

const char* status_string(Status status) noexcept { return status_text(static_cast<int>(status)); }

}  // namespace shapejit

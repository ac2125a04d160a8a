// The calling thread's last error message (behind shapejit_last_error()), and the one
// wrapper that turns C++ exceptions into C ABI statuses.
#pragma once

#include <new>
#include <string>
#include <utility>

#include "shapejit/shapejit.hpp"

namespace shapejit::rt {

/// Records `message` as the calling thread's last error.
void set_last_error(const std::string& message);
/// Clears the calling thread's last error.
void clear_last_error();
/// The calling thread's last error ("" if none).
const char* last_error();

/// Runs `body` and maps its outcome to a C status: shapejit::Error keeps its status and
/// message, std::bad_alloc becomes SHAPEJIT_OUT_OF_MEMORY, anything else INTERNAL_ERROR.
template <class Body>
shapejit_status guarded(Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    clear_last_error();
    return SHAPEJIT_OK;
  } catch (const Error& e) {
    set_last_error(e.what());
    return static_cast<shapejit_status>(e.status());
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return SHAPEJIT_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(std::string("internal error: ") + e.what());
    return SHAPEJIT_INTERNAL_ERROR;
  } catch (...) {
    set_last_error("internal error: unknown exception");
    return SHAPEJIT_INTERNAL_ERROR;
  }
}

}  // namespace shapejit::rt

// The version query and the status texts of the C ABI and the C++ API: the header's macros agree
// with each other, with the CMake project version and with what the library reports; every status
// has its own fixed text and an unknown one still gets a text.
#include <doctest/doctest.h>

#include <cstring>
#include <set>
#include <string>

#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"
#include "shapejit/version.h"

namespace {

std::string dotted(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace

TEST_CASE("version: the header's macros agree with each other") {
  CHECK(SHAPEJIT_VERSION == SHAPEJIT_VERSION_MAJOR * 10000 + SHAPEJIT_VERSION_MINOR * 100 + SHAPEJIT_VERSION_PATCH);
  // The number's encoding holds only while minor and patch stay below 100.
  CHECK(SHAPEJIT_VERSION_MINOR < 100);
  CHECK(SHAPEJIT_VERSION_PATCH < 100);
  CHECK(std::string(SHAPEJIT_VERSION_STRING) ==
        dotted(SHAPEJIT_VERSION_MAJOR, SHAPEJIT_VERSION_MINOR, SHAPEJIT_VERSION_PATCH));
}

#ifdef SHAPEJIT_CMAKE_PROJECT_VERSION
TEST_CASE("version: CMake's project version is read from version.h") {
  CHECK(std::string(SHAPEJIT_CMAKE_PROJECT_VERSION) == SHAPEJIT_VERSION_STRING);
}
#endif

TEST_CASE("version: the library reports the version it was built as") {
  CHECK(shapejit_version() == SHAPEJIT_VERSION);
  const char* s = shapejit_version_string();
  REQUIRE(s != nullptr);
  CHECK(std::string(s) == SHAPEJIT_VERSION_STRING);
  const int32_t v = shapejit_version();
  CHECK(std::string(s) == dotted(v / 10000, v / 100 % 100, v % 100));
  CHECK(shapejit_version_string() == s);  // static storage: the same text every call

  CHECK(shapejit::version() == shapejit_version());
  CHECK(std::string(shapejit::version_string()) == s);
}

TEST_CASE("status_string: a distinct fixed text for every status") {
  const shapejit_status all[] = {SHAPEJIT_OK, SHAPEJIT_INVALID_ARGUMENT, SHAPEJIT_UNSUPPORTED,
                                 SHAPEJIT_OUT_OF_MEMORY, SHAPEJIT_INTERNAL_ERROR};
  std::set<std::string> seen;
  for (const shapejit_status st : all) {
    CAPTURE(int(st));
    const char* text = shapejit_status_string(st);
    REQUIRE(text != nullptr);
    CHECK(std::strlen(text) > 0);
    CHECK(std::string(text).find("unknown") == std::string::npos);
    CHECK(shapejit_status_string(st) == text);  // static storage
    CHECK(std::string(shapejit::status_string(static_cast<shapejit::Status>(st))) == text);
    seen.insert(text);
  }
  CHECK(seen.size() == std::size(all));
  CHECK(std::string(shapejit_status_string(SHAPEJIT_OK)) == "ok");
  CHECK(std::string(shapejit_status_string(SHAPEJIT_INVALID_ARGUMENT)).rfind("invalid argument", 0) == 0);
  CHECK(std::string(shapejit_status_string(SHAPEJIT_OUT_OF_MEMORY)) == "out of memory");
}

TEST_CASE("status_string: a value outside the enum gets a text, never null") {
  const std::string first = shapejit_status_string(SHAPEJIT_OK);
  // 5..7 lie in the C enum's range of values (loading them is defined in C++); any int goes
  // through the C++ overload, whose enum class is int-based. tests/consumer/consumer.c passes 99
  // from C.
  for (const int v : {5, 6, 7}) {
    CAPTURE(v);
    const char* text = shapejit_status_string(static_cast<shapejit_status>(v));
    REQUIRE(text != nullptr);
    CHECK(std::string(text).rfind("unknown status", 0) == 0);
  }
  for (const int v : {-1, 5, 99, 1 << 30}) {
    CAPTURE(v);
    const char* text = shapejit::status_string(static_cast<shapejit::Status>(v));
    REQUIRE(text != nullptr);
    CHECK(std::string(text).rfind("unknown status", 0) == 0);
  }
  CHECK(std::string(shapejit_status_string(SHAPEJIT_OK)) == first);
}

TEST_CASE("status_string: names the status a failing call returned") {
  shapejit_embedding_bag_args a{};  // no weight, no indices: invalid
  a.weight_dtype = SHAPEJIT_F32;
  a.index_dtype = SHAPEJIT_I64;
  a.offset_dtype = SHAPEJIT_I64;
  a.num_rows = -1;
  shapejit_embedding_bag_shapes s{};
  const shapejit_status st = shapejit_embedding_bag_output_shapes(&a, &s);
  REQUIRE(st == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_status_string(st)).rfind("invalid argument", 0) == 0);
  CHECK(std::strlen(shapejit_last_error()) > 0);
}

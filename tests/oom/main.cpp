// doctest's main for shapejit_oom_tests, which also serves as the child process of
// first_call_test.cpp: with SHAPEJIT_OOM_FIRST_CALL set, it runs that one scenario and exits.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>

#include "oom/first_call.hpp"

int main(int argc, char** argv) {
  if (const char* spec = std::getenv(shapejit::test::oom::kFirstCallEnv))
    return shapejit::test::oom::run_first_call_child(spec);
  doctest::Context context(argc, argv);
  return context.run();
}

#include "jit/generated_code_observer.hpp"

namespace shapejit::jit {
namespace detail {
// Constant-initialised, so an observer installed during static initialisation stays installed.
constinit std::atomic<GeneratedCodeObserver> g_generated_code_observer{nullptr};
}  // namespace detail

GeneratedCodeObserver set_generated_code_observer(GeneratedCodeObserver observer) {
  return detail::g_generated_code_observer.exchange(observer, std::memory_order_acq_rel);
}

}  // namespace shapejit::jit

// A non-owning reference to a callable, passed by value in one register pair: the parallel
// drivers take their per-task bodies through it, so no std::function (which may allocate) sits
// between a call and its tasks.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace shapejit::rt {

template <class Signature>
class FunctionRef;

/// Refers to a callable that must outlive the call it is passed to (a lambda written in the
/// call's argument list does).
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
  FunctionRef(F&& f)  // NOLINT: implicit so lambdas pass directly
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, Args... args) -> R {
          auto& callable = *static_cast<std::remove_reference_t<F>*>(o);
          if constexpr (std::is_void_v<R>)
            callable(std::forward<Args>(args)...);  // a result, if any, is dropped
          else
            return callable(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace shapejit::rt

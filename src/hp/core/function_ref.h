// A non-owning reference to a callable, for functions that call it only during their own call
// (thread_pool.h's parallel_for / parallel_blocks). Unlike std::function it never allocates and
// instantiates nothing outside the callable's own type: a kernel TU compiled with -mavx512f that
// passes a lambda emits only symbols named after that lambda, never a shared std:: template such as
// std::_Function_base::~_Function_base that the linker could keep, AVX-512 code and all, for every
// other caller (tests/kernels/isa_symbols.sh checks this).
#pragma once

#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace hp {

template <class Sig>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  // Binds to any callable object (not a bare function name: take its address first). The callable
  // must outlive every call through this reference.
  template <class F, class = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
                                              std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): used like std::function
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_(&invoke<std::remove_reference_t<F>>) {}

  R operator()(Args... args) const { return call_(obj_, std::forward<Args>(args)...); }

 private:
  template <class F>
  static R invoke(void* obj, Args... args) {
    return std::invoke(*static_cast<F*>(obj), std::forward<Args>(args)...);
  }

  void* obj_;
  R (*call_)(void*, Args...);
};

}  // namespace hp

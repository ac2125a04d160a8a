// The replaced operator new family. Memory comes from malloc / posix_memalign and goes back
// through free, so sanitizers still see every block (ASan checks heap misuse through malloc).
#include "oom/alloc_injector.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

namespace shapejit::test::oom {
namespace {

std::atomic<bool> g_armed{false};
std::atomic<int64_t> g_count{0};
std::atomic<int64_t> g_fail_at{0};
std::atomic<bool> g_fired{false};
std::atomic<bool> g_persistent{false};

// True when this allocation is the one to fail.
bool should_fail() {
  if (!g_armed.load(std::memory_order_acquire)) return false;
  const int64_t n = g_count.fetch_add(1, std::memory_order_acq_rel) + 1;
  const int64_t fail_at = g_fail_at.load(std::memory_order_relaxed);
  if (fail_at == 0 || n < fail_at || (n > fail_at && !g_persistent.load(std::memory_order_relaxed))) return false;
  g_fired.store(true, std::memory_order_release);
  return true;
}

void* plain_alloc(std::size_t size) {
  if (should_fail()) return nullptr;
  return std::malloc(size == 0 ? 1 : size);
}

void* aligned_alloc_or_null(std::size_t size, std::align_val_t align) {
  if (should_fail()) return nullptr;
  void* p = nullptr;
  const std::size_t a = std::max(static_cast<std::size_t>(align), sizeof(void*));
  return posix_memalign(&p, a, size == 0 ? 1 : size) == 0 ? p : nullptr;
}

}  // namespace

void arm(int64_t fail_at, FailureMode mode) {
  g_count.store(0, std::memory_order_relaxed);
  g_persistent.store(mode == FailureMode::kPersistent, std::memory_order_relaxed);
  g_fired.store(false, std::memory_order_relaxed);
  g_fail_at.store(fail_at, std::memory_order_relaxed);
  g_armed.store(true, std::memory_order_release);
}

AllocCount disarm() {
  g_armed.store(false, std::memory_order_release);
  return {g_count.load(std::memory_order_acquire), g_fired.load(std::memory_order_acquire)};
}

AllocCount ScopedFailure::finish() {
  if (!done_) {
    result_ = disarm();
    done_ = true;
  }
  return result_;
}

}  // namespace shapejit::test::oom

using shapejit::test::oom::aligned_alloc_or_null;
using shapejit::test::oom::plain_alloc;

void* operator new(std::size_t size) {
  if (void* p = plain_alloc(size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return ::operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return plain_alloc(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return plain_alloc(size); }
void* operator new(std::size_t size, std::align_val_t align) {
  if (void* p = aligned_alloc_or_null(size, align)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size, std::align_val_t align) { return ::operator new(size, align); }
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return aligned_alloc_or_null(size, align);
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return aligned_alloc_or_null(size, align);
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

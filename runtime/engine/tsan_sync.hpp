// Happens-before edges that oneTBB provides but ThreadSanitizer cannot see: Debian's libtbb is
// not instrumented, so TSan misses that a parallel region's tasks start after the forking
// thread's writes (fork) and that the thread waiting for the region sees the tasks' writes
// (join). Without them every output a TBB worker writes looks like a race with the caller.
// ParallelRegionSync states exactly these two edges, and nothing else; it compiles to nothing
// unless the build uses -fsanitize=thread (tools/test.sh's build-tsan/).
#pragma once

#if defined(__SANITIZE_THREAD__)
#define SHAPEJIT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHAPEJIT_TSAN 1
#endif
#endif

#if defined(SHAPEJIT_TSAN)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace shapejit::rt {

/// The fork and join edges of one parallel region (see the file comment). The forking thread
/// holds a Region around task_arena::execute (fork before, join after); every function that TBB may run
/// on another thread (the functor given to execute, which a worker runs when the arena has no
/// free slot, and each parallel_for body) holds a Task for its whole run.
class ParallelRegionSync {
 public:
  void fork() {
    release(&execute_token());
    release(&fork_);
  }
  void join() { acquire(&join_); }

  /// First statement of a functor given to task_arena::execute, before it reads its captures:
  /// a worker may run that functor for the forking thread, reading the closure on the forking
  /// thread's stack, so the edge must not itself need a capture (a process-wide token).
  static void enter_execute() { acquire(&execute_token()); }

  /// The same for a functor object that reads its members only through the pointer returned
  /// (see after_acquire).
  template <class Functor>
  static const Functor* enter_execute(const Functor* functor) {
    enter_execute();
    return after_acquire(functor);
  }

  /// Returns p, such that the compiler cannot load through the result before the edges this
  /// thread acquired so far: it may hoist a load through a pointer it already holds above an
  /// acquire (clang did, with a lambda's captures), and ThreadSanitizer then sees the read
  /// before the edge that orders it.
  template <class T>
  static T* after_acquire(T* p) {
#if defined(SHAPEJIT_TSAN)
    asm volatile("" : "+r"(p)::"memory");  // where p points is unknown until here
#endif
    return p;
  }

  /// fork() on construction, join() on destruction: the join edge also holds when the region
  /// throws, so the caller's unwinding (freeing what the tasks read) is ordered after them.
  class Region {
   public:
    explicit Region(ParallelRegionSync& sync) : sync_(sync) { sync_.fork(); }
    ~Region() { sync_.join(); }
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;

   private:
    ParallelRegionSync& sync_;
  };

  /// Acquires the fork edge on construction, releases into the join edge on destruction.
  class Task {
   public:
    explicit Task(ParallelRegionSync& sync) : sync_(sync) { acquire(&sync_.fork_); }
    ~Task() { release(&sync_.join_); }
    Task(const Task&) = delete;
    Task& operator=(const Task&) = delete;

   private:
    ParallelRegionSync& sync_;
  };

 private:
#if defined(SHAPEJIT_TSAN)
  static void release(char* p) { __tsan_release(p); }
  static void acquire(char* p) { __tsan_acquire(p); }
#else
  static void release(char*) {}
  static void acquire(char*) {}
#endif
  static char& execute_token() {
    static char token = 0;
    return token;
  }
  char fork_ = 0, join_ = 0;  // only their addresses matter
};

}  // namespace shapejit::rt

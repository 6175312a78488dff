#pragma once

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <c10/util/intrusive_ptr.h>

#include "c10d/progress.hpp"

namespace dummy_collectives {

// Runs a backend's collectives one at a time, in issue order (every rank issues its collectives
// in the same order, so every rank runs them in the same order).
//
// Two kinds of thread run them. A thread that waits on a Work runs the queue itself up to that
// Work (a blocking collective then costs no thread hand-off, which is most of the small-message
// latency budget). The engine's own worker thread runs whatever nobody waits on: it leaves a
// just-issued collective alone for a short grace period, in which a synchronous caller's wait()
// claims it, so a tight loop of blocking collectives never wakes the worker for a collective.
// While collectives flow it polls (it is not told about each one: telling costs a wake-up),
// and it polls less often the longer callers run everything themselves: on a VM each timed
// wake-up costs tens of microseconds of a core some rank needs.
class Engine final : public Progress {
 public:
  struct Timing {
    std::chrono::microseconds grace{50};      // how long the worker leaves a new op to wait()
    std::chrono::microseconds poll{1000};     // the worker's poll period while recently active
    std::chrono::microseconds maxPoll{8000};  // ... backed off to this while it finds nothing
    std::chrono::milliseconds active{20};     // idle time after which the worker parks
  };

  explicit Engine(Timing timing);
  ~Engine() override; // runs what is queued, then stops the worker
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void enqueue(c10::intrusive_ptr<DummyWork> work);

  // Asks the worker to run queued work now rather than after the grace period: somebody
  // (a future callback, DDP) depends on progress without calling wait().
  void expedite() override;

  // Runs queued work on the calling thread until `work` has run; if another thread is running
  // the queue, or the caller waits with a deadline (not time_point::max()), returns at once (the
  // caller then blocks on the Work).
  void runUntil(const DummyWork& work, std::chrono::steady_clock::time_point deadline) override;

  // Runs `run()` on the calling thread now if nothing is queued or running (the caller will wait
  // for its collective at once: running it here skips the queue and its hand-offs); returns
  // false, without running it, otherwise. Ordered like any issued collective: queued ones run
  // after it.
  template <typename Run>
  bool runNow(Run&& run) {
    std::unique_lock<std::mutex> exec(execMu_, std::try_to_lock);
    if (!exec.owns_lock() || queued_.load(std::memory_order_acquire) != 0) {
      return false;
    }
    run();
    return true;
  }

  // Runs everything queued on the calling thread (waiting for a thread that is running the
  // queue to finish first); on return no queued or running Work is left.
  void drain();

 private:
  c10::intrusive_ptr<DummyWork> pop();
  void workerLoop();

  Timing timing_;
  std::mutex mu_;                 // guards the fields below
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<DummyWork>> queue_;
  std::atomic<size_t> queued_{0}; // queue_.size(), readable without mu_ (runNow)
  bool stopping_ = false;
  bool parked_ = false;
  bool expedite_ = false;
  std::chrono::steady_clock::time_point lastActive_;
  std::chrono::microseconds poll_;  // the worker's current poll period (worker thread only)
  std::mutex execMu_;             // held by whichever thread is running the queue
  std::thread worker_;
};

} // namespace dummy_collectives

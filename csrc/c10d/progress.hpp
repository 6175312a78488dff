#pragma once

#include <chrono>

namespace dummy_collectives {

class DummyWork;

// Whatever completes Works: the collective Engine, the point-to-point P2pEngine. A thread that
// waits on a Work lends itself to its Progress (runUntil), so blocking calls need no hand-off.
class Progress {
 public:
  virtual ~Progress() = default;
  // Makes progress on the calling thread until `work` is done, or returns at once if another
  // thread is making progress (the caller then blocks on the Work). Point-to-point progress
  // also gives up at `deadline` (Work.wait(timeout)); a collective, once started, runs to its
  // end or its own timeout.
  virtual void runUntil(
      const DummyWork& work,
      std::chrono::steady_clock::time_point deadline) = 0;
  // Someone depends on progress without waiting (a future callback): do not delay it.
  virtual void expedite() = 0;
};

} // namespace dummy_collectives

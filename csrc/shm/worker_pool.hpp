#pragma once

// Helper threads that share one rank's bulk copies and folds in a large collective, where the
// host has cores to spare beyond one per rank: a single thread per rank reaches only a part of
// the machine's memory bandwidth (docs/benchmarks.md, "Worker threads").

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include <c10/util/FunctionRef.h>

namespace dummy_collectives {

class WorkerPool {
 public:
  // `threads` counts the caller too: 1 runs everything on the caller (no helper threads).
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const {
    return threads_;
  }

  // Runs part(i) for every i in [0, threads()), i == 0 on the caller, and returns when all are
  // done. `part` must not throw. Calls from several threads at once run one after the other.
  void run(c10::function_ref<void(int)> part);

  // The default size for a rank of a group of `ranks` on this host: the usable cores shared out
  // among the ranks, at most 4 (past that the memory bus, not the threads, is the limit).
  static int defaultThreads(int ranks);

 private:
  void helperLoop(int index);

  const int threads_;
  std::vector<std::thread> helpers_;
  std::mutex runMutex_; // one run() at a time
  const c10::function_ref<void(int)>* part_ = nullptr;
  std::atomic<uint64_t> generation_{0}; // bumped by each run(); helpers wait for a change
  std::atomic<int> pending_{0};         // helpers still running the current generation
  std::atomic<int> parked_{0};          // helpers asleep on parkCv_
  std::atomic<bool> stopping_{false};
  std::mutex parkMutex_;
  std::condition_variable parkCv_;
};

} // namespace dummy_collectives

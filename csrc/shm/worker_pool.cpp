#include "shm/worker_pool.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>

#include <c10/util/thread_name.h>

namespace dummy_collectives {
namespace {

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long an idle helper spins before it parks: the phases of one large collective follow
// each other within microseconds; between collectives it sleeps.
constexpr auto kHelperSpin = std::chrono::microseconds(200);

} // namespace

int WorkerPool::defaultThreads(int ranks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    cores = CPU_COUNT(&set);
  }
  return std::clamp(cores / std::max(1, ranks), 1, 4);
}

WorkerPool::WorkerPool(int threads) : threads_(std::max(1, threads)) {
  for (int i = 1; i < threads_; ++i) {
    helpers_.emplace_back([this, i] {
      c10::setThreadName("dc_worker");
      helperLoop(i);
    });
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(parkMutex_);
    stopping_.store(true, std::memory_order_seq_cst);
  }
  parkCv_.notify_all();
  for (auto& helper : helpers_) {
    helper.join();
  }
}

void WorkerPool::run(c10::function_ref<void(int)> part) {
  if (threads_ == 1) {
    part(0);
    return;
  }
  std::lock_guard<std::mutex> serial(runMutex_);
  part_ = &part;
  pending_.store(threads_ - 1, std::memory_order_relaxed);
  // seq_cst pairs with a helper's parked_ increment: either it sees this generation before it
  // sleeps, or we see it parked and wake it.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (parked_.load(std::memory_order_seq_cst) != 0) {
    std::lock_guard<std::mutex> lock(parkMutex_);
    parkCv_.notify_all();
  }
  part(0);
  while (pending_.load(std::memory_order_acquire) != 0) {
    cpuRelax();
  }
}

void WorkerPool::helperLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    const auto start = std::chrono::steady_clock::now();
    uint32_t spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen &&
           !stopping_.load(std::memory_order_relaxed)) {
      if ((++spins & 63) != 0 || std::chrono::steady_clock::now() - start < kHelperSpin) {
        cpuRelax();
        continue;
      }
      std::unique_lock<std::mutex> lock(parkMutex_);
      parked_.fetch_add(1, std::memory_order_seq_cst);
      parkCv_.wait(lock, [&] {
        return generation_.load(std::memory_order_seq_cst) != seen ||
            stopping_.load(std::memory_order_relaxed);
      });
      parked_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stopping_.load(std::memory_order_relaxed)) {
      return;
    }
    seen = generation_.load(std::memory_order_acquire);
    (*part_)(index);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

} // namespace dummy_collectives

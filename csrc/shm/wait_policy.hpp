#pragma once

// How a rank passes the time while it waits for its peers: spin, yield or sleep, and what picks
// between them, whether the group's ranks share cores. Kept apart from the step protocol
// (shm_transport.cpp), which says what a wait waits for and when it must give up (an abort, a
// dead peer, the deadline): this file only says how the waiting rank uses its CPU meanwhile.
//
// Busy polling gives the lowest latency while ranks have a core each; once ranks outnumber
// cores, polling steals the core the awaited peer needs, so the wait yields (at once when the
// awaited rank last ran on this CPU) and then sleeps on a futex that the publishing rank wakes.
//
// The spin budget is long (1 ms) when ranks have a core each: a peer that is merely late (still
// in Python, or briefly preempted by another process) costs microseconds to wait for by
// polling, but a yield hands the core to whatever else is runnable for a whole scheduler slice.
// That is what DeepSpeed's and Open MPI's shared-memory paths do too (they poll indefinitely).
//
// A host level of a group across hosts (two_level_lowering.cpp) whose ranks share cores skips
// the yield phase: what its waits wait for is often a leader's cross-host step, and a waiter
// yielding for 2 ms takes the core from the thread doing the network I/O and the kernel's packet
// work; sleeping at once makes large collectives across hosts faster at a small cost to tiny
// ones (docs/benchmarks.md, "Waiting"). On one host the yield phase stays: there it is what lets
// more ranks than cores run (sleeping at once is slower at every size).
//
// Whether ranks outnumber cores is a property of the group, not of one rank: ranks pinned to a
// core each (taskset, numactl, a launcher's CPU binding) may each run on one CPU, yet no two
// share one. So every rank publishes the CPUs it may run on, and the group compares its size
// with their union once every rank has published (its first exchange).

#include <sched.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>

#include <dummy_collectives/transport.hpp>

namespace dummy_collectives {

// What a waiting rank does next: busy-poll, yield its core, or sleep.
enum class WaitPhase { kSpin, kYield, kSleep };

struct WaitPolicy {
  std::chrono::nanoseconds spin{std::chrono::milliseconds(1)};
  std::chrono::nanoseconds yield{std::chrono::milliseconds(2)};
  // How often a long wait checks that the ranks it waits for are still alive.
  std::chrono::nanoseconds livenessPeriod{std::chrono::milliseconds(50)};
  // Ranks outnumber cores: a wait hands its core over at once to a rank it waits for that
  // last ran on this CPU (that rank cannot publish while we hold the core).
  bool shareCores = false;

  // spinMicros: BackendOptions::spinMicros (-1 picks the budget from shareCores). hostLevel:
  // the host level of a group across hosts, which sleeps where it would yield (above).
  static WaitPolicy make(bool shareCores, long spinMicros, bool hostLevel);
  // After `waited`: spin first, then yield, then sleep.
  WaitPhase phase(Clock::duration waited) const {
    if (waited < spin) {
      return WaitPhase::kSpin;
    }
    return waited < spin + yield ? WaitPhase::kYield : WaitPhase::kSleep;
  }
};

// CPUs 0-1023, one bit each (what a plain cpu_set_t holds).
using CpuMask = std::array<uint64_t, 16>;
// The CPUs this process may run on. Its main thread's (pid == tid): a wait may run on the engine
// thread, whose mask was copied when the group was made, but `taskset`, numactl and Python's
// os.sched_setaffinity(0, ...) pin the main thread.
CpuMask affinityMask();
int countCpus(const CpuMask& mask);

// One busy-wait pause: lets the sibling hyperthread run and saves power.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// The sleep phase: a futex on the awaited rank's step counter, shared between processes.
// The word a futex waits on: the low half of a little-endian 64-bit counter (the futex value
// check only needs equality).
inline uint32_t* futexWord(std::atomic<uint64_t>& counter) {
  static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));
  return reinterpret_cast<uint32_t*>(&counter);
}
// Sleeps while `*word == expected`, for at most `timeout`, or until woken.
void futexWait(uint32_t* word, uint32_t expected, std::chrono::nanoseconds timeout);
// Wakes every sleeper on `word`.
void futexWakeAll(uint32_t* word);

// The wait policies of one group of ranks and which one its waits follow: whether its ranks
// share cores, a guess from this process's own CPUs until the group decides it after its first
// exchange (alike on every rank). Also the CPU this rank last ran on, which it publishes for its
// peers' waits while they share cores.
class CoreSharing {
 public:
  // `ranks`: the ranks sharing this machine's CPUs (the group's, or more: see Placement).
  // `spinMicros`: BackendOptions::spinMicros (-1 picks the spin budget from the sharing).
  // `hostLevel`: a host level of a group across hosts (WaitPolicy::make).
  CoreSharing(int ranks, long spinMicros, bool hostLevel);

  // The policy a wait starting now follows.
  const WaitPolicy& policy() const {
    return policies_[shared_.load(std::memory_order_relaxed) ? 1 : 0];
  }
  // Whether decide() has run; on the thread that runs it.
  bool decided() const {
    return decided_.load(std::memory_order_relaxed);
  }
  // After the group's first exchange: whether its ranks outnumber `groupCpus`, the union of the
  // CPUs every rank may run on (every rank sees the same masks, so all decide alike). Logged as
  // `logRank`'s, after `logPrefix`.
  void decide(const CpuMask& groupCpus, int logRank, const char* logPrefix);
  // Whether the ranks share cores; empty until decide(). Any thread may ask.
  std::optional<bool> sharesCores() const {
    if (!decided_.load(std::memory_order_acquire)) {
      return std::nullopt;
    }
    return shared_.load(std::memory_order_relaxed);
  }

  // Where this rank publishes its CPU for its peers (its record in the group's shared memory).
  void publishCpuAt(std::atomic<int32_t>* slot) {
    cpuSlot_ = slot;
  }
  // Records the CPU this rank runs on, publishing it only when it changed (so the line stays
  // shared in every reader's cache).
  void noteCpu() {
    const int cpu = ::sched_getcpu(); // glibc reads it from rseq: no syscall
    if (cpu != cpu_) {
      cpu_ = cpu;
      cpuSlot_->store(cpu, std::memory_order_relaxed);
    }
  }
  // The CPU noteCpu() last saw (-1: none yet).
  int cpu() const {
    return cpu_;
  }

  // One turn of a wait that has lasted `waited` and found nothing yet, as the policy says: a
  // pause, a yield, or `sleep()`. Where ranks share cores a spinning wait yields at once when
  // `coreWanted()` (a rank it waits for last ran on this CPU).
  template <typename CoreWanted, typename Sleep>
  void idle(Clock::duration waited, CoreWanted&& coreWanted, Sleep&& sleep) {
    const WaitPolicy& policy = this->policy();
    WaitPhase phase = policy.phase(waited);
    if (phase == WaitPhase::kSpin && policy.shareCores) {
      noteCpu();
      if (coreWanted()) {
        phase = WaitPhase::kYield;
      }
    }
    switch (phase) {
      case WaitPhase::kSpin:
        cpuRelax();
        break;
      case WaitPhase::kYield:
        std::this_thread::yield();
        break;
      case WaitPhase::kSleep:
        sleep();
        break;
    }
  }

 private:
  int ranks_;
  // Indexed by shared_: deciding the sharing flips one atomic, which sharesCores() may read from
  // any thread, instead of rewriting a policy's fields. (Point-to-point waits do not use these:
  // the p2p engine polls with its own back-off.)
  WaitPolicy policies_[2];
  std::atomic<bool> shared_;
  std::atomic<bool> decided_{false};
  std::atomic<int32_t>* cpuSlot_ = nullptr;
  int cpu_ = -1; // the CPU noteCpu() last saw
};

} // namespace dummy_collectives

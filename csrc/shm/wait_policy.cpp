// How a rank waits for its peers (wait_policy.hpp): the spin budgets, this process's CPUs, the
// group's decision whether its ranks share cores, and the futex a sleeping wait sleeps on.

#include "shm/wait_policy.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include <dummy_collectives/debug_log.hpp>

namespace dummy_collectives {

WaitPolicy WaitPolicy::make(bool shareCores, long spinMicros, bool hostLevel) {
  WaitPolicy policy;
  policy.shareCores = shareCores;
  if (spinMicros >= 0) {
    policy.spin = std::chrono::microseconds(spinMicros);
  } else if (policy.shareCores) {
    // Oversubscribed: a rank waited for on another core is running and will publish within a
    // call's time, so poll a while for it; one waited for on this core gets it at once.
    policy.spin = std::chrono::microseconds(2);
  }
  if (shareCores && hostLevel) {
    policy.yield = std::chrono::nanoseconds(0); // a yielding waiter starves the I/O (header)
  }
  return policy;
}

CpuMask affinityMask() {
  CpuMask mask{};
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(::getpid(), sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) {
        mask[cpu / 64] |= uint64_t{1} << (cpu % 64);
      }
    }
  } else { // more CPUs than a cpu_set_t holds: assume every one
    const int cpus = static_cast<int>(std::thread::hardware_concurrency());
    for (int cpu = 0; cpu < std::clamp(cpus, 1, CPU_SETSIZE); ++cpu) {
      mask[cpu / 64] |= uint64_t{1} << (cpu % 64);
    }
  }
  return mask;
}

int countCpus(const CpuMask& mask) {
  int count = 0;
  for (uint64_t word : mask) {
    count += __builtin_popcountll(word);
  }
  return count;
}

void futexWait(uint32_t* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  struct timespec ts {};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // Shared (not FUTEX_PRIVATE) because waiter and waker are different processes.
  ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWakeAll(uint32_t* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

CoreSharing::CoreSharing(int ranks, long spinMicros, bool hostLevel)
    : ranks_(ranks),
      policies_{WaitPolicy::make(false, spinMicros, hostLevel),
                WaitPolicy::make(true, spinMicros, hostLevel)},
      // Until the group's first exchange, this rank's own CPUs are all it knows.
      shared_(ranks > countCpus(affinityMask())) {}

void CoreSharing::decide(const CpuMask& groupCpus, int logRank, const char* logPrefix) {
  const int cpus = countCpus(groupCpus);
  shared_.store(ranks_ > cpus, std::memory_order_relaxed);
  decided_.store(true, std::memory_order_release);
  DC_LOG(kInfo, logRank, logPrefix, "ranks share cores: ", ranks_ > cpus ? "yes" : "no",
         " (ranks on this machine ", ranks_, ", CPUs in their affinities ", cpus, "); a wait "
         "spins ", std::chrono::duration_cast<std::chrono::microseconds>(policy().spin).count(),
         " us before it ", policy().yield.count() > 0 ? "yields" : "sleeps");
}

} // namespace dummy_collectives

#pragma once

// Who made whom wait: per collective, which rank arrived last and how long this rank waited for
// it, and running totals of that over a window. See docs/design.md, "Who made whom
// wait", for exactly what the numbers mean on one host and across hosts.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace dummy_collectives {

// One collective as this rank saw it, known once the collective's first exchange is done (its
// first step on one host, the agreement across hosts) and kept until the next collective of the
// group begins. This is the per-op record the flight recorder stores next to each entry:
//   - ShmLowering: ShmTransport::arrival(), read on the thread that ran the collective, after
//     its body returned (the engine runs a group's collectives one at a time);
//   - TwoLevelLowering: OpContext::arrival, filled by the agreement (see agreement.hpp).
struct Arrival {
  // Group rank of the rank that arrived last (this rank where it was last); -1 where nothing
  // was exchanged (a group of one rank, an op that never synchronised its ranks), in which case
  // the other fields say only when this rank arrived.
  int32_t lastRank = -1;
  // How long this rank waited for lastRank: its arrival minus ours, >= 0 (0 where we were last).
  int64_t waitedNs = 0;
  // When this rank arrived (began the collective): CLOCK_MONOTONIC (steady_clock) nanoseconds of
  // this host, comparable between ranks of one host only.
  int64_t arrivedNs = 0;

  bool known() const {
    return lastRank >= 0;
  }
};

// steady_clock's reading in nanoseconds: what Arrival::arrivedNs holds.
inline int64_t arrivalClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Per rank of a group: how often it arrived last, and how long this rank waited for it, summed
// over a window (since the group was made or since the last reset()).
//
// One writer adds (the thread running the group's collectives: an engine runs them one at a
// time, and hands the group from thread to thread under its lock), so add() is two relaxed loads
// and stores, no read-modify-write; totals() and reset() may run on any thread. reset() does not
// touch the writer's counters: it remembers what they read, and totals() subtracts it.
class WaitLedger {
 public:
  explicit WaitLedger(int size);

  // One collective whose last arrival was rank `last` (0 <= last < size), for which this rank
  // waited `waitedNs`.
  void add(int last, int64_t waitedNs) {
    bump(collectives_, 1);
    bump(counters_[last].timesLast, 1);
    bump(counters_[last].waitedNs, static_cast<uint64_t>(waitedNs));
  }

  struct Totals {
    uint64_t collectives = 0;
    std::vector<uint64_t> timesLast;   // per rank: collectives it arrived last in
    std::vector<uint64_t> waitedForNs; // per rank: how long this rank waited for it
  };
  // Since the last reset. Any thread.
  Totals totals() const;
  // Starts a new window. Any thread.
  void reset();

 private:
  struct alignas(16) Counter {
    std::atomic<uint64_t> timesLast{0};
    std::atomic<uint64_t> waitedNs{0};
  };
  static void bump(std::atomic<uint64_t>& counter, uint64_t by) {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  Totals read() const;

  int size_;
  std::atomic<uint64_t> collectives_{0};
  std::unique_ptr<Counter[]> counters_;
  mutable std::mutex mu_; // guards base_ (readers only)
  Totals base_;
};

} // namespace dummy_collectives

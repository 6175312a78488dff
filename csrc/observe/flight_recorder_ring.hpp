#pragma once

// The flight recorder's ring of entries (private to flight_recorder.cpp and
// flight_recorder_dump.cpp).

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <dummy_collectives/flight_recorder.hpp>

namespace dummy_collectives {
namespace flight_recorder {

// One recorded operation. Plain fields, guarded by `busy`: the writer of the slot and a dump
// are the only ones to take it, so on the hot path it is never contended (an operation's own
// state changes come after its record, on its own slot).
struct Slot {
  std::atomic<bool> busy{false};
  uint64_t id = 0; // 1-based record id; 0: never written
  Group* group = nullptr;
  const char* op = "";
  uint64_t collectiveSeq = 0;
  uint64_t p2pSeq = 0;
  bool p2p = false;
  int self = -1;
  int peer = -1;
  int64_t timeoutMs = 0;
  int64_t createdNs = 0;
  int64_t startedNs = 0;   // 0: not started
  int64_t completedNs = 0; // 0: not completed
  uint64_t threadId = 0;
  char threadName[16] = {};
  // Who made whom wait (arrival.hpp), set with the completion: the group rank that arrived last
  // and how long this rank waited for it; -1 where unknown, which the dump leaves out.
  int32_t lastArrival = -1;
  int64_t waitedUs = -1;
  // Inputs then outputs, each: count, then per tensor dtype (c10::ScalarType, -1 undefined),
  // dims, sizes. One buffer, kept across reuses of the slot.
  std::vector<int64_t> shapes;
};

class SlotGuard {
 public:
  explicit SlotGuard(Slot& slot) : slot_(slot) {
    while (slot_.busy.exchange(true, std::memory_order_acquire)) {
      while (slot_.busy.load(std::memory_order_relaxed)) {
      }
    }
  }
  ~SlotGuard() {
    slot_.busy.store(false, std::memory_order_release);
  }
  SlotGuard(const SlotGuard&) = delete;
  SlotGuard& operator=(const SlotGuard&) = delete;

 private:
  Slot& slot_;
};

// A slot's fields, copied out for a dump.
struct EntryCopy {
  explicit EntryCopy(const Slot& s)
      : id(s.id),
        group(s.group),
        op(s.op),
        collectiveSeq(s.collectiveSeq),
        p2pSeq(s.p2pSeq),
        p2p(s.p2p),
        self(s.self),
        peer(s.peer),
        timeoutMs(s.timeoutMs),
        createdNs(s.createdNs),
        startedNs(s.startedNs),
        completedNs(s.completedNs),
        threadId(s.threadId),
        threadName(s.threadName),
        lastArrival(s.lastArrival),
        waitedUs(s.waitedUs),
        shapes(s.shapes) {}
  uint64_t id;
  Group* group;
  const char* op;
  uint64_t collectiveSeq;
  uint64_t p2pSeq;
  bool p2p;
  int self;
  int peer;
  int64_t timeoutMs;
  int64_t createdNs;
  int64_t startedNs;
  int64_t completedNs;
  uint64_t threadId;
  std::string threadName;
  int32_t lastArrival;
  int64_t waitedUs;
  std::vector<int64_t> shapes;
};

// A group's dump fields, copied under the recorder's lock.
struct GroupCopy {
  size_t id;
  std::string name;
  std::string desc;
  std::vector<uint64_t> ranks;
  int64_t lastEnqueued;
  int64_t lastStarted;
  int64_t lastCompleted;
};

class Ring {
 public:
  static Ring& get();
  size_t capacity() const {
    return capacity_;
  }
  void addGroup(const std::shared_ptr<Group>& group);
  void describe(Group* group, const std::string& desc);
  // Every group registered in this process, by id.
  std::vector<GroupCopy> groups() const;
  uint64_t record(
      Group* group,
      const OpInfo& info,
      const std::vector<at::Tensor>& inputs,
      const std::vector<at::Tensor>& outputs,
      bool flattenInputs,
      bool flattenOutputs,
      size_t listCount);
  // lastArrival/waitedUs: who made whom wait, written with a completion (-1: unknown).
  void mark(uint64_t id, bool done, int32_t lastArrival = -1, int64_t waitedUs = -1);
  // The entries still in the ring, oldest first.
  std::vector<EntryCopy> snapshot() const;

 private:
  explicit Ring(size_t capacity);
  const size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> next_{0}; // records claimed so far
  mutable std::mutex groupsMutex_; // registration, descriptions and dumps only
  std::vector<std::shared_ptr<Group>> groups_;
};

// What recording costs one small collective on this machine, in nanoseconds: record, started
// and completed of a 1-element allreduce, `iterations` times per batch, best of 5 batches (the
// benchmark's --recorder-cost). Registers a group of its own ("flight_recorder_cost") and fills
// the ring: for a process that measures only. 0 when the recorder is off.
double hotPathNanos(size_t iterations);

} // namespace flight_recorder
} // namespace dummy_collectives

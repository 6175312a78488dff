// The flight recorder's ring and its hot path (record, started, completed). The dump is in
// flight_recorder_dump.cpp.
#include "observe/flight_recorder_ring.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <ATen/ops/ones.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <c10/util/thread_name.h>

namespace dummy_collectives {
namespace flight_recorder {

namespace {

// torch's convention (c10d getCvarInt): the first variable set wins, the old NCCL name is an
// alias; torch's default is 2000 entries, 0 turns the recorder off.
size_t readCapacity() {
  for (const char* name : {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') {
      char* end = nullptr;
      const long long n = std::strtoll(value, &end, 10);
      TORCH_CHECK_VALUE(
          end != value && *end == '\0' && n >= 0,
          "dummy_collectives: ", name, "=", value, " is not a number of entries (0 turns the flight "
          "recorder off)");
      return static_cast<size_t>(n);
    }
  }
  return 2000;
}

// The recording thread's id and name, found once per thread (a name read costs a syscall).
struct ThreadTag {
  uint64_t id;
  char name[16];
};

const ThreadTag& threadTag() {
  thread_local ThreadTag tag = [] {
    ThreadTag t{};
    t.id = static_cast<uint64_t>(std::hash<std::thread::id>()(std::this_thread::get_id()));
    const std::string name = c10::getThreadName();
    std::strncpy(t.name, name.c_str(), sizeof(t.name) - 1);
    return t;
  }();
  return tag;
}

void appendShapes(
    std::vector<int64_t>& shapes,
    const std::vector<at::Tensor>& tensors,
    bool flatten,
    size_t listCount) {
  if (flatten && !tensors.empty()) {
    // One tensor [listCount, *sizes of the first] standing for the list, as NCCL flattens it.
    const at::Tensor& t = tensors[0];
    shapes.push_back(1);
    shapes.push_back(static_cast<int64_t>(t.scalar_type()));
    shapes.push_back(t.dim() + 1);
    shapes.push_back(static_cast<int64_t>(listCount));
    for (int64_t s : t.sizes()) {
      shapes.push_back(s);
    }
    return;
  }
  shapes.push_back(static_cast<int64_t>(tensors.size()));
  for (const at::Tensor& t : tensors) {
    shapes.push_back(t.defined() ? static_cast<int64_t>(t.scalar_type()) : -1);
    if (!t.defined()) {
      shapes.push_back(0);
      continue;
    }
    shapes.push_back(t.dim());
    for (int64_t s : t.sizes()) {
      shapes.push_back(s);
    }
  }
}

} // namespace

Ring& Ring::get() {
  // Leaked: groups of static lifetime may record while the process exits.
  static Ring* ring = new Ring(readCapacity());
  return *ring;
}

Ring::Ring(size_t capacity) : capacity_(capacity) {
  if (capacity_ > 0) {
    slots_ = std::make_unique<Slot[]>(capacity_);
  }
}

bool enabled() {
  return Ring::get().capacity() > 0;
}

size_t capacity() {
  return Ring::get().capacity();
}

std::shared_ptr<Group> registerGroup(
    const std::string& name, std::vector<int64_t> globalRanks, int groupRank, int groupSize) {
  Ring& ring = Ring::get();
  if (ring.capacity() == 0) {
    return nullptr;
  }
  auto group = std::make_shared<Group>();
  group->name = name;
  // torch names its default group's description "default_pg" and a new_group's "undefined"
  // unless the caller gives one; c10d does not hand the description to a backend's creator.
  group->desc = name == "0" ? "default_pg" : "undefined";
  if (globalRanks.empty()) {
    for (int r = 0; r < groupSize; ++r) {
      globalRanks.push_back(r);
    }
  }
  TORCH_CHECK_VALUE(
      static_cast<int>(globalRanks.size()) == groupSize && groupRank >= 0 && groupRank < groupSize,
      "dummy_collectives: group ", name, " of ", groupSize, " ranks was given ",
      globalRanks.size(), " global ranks (rank ", groupRank, ")");
  for (int64_t r : globalRanks) {
    group->ranks.push_back(static_cast<uint64_t>(r));
  }
  group->globalRank = static_cast<int>(globalRanks[groupRank]);
  ring.addGroup(group);
  dumpOnSigterm(group.get()); // the ring keeps the group for the process's life
  return group;
}

void Ring::addGroup(const std::shared_ptr<Group>& group) {
  std::lock_guard<std::mutex> lock(groupsMutex_);
  group->id = groups_.size();
  groups_.push_back(group);
}

void Ring::describe(Group* group, const std::string& desc) {
  std::lock_guard<std::mutex> lock(groupsMutex_);
  if (!desc.empty()) {
    group->desc = desc;
  }
}

std::vector<GroupCopy> Ring::groups() const {
  std::lock_guard<std::mutex> lock(groupsMutex_);
  std::vector<GroupCopy> copies;
  for (const auto& g : groups_) {
    copies.push_back(GroupCopy{
        g->id, g->name, g->desc, g->ranks, g->lastEnqueued.load(), g->lastStarted.load(),
        g->lastCompleted.load()});
  }
  return copies;
}

void describe(Group* group, const std::string& desc) {
  if (group != nullptr) {
    Ring::get().describe(group, desc);
  }
}

uint64_t Ring::record(
    Group* group,
    const OpInfo& info,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs,
    bool flattenInputs,
    bool flattenOutputs,
    size_t listCount) {
  const int64_t now = c10::getTime();
  const uint64_t id = next_.fetch_add(1, std::memory_order_relaxed) + 1;
  Slot& slot = slots_[(id - 1) % capacity_];
  const ThreadTag& thread = threadTag();
  SlotGuard guard(slot);
  slot.id = id;
  slot.group = group;
  slot.op = info.op;
  slot.collectiveSeq = info.collectiveSeq;
  slot.p2pSeq = info.p2pSeq;
  slot.p2p = info.p2p;
  slot.self = info.self;
  slot.peer = info.peer;
  slot.timeoutMs = info.timeout.count();
  slot.createdNs = now;
  slot.startedNs = 0;
  slot.completedNs = 0;
  slot.threadId = thread.id;
  std::memcpy(slot.threadName, thread.name, sizeof(slot.threadName));
  slot.lastArrival = -1;
  slot.waitedUs = -1;
  slot.shapes.clear(); // keeps its capacity: no allocation once the slot held as large a shape
  appendShapes(slot.shapes, inputs, flattenInputs, listCount);
  appendShapes(slot.shapes, outputs, flattenOutputs, listCount);
  if (!info.p2p) {
    group->lastEnqueued.store(static_cast<int64_t>(info.collectiveSeq), std::memory_order_relaxed);
  }
  return id;
}

void Ring::mark(uint64_t id, bool done, int32_t lastArrival, int64_t waitedUs) {
  const int64_t now = c10::getTime();
  Slot& slot = slots_[(id - 1) % capacity_];
  SlotGuard guard(slot);
  if (slot.id != id) {
    return; // overwritten: the ring wrapped while this operation ran
  }
  auto& status = done ? slot.group->lastCompleted : slot.group->lastStarted;
  if (done) {
    slot.completedNs = now;
    if (slot.startedNs == 0) {
      slot.startedNs = now;
    }
    if (lastArrival >= 0) {
      slot.lastArrival = lastArrival;
      slot.waitedUs = waitedUs;
    }
  } else {
    slot.startedNs = now;
  }
  if (!slot.p2p) {
    status.store(static_cast<int64_t>(slot.collectiveSeq), std::memory_order_relaxed);
  }
}

std::vector<EntryCopy> Ring::snapshot() const {
  std::vector<EntryCopy> result;
  if (capacity_ == 0) {
    return result;
  }
  const uint64_t end = next_.load(std::memory_order_acquire);
  const uint64_t begin = end > capacity_ ? end - capacity_ : 0;
  result.reserve(end - begin);
  for (uint64_t id = begin + 1; id <= end; ++id) {
    Slot& slot = slots_[(id - 1) % capacity_];
    SlotGuard guard(slot);
    if (slot.id != id) {
      continue; // being written (claimed, not yet filled), or already overwritten
    }
    result.push_back(EntryCopy{slot});
  }
  return result;
}

uint64_t record(
    Group* group,
    const OpInfo& info,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs) {
  if (group == nullptr) {
    return 0;
  }
  return Ring::get().record(group, info, inputs, outputs, false, false, 0);
}

uint64_t recordFlattened(
    Group* group,
    const OpInfo& info,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs,
    bool flattenInputs,
    size_t listCount) {
  if (group == nullptr) {
    return 0;
  }
  return Ring::get().record(
      group, info, inputs, outputs, flattenInputs, !flattenInputs, listCount);
}

void started(uint64_t id) {
  if (id != 0) {
    Ring::get().mark(id, false);
  }
}

void completed(uint64_t id) {
  if (id != 0) {
    Ring::get().mark(id, true);
  }
}

void completed(uint64_t id, const Arrival& arrival) {
  if (id != 0) {
    Ring::get().mark(
        id, true, arrival.known() ? arrival.lastRank : -1, arrival.waitedNs / 1000);
  }
}

double hotPathNanos(size_t iterations) {
  auto group = registerGroup("flight_recorder_cost", {}, 0, 1);
  if (!group || iterations == 0) {
    return 0;
  }
  const std::vector<at::Tensor> tensors{at::ones({1})};
  const OpInfo info{"all_reduce", 0, 0, false, -1, -1, std::chrono::milliseconds(1000)};
  double best = 0;
  for (int batch = 0; batch < 5; ++batch) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < iterations; ++i) {
      const uint64_t id = record(group.get(), info, tensors, tensors);
      started(id);
      completed(id);
    }
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
            .count() /
        static_cast<double>(iterations);
    best = batch == 0 ? ns : std::min(best, ns);
  }
  return best;
}

} // namespace flight_recorder
} // namespace dummy_collectives

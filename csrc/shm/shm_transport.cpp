// ShmTransport's segment and step protocol: rank 0 creates the group's shared memory and the
// others map it; each step writes a slot, publishes the step and waits for every rank's (see
// docs/design.md, "The step protocol"). What a wait does meanwhile is wait_policy.hpp's, how
// it learns that a peer died and how the group aborts shm_liveness.cpp's, and whether ranks
// read each other's memory peer_access.hpp's; this file calls them.

#include "shm/shm_transport.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <sstream>
#include <thread>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include "shm/cross_memory.hpp"
#include <dummy_collectives/debug_log.hpp>

#include "shm/shm_layout.hpp"
#include "shm/shm_liveness.hpp"

namespace dummy_collectives {

namespace {

constexpr const char* kStoreKey = "dummy_collectives/shm";
// Ranks that have read rank 0's failure to create the segment.
constexpr const char* kFailureSeenKey = "dummy_collectives/shm_failure_seen";
// The longest pause of a joining rank between two looks at the store (and at rank 0's pid).
constexpr std::chrono::microseconds kStorePollPause{10000};

} // namespace

size_t ShmTransport::segmentBytes(int size, size_t slotBytes) {
  return controlBytes(size) + ringsBytes(size) + static_cast<size_t>(size) * 2 * slotBytes;
}

ShmTransport::ShmTransport(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    size_t slotBytes,
    long spinMicros,
    bool peerAccess,
    double peerAccessMinSpeed,
    std::vector<GroupSetting> settings,
    GroupJoin join,
    Placement placement)
    : rank_(rank),
      size_(size),
      slotBytes_(roundUp(slotBytes, kLine)),
      cores_(std::max(size, placement.ranksOnMachine), spinMicros, placement.hostLevel()),
      peerAccess_(peerAccess, peerAccessMinSpeed),
      placement_(std::move(placement)),
      join_(std::move(join)),
      waits_(size) {
  TORCH_CHECK(
      placement_.groupRanks.empty() || static_cast<int>(placement_.groupRanks.size()) == size,
      "dummy_collectives: ", placement_.groupRanks.size(), " group ranks for a host level of ",
      size, " ranks");
  join_.pids.resize(static_cast<size_t>(size), 0);
  if (auto fault = fault_injection::fromEnv()) {
    if (fault->collective == 0 && fault->rank == label(rank)) {
      fault_injection::fire(
          *fault, c10::str("while rank ", label(rank), " joins the group, before it maps the "
                           "group's shared memory"));
    }
    if (placement_.groupRanks.empty()) {
      fault_ = fault;
    }
  }
  settings.insert(
      settings.begin(),
      {"the buffer size (DUMMY_COLLECTIVES_BUFFER_BYTES or pg_options.buffer_bytes)", slotBytes_});
  std::string published;
  for (const GroupSetting& setting : settings) {
    published += c10::str(" ", setting.value);
  }
  if (rank == 0) {
    slotBytes_ = createSegment(store, published);
  } else {
    std::istringstream value(awaitSegment(store));
    std::string name;
    value >> name;
    for (const GroupSetting& setting : settings) {
      uint64_t rootValue = 0;
      value >> rootValue;
      TORCH_CHECK_VALUE(
          rootValue == setting.value,
          "dummy_collectives: ranks disagree on ",
          setting.what,
          ": rank ",
          label(0),
          " uses ",
          rootValue,
          ", rank ",
          label(rank),
          " uses ",
          setting.value);
    }
    // The slot size rank 0 could fit into /dev/shm (smaller than asked where it was short).
    size_t slot = 0;
    value >> slot;
    TORCH_CHECK(slot > 0, "dummy_collectives: rank 0 published no slot size for the group");
    slotBytes_ = slot;
    segment_ = ShmSegment::open(name, segmentBytes(size, slotBytes_));
    ctl_ = static_cast<ControlBlock*>(segment_.data());
    TORCH_CHECK(
        ctl_->magic == kMagic && ctl_->worldSize == size && ctl_->slotBytes == slotBytes_,
        "dummy_collectives: shared memory ",
        name,
        " does not belong to this group of ",
        size,
        " ranks");
  }
  data_ = static_cast<std::byte*>(segment_.data()) + controlBytes(size) + ringsBytes(size);
  RankControl& mine = control(rank_);
  cores_.publishCpuAt(&mine.cpu);
  mine.pid = static_cast<int32_t>(::getpid());
  mine.pidNamespace = pidNamespaceId();
  const cross_memory::ProbeWord probe = cross_memory::probeWord();
  mine.probeAddress = reinterpret_cast<uint64_t>(probe.address);
  mine.probeValue = probe.value;
  // The last rank to map the segment removes its name: from here on nothing can leak.
  if (ctl_->mapped.fetch_add(1) + 1 == size) {
    segment_.unlink();
  }
}

size_t ShmTransport::createSegment(
    const c10::intrusive_ptr<c10d::Store>& store, std::string settings) {
  // Where /dev/shm is short (Docker's default is 64 MiB), fall back to smaller slots: the
  // collectives stream through any slot size, only slower.
  const size_t asked = slotBytes_;
  const size_t smallest = std::min(asked, kMinFallbackSlotBytes);
  size_t slot = asked;
  for (;;) {
    try {
      segment_ = ShmSegment::create(segmentBytes(size_, slot));
      break;
    } catch (const ShmSegment::NoSpace& e) {
      if (slot > smallest) {
        slot = std::max(smallest, roundUp(slot / 2, kLine));
        continue;
      }
      const size_t full = segmentBytes(size_, asked);
      std::string message = c10::str(
          "dummy_collectives: /dev/shm is too small for this group of ", size_, " ranks: its "
          "shared memory needs ", full, " bytes (", debug_log::bytes(full), ") with buffer_bytes ",
          debug_log::bytes(asked), ", and at least ", e.needed, " bytes (",
          debug_log::bytes(e.needed), ") with the smallest fallback buffer ",
          debug_log::bytes(slot), ", but ", ShmSegment::kDirectory, " has ", e.free, " bytes (",
          debug_log::bytes(e.free), ") free (", e.what(), "). Fixes: a larger /dev/shm (docker "
          "run --shm-size=1g, or --ipc=host; Kubernetes: an emptyDir with medium Memory on "
          "/dev/shm), fewer groups alive at once (destroy the ones you no longer use), or fewer "
          "ranks per group");
      // The other ranks wait for the segment's name: give them the reason instead, and give
      // them a moment to read it (this rank may host the store, which leaves with it).
      const std::string failed = "!" + message;
      store->set(kStoreKey, std::vector<uint8_t>(failed.begin(), failed.end()));
      const auto patience = Clock::now() + std::chrono::seconds(2);
      while (store->add(kFailureSeenKey, 0) < size_ - 1 && Clock::now() < patience) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      TORCH_CHECK(false, message);
    }
  }
  if (slot != asked) {
    DC_LOG(kWarn, label(rank_), "/dev/shm has too little free space (",
           debug_log::bytes(ShmSegment::freeBytes() + segmentBytes(size_, slot)),
           " before this group) for this group's shared memory with buffer_bytes ",
           debug_log::bytes(asked), " (", debug_log::bytes(segmentBytes(size_, asked)),
           "): using buffer_bytes ", debug_log::bytes(slot), " (",
           debug_log::bytes(segmentBytes(size_, slot)), ") instead; large collectives take more "
           "steps. A larger /dev/shm (docker run --shm-size, --ipc=host), fewer groups alive at "
           "once or a smaller buffer_bytes avoids it");
  }
  ctl_ = new (segment_.data()) ControlBlock();
  ctl_->magic = kMagic;
  ctl_->worldSize = size_;
  ctl_->slotBytes = slot;
  for (int r = 0; r < size_; ++r) {
    new (&control(r)) RankControl();
  }
  auto* channels = reinterpret_cast<ChannelControl*>(&control(size_));
  for (int i = 0; i < size_ * size_; ++i) {
    new (&channels[i]) ChannelControl();
  }
  const std::string value = c10::str(segment_.name(), settings, " ", slot);
  store->set(kStoreKey, std::vector<uint8_t>(value.begin(), value.end()));
  return slot;
}

std::string ShmTransport::awaitSegment(const c10::intrusive_ptr<c10d::Store>& store) const {
  // Not a plain get(): that waits for the store's timeout (the default group's, for a new_group)
  // however soon rank 0 died. Poll instead (check(), not a timed wait(): FileStore's wait()
  // overshoots by up to a second), looking at rank 0's pid and the group's timeout in between.
  const auto deadline = Clock::now() + join_.timeout;
  const int32_t creator = pidOf(0);
  for (auto pause = std::chrono::microseconds(100); !store->check({kStoreKey});
       pause = std::min(pause * 2, kStorePollPause)) {
    if (creator > 0 && !processAlive(creator)) {
      C10_THROW_ERROR(
          DistBackendError,
          c10::str(
              "dummy_collectives: rank ", label(0), " (pid ", creator, ") died before it created "
              "the group's shared memory (rank ", label(rank_), " was joining the group); the "
              "group is unusable"));
    }
    if (Clock::now() >= deadline) {
      C10_THROW_ERROR(
          DistBackendError,
          c10::str(
              "dummy_collectives: rank ", label(rank_), " waited ", join_.timeout.count(),
              " ms (the group's timeout) for rank ", label(0), " to create the group's shared "
              "memory, in vain: rank ", label(0), " never reached the group's creation"));
    }
    std::this_thread::sleep_for(pause);
  }
  std::vector<uint8_t> raw = store->get(kStoreKey);
  std::string value(raw.begin(), raw.end());
  if (!value.empty() && value[0] == '!') {
    store->add(kFailureSeenKey, 1); // rank 0 may leave now
    TORCH_CHECK(false, value.substr(1), " (raised on rank ", label(0), ", which creates it)");
  }
  return value;
}

ShmTransport::~ShmTransport() = default;

RankControl& ShmTransport::control(int r) const {
  auto* ranks =
      reinterpret_cast<RankControl*>(reinterpret_cast<std::byte*>(ctl_) + sizeof(ControlBlock));
  return ranks[r];
}

P2pChannel ShmTransport::channel(int src, int dst) const {
  auto* channels = reinterpret_cast<ChannelControl*>(&control(size_));
  ChannelControl& c = channels[src * size_ + dst];
  const size_t bytes = ringBytes(size_);
  std::byte* rings = static_cast<std::byte*>(segment_.data()) + controlBytes(size_);
  return {&c.written, &c.consumed, rings + static_cast<size_t>(src * size_ + dst) * bytes, bytes};
}

std::byte* ShmTransport::slot(int r, uint64_t step) const {
  return data_ + (static_cast<size_t>(r) * 2 + (step & 1)) * slotBytes_;
}

std::string ShmTransport::opContext() const {
  return c10::str("dummy ", op_.describe(), " on rank ", label(rank_));
}

void ShmTransport::beginOp(const OpDescriptor& op, std::chrono::milliseconds timeout) {
  op_ = op;
  timeout_ = timeout;
  opClockStarted_ = false;
  opFirstStep_ = nextStep_;
  if (ctl_->aborted.load(std::memory_order_acquire) != 0) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(opContext(), ": the group was aborted earlier (", abortReason(), ")"));
  }
  RankControl& mine = control(rank_);
  mine.desc[nextStep_ & 1] = op;
  // One clock read per collective (through the vDSO, no system call): who made whom wait.
  const int64_t now = arrivalClockNs();
  mine.arrivedNs[nextStep_ & 1] = now;
  arrival_ = {-1, 0, now};
  faultStep_ = fault_ ? fault_->stepFor(rank_, op.seq) : 0;
}

void* ShmTransport::writeSlot() {
  return slot(rank_, nextStep_);
}

const void* ShmTransport::readSlot(int r) const {
  return slot(r, nextStep_ - 1);
}

bool ShmTransport::sharePointers(const void* mine, const void** all) {
  if (peerAccess_.state() == PeerAccessVote::State::kNo) {
    return false;
  }
  *static_cast<const void**>(writeSlot()) = mine;
  exchange();
  for (int r = 0; r < size_; ++r) {
    all[r] = *static_cast<const void* const*>(readSlot(r));
  }
  if (peerAccess_.state() == PeerAccessVote::State::kUndecided) {
    // Every rank has connected (and published its probe word) before publishing a step. One
    // rank that cannot reach one peer turns peer access off for the whole group: an algorithm
    // reaches every rank, so it is all or nothing.
    const bool mine = peerAccess_.vote(&control(0), size_, rank_);
    *static_cast<uint8_t*>(writeSlot()) = mine ? 1 : 0;
    exchange();
    bool everyone = true;
    for (int r = 0; r < size_; ++r) {
      everyone = everyone && *static_cast<const uint8_t*>(readSlot(r)) != 0;
    }
    peerAccess_.decide(mine, everyone, label(rank_), logPrefix());
  }
  return peerAccess_.state() == PeerAccessVote::State::kYes;
}

std::string ShmTransport::peerAccessState() const {
  return peerAccess_.describe();
}

void ShmTransport::readPeer(int r, void* local, const void* remote, size_t bytes) {
  const int error = cross_memory::read(control(r).pid, local, remote, bytes);
  if (error != 0) {
    failPeerAccess(r, "reading", bytes, error);
  }
}

void ShmTransport::writePeer(int r, void* remote, const void* local, size_t bytes) {
  const int error = cross_memory::write(control(r).pid, remote, local, bytes);
  if (error != 0) {
    failPeerAccess(r, "writing", bytes, error);
  }
}

void ShmTransport::exchange() {
  const uint64_t step = nextStep_;
  if (faultStep_ != 0 && step - opFirstStep_ + 1 == static_cast<uint64_t>(faultStep_)) {
    faultStep_ = 0;
    fault_injection::fire(*fault_, c10::str("in ", opContext(), ", at its step ",
                                            step - opFirstStep_ + 1));
  }
  const bool decided = cores_.decided();
  if (!decided) {
    // Read as late as this: ranks pinned after the group was made are pinned by now.
    control(rank_).cpus = affinityMask();
  }
  if (cores_.policy().shareCores) {
    cores_.noteCpu();
  }
  std::atomic<uint64_t>& published = control(rank_).published;
  // seq_cst pairs with the waiters' sleepers increment: either they see this step or we see them.
  published.store(step + 1, std::memory_order_seq_cst);
  if (ctl_->sleepers.load(std::memory_order_seq_cst) != 0) {
    futexWakeAll(futexWord(published));
  }
  waitAll(step);
  if (!decided) {
    decideCoreSharing();
  }
  // Advance before validating: a mismatch raises on every rank after this same step, and the
  // next collective must start from the next step on all of them.
  nextStep_ = step + 1;
  if (step == opFirstStep_) {
    noteArrivals(step);
    checkDescriptors(step);
  }
}

void ShmTransport::noteArrivals(uint64_t step) {
  // Every rank reads the same stamps (written before the publish just awaited), so every rank
  // names the same last rank; ties go to the lowest rank. The lines are in our cache already:
  // the stamps share the step counters' line pairs.
  int last = 0;
  int64_t lastNs = control(0).arrivedNs[step & 1];
  for (int r = 1; r < size_; ++r) {
    const int64_t ns = control(r).arrivedNs[step & 1];
    if (ns > lastNs) {
      last = r;
      lastNs = ns;
    }
  }
  const int64_t waited = std::max<int64_t>(0, lastNs - arrival_.arrivedNs);
  arrival_.lastRank = label(last);
  arrival_.waitedNs = waited;
  waits_.add(last, waited);
}

template <typename Ready, typename CoreWanted, typename Check, typename Sleep>
void ShmTransport::waitFor(
    WaitClock& clock, Ready&& ready, CoreWanted&& coreWanted, Check&& check, Sleep&& sleep) {
  for (uint32_t spins = 0; !ready();) {
    if (ctl_->aborted.load(std::memory_order_relaxed) != 0) {
      C10_THROW_ERROR(
          DistBackendError, c10::str(opContext(), ": the group was aborted (", abortReason(), ")"));
    }
    // Reading the clock costs many pause instructions' worth; amortise it over a few (the first
    // time through reads it at once: a rank waited for on this core should get it at once).
    if ((spins++ & 15) != 0) {
      cpuRelax();
      continue;
    }
    const auto now = Clock::now();
    if (!clock.started) {
      clock = {true, now, now + cores_.policy().livenessPeriod};
      if (!opClockStarted_) {
        opClockStarted_ = true;
        opStart_ = now;
        deadline_ = now + timeout_;
      }
    }
    if (now >= clock.nextCheck) {
      check(now);
      clock.nextCheck = now + cores_.policy().livenessPeriod;
    }
    cores_.idle(now - clock.start, coreWanted, sleep);
  }
}

void ShmTransport::waitAll(uint64_t step) {
  const uint64_t target = step + 1;
  WaitClock clock;
  for (int r = 0; r < size_; ++r) {
    std::atomic<uint64_t>& word = control(r).published;
    waitFor(
        clock,
        [&] { return word.load(std::memory_order_acquire) >= target; },
        [&] { return awaitedRankSharesCore(target, r); },
        [&](Clock::time_point) { checkPeers(step); },
        [&] {
          ctl_->sleepers.fetch_add(1, std::memory_order_seq_cst);
          const uint64_t seen = word.load(std::memory_order_seq_cst);
          if (seen < target) {
            futexWait(
                futexWord(word), static_cast<uint32_t>(seen), std::chrono::milliseconds(10));
          }
          ctl_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
        });
  }
}

void ShmTransport::waitUntil(const std::function<bool()>& ready, const std::string& what) {
  WaitClock clock;
  waitFor(
      clock,
      ready,
      [] { return false; }, // what is awaited is not a rank's call
      [&](Clock::time_point now) {
        for (int r = 0; r < size_; ++r) {
          std::string problem = r == rank_ ? std::string() : peerProblem(r);
          if (!problem.empty()) {
            fail(c10::str(problem, " while waiting for ", what, "; the group is unusable"));
          }
        }
        if (now >= deadline_) {
          failTimedOut(what);
        }
      },
      // What is awaited here takes microseconds at least (a GPU kernel) and has no futex word.
      [] { std::this_thread::sleep_for(std::chrono::microseconds(50)); });
}

void ShmTransport::decideCoreSharing() {
  // Every rank wrote its CPUs before publishing the step just awaited, so all ranks see the
  // same masks and decide alike.
  CpuMask all{};
  for (int r = 0; r < size_; ++r) {
    const CpuMask& cpus = control(r).cpus;
    for (size_t w = 0; w < all.size(); ++w) {
      all[w] |= cpus[w];
    }
  }
  cores_.decide(all, label(rank_), logPrefix());
}

std::optional<bool> ShmTransport::sharesCores() const {
  return cores_.sharesCores();
}

bool ShmTransport::awaitedRankSharesCore(uint64_t target, int from) const {
  for (int r = from; r < size_; ++r) {
    const RankControl& peer = control(r);
    if (r != rank_ && peer.cpu.load(std::memory_order_relaxed) == cores_.cpu() &&
        peer.published.load(std::memory_order_relaxed) < target) {
      return true;
    }
  }
  return false;
}

void ShmTransport::checkDescriptors(uint64_t step) const {
  bool same = true;
  for (int r = 0; r < size_ && same; ++r) {
    same = control(r).desc[step & 1] == op_;
  }
  if (same) {
    return;
  }
  std::string calls;
  for (int r = 0; r < size_; ++r) {
    calls += c10::str("\n  rank ", label(r), ": ", control(r).desc[step & 1].describe());
  }
  // Every rank sees the same descriptors, so every rank raises here, after the same number of
  // steps: the group stays consistent and usable.
  C10_THROW_ERROR(
      DistBackendError,
      c10::str(
          "dummy_collectives: ranks called different collectives (seen on rank ",
          label(rank_),
          "); no data was exchanged:",
          calls));
}

} // namespace dummy_collectives

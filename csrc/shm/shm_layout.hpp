#pragma once

// The layout of a group's shared-memory segment (private to ShmTransport's sources): what every
// rank of the group maps and where each part lies. Its own header because each concern of the
// transport reads it from its own file: the step protocol (shm_transport.cpp), liveness
// (shm_liveness.cpp) and the peer-access vote (peer_access.cpp).
//
// In order: ControlBlock, then one RankControl per rank, then one ChannelControl per ordered
// pair of ranks (padded to a page), then the point-to-point rings, then the data slots (rank r,
// buffer b at data + (2r + b) * slotBytes). Everything a rank writes often sits on its own
// 128-byte line (two cache lines: x86 prefetches pairs), so ranks never false-share.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include <dummy_collectives/op_descriptor.hpp>
#include "shm/wait_policy.hpp"

namespace dummy_collectives {

constexpr uint64_t kMagic = 0x6475'6d6d'795f'6363ULL; // "dummy_cc"
constexpr size_t kLine = 128;
constexpr size_t kReasonBytes = 1024;

struct alignas(kLine) RankControl {
  // Steps this rank has published. Futex waits use its low 32 bits (little-endian first word).
  std::atomic<uint64_t> published;
  // The collective whose first step is step s lives in desc[s % 2]; a rank rewrites a slot only
  // after every rank has gone two steps past the reads of it (the same rule as the data slots).
  // It shares `published`'s line pair: the transfer that shows a peer the step brings it along.
  OpDescriptor desc[2];
  // When this rank began the collective whose first step is step s: arrivedNs[s % 2], its
  // steady clock (one clock for every process of a host), written with the descriptor and read
  // by peers after that step (see noteArrivals). Double-buffered like the descriptor, for the
  // same reason: a fast rank begins its next collective while a slow one still reads this.
  int64_t arrivedNs[2];
  // Written once at connect.
  alignas(kLine) int32_t pid; // for peers' liveness checks and cross-memory reads
  uint64_t pidNamespace;
  uint64_t probeAddress; // a word of this process that peers read to see whether they can
  uint64_t probeValue;   // (cross_memory::ProbeWord)
  // The CPU this rank last ran on, kept only while ranks outnumber cores (WaitPolicy::shareCores)
  // and written only when it changes, so this line stays shared in every reader's cache.
  std::atomic<int32_t> cpu{-1};
  // The CPUs this rank may run on, written before its first publish (see decideCoreSharing).
  CpuMask cpus{};
};
static_assert(
    sizeof(std::atomic<uint64_t>) + 2 * sizeof(OpDescriptor) + 2 * sizeof(int64_t) <= kLine,
    "a peer's step counter, descriptors and arrival stamps come in one transfer");

struct alignas(kLine) ControlBlock {
  uint64_t magic;
  int32_t worldSize;
  uint64_t slotBytes;
  std::atomic<int32_t> mapped;     // ranks that have mapped the segment so far
  std::atomic<uint32_t> sleepers;  // ranks asleep in a futex wait: publishers wake only then
  std::atomic<uint32_t> aborted;   // 0 running, 1 being aborted, 2 aborted (reason readable)
  char abortReason[kReasonBytes];
};

// One per ordered pair of ranks; the two counters sit on separate lines (different writers).
struct alignas(kLine) ChannelControl {
  std::atomic<uint64_t> written;
  char pad0[kLine - sizeof(std::atomic<uint64_t>)];
  std::atomic<uint64_t> consumed;
  char pad1[kLine - sizeof(std::atomic<uint64_t>)];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");

inline size_t roundUp(size_t value, size_t to) {
  return (value + to - 1) / to * to;
}

// The control block, the ranks' records and the channels' counters.
inline size_t controlBytes(int size) {
  const auto n = static_cast<size_t>(size);
  return roundUp(
      sizeof(ControlBlock) + sizeof(RankControl) * n + sizeof(ChannelControl) * n * n, 4096);
}

// Point-to-point ring size: 256 KiB per pair for small groups, shrinking so a rank's rings stay
// near 4 MiB in large ones (pages are only touched when used anyway).
inline size_t ringBytes(int size) {
  const size_t perPeer = (size_t{4} << 20) / static_cast<size_t>(std::max(1, size - 1));
  return std::clamp<size_t>(perPeer / 4096 * 4096, size_t{16} << 10, size_t{256} << 10);
}

inline size_t ringsBytes(int size) {
  return static_cast<size_t>(size) * static_cast<size_t>(size) * ringBytes(size);
}

} // namespace dummy_collectives

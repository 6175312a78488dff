#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "inter_host/group_health.hpp"
#include "inter_host/peer_links.hpp"
#include <dummy_collectives/op_context.hpp>
#include "inter_host/topology.hpp"

namespace dummy_collectives::inter_host {

// The level between hosts: an existing engine (gloo for CPU tensors) over some ranks of the
// group, `members[i]` being the group rank of its rank i. Two-level algorithms move only bytes
// through it (contiguous uint8 tensors) and fold with dummy's own reduction kernels, so every
// dtype and ReduceOp keeps the one-host semantics whatever the engine supports.
//
// wait() is where the cross-host failure model lives: the engine cannot be interrupted, so a
// waiting rank watches the group's health (GroupHealth) and its deadline, and gives the wait up
// when the group failed elsewhere.
class InterHostEngine {
 public:
  InterHostEngine(
      c10::intrusive_ptr<c10d::Backend> backend,
      std::vector<int> members,
      const Topology& topology,
      GroupHealth& health);

  c10d::Backend& operator*() const {
    return *backend_;
  }
  c10d::Backend* operator->() const {
    return backend_.get();
  }
  const c10::intrusive_ptr<c10d::Backend>& backend() const {
    return backend_;
  }
  int rank() const {
    return backend_->getRank();
  }
  int size() const {
    return backend_->getSize();
  }
  const std::vector<int>& members() const {
    return members_;
  }

  // Byte-level operations (asynchronous; wait() completes them).
  // `alone` (every one of them): the caller has no other operation of this engine in flight,
  // so the links carry it where this engine has them (they move bytes only while a thread
  // waits, one operation at a time); every member must pass the same.
  // out (size() * in.numel() bytes) receives every member's `in`, in member order.
  c10::intrusive_ptr<c10d::Work> allgather(at::Tensor& out, at::Tensor& in, bool alone = false)
      const;
  // in and out: size() equal parts; member d receives part d of everyone's `in`, in order.
  c10::intrusive_ptr<c10d::Work> alltoall(at::Tensor& out, at::Tensor& in, bool alone = false)
      const;
  // Like alltoall, with per-member part sizes (bytes).
  c10::intrusive_ptr<c10d::Work> alltoall(
      at::Tensor& out,
      at::Tensor& in,
      std::vector<int64_t> outSplits,
      std::vector<int64_t> inSplits,
      bool alone = false) const;
  c10::intrusive_ptr<c10d::Work> broadcast(at::Tensor& data, int root, bool alone = false) const;
  // On the links (one operation, alone): receives member `from`'s frame into `bytes` and passes
  // it on to member `to` as it lands (the bytes received so far, not waiting for the whole);
  // from -1: sends `bytes`; to -1: receives only. A host's part in a chain through the members.
  c10::intrusive_ptr<c10d::Work> relayOnLinks(int from, int to, const at::Tensor& bytes) const;
  // On the links (one operation, alone): to every other member m, sends `sendTo(m)` and
  // receives m's frame into `receiveFrom(m)` (an empty tensor is neither sent nor expected, so
  // both ends must agree on which are), frames of `kind`. An all-to-all whose parts lie where
  // they lie.
  c10::intrusive_ptr<c10d::Work> piecesOnLinks(
      const std::function<at::Tensor(int)>& sendTo,
      const std::function<at::Tensor(int)>& receiveFrom,
      PeerLinks::Kind kind = PeerLinks::Kind::kData) const;
  // Member m's block of `out` is bytes [offsets[m], offsets[m + 1]) (blocks may differ in
  // size); this member's is in place already, and every member receives every other's: on the
  // links (`alone`), else by the engine's all-to-all of a copy of our block for every member.
  c10::intrusive_ptr<c10d::Work> allgatherBlocks(
      at::Tensor& out, const std::vector<int64_t>& offsets, bool alone) const;
  // A broadcast's one-way record (agreement.hpp, agreeOneWay): member `root` sends `record`,
  // every other member receives into its `record` (a whole record's capacity: a shorter message
  // fills part of it).
  c10::intrusive_ptr<c10d::Work> announce(at::Tensor& record, int root) const;
  // Every member sends `in` (at most `slotBytes`) to every other member, each receiving into a
  // slot of `slotBytes` per member; its own record is copied after the others' slots
  // (recordOffset() says where each lands). Only what `in` holds crosses the network, yet a
  // member that sends more than its peers (it called another collective) never overruns their
  // slots: gloo aborts the process when a message is larger than its receive, and accepts a
  // shorter one.
  c10::intrusive_ptr<c10d::Work> exchangeRecords(
      at::Tensor& out, const at::Tensor& in, int64_t slotBytes) const;
  // The size exchangeRecords' `out` must have, and where member m's record starts in it.
  int64_t recordsBytes(int64_t inBytes, int64_t slotBytes) const {
    return (size() - 1) * slotBytes + inBytes;
  }
  int64_t recordOffset(int member, int64_t slotBytes) const {
    if (member == rank()) {
      return (size() - 1) * slotBytes;
    }
    return (member < rank() ? member : member - 1) * slotBytes;
  }

  // Records travel on the leaders' own links (peer_links.hpp) from now on: an engine over the
  // hosts' leaders, every member at once. `carryData`: the byte-level operations above go there
  // too -- only where a collective has one engine operation in flight at a time (one rank per
  // host: no pipeline), since the links move bytes only while a thread waits on them.
  void useLinks(std::unique_ptr<PeerLinks> links, bool carryData) {
    links_ = std::move(links);
    dataOnLinks_ = carryData;
  }
  // Whether it has them: then operations issued `alone` go there (every member answers alike).
  bool hasLinks() const {
    return static_cast<bool>(links_);
  }
  // The member whose frame into `work` (exchangeRecords, announce) was of the other form -- an
  // exchange met a broadcast's one-way record, or the reverse: its slot holds the start of that
  // record -- or -1. Only the leaders' links can tell; gloo's operations never meet then.
  static int otherFormFrom(const c10::intrusive_ptr<c10d::Work>& work);
  // The group ranks whose connection ended right after the record they sent into `work` (on
  // the links; through the engine nobody can tell): they gave up on the group after sending it
  // (LinkHangUp), or left it.
  std::vector<int> endedAfterRecord(const c10::intrusive_ptr<c10d::Work>& work) const;

  // Waits for `work` of this engine. Raises (failing the group) if it failed -- naming the
  // dead rank where the group learns it -- if the group failed elsewhere meanwhile, or past the
  // collective's deadline.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const OpContext& ctx) const;

  // Whether a wait that lasts compares this rank's call with its peers' in the store: where
  // the group's collectives do not all begin with the same engine call (the leaders' rail:
  // GroupHealth::tellCall), ranks that called different collectives would otherwise wait for
  // each other until the timeout.
  void compareStuckCalls(bool on) {
    compareStuckCalls_ = on;
  }

 private:
  // The members on the host at the address the engine's error names (`host`: that host, or
  // -1). Nobody on this host sees another host's processes, so an address is all it has.
  std::vector<int> suspectsOf(const std::string& engineError, int& host) const;
  // The message of a mismatch this rank's call has with the calls its peers told (in the order
  // of othersThan(this rank)), if any.
  std::optional<std::string> stuckCallMismatch(
      const OpContext& ctx, const GroupHealth::ToldCalls& told) const;
  // Why the engine failed, for the message: the peer it lost, if known.
  std::string describeFailure(
      const std::string& engineError, const std::vector<int>& suspects, int host) const;
  // The group ranks of engine ranks; the members on other hosts; the members but `rank`.
  std::vector<int> groupRanksOf(const std::vector<int>& engineRanks) const;
  std::vector<int> othersThanThisHost() const;
  std::vector<int> othersThan(int rank) const;
  // "rank 2 (on host h1 (10.0.0.2), ranks 2, 3)", by host.
  std::string describeRanks(const std::vector<int>& ranks) const;
  // Whether a byte-level operation goes on the links.
  bool onLinks(bool alone) const {
    return links_ && (alone || dataOnLinks_);
  }
  // The byte-level operations on the links (dataOnLinks_). Splits: bytes per member, empty for
  // equal parts.
  c10::intrusive_ptr<c10d::Work> alltoallOnLinks(
      at::Tensor& out,
      at::Tensor& in,
      const std::vector<int64_t>& outSplits,
      const std::vector<int64_t>& inSplits) const;
  // Every member sends `bytes` to every other member and receives each one's into
  // `slotOf(member)`; nothing moves where `bytes` is empty (every member's is then). The pieces
  // (piecesOnLinks) of one tensor sent to all.
  c10::intrusive_ptr<c10d::Work> toEveryOtherOnLinks(
      PeerLinks::Kind kind,
      const at::Tensor& bytes,
      const std::function<at::Tensor(int)>& slotOf) const;
  // Member `root` sends `bytes` to every other member, of `kind`; they receive into `bytes`.
  c10::intrusive_ptr<c10d::Work> fromRootOnLinks(
      at::Tensor& bytes, int root, PeerLinks::Kind kind) const;
  // Calls `blockUntil(t)` (true once the work is done, false at t) until the work is done,
  // checking in between the group's health, the deadline and (compareStuckCalls) the calls;
  // `awaited()` names the group ranks it still waits for, should the deadline pass.
  template <typename BlockUntil, typename Awaited>
  void watch(const OpContext& ctx, bool firstCall, BlockUntil&& blockUntil, Awaited&& awaited)
      const;
  // The deadline passed waiting for `awaited`: fails the group, saying what this rank knows
  // (nothing heard from them; whether the store answered) and what it does not.
  [[noreturn]] void timedOut(
      const OpContext& ctx, bool firstCall, const std::vector<int>& awaited) const;
  // The engine failed with `engineError` (`lostRank`: the group rank whose connection it lost,
  // or -1 where the error does not say): fails the group, naming the cause.
  [[noreturn]] void failEngine(
      const OpContext& ctx, const std::string& engineError, int lostRank) const;

  c10::intrusive_ptr<c10d::Backend> backend_;
  std::vector<int> members_;
  const Topology& topology_;
  GroupHealth& health_;
  std::unique_ptr<PeerLinks> links_; // null: records go through the engine
  bool dataOnLinks_ = false;
  bool compareStuckCalls_ = false;
  // The collective (its sequence number) this engine last waited for: its first wait for a
  // collective is the one that may meet another collective's call. A group runs one at a time.
  mutable uint64_t lastWaitedSeq_ = 0;
};

// A contiguous tensor's bytes as a 1-D uint8 tensor (the engines move bytes).
at::Tensor bytesOf(const at::Tensor& tensor);
// `count` copies of contiguous uint8 `bytes`, one after another, copied on this thread.
at::Tensor copiesOf(const at::Tensor& bytes, int count);
// Copies contiguous `from` into `to` (as many bytes), unless they are the same memory (an
// in-place call: a rank's input is its own part of the output). memcpy, as copiesOf, for host
// memory; device memory's copy is queued on the current stream.
void copyUnlessSame(const at::Tensor& to, const at::Tensor& from);

// What every rank raises when ranks on different hosts called different collectives: each of
// `calls` is a rank and the collective it called (listed in rank order). The engine's wait
// raises it when the calls its peers told differ (compareStuckCalls); the agreement
// (hierarchy/agreement.cpp) when the records do.
std::string differentCalls(
    const Topology& topology, std::vector<std::pair<int, OpDescriptor>> calls);
// The same message around `calls` written already, a line each ("\n  rank 2 (...): ...").
std::string differentCallsMessage(const Topology& topology, const std::string& calls);

} // namespace dummy_collectives::inter_host

#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "inter_host/peer_links.hpp"
#include "ucx/ucx_worker.hpp"

namespace dummy_collectives::inter_host {

// The links on UCX (PeerLinks, peer_links.hpp): tagged messages on a worker of their own,
// progressed by the thread that waits. UCX chooses the transport (RDMA where the cluster's UCX
// has it, TCP otherwise) and reports a lost peer itself.
//
// A frame is one message (records) or, for data, messages of at most kPieceBytes, so a host
// that forwards a frame (a chain's broadcast) passes each piece on as it lands. A message's tag
// holds its kind, its channel (records, or data: each a sequence of its own per pair, so a
// record never waits behind a tensor's pieces), its sender and its number in that sequence: a
// receive probes for exactly the message it expects next and, finding a record of another
// kind, ends the operation (otherKindFrom). A member that gives up sends each peer, on both
// channels, a hang-up numbered after the last message it sent, so a peer reads every frame sent
// before it, then the hang-up (endedAfterFrame); waiting for a frame that a hang-up replaced, it
// raises LinkLost.
class UcxLinks final : public PeerLinks {
 public:
  // Every member makes it at the same time: publishes its worker's address in `store`, connects
  // to every other member's and exchanges a first message with each, throwing past `timeout`
  // (naming who did not answer). `addresses`: each member's host address, for messages.
  // `pollFor`: how long a wait polls before it sleeps (the host's wait policy).
  UcxLinks(
      const c10::intrusive_ptr<c10d::Store>& store,
      std::vector<int> members,
      int me,
      std::vector<std::string> addresses,
      std::chrono::milliseconds timeout,
      std::shared_ptr<LinkHangUp> hangUp,
      std::function<std::chrono::nanoseconds()> pollFor);
  ~UcxLinks() override;
  UcxLinks(const UcxLinks&) = delete;
  UcxLinks& operator=(const UcxLinks&) = delete;

  int size() const override {
    return static_cast<int>(members_.size());
  }
  int rank() const override {
    return me_;
  }
  c10::intrusive_ptr<c10d::Work> start(
      Kind kind, std::vector<Send> sends, std::vector<Receive> receives) override;
  // "UCX 1.22.0 (the libucx wheel's: /path/libucp.so.0), tcp/eth0": for the debug log.
  std::string describe() const;

  // A data frame's largest message: the granularity at which a relaying host passes a frame on.
  static constexpr int64_t kPieceBytes = int64_t{1} << 20;
  static_assert(kPieceBytes <= static_cast<int64_t>(ucx::kTcpSegmentBytes),
                "a piece crosses TCP in one segment");

  class UcxOperation;
  // One UCX request and what it keeps alive.
  struct Request;

 private:
  friend class UcxOperation;
  enum Channel { kRecords = 0, kData = 1 };
  static Channel channelOf(Kind kind) {
    return kind == Kind::kData ? kData : kRecords;
  }
  // Sends every peer a hang-up on both channels, numbered after the last message it sent.
  void hangUpNow();
  // Marks the links unusable: an operation ended without moving all its bytes.
  void breakLinks(const std::string& why);
  // Frees the requests of operations that ended early once UCX is done with them.
  void reapAbandoned(bool all);
  // "Connection closed by peer [10.0.0.2] (UCX: ...)", as gloo names a lost peer.
  [[noreturn]] void lost(int member, const std::string& why) const;
  // Whether `member` hung up on `channel` at or before its message number `sequence`.
  bool hungUpBy(Channel channel, int member, uint32_t sequence);

  std::vector<int> members_;
  int me_;
  std::vector<std::string> addresses_;
  std::unique_ptr<ucx::Worker> worker_;
  std::shared_ptr<LinkHangUp> hangUp_;
  int hangUpId_ = -1;
  std::function<std::chrono::nanoseconds()> pollFor_;
  // The next message number on each channel to each member, and from each; guarded by mu_
  // (the hang-up may come from any thread).
  std::mutex mu_;
  std::array<std::vector<uint32_t>, 2> sent_;
  std::array<std::vector<uint32_t>, 2> received_;
  std::vector<std::unique_ptr<Request>> abandoned_; // guarded by mu_
  std::string broken_;
  bool busy_ = false;
};

} // namespace dummy_collectives::inter_host

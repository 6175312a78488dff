#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "hierarchy/peer_links.hpp"

namespace dummy_collectives::hierarchy {

// TCP connections of the hosts' leaders among themselves, one per pair, for the agreement's
// records (agreement.hpp), driven on the thread that waits.
//
// Why not gloo: a gloo operation hands off between threads twice on each side (the caller to
// gloo's worker, its network loop to the worker, the worker back to the caller), so a record's
// round trip costs several times what it costs on a socket the waiting thread reads itself
// (docs/benchmarks.md, "The leaders' own links"), and every collective across hosts begins
// with one. gloo's transport is not reachable from an extension
// (torch's wheel ships no gloo headers), so the links are plain sockets, made here.
//
// Each message is a frame: its kind, its length, its bytes. A receive takes one frame from its
// peer into a slot; a frame longer than the slot fills it and the rest is read and dropped (gloo
// aborts the process there), so ranks that called different collectives never overrun each
// other and every stream stays framed. A frame of another kind than the receive expects (a
// broadcast's one-way record met by an exchange) ends the operation at once: the group fails
// then (agreement.cpp), as the streams no longer pair.
//
// Where records travel (the hosts' leaders), each pair has two connections: records (exchanges
// and one-way records) on one, data on the other. A TCP connection's congestion control keeps
// what the connection's past traffic taught it: under BBR (Linux's common choice) a connection
// that has carried bulk data both ways paces the next small records at that estimate and its
// probing cycle, not at the link's speed, which records on a connection of their own avoid.
// Records are what every collective waits for first; data follows an agreement, so each
// channel still pairs frame by frame (docs/benchmarks.md, "Records on a connection of their
// own", has the measurements and the price).
// The links on TCP sockets of our own (PeerLinks, peer_links.hpp).
class LeaderLinks final : public PeerLinks {
 public:
  // `members`: the group ranks of the leaders, `me` this rank's index among them; `addresses`:
  // each member's address (it listens there, on a port the system picks, published in `store`
  // with a random token that every member's hello must carry: a connection from anyone else --
  // a port scanner, a stray client, a stale peer of an earlier group -- is closed and the
  // listener goes on). Every member makes it at the same time; it returns once every pair is
  // connected, or throws past `timeout`. `carriesRecords`: whether records travel here too
  // (the hosts' leaders); links that carry only data (the other rails) need one connection per
  // pair.
  LeaderLinks(
      const c10::intrusive_ptr<c10d::Store>& store,
      std::vector<int> members,
      int me,
      const std::vector<std::string>& addresses,
      std::chrono::milliseconds timeout,
      bool carriesRecords,
      std::shared_ptr<LinkHangUp> hangUp = nullptr);
  ~LeaderLinks();
  // Whether links can be made between hosts at these addresses (IPv4, as gloo binds to here).
  static bool usable(const std::vector<std::string>& addresses);
  LeaderLinks(const LeaderLinks&) = delete;
  LeaderLinks& operator=(const LeaderLinks&) = delete;

  int size() const override {
    return static_cast<int>(channels_[0].size());
  }
  int rank() const override {
    return me_;
  }

  // Small frames leave at once (the kernel takes them); the rest moves while a thread waits on
  // the Work. A send that forwards passes the agreed data on by splice, the host copying it
  // once (SocketOperation::Relay).
  c10::intrusive_ptr<c10d::Work> start(
      Kind kind, std::vector<Send> sends, std::vector<Receive> receives) override;

  struct Peer;
  class SocketOperation;
  struct RelayPipes;
  struct Hello;

 private:
  // The creation's second half: accepts one connection per channel from every later member
  // on `listener`, refusing (and logging) any whose hello lacks `token` or names no awaited
  // connection, until `until`.
  void acceptLaterMembers(
      int listener,
      const std::vector<std::string>& addresses,
      uint64_t token,
      std::chrono::steady_clock::time_point until,
      std::chrono::milliseconds timeout,
      int groupRank);

  // Marks the links unusable: an operation ended without moving all its bytes (its group
  // failed), so the streams are no longer framed.
  void breakLinks(const std::string& why);

  // A relay's pipes (SocketOperation::Relay), made at the first use; null where the system refused.
  RelayPipes* relayPipes();

  // The connection to `member` that carries frames of `kind`.
  Peer* peer(Kind kind, int member) const {
    return channels_[kind == Kind::kData ? channels_.size() - 1 : 0][member].get();
  }

  int me_;
  std::shared_ptr<LinkHangUp> hangUp_; // shuts this member's connections' sending sides
  int hangUpId_ = -1;
  // By channel (0: records; the last: data, the same one where records do not travel here),
  // then by member; null for this rank.
  std::vector<std::vector<std::unique_ptr<Peer>>> channels_;
  std::string broken_;
  bool busy_ = false; // one operation at a time (a group runs one collective at a time)
  // Made at the first relay that splices (SocketOperation::Relay), kept for the next ones; null
  // until then, or where the system refused them.
  std::unique_ptr<RelayPipes> relayPipes_;
  bool relayPipesRefused_ = false;
};

// An operation on the sockets.
class LeaderLinks::SocketOperation final : public PeerLinks::Operation {
 public:
  SocketOperation(LeaderLinks& links, Kind kind, std::vector<Send> sends,
                  std::vector<Receive> receives);
  ~SocketOperation() override;

  bool progressUntil(std::chrono::steady_clock::time_point until) override;
  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<int> awaited() const override;
  // The members whose connection ends right after the frame they sent (LinkHangUp).
  std::vector<int> endedAfterFrame() const override;

 private:
  struct Outgoing;
  struct Incoming;
  struct Relay;
  // Passes over every socket without blocking; true when the operation is done.
  bool moveBytes();
  bool movePass();
  void sendPass(Outgoing& o);
  void receivePass(Incoming& in);
  // A forwarding send's payload through the relay's pipes (Relay): what they move now.
  void relayPass();
  // Whether the relay splices, decided once its receive's header is in.
  void decideRelay();
  // Whether this operation's relay decided to splice.
  bool splicing() const;
  // Whether a receive still wants its socket polled for reading.
  bool wantsInput(size_t index) const;
  // How much of `o`'s frame (header included) may be sent now.
  size_t sendable(const Outgoing& o) const;
  void finish();

  LeaderLinks& links_;
  Kind kind_;
  std::vector<Outgoing> out_;
  std::vector<Incoming> in_;
  std::unique_ptr<Relay> relay_; // a send that forwards one of this operation's receives
  bool done_ = false;
};

} // namespace dummy_collectives::hierarchy

#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace dummy_collectives::inter_host {

// The engine under a cross-host level's own operations (engine.hpp): framed messages between
// the level's members (the hosts' leaders, or a rail), moved by the thread that waits, with no
// hand-off to another thread. What the agreement and the algorithms ask of it:
// - a message is a frame of a kind; a receive takes one frame from its peer into a slot, and a
//   frame longer than the slot fills it and the rest is dropped, so ranks that called different
//   collectives never overrun each other and the streams stay framed;
// - a frame of another kind than the receive expects (a broadcast's one-way record met by an
//   exchange) ends the operation at once, saying who sent it (otherKindFrom);
// - a data frame whose size is not its receive's ends it too (wrongSize);
// - a send may forward what one of the operation's receives lands, as it lands (a chain's
//   broadcast);
// - a peer that gives up is seen after the frames it sent before (endedAfterFrame), and a lost
//   peer raises LinkLost naming it.
// Implemented on UCX (ucx_links.hpp); an engine of its own needs only this interface.
class PeerLinks {
 public:
  // An exchange's record, a broadcast's one-way record, or data that follows an agreement (its
  // sizes checked, so it pairs by construction).
  enum class Kind : uint32_t { kExchange = 1, kOneWay = 2, kData = 3 };

  struct Send {
    int member;
    at::Tensor bytes; // contiguous uint8, kept alive by the operation
    // Where >= 0: a receive of this operation (its index) whose slot is `bytes`; only what it
    // has landed is sent, so a host passes a message on as it arrives. One send of an operation
    // at most forwards.
    int forwards = -1;
  };
  struct Receive {
    int member;
    at::Tensor slot; // contiguous uint8: at most this much of the frame lands here
  };

  class Operation;

  virtual ~PeerLinks() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // Begins an operation of `kind`: sends, and receives of one frame each; an Operation, which
  // moves its bytes while a thread waits on it (Operation::progressUntil). One at a time.
  virtual c10::intrusive_ptr<c10d::Work> start(
      Kind kind, std::vector<Send> sends, std::vector<Receive> receives) = 0;
};

// An operation on the links: complete only once a thread drove it (progressUntil).
class PeerLinks::Operation : public c10d::Work {
 public:
  Operation() : c10d::Work(-1, c10d::OpType::UNKNOWN) {}

  // Moves bytes until the operation is done (true) or `until` passes (false). Throws LinkLost.
  virtual bool progressUntil(std::chrono::steady_clock::time_point until) = 0;
  // A frame of another kind arrived (the operation ended there): the member that sent it, and
  // the slot holds its first bytes; -1 where every frame was of the expected kind.
  int otherKindFrom() const {
    return otherKindFrom_;
  }
  // A data frame whose size is not its receive's (the operation ended there): who sent it, its
  // size and the receive's. Data moves only after every rank agreed on the call, so this is a
  // fault of ours; the bytes are never taken for data, and the streams no longer pair.
  struct WrongSize {
    int member;
    uint64_t bytes;
    int64_t expected;
  };
  const std::optional<WrongSize>& wrongSize() const {
    return wrongSize_;
  }
  // The members whose frame has not wholly arrived, or to whom ours has not wholly left: those
  // a wait that ends here was waiting for.
  virtual std::vector<int> awaited() const = 0;
  // Of a finished operation, the members that gave up on the group (or left it) right after
  // the frame they sent.
  virtual std::vector<int> endedAfterFrame() const = 0;

 protected:
  int otherKindFrom_ = -1;
  std::optional<WrongSize> wrongSize_;
};

// A peer's connection closed, or a transport call failed: names the peer as gloo does
// ("Connection closed by peer [10.0.0.2]:4567"), and says which member it was (-1: none in
// particular).
class LinkLost : public std::runtime_error {
 public:
  LinkLost(const std::string& what, int member) : std::runtime_error(what), member_(member) {}
  int member() const {
    return member_;
  }

 private:
  int member_;
};

// Lets any thread tell a member's peers at once that it gave up on the group, in each link's
// own order: a peer reads every frame sent before, then learns it (agreement.cpp reads it so).
// Each set of links enlists what hanging up does for it while it lives; links enlisted after
// now() hang up at once.
class LinkHangUp {
 public:
  void now() {
    std::lock_guard<std::mutex> lock(mu_);
    if (hungUp_) {
      return;
    }
    hungUp_ = true;
    for (auto& [id, hangUp] : actions_) {
      hangUp();
    }
  }
  // Returns the id that forget() takes.
  int enlist(std::function<void()> hangUp) {
    std::lock_guard<std::mutex> lock(mu_);
    if (hungUp_) {
      hangUp();
    }
    actions_.emplace(next_, std::move(hangUp));
    return next_++;
  }
  void forget(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    actions_.erase(id);
  }

 private:
  std::mutex mu_;
  std::map<int, std::function<void()>> actions_; // guarded by mu_
  int next_ = 0;                                 // guarded by mu_
  bool hungUp_ = false;                          // guarded by mu_
};

} // namespace dummy_collectives::inter_host

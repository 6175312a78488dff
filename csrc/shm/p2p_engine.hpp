#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <c10/util/intrusive_ptr.h>

#include "c10d/progress.hpp"
#include "shm/shm_transport.hpp"

namespace dummy_collectives {

class DummyWork;

// Point-to-point messages over the transport's per-pair rings. Separate from the collective
// Engine on purpose: c10d lets isend/irecv be issued in any order (both ranks may send first),
// so they must progress independently of each other and of collectives.
//
// A message is a 16-byte header {tag, length} then the payload, padded to 16 bytes. Receives
// match by (source, tag) in posting order, and messages from one source with one tag are taken
// in the order they were sent (MPI's non-overtaking rule). A message nobody has asked for stays
// in the ring; it is copied aside (the "unexpected" queue) only when a posted receive from that
// source needs to look past it.
class P2pEngine final : public Progress {
 public:
  using Finish = std::function<void()>; // runs before the Work completes (copy-back)


  P2pEngine(std::shared_ptr<ShmTransport> transport, std::chrono::milliseconds timeout);
  ~P2pEngine() override;

  void send(
      c10::intrusive_ptr<DummyWork> work,
      int dst,
      int64_t tag,
      const void* data,
      uint64_t bytes,
      Finish finish);
  // src < 0: any source (recvAnysource).
  void recv(
      c10::intrusive_ptr<DummyWork> work,
      int src,
      int64_t tag,
      void* data,
      uint64_t bytes,
      Finish finish);

  void runUntil(const DummyWork& work, std::chrono::steady_clock::time_point deadline) override;
  void expedite() override;

  void setTimeout(std::chrono::milliseconds timeout);

  // Interpreter exit: fails the pending receives (nobody can use their data any more) and
  // pushes the pending sends until they are written or fail (dead peer, deadline, abort).
  // On return no operation, and so no Work or tensor, is left.
  void finishForExit();

 private:
  struct Op {
    c10::intrusive_ptr<DummyWork> work;
    int peer; // destination (send) or source (recv; -1 for any)
    int64_t tag;
    std::byte* data;
    uint64_t bytes;
    Finish finish;
    std::chrono::steady_clock::time_point deadline;
    uint64_t progress = 0; // send: stream bytes written (header and padding included)
    bool matched = false;  // recv: an incoming message is being copied into it
    std::string error;     // recv: set when the matched message does not fit
  };
  struct Unexpected {
    int64_t tag;
    std::vector<std::byte> data;
    bool complete = false;
  };
  // The incoming stream from one source.
  struct Inbound {
    bool inMessage = false;
    int64_t tag = 0;
    uint64_t length = 0;
    uint64_t copied = 0;
    Op* receiver = nullptr;       // where the payload goes, or...
    Unexpected* aside = nullptr;  // ...copied aside; neither: discarded
    std::list<Unexpected> unexpected; // list: the stream keeps a pointer into it
  };

  // How messages name rank r (ShmTransport::label).
  int label(int r) const {
    return transport_->label(r);
  }
  bool progressLocked();
  bool pushSends(int dst);
  bool takeUnexpected();
  bool pullStream(int src);
  Op* findReceiver(int src, int64_t tag);
  bool someoneWaitsOn(int src) const;
  void finishOp(Op& op, const std::string& error);
  void checkFailures();
  bool pendingLocked() const;
  void workerLoop();

  std::shared_ptr<ShmTransport> transport_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_; // guards everything below; progress is made under it
  std::condition_variable cv_;
  std::vector<std::deque<Op>> sends_; // per destination, in posting order
  std::list<Op> recvs_;               // in posting order (stable addresses)
  std::vector<Inbound> inbound_;      // per source
  std::chrono::steady_clock::time_point nextCheck_;
  bool stopping_ = false;
  std::thread worker_;
};

} // namespace dummy_collectives

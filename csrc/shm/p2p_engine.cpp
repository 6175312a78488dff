#include "shm/p2p_engine.hpp"

#include <algorithm>
#include <cstring>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <c10/util/thread_name.h>

#include "c10d/work.hpp"

namespace dummy_collectives {
namespace {

using std::chrono::steady_clock;

constexpr uint64_t kHeader = 16;
constexpr auto kCheckPeriod = std::chrono::milliseconds(50);

uint64_t padded(uint64_t bytes) {
  return (bytes + 15) / 16 * 16;
}

// Copies between a linear buffer and a ring position (the range may wrap once).
void toRing(const P2pChannel& c, uint64_t position, const std::byte* from, uint64_t n) {
  const uint64_t at = position % c.bytes;
  const uint64_t first = std::min<uint64_t>(n, c.bytes - at);
  std::memcpy(c.ring + at, from, first);
  std::memcpy(c.ring, from + first, n - first);
}

void fromRing(const P2pChannel& c, uint64_t position, std::byte* to, uint64_t n) {
  const uint64_t at = position % c.bytes;
  const uint64_t first = std::min<uint64_t>(n, c.bytes - at);
  if (to != nullptr) {
    std::memcpy(to, c.ring + at, first);
    std::memcpy(to + first, c.ring, n - first);
  }
}

} // namespace

P2pEngine::P2pEngine(std::shared_ptr<ShmTransport> transport, std::chrono::milliseconds timeout)
    : transport_(std::move(transport)),
      rank_(transport_->rank()),
      size_(transport_->size()),
      timeout_(timeout),
      sends_(static_cast<size_t>(size_)),
      inbound_(static_cast<size_t>(size_)),
      nextCheck_(steady_clock::now() + kCheckPeriod) {
  worker_ = std::thread([this] {
    // Named so profilers, py-spy and the tests can tell it from the caller's threads.
    c10::setThreadName("dc_p2p");
    workerLoop();
  });
}

P2pEngine::~P2pEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& queue : sends_) {
      for (auto& op : queue) {
        finishOp(op, "the process group was destroyed before the send completed");
      }
      queue.clear();
    }
    for (auto& op : recvs_) {
      finishOp(op, "the process group was destroyed before the receive completed");
    }
    recvs_.clear();
  }
  cv_.notify_all();
  worker_.join();
}

void P2pEngine::setTimeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  timeout_ = timeout;
}

void P2pEngine::finishForExit() {
  std::unique_lock<std::mutex> lock(mu_);
  for (auto& in : inbound_) {
    in.receiver = nullptr; // the rest of a message being received is discarded
  }
  for (auto& op : recvs_) {
    finishOp(
        op, c10::str("dummy recv (rank ", label(rank_), "): abandoned, the process is exiting"));
  }
  recvs_.clear();
  // A peer may be waiting for these. checkFailures() ends each one that cannot complete.
  auto sending = [&] {
    return std::any_of(sends_.begin(), sends_.end(), [](const auto& q) { return !q.empty(); });
  };
  while (sending()) {
    if (!progressLocked()) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      lock.lock();
    }
  }
}

void P2pEngine::send(
    c10::intrusive_ptr<DummyWork> work,
    int dst,
    int64_t tag,
    const void* data,
    uint64_t bytes,
    Finish finish) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    sends_[dst].push_back(Op{
        std::move(work),
        dst,
        tag,
        const_cast<std::byte*>(static_cast<const std::byte*>(data)),
        bytes,
        std::move(finish),
        steady_clock::now() + timeout_});
    pushSends(dst); // eager: a message that fits completes at once
  }
  cv_.notify_one();
}

void P2pEngine::recv(
    c10::intrusive_ptr<DummyWork> work,
    int src,
    int64_t tag,
    void* data,
    uint64_t bytes,
    Finish finish) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    recvs_.push_back(Op{
        std::move(work),
        src,
        tag,
        static_cast<std::byte*>(data),
        bytes,
        std::move(finish),
        steady_clock::now() + timeout_});
  }
  cv_.notify_one();
}

void P2pEngine::finishOp(Op& op, const std::string& error) {
  std::exception_ptr failure;
  if (error.empty() && op.finish) {
    try {
      op.finish();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (!error.empty()) {
    try {
      C10_THROW_ERROR(DistBackendError, error);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  op.work->complete(failure);
}

bool P2pEngine::pushSends(int dst) {
  bool progressed = false;
  auto& queue = sends_[dst];
  const P2pChannel c = transport_->channel(rank_, dst);
  while (!queue.empty()) {
    Op& op = queue.front();
    const uint64_t written = c.written->load(std::memory_order_relaxed);
    const uint64_t space = c.bytes - (written - c.consumed->load(std::memory_order_acquire));
    const uint64_t total = kHeader + padded(op.bytes);
    uint64_t n = 0;
    if (op.progress == 0) {
      if (space < kHeader) {
        break;
      }
      const int64_t header[2] = {op.tag, static_cast<int64_t>(op.bytes)};
      toRing(c, written, reinterpret_cast<const std::byte*>(header), kHeader);
      n = kHeader;
    }
    const uint64_t payloadDone = op.progress + n - kHeader;
    const uint64_t payload = std::min(op.bytes - std::min(op.bytes, payloadDone), space - n);
    if (payload > 0) {
      toRing(c, written + n, op.data + payloadDone, payload);
      n += payload;
    }
    const uint64_t pad = total - (kHeader + op.bytes);
    if (op.progress + n == kHeader + op.bytes && space - n >= pad) {
      n += pad; // padding: nothing to write, but it must fit before it is skipped
    }
    if (n == 0) {
      break;
    }
    c.written->store(written + n, std::memory_order_release);
    op.progress += n;
    progressed = true;
    if (op.progress < total) {
      break;
    }
    finishOp(op, {});
    queue.pop_front();
  }
  return progressed;
}

// The earliest posted receive that may take message (src, tag) now. A receive that an older
// message copied aside could satisfy must take that one first (non-overtaking).
P2pEngine::Op* P2pEngine::findReceiver(int src, int64_t tag) {
  for (Op& op : recvs_) {
    if (op.matched || op.tag != tag || (op.peer >= 0 && op.peer != src)) {
      continue;
    }
    const auto& aside = inbound_[src].unexpected;
    const bool older = std::any_of(
        aside.begin(), aside.end(), [&](const Unexpected& u) { return u.tag == tag; });
    if (!older) {
      return &op;
    }
  }
  return nullptr;
}

bool P2pEngine::someoneWaitsOn(int src) const {
  return std::any_of(recvs_.begin(), recvs_.end(), [&](const Op& op) {
    return !op.matched && (op.peer < 0 || op.peer == src);
  });
}

bool P2pEngine::takeUnexpected() {
  bool progressed = false;
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    Op& op = *it;
    bool done = false;
    for (int src = 0; src < size_ && !op.matched && !done; ++src) {
      if (op.peer >= 0 && op.peer != src) {
        continue;
      }
      auto& aside = inbound_[src].unexpected;
      auto match = std::find_if(
          aside.begin(), aside.end(), [&](const Unexpected& u) { return u.tag == op.tag; });
      if (match == aside.end() || !match->complete) {
        continue; // none, or still arriving: it completes through pullStream
      }
      std::string error;
      if (match->data.size() != op.bytes) {
        error = c10::str(
            "dummy recv (rank ", label(rank_), "): the message from rank ", label(src),
            " with tag ", op.tag, " has ", match->data.size(),
            " bytes but the receive buffer has ", op.bytes);
      } else if (op.bytes > 0) {
        std::memcpy(op.data, match->data.data(), op.bytes);
      }
      aside.erase(match);
      op.work->setSourceRank(src);
      finishOp(op, error);
      done = true;
    }
    if (done) {
      it = recvs_.erase(it);
      progressed = true;
    } else {
      ++it;
    }
  }
  return progressed;
}

bool P2pEngine::pullStream(int src) {
  bool progressed = false;
  Inbound& in = inbound_[src];
  const P2pChannel c = transport_->channel(src, rank_);
  for (;;) {
    const uint64_t consumed = c.consumed->load(std::memory_order_relaxed);
    const uint64_t available = c.written->load(std::memory_order_acquire) - consumed;
    uint64_t n = 0;
    if (!in.inMessage) {
      if (available < kHeader) {
        break;
      }
      int64_t header[2];
      fromRing(c, consumed, reinterpret_cast<std::byte*>(header), kHeader);
      Op* receiver = findReceiver(src, header[0]);
      if (receiver == nullptr && !someoneWaitsOn(src)) {
        break; // leave it in the ring until somebody asks for it
      }
      in = Inbound{true, header[0], static_cast<uint64_t>(header[1]), 0, receiver, nullptr,
                   std::move(in.unexpected)};
      if (receiver != nullptr) {
        receiver->matched = true;
        receiver->work->setSourceRank(src);
        if (receiver->bytes != in.length) {
          receiver->error = c10::str(
              "dummy recv (rank ", label(rank_), "): the message from rank ", label(src),
              " with tag ", in.tag, " has ", in.length, " bytes but the receive buffer has ",
              receiver->bytes);
        }
      } else {
        in.unexpected.push_back(Unexpected{in.tag, std::vector<std::byte>(in.length)});
        in.aside = &in.unexpected.back();
      }
      n = kHeader;
    }
    const uint64_t chunk = std::min(in.length - in.copied, available - n);
    std::byte* to = nullptr;
    if (in.receiver != nullptr && in.receiver->error.empty()) {
      to = in.receiver->data + in.copied;
    } else if (in.aside != nullptr) {
      to = in.aside->data.data() + in.copied;
    }
    fromRing(c, consumed + n, to, chunk);
    in.copied += chunk;
    n += chunk;
    const bool complete = in.copied == in.length && available >= n + padded(in.length) - in.length;
    if (complete) {
      n += padded(in.length) - in.length;
    }
    if (n == 0) {
      break;
    }
    c.consumed->store(consumed + n, std::memory_order_release);
    progressed = true;
    if (!complete) {
      break;
    }
    in.inMessage = false;
    if (in.receiver != nullptr) {
      Op* done = in.receiver;
      finishOp(*done, done->error);
      recvs_.remove_if([&](const Op& op) { return &op == done; });
    } else {
      in.aside->complete = true;
    }
    in.receiver = nullptr;
    in.aside = nullptr;
  }
  return progressed;
}

void P2pEngine::checkFailures() {
  const auto now = steady_clock::now();
  auto problemWith = [&](const Op& op, const char* what) -> std::string {
    if (op.peer >= 0) {
      std::string problem = transport_->peerProblem(op.peer);
      if (!problem.empty()) {
        return c10::str("dummy ", what, " (rank ", label(rank_), ", tag ", op.tag, "): ", problem);
      }
    }
    if (now >= op.deadline) {
      return c10::str(
          "dummy ", what, " (rank ", label(rank_), ", tag ", op.tag, ") timed out after ",
          timeout_.count(), " ms: ",
          op.peer >= 0 ? c10::str("rank ", label(op.peer), " did not take part")
                       : "no message came");
    }
    return {};
  };
  for (auto& queue : sends_) {
    for (auto it = queue.begin(); it != queue.end();) {
      std::string error = problemWith(*it, c10::str("send to rank ", label(it->peer)).c_str());
      if (error.empty()) {
        ++it;
        continue;
      }
      // A half-written message would corrupt the stream: the group cannot go on.
      if (it->progress > 0) {
        transport_->abort(error);
      }
      finishOp(*it, error);
      it = queue.erase(it);
    }
  }
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    std::string error;
    if (it->matched) {
      // A message is arriving: no deadline while it moves, but its sender may die mid-way.
      const int src = it->work->sourceRank();
      std::string problem = transport_->peerProblem(src);
      if (!problem.empty()) {
        error = c10::str(
            "dummy recv from rank ", label(src), " (rank ", label(rank_), "): ", problem);
        transport_->abort(error); // the stream from src is cut mid-message
        inbound_[src].inMessage = false;
        inbound_[src].receiver = nullptr;
      }
    } else {
      error = problemWith(
          *it,
          it->peer >= 0 ? c10::str("recv from rank ", label(it->peer)).c_str() : "recvAnysource");
    }
    if (error.empty()) {
      ++it;
      continue;
    }
    finishOp(*it, error);
    it = recvs_.erase(it);
  }
}

bool P2pEngine::progressLocked() {
  bool progressed = false;
  for (int dst = 0; dst < size_; ++dst) {
    progressed |= !sends_[dst].empty() && pushSends(dst);
  }
  progressed |= takeUnexpected();
  for (int src = 0; src < size_; ++src) {
    progressed |= src != rank_ && pullStream(src);
  }
  const auto now = steady_clock::now();
  if (now >= nextCheck_) {
    nextCheck_ = now + kCheckPeriod;
    checkFailures();
  }
  return progressed;
}

bool P2pEngine::pendingLocked() const {
  return !recvs_.empty() ||
      std::any_of(sends_.begin(), sends_.end(), [](const auto& q) { return !q.empty(); });
}

void P2pEngine::runUntil(const DummyWork& work, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    return;
  }
  for (int idle = 0; !work.done();) {
    if (progressLocked()) {
      idle = 0;
      continue;
    }
    if (!pendingLocked() || std::chrono::steady_clock::now() >= deadline) {
      return;
    }
    // Nothing moved: the peer is not there yet. Poll gently; let other posters in.
    lock.unlock();
    if (++idle < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    lock.lock();
  }
}

void P2pEngine::expedite() {
  cv_.notify_one();
}

void P2pEngine::workerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  int idle = 0;
  while (!stopping_) {
    if (!pendingLocked()) {
      idle = 0;
      cv_.wait(lock);
      continue;
    }
    if (progressLocked()) {
      idle = 0;
      continue;
    }
    // Back off from 10 us to 1 ms between polls while peers are not ready.
    const auto pause = std::chrono::microseconds(std::min(1000, 10 << std::min(idle++, 7)));
    cv_.wait_for(lock, pause);
  }
}

} // namespace dummy_collectives

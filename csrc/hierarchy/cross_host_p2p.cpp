#include "hierarchy/cross_host_p2p.hpp"

#include <cstring>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/exception.h>

namespace dummy_collectives::hierarchy {

struct CrossHostP2P::Settling {
  std::mutex mu;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;

  void keep(std::initializer_list<c10::intrusive_ptr<c10d::Work>> some) {
    std::lock_guard<std::mutex> lock(mu);
    works.insert(works.end(), some.begin(), some.end());
  }
};

namespace {

// What one side of a send/recv pair tells the other before the payload moves.
struct Record {
  uint32_t magic;
  uint32_t tag;
  uint64_t seq; // among the pair's messages with this tag, this direction
  int64_t bytes;
  int32_t dtype;
  int32_t rank;
};
static_assert(sizeof(Record) == 32, "a record is 32 bytes on every rank");
constexpr uint32_t kMagic = 0x64633270; // "dc2p"

// gloo's send/recv tags are the non-negative ints, and the engine's own tags
// (TwoLevelLowering's engineTag) may be any of them. The records take the upper half, the
// senders' and the receivers' a quarter each: a tag at or above 2^29 shares its records' slot
// with the tag a multiple of 2^29 below (their records are then told apart by the tag they
// carry). Payload tags are hashed into the lower half: the payloads of different (tag, size,
// position) could meet only by a hash collision among the operations a pair has in flight.
constexpr uint32_t kSenderRecords = 0x40000000u;
constexpr uint32_t kReceiverRecords = 0x60000000u;
constexpr uint32_t kRecordTagMask = 0x1FFFFFFFu;
constexpr uint32_t kPayloadTagMask = 0x3FFFFFFFu;

uint64_t mix(uint64_t x) { // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int payloadSlot(uint32_t tag, int64_t bytes, uint64_t seq) {
  const uint64_t h = mix(tag ^ mix(static_cast<uint64_t>(bytes) ^ mix(seq)));
  return static_cast<int>(h & kPayloadTagMask);
}

int asEngineTag(uint32_t tag) {
  return static_cast<int>(tag); // below 2^31
}

at::Tensor recordOf(uint32_t tag, uint64_t seq, const at::Tensor& data, int rank) {
  Record record{kMagic, tag, seq, static_cast<int64_t>(data.nbytes()),
                static_cast<int32_t>(data.scalar_type()), rank};
  at::Tensor bytes = at::empty({static_cast<int64_t>(sizeof(Record))}, at::kByte);
  std::memcpy(bytes.data_ptr(), &record, sizeof(Record));
  return bytes;
}

std::string describeBytes(int64_t bytes, int32_t dtype) {
  const auto type = static_cast<at::ScalarType>(dtype);
  const int64_t size = static_cast<int64_t>(c10::elementSize(type));
  return c10::str(bytes, " bytes (", size > 0 ? bytes / size : 0, " ", c10::toString(type),
                  " elements)");
}

c10::intrusive_ptr<c10d::Work> engineSend(
    c10d::Backend& engine, const at::Tensor& data, int dst, int tag) {
  std::vector<at::Tensor> tensors{data};
  return engine.send(tensors, dst, tag);
}

c10::intrusive_ptr<c10d::Work> engineRecv(
    c10d::Backend& engine, const at::Tensor& data, int src, int tag) {
  std::vector<at::Tensor> tensors{data};
  return engine.recv(tensors, src, tag);
}

// One send or receive: this side's record (sent), the peer's (received) and the payload.
class CrossHostWork final : public c10d::Work {
 public:
  CrossHostWork(
      bool sending,
      int self,
      int peer,
      uint32_t tag,
      uint64_t seq,
      const at::Tensor& data,
      at::Tensor peerRecord,
      c10::intrusive_ptr<c10d::Work> ownRecordWork,
      c10::intrusive_ptr<c10d::Work> peerRecordWork,
      c10::intrusive_ptr<c10d::Work> payloadWork,
      std::shared_ptr<CrossHostP2P::Settling> settling)
      : c10d::Work(-1, sending ? c10d::OpType::SEND : c10d::OpType::RECV),
        sending_(sending),
        self_(self),
        peer_(peer),
        tag_(tag),
        seq_(seq),
        bytes_(static_cast<int64_t>(data.nbytes())),
        dtype_(static_cast<int32_t>(data.scalar_type())),
        peerRecord_(std::move(peerRecord)),
        ownRecordWork_(std::move(ownRecordWork)),
        peerRecordWork_(std::move(peerRecordWork)),
        payloadWork_(std::move(payloadWork)),
        settling_(std::move(settling)) {}

  ~CrossHostWork() override {
    if (!isCompleted()) {
      // Dropped unwaited: gloo must not see the buffers of what it still carries go.
      settle();
    }
  }

  int sourceRank() const override {
    return peer_;
  }

  bool wait(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> waiting(waitMu_);
    if (!isCompleted()) {
      std::exception_ptr error;
      try {
        run(timeout);
      } catch (...) {
        error = std::current_exception();
        settle();
      }
      finish(error);
    }
    if (auto error = exception()) {
      std::rethrow_exception(error);
    }
    return true;
  }

 private:
  std::string describe() const {
    return sending_ ? c10::str("dummy send to rank ", peer_, " on rank ", self_)
                    : c10::str("dummy recv from rank ", peer_, " on rank ", self_);
  }

  void run(std::chrono::milliseconds timeout) {
    peerRecordWork_->wait(timeout);
    Record peer;
    std::memcpy(&peer, peerRecord_.data_ptr(), sizeof(Record));
    if (peer.magic != kMagic || peer.tag != tag_ || peer.seq != seq_ || peer.rank != peer_) {
      C10_THROW_ERROR(
          DistBackendError,
          c10::str(describe(), " with tag ", tag_, ": the peer's record is of another message (",
                   "tag ", peer.tag, ", message ", peer.seq, " from rank ", peer.rank,
                   "; expected message ", seq_, "): tags ", tag_ & kRecordTagMask, " + k * 2^29 ",
                   "in flight at once between two ranks cannot be told apart across hosts"));
    }
    if (peer.bytes != bytes_) {
      const std::string mine = describeBytes(bytes_, dtype_);
      const std::string theirs = describeBytes(peer.bytes, peer.dtype);
      C10_THROW_ERROR(
          DistBackendError,
          sending_
              ? c10::str(describe(), ": the size does not match the receive: rank ", peer_,
                         " receives ", theirs, " with tag ", tag_, ", this send has ", mine,
                         "; nothing was sent (the group stays usable)")
              : c10::str(describe(), ": the size does not match the send: rank ", peer_,
                         " sends ", theirs, " with tag ", tag_, ", this receive's tensor has ",
                         mine, "; nothing was received (the group stays usable)"));
    }
    ownRecordWork_->wait(timeout);
    payloadWork_->wait(timeout);
  }

  void settle() {
    settling_->keep({ownRecordWork_, peerRecordWork_, payloadWork_});
  }

  const bool sending_;
  const int self_;
  const int peer_;
  const uint32_t tag_;
  const uint64_t seq_;
  const int64_t bytes_;
  const int32_t dtype_;
  at::Tensor peerRecord_;
  c10::intrusive_ptr<c10d::Work> ownRecordWork_;
  c10::intrusive_ptr<c10d::Work> peerRecordWork_;
  c10::intrusive_ptr<c10d::Work> payloadWork_;
  std::shared_ptr<CrossHostP2P::Settling> settling_;
  std::mutex waitMu_;
};

} // namespace

CrossHostP2P::CrossHostP2P(c10::intrusive_ptr<c10d::Backend> engine, int rank)
    : engine_(std::move(engine)), rank_(rank), settling_(std::make_shared<Settling>()) {}

c10::intrusive_ptr<c10d::Work> CrossHostP2P::send(const at::Tensor& data, int dst, uint32_t tag) {
  return post(true, data, dst, tag);
}

c10::intrusive_ptr<c10d::Work> CrossHostP2P::recv(const at::Tensor& data, int src, uint32_t tag) {
  return post(false, data, src, tag);
}

// A send and a receive post the same three messages, mirrored: this side's record goes to the
// peer's slot for its side (senders' or receivers'), the peer's record comes from the other.
c10::intrusive_ptr<c10d::Work> CrossHostP2P::post(
    bool sending, const at::Tensor& data, int peer, uint32_t tag) {
  std::lock_guard<std::mutex> lock(mu_); // the three posts of one operation stay together
  const uint64_t seq = (sending ? sent_ : received_)[{peer, tag}]++;
  const uint32_t slot = tag & kRecordTagMask;
  const uint32_t ownRecords = sending ? kSenderRecords : kReceiverRecords;
  const uint32_t peerRecords = sending ? kReceiverRecords : kSenderRecords;
  at::Tensor ours = recordOf(tag, seq, data, rank_);
  at::Tensor theirs = at::empty({static_cast<int64_t>(sizeof(Record))}, at::kByte);
  auto ownWork = engineSend(*engine_, ours, peer, asEngineTag(ownRecords | slot));
  auto peerWork = engineRecv(*engine_, theirs, peer, asEngineTag(peerRecords | slot));
  const int payloadTag = payloadSlot(tag, static_cast<int64_t>(data.nbytes()), seq);
  auto payload = sending ? engineSend(*engine_, data, peer, payloadTag)
                         : engineRecv(*engine_, data, peer, payloadTag);
  return c10::make_intrusive<CrossHostWork>(
      sending, rank_, peer, tag, seq, data, std::move(theirs), std::move(ownWork),
      std::move(peerWork), std::move(payload), settling_);
}

} // namespace dummy_collectives::hierarchy

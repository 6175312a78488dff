#pragma once

// The UCX links' messages (ucx_links.hpp): how a tag says what a message is, and the posted
// sends and receives that carry them.

#include <cstddef>
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "inter_host/ucx_links.hpp"

namespace dummy_collectives::inter_host {

// A posted send or receive. `keep` holds the memory UCX reads or writes until it is done; set
// before posting, it also tells UCX which memory that is (host or CUDA).
struct UcxLinks::Request {
  ucs_status_ptr_t handle = nullptr;
  at::Tensor keep;
  // Whether UCX is done with it (completed at once, or checked since), and how.
  bool receive = false;
  bool done = false;
  ucs_status_t status = UCS_OK;
  size_t length = 0;      // a receive's message length
  uint64_t senderTag = 0; // a receive's message's tag

  // Records a call's result: done at once (a status) or a request to check.
  void posted(ucs_status_ptr_t result, const ucp_tag_recv_info_t& immediate);
  // Whether it is done; a receive's length lands in `length`.
  bool test();
};

namespace ucx_wire {

// A tag: kind (4 bits), channel (1), sender (27), the message's number on its channel (32).
enum WireKind : uint64_t { kExchange = 1, kOneWay = 2, kDataKind = 3, kHangUp = 4, kHello = 5 };
constexpr int kKindShift = 60;
constexpr int kChannelShift = 59;
constexpr int kSenderShift = 32;
constexpr uint64_t kSequenceBits = 0xffffffffULL;
constexpr uint64_t kSenderBits = ((uint64_t{1} << 27) - 1) << kSenderShift;
constexpr uint64_t kChannelBit = uint64_t{1} << kChannelShift;
constexpr uint64_t kAnyKind = kChannelBit | kSenderBits | kSequenceBits;
constexpr uint64_t kWholeTag = ~uint64_t{0};

inline uint64_t tagOf(uint64_t kind, int channel, int sender, uint32_t sequence) {
  return (kind << kKindShift) | (uint64_t(channel) << kChannelShift) |
      (uint64_t(sender) << kSenderShift) | sequence;
}
inline uint64_t kindOf(uint64_t tag) {
  return tag >> kKindShift;
}

// How many messages a frame of `bytes` is: records one; data pieces of at most kPieceBytes.
int piecesOf(PeerLinks::Kind kind, int64_t bytes);
// Where message `k` of such a frame starts in it, and how many bytes it carries: a record is
// one message whatever its length.
struct Piece {
  int64_t at = 0;
  int64_t bytes = 0;
};
Piece pieceOf(PeerLinks::Kind kind, int64_t bytes, size_t k);

// Posts a send of `length` bytes at `data` to `ep`.
void postSend(UcxLinks::Request& request, ucp_ep_h ep, const void* data, size_t length,
              uint64_t tag);
// Takes the probed `message` (of `length` bytes) into `data`.
void postReceive(UcxLinks::Request& request, ucp_worker_h worker, void* data, size_t length,
                 ucp_tag_message_h message);
// Posts a receive of the message tagged `tag` (under `mask`) into `length` bytes at `data`.
void postExpected(UcxLinks::Request& request, ucp_worker_h worker, void* data, size_t length,
                  uint64_t tag, uint64_t mask);

} // namespace ucx_wire
} // namespace dummy_collectives::inter_host

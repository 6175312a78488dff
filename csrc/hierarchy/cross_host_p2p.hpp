#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace dummy_collectives::hierarchy {

// Send and receive between ranks on different hosts, over the engine of every rank (gloo),
// with the sizes checked before gloo sees a payload.
//
// gloo matches a send with a receive by tag alone. A message larger than the posted buffer
// aborts the receiving process (a GLOO_ENFORCE on gloo's device thread: "Received data size
// doesn't match expected size"); a smaller one completes the receive silently, the rest of the
// buffer left as it was. On one host a mismatch is an error and the group stays usable; here
// too:
//   - each send also sends a record of what it sends (its byte count and dtype), each receive
//     a record of what it expects, each on a slot of its own (tags x direction);
//   - each payload travels on a slot keyed by the tag, its byte count and its position among
//     the pair's messages with that tag (c10d matches them in order), so a send and a receive
//     of different sizes never meet in gloo, and a mismatch leaves nothing behind that a later
//     message could meet.
// All three are posted when the operation is issued: no progress depends on the peer calling
// wait() (c10d programs that isend and irecv before waiting stay free of deadlock), and a match
// costs no extra round trip. wait() reads the peer's record: on a mismatch both ranks raise,
// naming both sides. The mismatched payload's slot is never used again (the operation's
// engine work is kept until the group goes, so gloo never sees its buffers go).
class CrossHostP2P {
 public:
  // `engine`: a gloo group over every rank of the group, ranks numbered as the group's.
  CrossHostP2P(c10::intrusive_ptr<c10d::Backend> engine, int rank);

  // `data`: contiguous CPU memory, kept alive by the returned Work; `tag` >= 0 (the engine's).
  c10::intrusive_ptr<c10d::Work> send(const at::Tensor& data, int dst, uint32_t tag);
  c10::intrusive_ptr<c10d::Work> recv(const at::Tensor& data, int src, uint32_t tag);

  // What a mismatched operation left posted in the engine; lives as long as the engine.
  struct Settling;

 private:
  c10::intrusive_ptr<c10d::Work> post(bool sending, const at::Tensor& data, int peer, uint32_t tag);
  c10::intrusive_ptr<c10d::Backend> engine_;
  int rank_;
  std::mutex mu_;
  // How many sends to (peer, tag) and receives from (peer, tag) were issued.
  std::map<std::pair<int, uint32_t>, uint64_t> sent_;
  std::map<std::pair<int, uint32_t>, uint64_t> received_;
  std::shared_ptr<Settling> settling_;
};

} // namespace dummy_collectives::hierarchy

#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <dummy_collectives/hierarchy/levels.hpp>

namespace dummy_collectives::hierarchy {

// Bytes in flight, and a view of them.
using Bytes = std::vector<std::byte>;
struct ByteView {
  const std::byte* data = nullptr;
  size_t size = 0;
};

// What the collective combines on the way (small messages: their data rides along). combineHost
// turns the payloads of a host's ranks (local rank order) into what the host sends; combineAll
// turns every host's contribution (host order) into the result. Both run only on the hosts'
// leaders, once every rank concerned called the same collective. Each result must fit in
// settings.inlineBytes (the leader broadcasts it inside its host).
struct Combine {
  std::function<Bytes(const std::vector<ByteView>& localPayloads)> host;
  std::function<Bytes(const std::vector<ByteView>& hostPayloads)> all;
};

// The first step of every collective of a group that spans hosts: every rank learns that every
// rank of the group called the same collective, or every rank raises the same mismatch error
// (DistBackendError) before any data moved, and the group stays usable -- as on one host.
//
// Every exchange has one fixed size (a header plus inlineBytes), whatever the collective, so
// ranks that called different collectives still exchange the same bytes:
//   1. an all-gather of every rank's header (and payload) inside each host: each host knows
//      whether its ranks agree;
//   2. an all-gather of each host's header and combined payload among the hosts' leaders (their
//      local rank 0): every leader knows every host's verdict;
//   3. a broadcast inside each host from its leader: the verdict and the result.
// One rank per host crosses hosts: a small collective costs one cross-host exchange between
// leaders, not one per rank (the other ranks wait in shared memory, which costs no network and,
// on a shared machine, no CPU).
// Returns the combined result (empty without `combine`).
Bytes agree(
    const Levels& levels,
    const OpContext& ctx,
    ByteView payload = {},
    const Combine* combine = nullptr);

// The agreement in two halves, so that a large collective's first in-host stage overlaps the
// leaders' exchange: the constructor runs step 1 and issues step 2, finish() completes steps 2
// and 3 (and raises a mismatch). Between the two the caller may issue in-host collectives only
// (every rank of the host the same ones, and only where hostAgrees()), never cross-host ones.
class Agreement {
 public:
  Agreement(
      const Levels& levels,
      const OpContext& ctx,
      ByteView payload = {},
      const Combine* combine = nullptr);
  // Whether this host's ranks all called the same collective (known after step 1).
  bool hostAgrees() const {
    return hostAgrees_;
  }
  Bytes finish();

  // What every record starts with (a fixed-size record: agreement.cpp).
  struct Header {
    OpDescriptor op;
    int32_t verdict = 0;       // agreement.cpp's Verdict
    int32_t writer = -1;       // group rank
    uint64_t payloadBytes = 0;
    int64_t sentAtUs = 0;      // wall clock (microseconds since the epoch) when it crossed hosts
  };

 private:

  const Levels& levels_;
  const OpContext& ctx_;
  const Combine* combine_;
  Header mine_;
  at::Tensor hostRecords_;
  bool hostAgrees_ = true;
  c10::intrusive_ptr<c10d::Work> exchange_; // the leaders' exchange (leaders only)
  at::Tensor leaderRecords_;
  int64_t sentAtUs_ = 0;
  bool finished_ = false;
};

} // namespace dummy_collectives::hierarchy

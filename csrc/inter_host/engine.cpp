// The engine between hosts: its byte-level operations, on the links or through the engine
// (waiting for them, and failing well: engine_wait.cpp).
#include "inter_host/engine.hpp"

#include <cstring>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

namespace dummy_collectives::inter_host {

at::Tensor bytesOf(const at::Tensor& tensor) {
  return tensor.reshape(-1).view(at::kByte);
}

at::Tensor copiesOf(const at::Tensor& bytes, int count) {
  // A plain memcpy, not Tensor::repeat: ATen parallelizes a large copy with OpenMP, whose
  // threads then spin for a while after it; on a host whose cores the ranks share (torchrun
  // leaves OMP_NUM_THREADS unset for one rank per host) the spinning starves gloo's network
  // thread (docs/benchmarks.md, "Three hosts of one rank: pieces on the links").
  const int64_t n = bytes.numel();
  at::Tensor copies = at::empty({n * count}, bytes.options());
  auto* out = static_cast<std::byte*>(copies.data_ptr());
  const auto* in = static_cast<const std::byte*>(bytes.data_ptr());
  for (int i = 0; i < count; ++i) {
    std::memcpy(out + i * n, in, static_cast<size_t>(n));
  }
  return copies;
}

void copyUnlessSame(const at::Tensor& to, const at::Tensor& from) {
  const size_t bytes = static_cast<size_t>(from.numel()) * from.element_size();
  if (bytes == 0 || to.data_ptr() == from.data_ptr()) {
    return;
  }
  if (to.is_cpu() && from.is_cpu()) {
    std::memcpy(to.data_ptr(), from.data_ptr(), bytes);
  } else {
    to.copy_(from); // on the current stream
  }
}

InterHostEngine::InterHostEngine(
    c10::intrusive_ptr<c10d::Backend> backend,
    std::vector<int> members,
    const Topology& topology,
    GroupHealth& health)
    : backend_(std::move(backend)),
      members_(std::move(members)),
      topology_(topology),
      health_(health) {
  TORCH_CHECK(
      static_cast<int>(members_.size()) == backend_->getSize(),
      "dummy_collectives: a cross-host engine of ", backend_->getSize(), " ranks for ",
      members_.size(), " members");
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::allgather(
    at::Tensor& out, at::Tensor& in, bool alone) const {
  const int64_t n = in.numel();
  if (onLinks(alone)) {
    // `in` itself to every other member (nothing copied to send), into its part of theirs.
    auto work = toEveryOtherOnLinks(PeerLinks::Kind::kData, in,
                                    [&](int m) { return out.narrow(0, m * n, n); });
    copyUnlessSame(out.narrow(0, rank() * n, n), in);
    return work;
  }
  if (size() == 2) {
    // Two members swap: the other's input lands straight in its part of `out` (one step, as in
    // gloo's ring), ours is copied here, and nothing is copied to send.
    const int other = 1 - rank();
    std::vector<int64_t> splits(2, 0);
    splits[other] = n;
    at::Tensor theirs = out.narrow(0, other * n, n);
    auto work = alltoall(theirs, in, splits, splits);
    copyUnlessSame(out.narrow(0, rank() * n, n), in);
    return work;
  }
  // gloo answers an all-to-all of our bytes to every member faster than its all-gather of the
  // same small records (docs/benchmarks.md, "The cross-host exchange"): send everyone a copy.
  // The Work keeps the copies alive.
  at::Tensor copies = copiesOf(in, size());
  return alltoall(out, copies);
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::allgatherBlocks(
    at::Tensor& out, const std::vector<int64_t>& offsets, bool alone) const {
  TORCH_CHECK(static_cast<int>(offsets.size()) == size() + 1 && offsets.back() == out.numel(),
              "dummy_collectives: all-gather of blocks: ", offsets.size(), " offsets for ",
              size(), " members and ", out.numel(), " bytes");
  auto blockOf = [&](int m) { return out.narrow(0, offsets[m], offsets[m + 1] - offsets[m]); };
  at::Tensor mine = blockOf(rank());
  if (onLinks(alone)) {
    return toEveryOtherOnLinks(PeerLinks::Kind::kData, mine, blockOf);
  }
  std::vector<int64_t> outSplits(size());
  for (int m = 0; m < size(); ++m) {
    outSplits[m] = offsets[m + 1] - offsets[m];
  }
  // The Work keeps the copies alive.
  at::Tensor copies = copiesOf(mine, size());
  std::vector<int64_t> inSplits(size(), mine.numel());
  return backend_->alltoall_base(out, copies, outSplits, inSplits);
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::alltoall(
    at::Tensor& out, at::Tensor& in, bool alone) const {
  std::vector<int64_t> none;
  if (onLinks(alone)) {
    return alltoallOnLinks(out, in, none, none);
  }
  return backend_->alltoall_base(out, in, none, none);
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::alltoall(
    at::Tensor& out,
    at::Tensor& in,
    std::vector<int64_t> outSplits,
    std::vector<int64_t> inSplits,
    bool alone) const {
  if (onLinks(alone)) {
    return alltoallOnLinks(out, in, outSplits, inSplits);
  }
  return backend_->alltoall_base(out, in, outSplits, inSplits);
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::alltoallOnLinks(
    at::Tensor& out,
    at::Tensor& in,
    const std::vector<int64_t>& outSplits,
    const std::vector<int64_t>& inSplits) const {
  const int n = size();
  auto splitsOf = [n](const std::vector<int64_t>& splits, const at::Tensor& t) {
    return splits.empty() ? std::vector<int64_t>(n, t.numel() / n) : splits;
  };
  const std::vector<int64_t> outs = splitsOf(outSplits, out);
  const std::vector<int64_t> ins = splitsOf(inSplits, in);
  std::vector<PeerLinks::Send> sends;
  std::vector<PeerLinks::Receive> receives;
  int64_t outAt = 0;
  int64_t inAt = 0;
  for (int m = 0; m < n; ++m) {
    // Sizes were agreed: a part of no bytes is neither sent nor expected, on both sides.
    if (m == rank()) {
      TORCH_CHECK(outs[m] == ins[m], "dummy_collectives: an all-to-all keeps ", ins[m],
                  " bytes of its own in ", outs[m]);
      std::memcpy(static_cast<std::byte*>(out.data_ptr()) + outAt,
                  static_cast<const std::byte*>(in.data_ptr()) + inAt,
                  static_cast<size_t>(ins[m]));
    } else {
      if (ins[m] > 0) {
        sends.push_back({m, in.narrow(0, inAt, ins[m])});
      }
      if (outs[m] > 0) {
        receives.push_back({m, out.narrow(0, outAt, outs[m])});
      }
    }
    outAt += outs[m];
    inAt += ins[m];
  }
  return links_->start(PeerLinks::Kind::kData, std::move(sends), std::move(receives));
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::toEveryOtherOnLinks(
    PeerLinks::Kind kind,
    const at::Tensor& bytes,
    const std::function<at::Tensor(int)>& slotOf) const {
  return piecesOnLinks(
      [&](int) { return bytes; },
      [&](int m) { return bytes.numel() > 0 ? slotOf(m) : at::Tensor(); }, kind);
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::piecesOnLinks(
    const std::function<at::Tensor(int)>& sendTo,
    const std::function<at::Tensor(int)>& receiveFrom,
    PeerLinks::Kind kind) const {
  TORCH_CHECK(links_, "dummy_collectives: pieces on the links need the links between hosts");
  std::vector<PeerLinks::Send> sends;
  std::vector<PeerLinks::Receive> receives;
  for (int m = 0; m < size(); ++m) {
    if (m == rank()) {
      continue;
    }
    if (at::Tensor out = sendTo(m); out.defined() && out.numel() > 0) {
      sends.push_back({m, std::move(out)});
    }
    if (at::Tensor in = receiveFrom(m); in.defined() && in.numel() > 0) {
      receives.push_back({m, std::move(in)});
    }
  }
  return links_->start(kind, std::move(sends), std::move(receives));
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::fromRootOnLinks(
    at::Tensor& bytes, int root, PeerLinks::Kind kind) const {
  std::vector<PeerLinks::Send> sends;
  std::vector<PeerLinks::Receive> receives;
  if (rank() == root) {
    for (int m = 0; m < size(); ++m) {
      if (m != root) {
        sends.push_back({m, bytes});
      }
    }
  } else {
    receives.push_back({root, bytes});
  }
  return links_->start(kind, std::move(sends), std::move(receives));
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::exchangeRecords(
    at::Tensor& out, const at::Tensor& in, int64_t slotBytes) const {
  const int64_t sent = in.numel();
  TORCH_CHECK(
      sent <= slotBytes && out.numel() == recordsBytes(sent, slotBytes),
      "dummy_collectives: a record of ", sent, " bytes for slots of ", slotBytes);
  if (links_) {
    // The same bytes to every member (nothing copied), a slot from each.
    auto work = toEveryOtherOnLinks(PeerLinks::Kind::kExchange, in, [&](int m) {
      return out.narrow(0, recordOffset(m, slotBytes), slotBytes);
    });
    out.narrow(0, recordOffset(rank(), slotBytes), sent).copy_(in);
    return work;
  }
  // Nothing to or from itself (gloo would copy it): the own record is copied after the slots.
  std::vector<int64_t> outSplits(size(), slotBytes);
  std::vector<int64_t> inSplits(size(), sent);
  outSplits[rank()] = 0;
  inSplits[rank()] = 0;
  at::Tensor slots = out.narrow(0, 0, (size() - 1) * slotBytes);
  // A copy for each other member (the Work keeps them alive); two members send `in` itself.
  at::Tensor copies = size() == 2 ? in : copiesOf(in, size() - 1);
  auto work = alltoall(slots, copies, std::move(outSplits), std::move(inSplits));
  out.narrow(0, recordOffset(rank(), slotBytes), sent).copy_(in);
  return work;
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::broadcast(
    at::Tensor& data, int root, bool alone) const {
  if (onLinks(alone)) {
    at::Tensor bytes = bytesOf(data);
    return fromRootOnLinks(bytes, root, PeerLinks::Kind::kData);
  }
  std::vector<at::Tensor> tensors{data};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  return backend_->broadcast(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::relayOnLinks(
    int from, int to, const at::Tensor& bytes) const {
  TORCH_CHECK(links_, "dummy_collectives: a relay needs the links between hosts");
  std::vector<PeerLinks::Send> sends;
  std::vector<PeerLinks::Receive> receives;
  if (from >= 0) {
    receives.push_back({from, bytes});
  }
  if (to >= 0) {
    sends.push_back({to, bytes, from >= 0 ? 0 : -1});
  }
  return links_->start(PeerLinks::Kind::kData, std::move(sends), std::move(receives));
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::announce(at::Tensor& record, int root) const {
  if (!links_) {
    return broadcast(record, root);
  }
  return fromRootOnLinks(record, root, PeerLinks::Kind::kOneWay);
}

int InterHostEngine::otherFormFrom(const c10::intrusive_ptr<c10d::Work>& work) {
  const auto* onLinks = dynamic_cast<const PeerLinks::Operation*>(work.get());
  return onLinks != nullptr ? onLinks->otherKindFrom() : -1;
}

std::vector<int> InterHostEngine::endedAfterRecord(const c10::intrusive_ptr<c10d::Work>& work) const {
  const auto* onLinks = dynamic_cast<const PeerLinks::Operation*>(work.get());
  std::vector<int> ranks;
  if (onLinks != nullptr) {
    for (const int m : onLinks->endedAfterFrame()) {
      ranks.push_back(members_[m]);
    }
  }
  return ranks;
}

} // namespace dummy_collectives::inter_host

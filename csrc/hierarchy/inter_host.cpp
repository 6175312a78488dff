#include "hierarchy/inter_host.hpp"

#include <condition_variable>
#include <cstring>
#include <mutex>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/StringUtil.h>

#include "hierarchy/agreement.hpp"

namespace dummy_collectives::hierarchy {
namespace {

using Clock = std::chrono::steady_clock;

// How often a cross-host wait looks whether the group failed meanwhile (GroupHealth: a flag,
// and the host level's shared one, set by the host's store watcher).
constexpr std::chrono::milliseconds kHealthPeriod{20};
// A wait longer than kStorePollAfter also asks the store for a published failure, every
// kStorePollPeriod: the host's leader, which watches it for the host, may be the rank that died.
constexpr std::chrono::milliseconds kStorePollAfter{1000};
constexpr std::chrono::milliseconds kStorePollPeriod{250};
// After the engine fails (a peer's connection closed), or past the deadline, how long to wait
// for the reason a rank that saw the cause publishes: the failed rank's host peers see a dead
// process within their liveness period, and a rank whose host peer never came names it.
constexpr std::chrono::milliseconds kReasonPatience = OpContext::kReasonPatience;
// A wait longer than this on a group whose collectives may begin with different engine calls
// compares calls in the store (compareStuckCalls), then again every period: how long ranks
// that called different collectives take to raise, at two store requests per peer a period.
constexpr std::chrono::milliseconds kCompareCallsAfter{100};
constexpr std::chrono::milliseconds kCompareCallsPeriod{100};

struct Completion {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

} // namespace

at::Tensor bytesOf(const at::Tensor& tensor) {
  return tensor.reshape(-1).view(at::kByte);
}

at::Tensor copiesOf(const at::Tensor& bytes, int count) {
  // A plain memcpy, not Tensor::repeat: ATen parallelizes a large copy with OpenMP, whose
  // threads then spin for a while after it; on a host whose cores the ranks share (torchrun
  // leaves OMP_NUM_THREADS unset for one rank per host) the spinning starved gloo's network
  // thread: a 3-host allreduce of 64 KiB took 20 ms instead of 1.5.
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
  if (bytes > 0 && to.data_ptr() != from.data_ptr()) {
    std::memcpy(to.data_ptr(), from.data_ptr(), bytes);
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
    auto work = toEveryOtherOnLinks(LeaderLinks::Kind::kData, in,
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
    return toEveryOtherOnLinks(LeaderLinks::Kind::kData, mine, blockOf);
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
  std::vector<LeaderLinks::Send> sends;
  std::vector<LeaderLinks::Receive> receives;
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
  return links_->start(LeaderLinks::Kind::kData, std::move(sends), std::move(receives));
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::toEveryOtherOnLinks(
    LeaderLinks::Kind kind,
    const at::Tensor& bytes,
    const std::function<at::Tensor(int)>& slotOf) const {
  return piecesOnLinks(
      [&](int) { return bytes; },
      [&](int m) { return bytes.numel() > 0 ? slotOf(m) : at::Tensor(); }, kind);
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::piecesOnLinks(
    const std::function<at::Tensor(int)>& sendTo,
    const std::function<at::Tensor(int)>& receiveFrom,
    LeaderLinks::Kind kind) const {
  TORCH_CHECK(links_, "dummy_collectives: pieces on the links need the links between hosts");
  std::vector<LeaderLinks::Send> sends;
  std::vector<LeaderLinks::Receive> receives;
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
    at::Tensor& bytes, int root, LeaderLinks::Kind kind) const {
  std::vector<LeaderLinks::Send> sends;
  std::vector<LeaderLinks::Receive> receives;
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
    auto work = toEveryOtherOnLinks(LeaderLinks::Kind::kExchange, in, [&](int m) {
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
    return fromRootOnLinks(bytes, root, LeaderLinks::Kind::kData);
  }
  std::vector<at::Tensor> tensors{data};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  return backend_->broadcast(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::relayOnLinks(
    int from, int to, const at::Tensor& bytes) const {
  TORCH_CHECK(links_, "dummy_collectives: a relay needs the links between hosts");
  std::vector<LeaderLinks::Send> sends;
  std::vector<LeaderLinks::Receive> receives;
  if (from >= 0) {
    receives.push_back({from, bytes});
  }
  if (to >= 0) {
    sends.push_back({to, bytes, from >= 0 ? 0 : -1});
  }
  return links_->start(LeaderLinks::Kind::kData, std::move(sends), std::move(receives));
}

c10::intrusive_ptr<c10d::Work> InterHostEngine::announce(at::Tensor& record, int root) const {
  if (!links_) {
    return broadcast(record, root);
  }
  return fromRootOnLinks(record, root, LeaderLinks::Kind::kOneWay);
}

int InterHostEngine::otherFormFrom(const c10::intrusive_ptr<c10d::Work>& work) {
  const auto* onLinks = dynamic_cast<const LeaderLinks::Operation*>(work.get());
  return onLinks != nullptr ? onLinks->otherKindFrom() : -1;
}

void InterHostEngine::wait(const c10::intrusive_ptr<c10d::Work>& work, const OpContext& ctx) const {
  ctx.step();
  // Only a collective's first engine call can meet another collective's: later ones follow a
  // check every rank passed.
  const bool firstCall = ctx.op.seq != lastWaitedSeq_;
  lastWaitedSeq_ = ctx.op.seq;
  if (auto* onLinks = dynamic_cast<LeaderLinks::Operation*>(work.get())) {
    // This thread moves the bytes itself: it wakes when they arrive, with no hand-off.
    std::string lost;
    watch(ctx, firstCall, [&](Clock::time_point until) {
      try {
        return onLinks->progressUntil(until);
      } catch (const LinkLost& e) {
        lost = e.what();
        return true;
      }
    });
    if (!lost.empty()) {
      failEngine(ctx, lost);
    }
    if (const auto& wrong = onLinks->wrongSize()) {
      health_.fail(ctx.describe(),
                   c10::str(health_.self(), " received ", wrong->bytes, " bytes from rank ",
                            members_[wrong->member], " where it expected ", wrong->expected,
                            " (a fault of dummy_collectives: the ranks had agreed on the call)"));
    }
    return;
  }
  if (!work->isCompleted()) {
    auto completion = std::make_shared<Completion>();
    work->getFuture()->addCallback([completion](c10::ivalue::Future&) {
      {
        std::lock_guard<std::mutex> lock(completion->mu);
        completion->done = true;
      }
      completion->cv.notify_all();
    });
    watch(ctx, firstCall, [&](Clock::time_point until) {
      std::unique_lock<std::mutex> lock(completion->mu);
      return completion->cv.wait_until(lock, until, [&] { return completion->done; });
    });
  }
  try {
    work->wait();
  } catch (const std::exception& e) {
    failEngine(ctx, errorText(e));
  }
}

template <typename BlockUntil>
void InterHostEngine::watch(const OpContext& ctx, bool firstCall, BlockUntil&& blockUntil) const {
  const auto start = Clock::now();
  auto nextCheck = start + kHealthPeriod;
  auto nextStorePoll = start;
  auto nextCallComparison = start + kCompareCallsAfter;
  bool told = false;
  while (!blockUntil(std::min(nextCheck, ctx.deadline))) {
    const auto now = Clock::now();
    if (now >= ctx.deadline) {
      // This host's ranks have all come (the collective's in-host stage comes first).
      std::vector<int> others;
      for (const int member : members_) {
        if (topology_.hostOf(member) != topology_.host()) {
          others.push_back(member);
        }
      }
      // A rank of another host that waits in shared memory for the rank that never came
      // times out about now too, and names it: prefer its reason to "waited for a host".
      if (auto reason = health_.awaitPublished(kReasonPatience)) {
        health_.fail(ctx.describe(), *reason);
      }
      // The reason goes to every rank: it names who waited (a rank quoting it would
      // otherwise seem to have waited for itself), and the time since the collective began,
      // which the deadline counts from (not since this wait began: that quoted less than the
      // timeout).
      const auto began = ctx.deadline - ctx.timeout;
      health_.fail(
          ctx.describe(),
          c10::str(
              health_.self(), " timed out after ",
              std::chrono::duration_cast<std::chrono::milliseconds>(now - began).count(),
              " ms (its timeout is ", ctx.timeout.count(), " ms) waiting for ranks ",
              c10::Join(", ", others),
              " to arrive (on other hosts); a rank that never calls it, or calls collectives "
              "in a different order, causes this"));
    }
    if (now >= nextCheck) {
      const std::string reason = health_.brokenReason();
      if (!reason.empty()) {
        health_.fail(ctx.describe(), reason);
      }
      // This host's leader watches the store for the others; if it died, nobody does. A
      // wait that lasts asks the store itself (a round trip every kStorePollPeriod).
      if (now - start >= kStorePollAfter && now >= nextStorePoll &&
          !health_.storeUnreachable()) {
        if (auto published = health_.published(/*unreachableIsFailure=*/false)) {
          health_.fail(ctx.describe(), *published);
        }
        nextStorePoll = now + kStorePollPeriod;
      }
      if (compareStuckCalls_ && firstCall && now >= nextCallComparison) {
        if (auto mismatch = stuckCallMismatch(ctx, told)) {
          health_.fail(ctx.describe(), *mismatch);
        }
        nextCallComparison = Clock::now() + kCompareCallsPeriod;
      }
      nextCheck = Clock::now() + kHealthPeriod;
    }
  }
}

void InterHostEngine::failEngine(const OpContext& ctx, const std::string& error) const {
  // A peer's connection closed or the engine gave up. If the rank that failed is dead, its
  // host peers see that within their liveness period and publish it, naming it: prefer that.
  // A rank alone on its host has nobody to tell (a rank that failed on its own published
  // before it left): then only what is published already counts.
  int host = -1;
  const std::vector<int> suspects = suspectsOf(error, host);
  const bool aloneOnItsHost = suspects.size() == 1 &&
      topology_.ranksOn(topology_.hostOf(suspects[0])).size() == 1;
  auto reason = aloneOnItsHost ? health_.published(/*unreachableIsFailure=*/false)
                               : health_.awaitPublished(kReasonPatience);
  health_.fail(ctx.describe(), reason ? *reason : describeFailure(error));
}

std::optional<std::string> InterHostEngine::stuckCallMismatch(
    const OpContext& ctx, bool& told) const {
  if (!told) {
    health_.tellCall(topology_.rank(), ctx.op);
    told = true;
  }
  std::vector<std::pair<int, OpDescriptor>> calls{{topology_.rank(), ctx.op}};
  for (const int member : members_) {
    if (member == topology_.rank()) {
      continue;
    }
    // A peer's call of another collective of the sequence is an old one (it waited long then)
    // or one it has not reached: only the same collective of the sequence tells a mismatch.
    auto op = health_.toldCall(member);
    if (op && op->seq == ctx.op.seq && *op != ctx.op) {
      calls.emplace_back(member, *op);
    }
  }
  if (calls.size() == 1) {
    return std::nullopt;
  }
  return differentCalls(topology_, std::move(calls));
}

namespace {

// gloo names the peer of a failed connection by its address: "Connection closed by peer
// [10.0.0.2]:4567. This is typically caused by ...". The address, or "" (source locations,
// "[pair.cc:553]", are gone by now: errorText).
std::string peerAddress(const std::string& engineError) {
  size_t at = 0;
  while ((at = engineError.find('[', at)) != std::string::npos) {
    const size_t close = engineError.find(']', at);
    if (close == std::string::npos) {
      break;
    }
    if (close + 1 < engineError.size() && engineError[close + 1] == ':') {
      return engineError.substr(at + 1, close - at - 1);
    }
    at = close;
  }
  return {};
}

} // namespace

std::vector<int> InterHostEngine::suspectsOf(const std::string& engineError, int& host) const {
  std::vector<int> others;
  for (const int member : members_) {
    if (member != topology_.rank()) {
      others.push_back(member);
    }
  }
  // Members whose process this rank can see to have ended (ranks of this machine on hosts of
  // their own: simulated hosts); else the members on the host at gloo's address, when that
  // names one host.
  std::vector<int> suspects;
  for (const int member : others) {
    if (topology_.processEnded(member)) {
      suspects.push_back(member);
    }
  }
  host = topology_.hostAt(peerAddress(engineError));
  if (suspects.empty() && host >= 0 && host != topology_.host()) {
    for (const int member : others) {
      if (topology_.hostOf(member) == host) {
        suspects.push_back(member);
      }
    }
  }
  return suspects;
}

std::string InterHostEngine::describeFailure(const std::string& engineError) const {
  int host = -1;
  const std::vector<int> suspects = suspectsOf(engineError, host);
  // Survivors name the ranks they lost to shrink_group (dead_ranks()): a host whose
  // connection closed is lost whether its process or its network died.
  health_.noteLost(suspects);
  std::string peer = "a rank on another host";
  if (suspects.size() == 1) {
    peer = topology_.describeRank(suspects[0]);
    if (topology_.processEnded(suspects[0])) {
      peer += c10::str(", whose process (pid ", topology_.pidOf(suspects[0]), ") has ended");
    }
  } else if (!suspects.empty() && host >= 0) {
    peer = c10::str("a rank of ", topology_.describeHost(host));
  } else if (!suspects.empty()) {
    std::vector<std::string> named;
    for (const int member : suspects) {
      named.push_back(topology_.describeRank(member));
    }
    peer = c10::str("one of ", c10::Join(", ", named), ", whose processes have ended");
  }
  // gloo's first sentence ("Connection closed by peer [10.0.0.2]:4567"): the rest is advice.
  const std::string what = engineError.substr(0, engineError.find(". "));
  return c10::str(
      "lost the cross-host connection to ", peer,
      " (its process or host died, or the network failed; nobody reported a cause): ", what);
}

} // namespace dummy_collectives::hierarchy

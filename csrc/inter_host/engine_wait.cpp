// The cross-host failure model: how a rank waits for an operation of the engine between hosts
// (InterHostEngine::wait), and what it says when the wait ends without it.
#include "inter_host/engine.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include <ATen/core/ivalue.h>
#include <c10/util/StringUtil.h>

namespace dummy_collectives::inter_host {
namespace {

using Clock = std::chrono::steady_clock;

// How often a cross-host wait looks whether the group failed meanwhile (GroupHealth: a flag,
// and the host level's shared one, set by the host's store watcher).
constexpr std::chrono::milliseconds kHealthPeriod{20};
// A wait longer than kStorePollAfter also asks the store for a published failure, every
// kStorePollPeriod (without blocking: GroupHealth::Poll): the host's leader, which watches it
// for the host, may be the rank that died.
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

void InterHostEngine::wait(const c10::intrusive_ptr<c10d::Work>& work, const OpContext& ctx) const {
  ctx.step();
  // Only a collective's first engine call can meet another collective's: later ones follow a
  // check every rank passed.
  const bool firstCall = ctx.op.seq != lastWaitedSeq_;
  lastWaitedSeq_ = ctx.op.seq;
  if (auto* onLinks = dynamic_cast<PeerLinks::Operation*>(work.get())) {
    // This thread moves the bytes itself: it wakes when they arrive, with no hand-off.
    std::optional<LinkLost> lost;
    watch(
        ctx, firstCall,
        [&](Clock::time_point until) {
          try {
            return onLinks->progressUntil(until);
          } catch (const LinkLost& e) {
            lost = e;
            return true;
          }
        },
        [&] { return groupRanksOf(onLinks->awaited()); });
    if (lost) {
      failEngine(ctx, lost->what(), lost->member() >= 0 ? members_[lost->member()] : -1);
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
    watch(
        ctx, firstCall,
        [&](Clock::time_point until) {
          std::unique_lock<std::mutex> lock(completion->mu);
          return completion->cv.wait_until(lock, until, [&] { return completion->done; });
        },
        [&] { return othersThanThisHost(); });
  }
  try {
    work->wait();
  } catch (const std::exception& e) {
    failEngine(ctx, errorText(e), -1);
  }
}

std::vector<int> InterHostEngine::groupRanksOf(const std::vector<int>& engineRanks) const {
  std::vector<int> ranks;
  for (const int m : engineRanks) {
    ranks.push_back(members_[m]);
  }
  return ranks;
}

std::vector<int> InterHostEngine::othersThanThisHost() const {
  std::vector<int> others;
  for (const int member : members_) {
    if (topology_.hostOf(member) != topology_.host()) {
      others.push_back(member);
    }
  }
  return others;
}

template <typename BlockUntil, typename Awaited>
void InterHostEngine::watch(
    const OpContext& ctx, bool firstCall, BlockUntil&& blockUntil, Awaited&& awaited) const {
  const auto start = Clock::now();
  auto nextCheck = start + kHealthPeriod;
  auto nextStorePoll = start + kStorePollAfter;
  auto nextCallComparison = start + kCompareCallsAfter;
  // The store is asked without blocking: a question is posted, and its answer read at a later
  // check, so a store out of reach never holds this wait past its deadline.
  GroupHealth::Poll poll(health_);
  std::optional<StoreRequests::Reply<GroupHealth::ToldCalls>> calls;
  bool told = false;
  while (!blockUntil(std::min(nextCheck, ctx.deadline))) {
    const auto now = Clock::now();
    if (now >= ctx.deadline) {
      timedOut(ctx, firstCall, awaited());
    }
    if (now < nextCheck) {
      continue;
    }
    const std::string reason = health_.brokenReason();
    if (!reason.empty()) {
      health_.fail(ctx.describe(), reason);
    }
    // This host's leader watches the store for the others; if it died, nobody does. A wait
    // that lasts asks the store itself (a question every kStorePollPeriod).
    if (auto heard = poll.heard(); heard && heard->what == GroupHealth::Heard::What::kReason) {
      health_.fail(ctx.describe(), heard->reason);
    }
    if (now >= nextStorePoll) {
      poll.ask();
      nextStorePoll = now + kStorePollPeriod;
    }
    if (compareStuckCalls_ && firstCall && now >= nextCallComparison) {
      if (!told) {
        health_.tellCall(topology_.rank(), ctx.op);
        told = true;
      }
      if (calls && calls->state() == StoreRequests::State::kAnswered) {
        if (auto mismatch = stuckCallMismatch(ctx, calls->value())) {
          health_.fail(ctx.describe(), *mismatch);
        }
      }
      if (!calls || calls->state() != StoreRequests::State::kWaiting) {
        calls = health_.toldCalls(othersThan(topology_.rank()));
      }
      nextCallComparison = now + kCompareCallsPeriod;
    }
    nextCheck = Clock::now() + kHealthPeriod;
  }
}

void InterHostEngine::timedOut(
    const OpContext& ctx, bool firstCall, const std::vector<int>& awaited) const {
  // A rank of another host that waits in shared memory for a rank that never came times out
  // about now too, and names it: prefer its reason to "heard nothing".
  const GroupHealth::Heard heard = health_.awaitPublished(Clock::now() + kReasonPatience);
  if (heard.what == GroupHealth::Heard::What::kReason) {
    health_.fail(ctx.describe(), heard.reason);
  }
  // The reason goes to every rank: it names who waited (a rank quoting it would otherwise seem
  // to have waited for itself), and the time since the collective began, which the deadline
  // counts from (the time since this wait began would quote less than the timeout).
  const auto began = ctx.deadline - ctx.timeout;
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began).count();
  const std::string why = firstCall
      ? "in the collective's first step across hosts: those ranks never called it (or "
        "called collectives in a different order), or the network between the hosts failed"
      : "after every rank had called it: the network between the hosts failed, or that host "
        "stopped";
  std::string store;
  switch (heard.what) {
    case GroupHealth::Heard::What::kNothing:
      store = "the group's store answered, and no rank had reported a failure there";
      break;
    case GroupHealth::Heard::What::kSilent:
      store = "the group's store did not answer either, so this host may be cut off from the "
              "others";
      break;
    case GroupHealth::Heard::What::kGone:
      store = c10::str("the group's store could not be reached (", heard.reason, ")");
      break;
    case GroupHealth::Heard::What::kReason:
      break;
  }
  health_.fail(ctx.describe(),
               c10::str(health_.self(), " heard nothing from ", describeRanks(awaited), " for ",
                        waited, " ms (its timeout is ", ctx.timeout.count(), " ms) ", why, "; ",
                        store),
               /*sayIfUntold=*/heard.what == GroupHealth::Heard::What::kNothing);
}

std::vector<int> InterHostEngine::othersThan(int rank) const {
  std::vector<int> others;
  for (const int member : members_) {
    if (member != rank) {
      others.push_back(member);
    }
  }
  return others;
}

std::string InterHostEngine::describeRanks(const std::vector<int>& ranks) const {
  // By host, in host order: "rank 2 (on host h1 (10.0.0.2), ranks 2, 3)".
  std::vector<std::string> parts;
  for (int h = 0; h < topology_.hostCount(); ++h) {
    std::vector<int> here;
    for (const int r : ranks) {
      if (topology_.hostOf(r) == h) {
        here.push_back(r);
      }
    }
    if (!here.empty()) {
      parts.push_back(c10::str(here.size() > 1 ? "ranks " : "rank ", c10::Join(", ", here),
                               " (on ", topology_.describeHost(h), ")"));
    }
  }
  return parts.empty() ? std::string("the other hosts") : c10::Join(" and ", parts);
}

void InterHostEngine::failEngine(
    const OpContext& ctx, const std::string& error, int lostRank) const {
  // A peer's connection closed or the engine gave up. If the rank that failed is dead, its
  // host peers see that within their liveness period and publish it, naming it: prefer that.
  // A rank alone on its host has nobody to tell (a rank that failed on its own published
  // before it left): then only what is published already counts.
  int host = -1;
  const std::vector<int> suspects =
      lostRank >= 0 ? std::vector<int>{lostRank} : suspectsOf(error, host);
  const bool aloneOnItsHost = suspects.size() == 1 &&
      topology_.ranksOn(topology_.hostOf(suspects[0])).size() == 1;
  const GroupHealth::Heard heard = aloneOnItsHost
      ? health_.published()
      : health_.awaitPublished(Clock::now() + kReasonPatience);
  health_.fail(ctx.describe(), heard.what == GroupHealth::Heard::What::kReason
                                   ? heard.reason
                                   : describeFailure(error, suspects, host));
}

std::optional<std::string> InterHostEngine::stuckCallMismatch(
    const OpContext& ctx, const GroupHealth::ToldCalls& told) const {
  std::vector<std::pair<int, OpDescriptor>> calls{{topology_.rank(), ctx.op}};
  const std::vector<int> others = othersThan(topology_.rank());
  for (size_t i = 0; i < others.size() && i < told.size(); ++i) {
    // A peer's call of another collective of the sequence is an old one (it waited long then)
    // or one it has not reached: only the same collective of the sequence tells a mismatch.
    const auto& op = told[i];
    if (op && op->seq == ctx.op.seq && *op != ctx.op) {
      calls.emplace_back(others[i], *op);
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
  // The members on the host at the address the engine's error names, where it names one host
  // (ranks of one machine that are hosts of their own share an address, which names none).
  std::vector<int> suspects;
  host = topology_.hostAt(peerAddress(engineError));
  if (host >= 0 && host != topology_.host()) {
    for (const int member : members_) {
      if (member != topology_.rank() && topology_.hostOf(member) == host) {
        suspects.push_back(member);
      }
    }
  }
  return suspects;
}

std::string InterHostEngine::describeFailure(
    const std::string& engineError, const std::vector<int>& suspects, int host) const {
  // Survivors name the ranks they lost to shrink_group (dead_ranks()): a host whose
  // connection closed is lost whether its process or its network died.
  health_.noteLost(suspects);
  std::string peer = "a rank on another host";
  if (suspects.size() == 1) {
    peer = topology_.describeRank(suspects[0]);
  } else if (!suspects.empty() && host >= 0) {
    peer = c10::str("a rank of ", topology_.describeHost(host));
  }
  // gloo's first sentence ("Connection closed by peer [10.0.0.2]:4567"): the rest is advice.
  // Nobody on this host saw that rank's process, so whether it died is not known here.
  const std::string what = engineError.substr(0, engineError.find(". "));
  return c10::str(
      "lost the cross-host connection to ", peer,
      " (its process or host died, or the network failed; nobody reported a cause): ", what);
}

std::string differentCallsMessage(const Topology& topology, const std::string& calls) {
  return c10::str(
      "dummy_collectives: ranks called different collectives (seen on rank ", topology.rank(),
      ", across ", topology.hostCount(), " hosts); no data was exchanged:", calls);
}

std::string differentCalls(
    const Topology& topology, std::vector<std::pair<int, OpDescriptor>> calls) {
  std::sort(calls.begin(), calls.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string lines;
  for (const auto& [rank, op] : calls) {
    lines += c10::str("\n  ", topology.describeRank(rank), ": ", op.describe());
  }
  return differentCallsMessage(topology, lines);
}

} // namespace dummy_collectives::inter_host

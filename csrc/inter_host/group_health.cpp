#include "inter_host/group_health.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/exception.h>

namespace dummy_collectives::inter_host {
namespace {

const char* const kFailureKey = "dummy_collectives/failure";
// One key per lost rank ("dummy_collectives/lost/3"): several ranks may report the same loss.
const char* const kLostKeyPrefix = "dummy_collectives/lost/";
// One key per rank: the collective it waits in ("dummy_collectives/call/3"), see tellCall.
const char* const kCallKeyPrefix = "dummy_collectives/call/";

std::vector<uint8_t> bytesOf(const std::string& text) {
  return {text.begin(), text.end()};
}

// "[path/file.cc:123] " (gloo's GLOO_ERROR_MSG prefix) and the like: a bracket holding a
// source file's name and line.
bool isSourceLocation(const std::string& bracketed) {
  const size_t colon = bracketed.rfind(':');
  if (colon == std::string::npos || colon + 1 == bracketed.size()) {
    return false;
  }
  for (size_t i = colon + 1; i < bracketed.size(); ++i) {
    if (bracketed[i] < '0' || bracketed[i] > '9') {
      return false;
    }
  }
  const std::string file = bracketed.substr(0, colon);
  for (const char* suffix : {".cc", ".cpp", ".c", ".h", ".hpp", ".cu"}) {
    const size_t n = std::strlen(suffix);
    if (file.size() > n && file.compare(file.size() - n, n, suffix) == 0) {
      return true;
    }
  }
  return false;
}

} // namespace

std::string errorText(const std::exception& e) {
  const auto* c10Error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10Error != nullptr ? c10Error->what_without_backtrace() : e.what();
  // c10 appends its stack after the message's first line ("Exception raised from ...").
  const size_t stack = text.find("\nException raised from");
  if (stack != std::string::npos) {
    text.resize(stack);
  }
  const size_t frames = text.find("\nframe #");
  if (frames != std::string::npos) {
    text.resize(frames);
  }
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find('[', at);
    const size_t close = open == std::string::npos ? open : text.find(']', open);
    if (close == std::string::npos) {
      out += text.substr(at);
      break;
    }
    if (isSourceLocation(text.substr(open + 1, close - open - 1))) {
      out += text.substr(at, open - at);
      at = close + 1;
      while (at < text.size() && text[at] == ' ') {
        ++at;
      }
    } else {
      out += text.substr(at, close + 1 - at);
      at = close + 1;
    }
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) {
    out.pop_back();
  }
  return out;
}

GroupHealth::GroupHealth(
    const c10::intrusive_ptr<c10d::Store>& store,
    std::function<void(const std::string&)> abortHost,
    std::function<std::string()> hostBroken,
    std::function<std::vector<int>()> hostLosses,
    std::string self,
    bool watch,
    int hosts)
    : requests_(store),
      abortHost_(std::move(abortHost)),
      hostBroken_(std::move(hostBroken)),
      hostLosses_(std::move(hostLosses)),
      self_(std::move(self)),
      // One check per host per period: about a thousand a second for the whole job.
      watchPeriod_(std::clamp(
          std::chrono::milliseconds(hosts), kMinWatchPeriod, kMaxWatchPeriod)) {
  if (watch) {
    watcher_ = std::thread([this] { watchLoop(); });
  }
}

GroupHealth::~GroupHealth() {
  {
    std::lock_guard<std::mutex> lock(watchMu_);
    stopWatching_ = true;
  }
  watchCv_.notify_all();
  if (watcher_.joinable()) {
    watcher_.join();
  }
}

void GroupHealth::watchLoop() {
  std::unique_lock<std::mutex> lock(watchMu_);
  uint64_t seen = 0; // collectives begun when the store was last asked
  Poll poll(*this);
  // A store that is gone (its host left after its last collective, or died) will publish
  // nothing any more, and asking again would only fill stderr.
  while (!stopWatching_ && !broken_.load(std::memory_order_acquire) && !storeGone()) {
    if (watchCv_.wait_for(lock, watchPeriod_, [&] { return stopWatching_; })) {
      break;
    }
    lock.unlock();
    if (auto heard = poll.heard(); heard && heard->what == Heard::What::kReason) {
      markFailed(heard->reason);
    }
    const uint64_t begun = begun_.load(std::memory_order_relaxed);
    if (begun != seen || inFlight_.load(std::memory_order_relaxed) != 0) {
      seen = begun;
      poll.ask(); // none while one is in flight: a silent store gets one request, not many
    }
    lock.lock();
  }
}

std::string GroupHealth::brokenReason() {
  if (!broken_.load(std::memory_order_acquire)) {
    // This host's level was aborted: by its watcher (a failure elsewhere), or because a rank
    // of this host died or timed out. Either way the group has failed. The rank that aborted
    // it told the store, or said why it could not.
    std::string host = hostBroken_();
    if (host.empty()) {
      return {};
    }
    return markFailed(host, /*sayIfUntold=*/false);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (untold_ && untold_->state() != StoreRequests::State::kWaiting) {
    if (untold_->state() == StoreRequests::State::kAnswered && !untold_->value().empty()) {
      reason_.assign(untold_->value().begin(), untold_->value().end());
    }
    untold_.reset();
  }
  return reason_;
}

void GroupHealth::raiseIfBroken(const std::string& context) {
  const std::string reason = brokenReason();
  if (!reason.empty()) {
    C10_THROW_ERROR(
        DistBackendError, c10::str(context, ": the group failed earlier (", reason, ")"));
  }
}

void GroupHealth::noteLost(const std::vector<int>& ranks) {
  std::vector<int> added;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const int r : ranks) {
      if (lost_.insert(r).second) {
        added.push_back(r);
      }
    }
  }
  for (const int r : added) {
    requests_.post<int64_t>([key = c10::str(kLostKeyPrefix, r)](c10d::Store& store) {
      return store.add(key, 1);
    });
  }
}

std::vector<int> GroupHealth::lostRanks(int size, Clock::time_point until) const {
  std::set<int> known;
  {
    std::lock_guard<std::mutex> lock(mu_);
    known = lost_;
  }
  for (const int r : hostLosses_()) {
    known.insert(r);
  }
  std::vector<int> unknown;
  for (int r = 0; r < size; ++r) {
    if (known.count(r) == 0) {
      unknown.push_back(r);
    }
  }
  auto told = requests_.post<std::vector<int>>([unknown](c10d::Store& store) {
    std::vector<int> lost;
    for (const int r : unknown) {
      if (store.check({c10::str(kLostKeyPrefix, r)})) {
        lost.push_back(r);
      }
    }
    return lost;
  });
  if (told.await(until) == StoreRequests::State::kAnswered) {
    known.insert(told.value().begin(), told.value().end());
  }
  return {known.begin(), known.end()};
}

std::string GroupHealth::markFailed(const std::string& reason, bool sayIfUntold) {
  // Who this rank saw die goes to the store before the reason does (requests run in order): a
  // rank that hears of the failure (the reason) then finds the lost ranks named too.
  noteLost(hostLosses_());
  std::string winner = reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.load(std::memory_order_relaxed)) {
      return reason_; // already failed: keep the first reason
    }
    // compareSet with an empty expected value sets a missing key and returns what is stored.
    // Posted even where the store is silent: it lands once the network returns.
    const bool silent = storeSilent();
    auto stored = requests_.post<std::vector<uint8_t>>(
        [value = bytesOf(reason)](c10d::Store& store) {
          return store.compareSet(kFailureKey, {}, value);
        });
    switch (stored.await(silent ? Clock::now() : Clock::now() + kStorePatience)) {
      case StoreRequests::State::kAnswered:
        if (!stored.value().empty()) {
          winner.assign(stored.value().begin(), stored.value().end());
        }
        break;
      case StoreRequests::State::kFailed:
        if (sayIfUntold) {
          winner = c10::str(reason, " (the group's store could not be reached to tell the "
                            "other hosts: ", stored.error(), ")");
        }
        break;
      case StoreRequests::State::kWaiting:
        untold_ = stored;
        if (sayIfUntold) {
          winner = c10::str(reason, " (the group's store did not answer, so the other hosts "
                            "may not hear of it)");
        }
        break;
    }
    reason_ = winner;
    broken_.store(true, std::memory_order_release);
  }
  abortHost_(winner); // wakes this host's ranks waiting in shared memory
  return winner;
}

void GroupHealth::fail(const std::string& context, const std::string& reason, bool sayIfUntold) {
  const std::string winner = markFailed(reason, sayIfUntold);
  C10_THROW_ERROR(DistBackendError, c10::str(context, ": ", winner));
}

StoreRequests::Reply<std::optional<std::string>> GroupHealth::askPublished() const {
  return requests_.post<std::optional<std::string>>(
      [](c10d::Store& store) -> std::optional<std::string> {
        if (!store.check({kFailureKey})) {
          return std::nullopt;
        }
        const std::vector<uint8_t> stored = store.get(kFailureKey);
        return std::string(stored.begin(), stored.end());
      });
}

namespace {

GroupHealth::Heard heardFrom(const StoreRequests::Reply<std::optional<std::string>>& reply) {
  using What = GroupHealth::Heard::What;
  switch (reply.state()) {
    case StoreRequests::State::kAnswered:
      if (reply.value()) {
        return {What::kReason, *reply.value()};
      }
      return {What::kNothing, {}};
    case StoreRequests::State::kFailed:
      return {What::kGone, reply.error()};
    case StoreRequests::State::kWaiting:
      break;
  }
  return {What::kSilent, {}};
}

} // namespace

GroupHealth::Heard GroupHealth::published() const {
  if (storeSilent()) {
    return {Heard::What::kSilent, {}}; // a new request would queue behind the unanswered one
  }
  auto reply = askPublished();
  reply.await(Clock::now() + kStorePatience);
  return heardFrom(reply);
}

GroupHealth::Heard GroupHealth::awaitPublished(Clock::time_point until) const {
  for (;;) {
    // Each question gets its answer's worth of time, even the last one, asked just before
    // `until`: a store that answers is never taken for a silent one.
    Heard heard = published();
    const auto now = Clock::now();
    if (heard.what != Heard::What::kNothing || now >= until) {
      return heard;
    }
    std::this_thread::sleep_for(
        std::min<Clock::duration>(std::chrono::milliseconds(20), until - now));
  }
}

void GroupHealth::Poll::ask() {
  if (!reply_ && !health_.storeGone()) {
    reply_ = health_.askPublished();
  }
}

std::optional<GroupHealth::Heard> GroupHealth::Poll::heard() {
  if (!reply_ || reply_->state() == StoreRequests::State::kWaiting) {
    return std::nullopt;
  }
  Heard heard = heardFrom(*reply_);
  reply_.reset();
  return heard;
}

void GroupHealth::tellCall(int rank, const OpDescriptor& op) {
  std::vector<uint8_t> bytes(sizeof(OpDescriptor));
  std::memcpy(bytes.data(), &op, sizeof(OpDescriptor));
  requests_.post<bool>([key = c10::str(kCallKeyPrefix, rank), bytes](c10d::Store& store) {
    store.set(key, bytes);
    return true;
  });
}

StoreRequests::Reply<GroupHealth::ToldCalls> GroupHealth::toldCalls(
    const std::vector<int>& ranks) const {
  return requests_.post<ToldCalls>([ranks](c10d::Store& store) {
    ToldCalls calls;
    for (const int rank : ranks) {
      const std::string key = c10::str(kCallKeyPrefix, rank);
      std::optional<OpDescriptor> call;
      if (store.check({key})) {
        const std::vector<uint8_t> bytes = store.get(key);
        if (bytes.size() == sizeof(OpDescriptor)) {
          call.emplace();
          std::memcpy(&*call, bytes.data(), sizeof(OpDescriptor));
        }
      }
      calls.push_back(call);
    }
    return calls;
  });
}

} // namespace dummy_collectives::inter_host

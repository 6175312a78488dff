#include "hierarchy/group_health.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/exception.h>

namespace dummy_collectives::hierarchy {
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
    c10::intrusive_ptr<c10d::Store> store,
    std::function<void(const std::string&)> abortHost,
    std::function<std::string()> hostBroken,
    std::function<std::vector<int>()> hostLosses,
    std::string self,
    bool watch,
    int hosts)
    : store_(std::move(store)),
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
  // A store that cannot be reached is gone for good (its host left after its last collective,
  // or died): nothing can be published there any more, so there is nothing left to watch, and
  // asking again would only fill stderr.
  while (!stopWatching_ && !broken_.load(std::memory_order_acquire) && !storeUnreachable()) {
    if (watchCv_.wait_for(lock, watchPeriod_, [&] { return stopWatching_; })) {
      break;
    }
    const uint64_t begun = begun_.load(std::memory_order_relaxed);
    if (begun == seen && inFlight_.load(std::memory_order_relaxed) == 0) {
      continue; // idle: leave the store alone
    }
    seen = begun;
    lock.unlock();
    if (auto reason = published(/*unreachableIsFailure=*/false)) {
      markFailed(*reason);
    }
    lock.lock();
  }
}

std::string GroupHealth::brokenReason() {
  if (!broken_.load(std::memory_order_acquire)) {
    // This host's level was aborted: by its watcher (a failure elsewhere), or because a rank
    // of this host died or timed out. Either way the group has failed.
    std::string host = hostBroken_();
    if (host.empty()) {
      return {};
    }
    return markFailed(host);
  }
  std::lock_guard<std::mutex> lock(mu_);
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
    if (storeUnreachable()) {
      return;
    }
    try {
      store_->add(c10::str(kLostKeyPrefix, r), 1);
    } catch (const std::exception&) {
      storeUnreachable_.store(true, std::memory_order_release);
    }
  }
}

std::vector<int> GroupHealth::lostRanks(int size) const {
  std::set<int> known;
  {
    std::lock_guard<std::mutex> lock(mu_);
    known = lost_;
  }
  for (const int r : hostLosses_()) {
    known.insert(r);
  }
  for (int r = 0; r < size && !storeUnreachable(); ++r) {
    if (known.count(r) != 0) {
      continue;
    }
    try {
      if (store_->check({c10::str(kLostKeyPrefix, r)})) {
        known.insert(r);
      }
    } catch (const std::exception&) {
      storeUnreachable_.store(true, std::memory_order_release);
    }
  }
  return {known.begin(), known.end()};
}

std::string GroupHealth::markFailed(const std::string& reason) {
  // Who this rank saw die goes to the store before the reason does: a rank that hears of the
  // failure (the reason) then finds the lost ranks named too.
  noteLost(hostLosses_());
  std::string winner = reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.load(std::memory_order_relaxed)) {
      return reason_; // already failed: keep the first reason
    }
    if (storeUnreachable()) {
      // Known gone: another request would only fail again, with another warning.
      winner = c10::str(reason, " (the group's store could not be reached earlier, so the other "
                        "hosts cannot be told)");
    } else {
      try {
        // compareSet with an empty expected value sets a missing key and returns what is
        // stored.
        std::vector<uint8_t> stored = store_->compareSet(kFailureKey, {}, bytesOf(reason));
        if (!stored.empty()) {
          winner.assign(stored.begin(), stored.end());
        }
      } catch (const std::exception& e) {
        // The store is gone (its host died): every rank reports what it saw itself.
        storeUnreachable_.store(true, std::memory_order_release);
        winner = c10::str(reason, " (the group's store was unreachable to tell the other hosts: ",
                          errorText(e), ")");
      }
    }
    reason_ = winner;
    broken_.store(true, std::memory_order_release);
  }
  abortHost_(winner); // wakes this host's ranks waiting in shared memory
  return winner;
}

void GroupHealth::fail(const std::string& context, const std::string& reason) {
  const std::string winner = markFailed(reason);
  C10_THROW_ERROR(DistBackendError, c10::str(context, ": ", winner));
}

std::optional<std::string> GroupHealth::published(bool unreachableIsFailure) const {
  try {
    if (!store_->check({kFailureKey})) {
      return std::nullopt;
    }
    std::vector<uint8_t> stored = store_->get(kFailureKey);
    return std::string(stored.begin(), stored.end());
  } catch (const std::exception& e) {
    storeUnreachable_.store(true, std::memory_order_release);
    if (!unreachableIsFailure) {
      return std::nullopt;
    }
    return c10::str("the group's store became unreachable (", errorText(e), ")");
  }
}

void GroupHealth::tellCall(int rank, const OpDescriptor& op) {
  if (storeUnreachable()) {
    return;
  }
  std::vector<uint8_t> bytes(sizeof(OpDescriptor));
  std::memcpy(bytes.data(), &op, sizeof(OpDescriptor));
  try {
    store_->set(c10::str(kCallKeyPrefix, rank), bytes);
  } catch (const std::exception&) {
    storeUnreachable_.store(true, std::memory_order_release);
  }
}

std::optional<OpDescriptor> GroupHealth::toldCall(int rank) const {
  if (storeUnreachable()) {
    return std::nullopt;
  }
  const std::string key = c10::str(kCallKeyPrefix, rank);
  try {
    if (!store_->check({key})) {
      return std::nullopt;
    }
    const std::vector<uint8_t> bytes = store_->get(key);
    if (bytes.size() != sizeof(OpDescriptor)) {
      return std::nullopt;
    }
    OpDescriptor op;
    std::memcpy(&op, bytes.data(), sizeof(OpDescriptor));
    return op;
  } catch (const std::exception&) {
    storeUnreachable_.store(true, std::memory_order_release);
    return std::nullopt;
  }
}

std::optional<std::string> GroupHealth::awaitPublished(std::chrono::milliseconds patience) const {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    if (storeUnreachable()) {
      return std::nullopt;
    }
    if (auto reason = published(/*unreachableIsFailure=*/false)) {
      return reason;
    }
    if (storeUnreachable() || std::chrono::steady_clock::now() >= deadline) {
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

} // namespace dummy_collectives::hierarchy

#include <dummy_collectives/hierarchy/group_health.hpp>

#include <algorithm>
#include <thread>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/exception.h>

namespace dummy_collectives::hierarchy {
namespace {

const char* const kFailureKey = "dummy_collectives/failure";

std::vector<uint8_t> bytesOf(const std::string& text) {
  return {text.begin(), text.end()};
}

} // namespace

GroupHealth::GroupHealth(
    c10::intrusive_ptr<c10d::Store> store,
    std::function<void(const std::string&)> abortHost,
    std::function<std::string()> hostBroken,
    std::string self,
    bool watch,
    int hosts)
    : store_(std::move(store)),
      abortHost_(std::move(abortHost)),
      hostBroken_(std::move(hostBroken)),
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
  while (!stopWatching_ && !broken_.load(std::memory_order_acquire)) {
    if (watchCv_.wait_for(lock, watchPeriod_, [&] { return stopWatching_; })) {
      break;
    }
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

std::string GroupHealth::markFailed(const std::string& reason) {
  std::string winner = reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.load(std::memory_order_relaxed)) {
      return reason_; // already failed: keep the first reason
    }
    try {
      // compareSet with an empty expected value sets a missing key and returns what is stored.
      std::vector<uint8_t> stored = store_->compareSet(kFailureKey, {}, bytesOf(reason));
      if (!stored.empty()) {
        winner.assign(stored.begin(), stored.end());
      }
    } catch (const std::exception& e) {
      // The store is gone (its host died): every rank reports what it saw itself.
      winner = c10::str(reason, " (the store was unreachable to tell the other hosts: ",
                        e.what(), ")");
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
    if (!unreachableIsFailure) {
      return std::nullopt;
    }
    return c10::str("the group's store became unreachable (", e.what(), ")");
  }
}

std::optional<std::string> GroupHealth::awaitPublished(std::chrono::milliseconds patience) const {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    if (auto reason = published()) {
      return reason;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

} // namespace dummy_collectives::hierarchy

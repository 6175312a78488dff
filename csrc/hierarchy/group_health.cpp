#include <dummy_collectives/hierarchy/group_health.hpp>

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
    std::string self)
    : store_(std::move(store)), abortHost_(std::move(abortHost)), self_(std::move(self)) {}

std::string GroupHealth::brokenReason() const {
  if (!broken_.load(std::memory_order_acquire)) {
    return {};
  }
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

void GroupHealth::raiseIfBroken(const std::string& context) const {
  if (broken_.load(std::memory_order_acquire)) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(context, ": the group failed earlier (", brokenReason(), ")"));
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

std::optional<std::string> GroupHealth::published() const {
  try {
    if (!store_->check({kFailureKey})) {
      return std::nullopt;
    }
    std::vector<uint8_t> stored = store_->get(kFailureKey);
    return std::string(stored.begin(), stored.end());
  } catch (const std::exception& e) {
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

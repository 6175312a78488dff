#include "c10d/exit_registry.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <c10/util/StringUtil.h>

namespace dummy_collectives {
namespace {

struct ExitEntry {
  std::weak_ptr<ExitHandle> handle;
  std::chrono::milliseconds timeout;
  int rank;
};

// The live groups of this process. Never destroyed: groups may outlive static destruction.
struct ExitRegistry {
  std::mutex mu;
  std::atomic<int> pid{0}; // the process the entries belong to
  std::vector<ExitEntry> entries;
};

ExitRegistry& exitRegistry() {
  static auto* registry = new ExitRegistry();
  return *registry;
}

void flushForExit(const ExitEntry& entry, std::chrono::steady_clock::time_point start) {
  auto handle = entry.handle.lock();
  if (!handle) {
    return; // destroyed meanwhile
  }
  const auto deadline = start + std::min(kExitGrace, entry.timeout);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  // Peers that never join an outstanding operation must not hold the exit up for the whole
  // group timeout: past the deadline the group is aborted, which ends every wait.
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_until(lock, deadline, [&] { return done; })) {
      handle->abort(c10::str(
          "rank ", entry.rank, " (pid ", ::getpid(), ") exited with operations still outstanding"));
    }
  });
  handle->drain();
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
}

} // namespace

void registerForExit(
    const std::shared_ptr<ExitHandle>& handle,
    std::chrono::milliseconds timeout,
    int rank) {
  ExitRegistry& registry = exitRegistry();
  const int pid = static_cast<int>(::getpid());
  std::lock_guard<std::mutex> lock(registry.mu);
  if (registry.pid != pid) {
    registry.pid = pid;
    registry.entries.clear(); // inherited through fork: the parent's
  }
  auto& entries = registry.entries;
  entries.erase(
      std::remove_if(
          entries.begin(),
          entries.end(),
          [](const ExitEntry& e) { return e.handle.expired(); }),
      entries.end());
  entries.push_back({handle, timeout, rank});
}

void flushAllForExit() {
  ExitRegistry& registry = exitRegistry();
  // In a forked child the lock may be held by a thread that exists only in the parent.
  if (registry.pid != static_cast<int>(::getpid())) {
    return;
  }
  std::vector<ExitEntry> entries;
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    entries = registry.entries;
  }
  const auto start = std::chrono::steady_clock::now();
  for (const auto& entry : entries) {
    flushForExit(entry, start);
  }
}

} // namespace dummy_collectives

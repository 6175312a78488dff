#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

#include <c10/util/Exception.h>

namespace dummy_collectives {

// The abort hooks users register on a group (torch >= 2.15's Backend::registerAbortHook): run
// once, on the thread that first finds the group failed or aborts it, before that failure is
// raised, so a hook can still capture what it needs (a dump, a log line). Hooks registered after
// they ran do not run.
class AbortHooks {
 public:
  void add(int64_t id, std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    hooks_[id] = std::move(hook);
  }
  void remove(int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    hooks_.erase(id);
  }
  // Runs every hook, the first time only; a hook that throws does not stop the others (the
  // group's own failure is what the caller raises).
  void runOnce() {
    std::map<int64_t, std::function<void()>> hooks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ran_) {
        return;
      }
      ran_ = true;
      hooks.swap(hooks_);
    }
    for (auto& [id, hook] : hooks) {
      try {
        hook();
      } catch (const std::exception& e) {
        TORCH_WARN("dummy_collectives: abort hook ", id, " raised: ", e.what());
      }
    }
  }

 private:
  std::mutex mu_;
  std::map<int64_t, std::function<void()>> hooks_; // guarded by mu_
  bool ran_ = false;                               // guarded by mu_
};

} // namespace dummy_collectives

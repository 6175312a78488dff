#include "c10d/this_process.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

#include <c10/util/Exception.h>

namespace dummy_collectives {
namespace {

std::atomic<int> cachedPid{0};

void refresh() {
  cachedPid.store(static_cast<int>(::getpid()), std::memory_order_relaxed);
}

} // namespace

int thisProcessId() {
  // Registered with the first group, before any fork that could matter to one.
  static const bool registered = [] {
    refresh();
    ::pthread_atfork(nullptr, nullptr, refresh);
    return true;
  }();
  (void)registered;
  return cachedPid.load(std::memory_order_relaxed);
}

void refuseForkedChild(int creator, const char* collective, int rank) {
  TORCH_CHECK(
      false, "dummy ", collective, " (rank ", rank, "): this process (pid ", thisProcessId(),
      ") was forked from the one that created the group (pid ", creator, "); a forked child "
      "cannot use its parent's groups (their shared memory and threads are the parent's, and "
      "the parent's peers would take the child's data for the parent's). Make the child's own "
      "groups in the child, e.g. start it with the 'spawn' method and call init_process_group "
      "there");
}

} // namespace dummy_collectives

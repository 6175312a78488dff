// ShmTransport's liveness: whether the ranks a wait waits for can still take part (their pids,
// the group's abort, the op's deadline), and the group's abort itself (a flag and a reason in
// the segment, which every wait polls, and a futex wake of every sleeper). Kept apart from the
// step protocol (shm_transport.cpp), which calls these when a wait has lasted a liveness period
// or something failed.

#include "shm/shm_transport.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include "shm/shm_layout.hpp"
#include "shm/shm_liveness.hpp"

namespace dummy_collectives {

uint64_t pidNamespaceId() {
  struct stat info {};
  return ::stat("/proc/self/ns/pid", &info) == 0 ? static_cast<uint64_t>(info.st_ino) : 0;
}

bool processAlive(int32_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) {
    return false;
  }
  std::ifstream stat(c10::str("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) {
    return !text.empty() || !stat.fail();
  }
  char state = text[close + 2];
  return state != 'Z' && state != 'X';
}

int32_t ShmTransport::pidOf(int r) const {
  if (ctl_ != nullptr && control(r).pid > 0) {
    return control(r).pid;
  }
  return join_.pids[static_cast<size_t>(r)];
}

std::string ShmTransport::abortReason() const {
  while (ctl_->aborted.load(std::memory_order_acquire) == 1) {
    cpuRelax();
  }
  return ctl_->abortReason;
}

std::string ShmTransport::brokenReason() const {
  return ctl_->aborted.load(std::memory_order_acquire) != 0 ? abortReason() : std::string();
}

int32_t ShmTransport::checkablePid(int r) const {
  const RankControl& peer = control(r);
  if (peer.pid > 0) {
    return peer.pidNamespace == control(rank_).pidNamespace ? peer.pid : 0;
  }
  return join_.pids[static_cast<size_t>(r)]; // sized to the group (0: unknown)
}

void ShmTransport::awaitEveryRankMapped(std::chrono::steady_clock::time_point deadline) const {
  while (ctl_->mapped.load(std::memory_order_acquire) < size_ &&
         ctl_->aborted.load(std::memory_order_acquire) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < size_; ++r) {
      const int32_t pid = checkablePid(r);
      if (control(r).pid <= 0 && pid > 0 && !processAlive(pid)) {
        return; // it will never come
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::vector<int> ShmTransport::deadRanks() const {
  std::vector<int> dead;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) {
      continue;
    }
    const int32_t pid = checkablePid(r);
    if (pid > 0 && !processAlive(pid)) {
      dead.push_back(label(r));
    }
  }
  std::sort(dead.begin(), dead.end());
  return dead;
}

std::vector<int> ShmTransport::labels(const std::vector<int>& ranks) const {
  std::vector<int> named;
  for (const int r : ranks) {
    named.push_back(label(r));
  }
  return named;
}

std::string ShmTransport::peerProblem(int r) const {
  if (ctl_->aborted.load(std::memory_order_acquire) != 0) {
    return c10::str("the group was aborted (", abortReason(), ")");
  }
  const int32_t pid = checkablePid(r);
  if (pid <= 0 || processAlive(pid)) {
    return {};
  }
  if (control(r).pid > 0) {
    return c10::str("rank ", label(r), " (pid ", pid, ") has died");
  }
  // Not mapped yet: the pid its discovery published still tells a death.
  return c10::str(
      "rank ", label(r), " (pid ", pid, ") has died (before it mapped the group's shared "
      "memory: during the group's creation)");
}

void ShmTransport::fail(const std::string& what) {
  std::string message = c10::str(opContext(), ": ", what);
  abort(message);
  C10_THROW_ERROR(DistBackendError, message);
}

void ShmTransport::failOnThisRank(const std::string& error) {
  fail(c10::str(
      "rank ", label(rank_), " (pid ", ::getpid(), ") failed part way through the collective: ",
      error, "; the group is unusable (its ranks would no longer agree on the collective's "
      "steps)"));
}

void ShmTransport::abort(const std::string& reason) {
  uint32_t expected = 0;
  if (ctl_->aborted.compare_exchange_strong(expected, 1)) {
    size_t n = std::min(reason.size(), kReasonBytes - 1);
    std::memcpy(ctl_->abortReason, reason.data(), n);
    ctl_->abortReason[n] = '\0';
    ctl_->aborted.store(2);
    // Nobody may join an aborted group: if a rank never mapped the segment (it died during
    // init), its name would otherwise stay in /dev/shm once the creator is killed too.
    segment_.unlink();
  }
  for (int r = 0; r < size_; ++r) {
    futexWakeAll(futexWord(control(r).published));
  }
}

void ShmTransport::failPeerAccess(int r, const char* what, size_t bytes, int error) {
  const int32_t pid = control(r).pid;
  // ESRCH: the process is gone, though /proc may not show it dead yet.
  std::string problem =
      error == ESRCH ? c10::str("rank ", label(r), " (pid ", pid, ") has died") : peerProblem(r);
  fail(
      problem.empty() ? c10::str(
                            what, " ", bytes, " bytes of rank ", label(r), "'s tensor (pid ", pid,
                            ") failed: ", std::strerror(error), "; the group is unusable")
                      : problem + "; the group is unusable");
}

void ShmTransport::checkPeers(uint64_t step) {
  const uint64_t target = step + 1;
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (control(r).published.load(std::memory_order_acquire) < target) {
      missing.push_back(r);
    }
  }
  for (int r : missing) {
    // A pid means something only in our pid namespace; elsewhere only the timeout can tell.
    std::string problem = peerProblem(r);
    if (!problem.empty()) {
      fail(problem + "; the group is unusable");
    }
  }
  if (Clock::now() >= deadline_) {
    failTimedOut(c10::str(
        "ranks ",
        c10::Join(", ", labels(missing)),
        " to arrive (step ",
        step - opFirstStep_ + 1,
        " of the collective); a rank that never calls it, or calls collectives in a different "
        "order, causes this"));
  }
}

void ShmTransport::failTimedOut(const std::string& waitingFor) {
  const auto now = Clock::now();
  fail(c10::str(
      "timed out after ",
      std::chrono::duration_cast<std::chrono::milliseconds>(now - opStart_).count(),
      " ms (its timeout is ",
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - opStart_).count(),
      " ms) waiting for ",
      waitingFor));
}

} // namespace dummy_collectives

#pragma once

#include <type_traits>
#include <utility>

#include <c10/macros/Macros.h>

namespace dummy_collectives {

// This process's pid, cached: glibc's getpid() is a system call, too dear for every collective's
// entry. A pthread_atfork child handler refreshes it, so a forked child sees its own pid.
int thisProcessId();

// Raises a RuntimeError saying that this process, a child forked from `creator` (the process
// that made the group), cannot use the group.
[[noreturn]] void refuseForkedChild(int creator, const char* collective, int rank);

// At every collective's entry: a child forked after the group was made shares the parent's
// segment and would take the parent's place in its collectives, so it is refused (NCCL refuses a
// communicator in a forked child too). A cached compare, not a syscall.
inline void requireCreatorProcess(int creator, const char* collective, int rank) {
  if (C10_UNLIKELY(thisProcessId() != creator)) {
    refuseForkedChild(creator, collective, rank);
  }
}

// Keeps what `owners` own alive until the process exits, without running their destructors:
// for objects whose destructor would join a thread that cannot be joined here (a forked child's
// copy of its parent's threads, a thread blocked in a wait nothing can interrupt).
template <typename... Owners>
void leaveToExit(Owners&&... owners) {
  (static_cast<void>(new std::decay_t<Owners>(std::forward<Owners>(owners))), ...);
}

} // namespace dummy_collectives

#pragma once

// Whether a rank's process is alive, by its pid (private to ShmTransport's sources, whose
// liveness checks are in shm_liveness.cpp). A pid names a process only within one pid
// namespace: ranks publish theirs with their pid, and a peer's pid is looked at only where the
// two namespaces are the same.

#include <cstdint>

namespace dummy_collectives {

// This process's pid namespace (the inode of /proc/self/ns/pid; 0: unknown).
uint64_t pidNamespaceId();

// Whether process `pid` of this pid namespace is alive: one whose pid is gone, or a zombie
// waiting to be reaped, is dead.
bool processAlive(int32_t pid);

} // namespace dummy_collectives

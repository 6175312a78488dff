#pragma once

// Single-copy reads of another process's private memory: Linux cross memory attach
// (process_vm_readv). The kernel copies straight from the peer's pages, so a collective can read
// a peer's tensor where it lies instead of having the peer copy it into shared memory first: one
// copy per byte instead of two, and no shared-memory slot in between.
//
// Whether it works depends on the host, not on us: the reader needs ptrace access to the peer
// (same user, Yama's ptrace_scope 0, no seccomp filter refusing the call, the same pid
// namespace). A group probes every pair before using it (see ShmTransport).

#include <cstddef>
#include <cstdint>

namespace dummy_collectives::cross_memory {

// Copies `bytes` from address `remote` in process `pid` to `local`. Returns 0, or the errno of
// the failed call (ESRCH: the process is gone; EPERM: not allowed; EFAULT: a bad address).
int read(int32_t pid, void* local, const void* remote, size_t bytes);

// Copies `bytes` from `local` to address `remote` in process `pid`; returns 0 or the errno.
int write(int32_t pid, void* remote, const void* local, size_t bytes);

// A word in this process whose value is random and fixed for the process's life. A peer that
// reads it through read() and finds the value published beside its address (and can write it
// back through write()) knows that it can reach this process, and that the pid it used names
// this process and not another one.
struct ProbeWord {
  uint64_t* address; // writable: peers write the value back to check they can write
  uint64_t value;
};
ProbeWord probeWord();

// How fast the kernel copies through read() against memcpy in this process, as a fraction of
// memcpy's speed (0 where read() fails). Measured on the first call, once per process, on an
// L2-sized piece in cache, as the collectives use it. Whether peer access pays depends on it:
// it replaces the slots' two memcpys, made by two cores at once, with one kernel copy, and where
// the kernel copies slowly the slots win at every size (docs/benchmarks.md, "Peer access").
double copySpeed();

} // namespace dummy_collectives::cross_memory

#pragma once

#include <cstddef>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/version.h>

namespace dummy_collectives {

// What the backend does with a collective.
enum class Mode {
  kReal,  // really communicate (the default)
  kZero,  // the PyTorch tutorial's behaviour: zero the outputs, move nothing
};

Mode parseMode(const std::string& text);
std::string modeName(Mode mode);
// Validates a cross-host engine name (BackendOptions::interHost).
std::string parseInterHost(const std::string& text);

// Backend options, the PyTorch way: a c10d::Backend::Options subclass that Python passes as
// `pg_options`. A default-constructed instance takes its values from the DUMMY_COLLECTIVES_*
// environment variables, read once here, so the environment and pg_options cannot disagree later.
struct BackendOptions : c10d::Backend::Options {
  BackendOptions();

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
  // torch 2.15 copies a backend's options where it makes a child group from them (split, merge)
  // through this virtual: without it the copy would be sliced to c10d's fields, and torch would
  // then share this object instead of copying it.
  c10::intrusive_ptr<c10d::Backend::Options> clone() const override {
    return c10::make_intrusive<BackendOptions>(*this);
  }
#endif

  Mode mode = Mode::kReal;
  // Bytes of one rank's shared-memory slot for one pipeline stage; each rank has two (double
  // buffering). Any message size streams through these, so this bounds memory, not message size.
  size_t bufferBytes = size_t{1} << 20;
  // Allreduces up to this many bytes use the one-shot algorithm (every rank reduces every slot);
  // larger ones reduce-scatter then all-gather through the slots.
  size_t oneShotMaxBytes = size_t{64} << 10;
  // Allreduces, gathers (all-gather, gather) and reduce_scatter_tensor of peerAccessMinBytes to
  // peerAccessMaxBytes (the tensor a rank ends up with) read, and for allreduce write, the peers'
  // tensors where they lie (Linux cross memory attach) instead of copying through the slots,
  // where every rank can reach every other's memory; elsewhere, or off, they go through the
  // slots. Past the cache the slots' pipeline, whose chunks a peer reads while they are still in
  // the writer's cache, is as fast or faster (2 ranks on the 2-core machine: all-gather 64 MiB
  // 11.3-11.9 against 12.9-13.2 ms, allreduce 64 MiB a tie, 128 MiB 25 against 28 ms).
  bool peerAccess = true;
  size_t peerAccessMinBytes = size_t{128} << 10;
  size_t peerAccessMaxBytes = size_t{32} << 20;
  // Peer access pays only where the kernel's cross-memory copy is fast: each rank measures it
  // against memcpy once (cross_memory::copySpeed) and turns peer access down below this fraction.
  // 0: use it wherever the ranks can reach each other.
  double peerAccessMinSpeed = 0.5;
  // How long a waiting rank busy-polls before yielding and then sleeping. -1: choose from the
  // number of ranks and usable cores.
  long spinMicros = -1;
  // Threads per rank (the caller included) that share a large allreduce's copies and folds.
  // -1: the usable cores shared out among the group's ranks, at most 4 (1 where ranks have a
  // core each or fewer).
  int threads = -1;
  // CUDA tensors: exchange them through device buffers shared by CUDA IPC (CUDA builds); off,
  // or where IPC cannot be set up on some rank, they are staged through host memory.
  bool cudaIpc = true;
  // Bytes of each of a rank's two CUDA IPC staging buffers (device memory, per group). Each
  // chunk costs a cross-process step, and on a shared GPU each step costs a context switch
  // (~75 us measured on an H100): large buffers, few steps.
  size_t cudaBufferBytes = size_t{64} << 20;
  // Ranks sharing one GPU wait for each other's GPU work on the host, not on the GPU: a stream
  // blocked on another process's event keeps the GPU (time-sliced between processes) until its
  // time slice ends, ~150 us per step measured on an H100; an idle process hands it over at once.
  bool cudaHostWait = true;

  // Groups whose ranks span hosts (several hosts found at group creation): shared memory inside
  // each host, this engine between hosts: "auto" (gloo; see README), "gloo" or "nccl".
  std::string interHost = "auto";
  // Collectives of up to this many bytes (allreduce, broadcast, reduce; all-gather counting a
  // host's inputs) cross hosts with the agreement every collective starts with: one exchange.
  size_t interHostInlineBytes = size_t{16} << 10;
  // Larger messages cross hosts in chunks of at most this size, pipelined: a chunk's in-host
  // stage overlaps the previous chunk's cross-host stage. 1 MiB: on 2 namespaced hosts x 2
  // ranks, 16 and 64 MiB allreduces ran 1.54-1.86x faster than gloo with it, 1.29-1.50x with
  // 4 MiB (unshaped links, runs alternated), at the same share of a 1 Gbit/s link.
  size_t interHostChunkBytes = size_t{1} << 20;
};

} // namespace dummy_collectives

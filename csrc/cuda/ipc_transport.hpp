#pragma once

// Device staging buffers shared between the ranks of one host by CUDA IPC (CUDA builds only).

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "cuda/peer_memory.hpp"
#include <dummy_collectives/transport.hpp>

namespace dummy_collectives::cuda {

// Each rank owns two device staging buffers (double buffering, like the host slots) and two
// inter-process events, allocated with cudaMalloc and exported with cudaIpcGet*Handle; the
// handles travel through the Store and every rank maps every peer's. That works for ranks that
// share one GPU (where NCCL refuses) and for ranks on different GPUs with peer access.
//
// Synchronisation is split the NCCL way: the data never waits on the host. step() is a
// stream-ordered barrier: each rank records its event on its backend stream, the host transport
// exchanges one step (so every rank knows every peer has recorded), and each rank's stream then
// waits on every peer's event. The host only waits for peers to have *queued* their work --
// except for peers on this same GPU (with hostWaitOnSharedGpu): processes share a GPU by time
// slices, and a stream blocked on another process's event holds the GPU until its slice ends
// (a cost per step larger than the data: docs/benchmarks.md, "Why the leader does the GPU
// work"), so there the host waits until the peer's event has completed before it queues more,
// and the GPU never waits across processes.
class CudaIpcTransport {
 public:
  // A collective over the Store: every rank of the group calls it at the same point. Returns
  // null on every rank (with a warning naming each rank's reason) if any rank could not set up
  // its buffers or map a peer's, or has the IPC path switched off; the caller then stages
  // through the host.
  static std::unique_ptr<CudaIpcTransport> create(
      const c10::intrusive_ptr<c10d::Store>& store,
      int rank,
      int size,
      c10::Device device,
      c10::cuda::CUDAStream stream,
      size_t bufferBytes,
      bool enabled,
      bool hostWaitOnSharedGpu);
  ~CudaIpcTransport();
  CudaIpcTransport(const CudaIpcTransport&) = delete;
  CudaIpcTransport& operator=(const CudaIpcTransport&) = delete;

  int rank() const {
    return rank_;
  }
  int size() const {
    return size_;
  }
  c10::Device device() const {
    return device_;
  }
  cudaStream_t stream() const {
    return stream_.stream();
  }
  // Bytes of one staging buffer (the largest chunk one step moves per rank).
  size_t bufferBytes() const {
    return bufferBytes_;
  }

  // The staging buffer the next chunk uses: 0 and 1 alternately across every collective of the
  // group, so a chunk never overwrites the buffer the previous chunk's readers may still read.
  int nextBuffer() {
    return static_cast<int>(chunks_++ & 1);
  }
  // Rank r's staging buffer `buffer` (this rank's own when r == rank()), mapped here.
  char* buffer(int r, int buffer) const {
    return bases_[r] + static_cast<size_t>(buffer) * bufferBytes_;
  }

  // True when every rank runs on this same GPU and waits for its peers on the host
  // (hostWaitOnSharedGpu): then one process can do a collective's GPU work for all of them.
  bool sharesOneGpu() const {
    return sharesOneGpu_;
  }
  // Peers' tensor memory opened here (for collectives that work on peers' tensors in place).
  PeerMemoryMap& peerMemory() {
    return peerMemory_;
  }
  // Rank `from` has queued GPU work that the others' next host actions depend on: every other
  // rank returns once that work (all `from` queued on its backend stream so far) has completed,
  // without queueing anything on its own GPU stream; `from` itself does not wait.
  void signal(int from, Transport& host);

  // Stream-ordered barrier: whatever any rank queued on its backend stream before its step()
  // runs before whatever any rank queues after it. `host` carries the handshake (and with the
  // collective's first step its descriptor, so mismatched calls fail before data moves).
  void step(Transport& host);

 private:
  struct Exported; // what a rank publishes through the Store
  CudaIpcTransport(int rank, int size, c10::Device device, c10::cuda::CUDAStream stream,
                   size_t bufferBytes);
  Exported allocate();
  void map(int r, const Exported& peer);
  // True once `event` (a peer's, mapped here) has completed; raises on a CUDA error.
  static bool completed(cudaEvent_t event);

  int rank_;
  int size_;
  c10::Device device_;
  c10::cuda::CUDAStream stream_;
  size_t bufferBytes_;
  uint64_t chunks_ = 0;
  uint64_t steps_ = 0;
  char* own_ = nullptr;                                // cudaMalloc'd, 2 * bufferBytes_
  std::vector<std::string> waitWhat_; // per peer: non-empty where the host waits for its events
  bool sharesOneGpu_ = false;
  PeerMemoryMap peerMemory_;
  std::vector<char*> bases_;                           // every rank's buffers, mapped here
  std::vector<std::array<cudaEvent_t, 2>> events_;     // every rank's events (ours created)
};

} // namespace dummy_collectives::cuda

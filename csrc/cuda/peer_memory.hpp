#pragma once

// A rank's tensor memory opened in another rank's process by CUDA IPC (CUDA builds only): what
// lets one process on a GPU read and write its peers' tensors in place.

#include <array>
#include <cstdint>
#include <map>

#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>

namespace dummy_collectives::cuda {

// How another process names a tensor's memory: the CUDA IPC handle of the allocation it lies in
// (a caching-allocator segment) and its byte offset there. Plain bytes: it travels in a host slot.
struct MemoryExport {
  int32_t exported = 0; // 0: this memory cannot be shared (see exportMemory)
  uint64_t offset = 0;
  cudaIpcMemHandle_t handle{};
};

// Exports `tensor`'s memory. Not exported (no error) where CUDA IPC cannot name it: memory not
// from PyTorch's caching allocator, or from expandable segments, or the cudaMallocAsync
// backend. The handle is taken afresh every time: the allocator may have freed the segment
// and made a new one at the same address since, and a stale handle would open the old one.
MemoryExport exportMemory(const at::Tensor& tensor);

// Peers' allocations opened in this process, kept open across collectives: opening one costs
// far more than a collective (tens of microseconds at least), and a training loop reuses the
// same few tensors. A segment its owner has freed stays open here until evicted; a new segment
// has a new handle, so it is never mistaken for the old one.
class PeerMemoryMap {
 public:
  explicit PeerMemoryMap(cudaStream_t stream) : stream_(stream) {}
  ~PeerMemoryMap();
  PeerMemoryMap(const PeerMemoryMap&) = delete;
  PeerMemoryMap& operator=(const PeerMemoryMap&) = delete;

  // The address in this process of the exported memory (opened now if not yet).
  char* open(const MemoryExport& peer);

 private:
  // Bound on open allocations; past it every one is closed (after `stream_` drains, the only
  // user of them) and the map starts over.
  static constexpr size_t kMaxOpen = 64;
  using Key = std::array<char, sizeof(cudaIpcMemHandle_t)>;
  void closeAll() noexcept;

  cudaStream_t stream_;
  std::map<Key, char*> open_;
};

} // namespace dummy_collectives::cuda

#include "cuda/peer_memory.hpp"

#include <cstring>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>

namespace dummy_collectives::cuda {

MemoryExport exportMemory(const at::Tensor& tensor) {
  MemoryExport out;
  void* data = tensor.data_ptr();
  if (data == nullptr) {
    return out;
  }
  void* base = nullptr;
  try {
    size_t segmentBytes = 0;
    // Raises for memory the caching allocator does not own or cannot share.
    base = c10::cuda::CUDACachingAllocator::getBaseAllocation(data, &segmentBytes);
  } catch (const c10::Error&) {
    return out;
  }
  if (base == nullptr || cudaIpcGetMemHandle(&out.handle, base) != cudaSuccess) {
    (void)cudaGetLastError(); // an answer, not an error to leave behind
    return out;
  }
  out.offset = static_cast<uint64_t>(static_cast<char*>(data) - static_cast<char*>(base));
  out.exported = 1;
  return out;
}

char* PeerMemoryMap::open(const MemoryExport& peer) {
  Key key;
  std::memcpy(key.data(), &peer.handle, key.size());
  auto it = open_.find(key);
  if (it == open_.end()) {
    if (open_.size() >= kMaxOpen) {
      closeAll();
    }
    void* base = nullptr;
    C10_CUDA_CHECK(cudaIpcOpenMemHandle(&base, peer.handle, cudaIpcMemLazyEnablePeerAccess));
    it = open_.emplace(key, static_cast<char*>(base)).first;
  }
  return it->second + peer.offset;
}

void PeerMemoryMap::closeAll() noexcept {
  (void)cudaStreamSynchronize(stream_);
  for (const auto& [key, base] : open_) {
    (void)cudaIpcCloseMemHandle(base);
  }
  (void)cudaGetLastError();
  open_.clear();
}

PeerMemoryMap::~PeerMemoryMap() {
  closeAll();
}

} // namespace dummy_collectives::cuda

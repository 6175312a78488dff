#include "cuda/ipc_transport.hpp"

#include <unistd.h>

#include <cstring>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

namespace dummy_collectives::cuda {
namespace {

constexpr const char* kKeyPrefix = "dummy_cuda_ipc/";

std::vector<uint8_t> bytesOf(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  return std::vector<uint8_t>(p, p + size);
}

} // namespace

struct CudaIpcTransport::Exported {
  int32_t pid = 0;
  int32_t device = -1;
  char pciBusId[32] = {}; // the GPU itself (device indices differ between processes)
  char problem[256] = {}; // empty: set up fine
  cudaIpcMemHandle_t memory{};
  cudaIpcEventHandle_t events[2]{};
};

CudaIpcTransport::CudaIpcTransport(
    int rank,
    int size,
    c10::Device device,
    c10::cuda::CUDAStream stream,
    size_t bufferBytes)
    : rank_(rank),
      size_(size),
      device_(device),
      stream_(stream),
      bufferBytes_(bufferBytes),
      waitWhat_(size),
      peerMemory_(stream.stream()),
      bases_(size, nullptr),
      events_(size, std::array<cudaEvent_t, 2>{nullptr, nullptr}) {}

CudaIpcTransport::Exported CudaIpcTransport::allocate() {
  Exported mine;
  mine.pid = static_cast<int32_t>(::getpid());
  mine.device = device_.index();
  C10_CUDA_CHECK(cudaDeviceGetPCIBusId(mine.pciBusId, sizeof(mine.pciBusId) - 1, device_.index()));
  // cudaMalloc, not the caching allocator: an IPC handle names a whole allocation.
  C10_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&own_), 2 * bufferBytes_));
  bases_[rank_] = own_;
  C10_CUDA_CHECK(cudaIpcGetMemHandle(&mine.memory, own_));
  for (int i = 0; i < 2; ++i) {
    C10_CUDA_CHECK(cudaEventCreateWithFlags(
        &events_[rank_][i], cudaEventDisableTiming | cudaEventInterprocess));
    C10_CUDA_CHECK(cudaIpcGetEventHandle(&mine.events[i], events_[rank_][i]));
  }
  return mine;
}

void CudaIpcTransport::map(int r, const Exported& peer) {
  TORCH_CHECK(
      peer.pid != static_cast<int32_t>(::getpid()),
      "rank ", r, " lives in this same process (CUDA IPC maps only other processes' memory)");
  void* base = nullptr;
  C10_CUDA_CHECK(cudaIpcOpenMemHandle(&base, peer.memory, cudaIpcMemLazyEnablePeerAccess));
  bases_[r] = static_cast<char*>(base);
  for (int i = 0; i < 2; ++i) {
    C10_CUDA_CHECK(cudaIpcOpenEventHandle(&events_[r][i], peer.events[i]));
  }
}

std::unique_ptr<CudaIpcTransport> CudaIpcTransport::create(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    c10::Device device,
    c10::cuda::CUDAStream stream,
    size_t bufferBytes,
    bool enabled,
    bool hostWaitOnSharedGpu) {
  c10::cuda::CUDAGuard guard(device);
  std::unique_ptr<CudaIpcTransport> transport(
      new CudaIpcTransport(rank, size, device, stream, bufferBytes));
  Exported mine;
  std::string problem;
  if (!enabled) {
    problem = "DUMMY_COLLECTIVES_CUDA_IPC=0";
  } else {
    try {
      mine = transport->allocate();
    } catch (const std::exception& e) {
      problem = c10::str("could not export its staging buffers: ", e.what());
    }
  }
  std::strncpy(mine.problem, problem.c_str(), sizeof(mine.problem) - 1);
  store->set(c10::str(kKeyPrefix, rank), bytesOf(&mine, sizeof(mine)));

  for (int r = 0; r < size && problem.empty(); ++r) {
    if (r == rank) {
      continue;
    }
    const std::vector<uint8_t> blob = store->get(c10::str(kKeyPrefix, r));
    TORCH_CHECK(blob.size() == sizeof(Exported), "dummy: malformed CUDA IPC record of rank ", r);
    Exported peer;
    std::memcpy(&peer, blob.data(), sizeof(peer));
    if (peer.problem[0] != '\0') {
      break; // that rank says why itself
    }
    if (hostWaitOnSharedGpu &&
        std::strncmp(peer.pciBusId, mine.pciBusId, sizeof(mine.pciBusId)) == 0) {
      transport->waitWhat_[r] = c10::str("rank ", r, "'s GPU work (it shares this GPU)");
    }
    try {
      transport->map(r, peer);
    } catch (const std::exception& e) {
      problem = c10::str("could not map rank ", r, "'s buffers: ", e.what());
    }
  }
  transport->sharesOneGpu_ = problem.empty();
  for (int r = 0; r < size; ++r) {
    if (r != rank && transport->waitWhat_[r].empty()) {
      transport->sharesOneGpu_ = false;
    }
  }
  store->set(c10::str(kKeyPrefix, "status/", rank), bytesOf(problem.data(), problem.size()));

  std::string problems;
  for (int r = 0; r < size; ++r) {
    const std::vector<uint8_t> status = store->get(c10::str(kKeyPrefix, "status/", r));
    if (!status.empty()) {
      problems += c10::str(
          "\n  rank ", r, ": ", std::string(status.begin(), status.end()).substr(0, 300));
    }
  }
  if (!problems.empty()) {
    if (rank == 0) {
      TORCH_WARN(
          "dummy: CUDA tensors of this group are staged through host memory (slower), as the "
          "CUDA IPC path could not be set up:",
          problems);
    }
    return nullptr;
  }
  return transport;
}

CudaIpcTransport::~CudaIpcTransport() {
  // Teardown must not throw, and may run after the CUDA context is gone (process exit): every
  // error is ignored. Our stream first, so nothing we queued still reads a peer's buffer.
  c10::cuda::CUDAGuard guard(device_);
  (void)cudaStreamSynchronize(stream_.stream());
  for (int r = 0; r < size_; ++r) {
    for (cudaEvent_t event : events_[r]) {
      if (event != nullptr) {
        (void)cudaEventDestroy(event);
      }
    }
    if (r != rank_ && bases_[r] != nullptr) {
      (void)cudaIpcCloseMemHandle(bases_[r]);
    }
  }
  if (own_ != nullptr) {
    (void)cudaFree(own_);
  }
  (void)cudaGetLastError();
}

bool CudaIpcTransport::completed(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError(); // not an error; do not leave it for the next check to find
    return false;
  }
  C10_CUDA_CHECK(status);
  return true;
}

void CudaIpcTransport::signal(int from, Transport& host) {
  const int parity = static_cast<int>(steps_ & 1);
  ++steps_;
  if (rank_ == from) {
    C10_CUDA_CHECK(cudaEventRecord(events_[rank_][parity], stream_.stream()));
  }
  host.exchange(); // the event is recorded before anyone queries it
  if (rank_ != from) {
    cudaEvent_t event = events_[from][parity];
    host.waitUntil(
        [event] { return completed(event); },
        waitWhat_[from].empty() ? c10::str("rank ", from, "'s GPU work") : waitWhat_[from]);
  }
}

void CudaIpcTransport::step(Transport& host) {
  const int parity = static_cast<int>(steps_ & 1);
  ++steps_;
  C10_CUDA_CHECK(cudaEventRecord(events_[rank_][parity], stream_.stream()));
  host.exchange();
  // A peer re-records this parity's event two steps later, which needs our next exchange, which
  // comes after these waits: each wait sees the record of this step (or a later, stronger one).
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) {
      continue;
    }
    cudaEvent_t event = events_[r][parity];
    if (!waitWhat_[r].empty()) {
      host.waitUntil([event] { return completed(event); }, waitWhat_[r]);
    }
    // Also after a host wait: it costs nothing then, and orders the memory accesses for CUDA.
    C10_CUDA_CHECK(cudaStreamWaitEvent(stream_.stream(), event, 0));
  }
}

} // namespace dummy_collectives::cuda

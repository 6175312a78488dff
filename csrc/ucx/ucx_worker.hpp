#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

namespace dummy_collectives::ucx {

// The TCP transport's segment, both ways (UCX_TCP_TX_SEG_SIZE / UCX_TCP_RX_SEG_SIZE unless the
// user set them): as large as the largest message the links send of a tensor's data, so each
// such message crosses in one system call where the socket takes it.
constexpr size_t kTcpSegmentBytes = size_t{1} << 20;

// A UCX worker with an endpoint to each peer, driven by whichever thread waits (no progress
// thread: a wait progresses the worker itself, then sleeps on its event fd). One ucp context
// serves the whole process; each set of peers gets a worker of its own.
//
// Endpoints use UCP_ERR_HANDLING_MODE_PEER: a peer's failure completes its requests with an
// error and marks it lost (lostReason), instead of hanging. That mode also keeps UCX off
// shared memory between the peers, which is right: they are on other hosts.
class Worker {
 public:
  // `hostAddress`: the address this host's peers reach it on (the process's first worker
  // decides, for the whole process, whether UCX may use bridges: context()).
  explicit Worker(const std::string& hostAddress);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // This worker's address, to publish to the peers.
  std::vector<uint8_t> address() const;
  // Connects to peer `index` at `address` (one of address()'s from another process).
  void connect(int index, const std::vector<uint8_t>& address);
  // Closes every endpoint, cancelling what is in flight (the group is done with them).
  void closeAll();

  ucp_worker_h handle() const {
    return worker_;
  }
  ucp_ep_h endpoint(int index) const {
    return endpoints_.at(index).ep;
  }
  // Why peer `index` was lost ("" while it is not): UCX's status for its endpoint.
  std::string lostReason(int index) const;
  // The transports the endpoint to `index` uses ("tcp/eth0"), where UCX can tell.
  std::string transports(int index) const;

  // Progresses until no more events are pending.
  void progress();
  // Sleeps until the worker has events or `until` passes (false then), after a progress pass
  // found nothing to do.
  bool sleepUntil(std::chrono::steady_clock::time_point until);

 private:
  struct Endpoint {
    ucp_ep_h ep = nullptr;
    // Set from UCX's error callback (inside progress, on the waiting thread).
    std::shared_ptr<std::atomic<int>> lost = std::make_shared<std::atomic<int>>(UCS_OK);
  };
  ucp_worker_h worker_ = nullptr;
  int eventFd_ = -1;
  std::vector<Endpoint> endpoints_;
};

// The process's ucp context (tag matching, wake-ups), made at the first call; UCX may use
// Linux bridges where `hostAddress` is on one. Throws where UCX did not load (ucx_api.hpp) or
// refused to start.
ucp_context_h context(const std::string& hostAddress);

// Whether the process's context moves CUDA memory (UCX was built with CUDA and found a driver):
// then a tensor in CUDA memory is sent and received where it lies, UCX choosing how (GPUDirect
// RDMA where the network has it, else through host buffers of its own).
bool movesCudaMemory(const std::string& hostAddress);

} // namespace dummy_collectives::ucx

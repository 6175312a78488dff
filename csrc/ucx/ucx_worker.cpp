#include "ucx/ucx_worker.hpp"

#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include <c10/util/StringUtil.h>

#include "ucx/ucx_api.hpp"

namespace dummy_collectives::ucx {
namespace {

// Whether `address` (numeric, IPv4 or IPv6) belongs to an interface of this host that is a
// Linux bridge.
bool onBridge(const std::string& address) {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) {
    return false;
  }
  bool bridge = false;
  for (const ifaddrs* entry = all; entry != nullptr && !bridge; entry = entry->ifa_next) {
    const sockaddr* at = entry->ifa_addr;
    if (at == nullptr || (at->sa_family != AF_INET && at->sa_family != AF_INET6)) {
      continue;
    }
    char host[NI_MAXHOST] = {};
    const socklen_t length =
        at->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (::getnameinfo(at, length, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0 ||
        address != host) {
      continue;
    }
    struct stat info{};
    bridge = ::stat(c10::str("/sys/class/net/", entry->ifa_name, "/bridge").c_str(), &info) == 0;
  }
  ::freeifaddrs(all);
  return bridge;
}

ucp_context_h makeContext(const std::string& hostAddress) {
  const Api& ucp = api();
  ucp_config_t* config = nullptr;
  check(ucp.ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  // UCX leaves out network interfaces that are Linux bridges, rightly where they are local ones
  // with the same address on every host (docker0, virbr0). Where this host's own address, the
  // one the hosts reach each other on, is on a bridge (a VM host's br0), UCX must take bridges.
  // The user's setting wins.
  if (std::getenv("UCX_TCP_BRIDGE_ENABLE") == nullptr && onBridge(hostAddress)) {
    ucp.ucp_config_modify(config, "TCP_BRIDGE_ENABLE", "y");
  }
  // TCP moves a message in segments, a system call each way: UCX's default segment suits
  // latency between processes that exchange little, ours carry whole tensors. A segment that
  // holds a whole piece of the links' data (kTcpSegmentBytes) moves each piece in one call where
  // the socket takes it, where smaller ones cost a call, a wake-up and a header each
  // (docs/benchmarks.md, "UCX under the links"). The user's settings win.
  const std::string segment = c10::str(kTcpSegmentBytes >> 10, "k");
  for (const char* name : {"TCP_TX_SEG_SIZE", "TCP_RX_SEG_SIZE"}) {
    if (std::getenv(c10::str("UCX_", name).c_str()) == nullptr) {
      ucp.ucp_config_modify(config, name, segment.c_str());
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1; // groups on several threads make workers of one context
  ucp_context_h context = nullptr;
  unsigned major = 0, minor = 0, release = 0;
  ucp.ucp_get_version(&major, &minor, &release);
  // The API version asked for is the library's where it is older than these headers: every
  // field this build sets is behind a field mask that older libraries know.
  const ucs_status_t status = ucp.ucp_init_version(
      UCP_API_MAJOR, std::min<unsigned>(minor, UCP_API_MINOR), &params, config, &context);
  ucp.ucp_config_release(config);
  check(status, "ucp_init");
  return context;
}

} // namespace

ucp_context_h context(const std::string& hostAddress) {
  static ucp_context_h made = makeContext(hostAddress); // a throw leaves it to the next call
  return made;
}

bool movesCudaMemory(const std::string& hostAddress) {
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  check(api().ucp_context_query(context(hostAddress), &attr), "ucp_context_query");
  return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

Worker::Worker(const std::string& hostAddress) {
  const Api& ucp = api();
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Any thread may hang the links up while another waits on them (LinkHangUp).
  params.thread_mode = UCS_THREAD_MODE_MULTI;
  check(ucp.ucp_worker_create(context(hostAddress), &params, &worker_), "ucp_worker_create");
  const ucs_status_t status = ucp.ucp_worker_get_efd(worker_, &eventFd_);
  if (status != UCS_OK) {
    ucp.ucp_worker_destroy(worker_);
    check(status, "ucp_worker_get_efd");
  }
}

Worker::~Worker() {
  closeAll();
  api().ucp_worker_destroy(worker_);
}

std::vector<uint8_t> Worker::address() const {
  const Api& ucp = api();
  ucp_address_t* address = nullptr;
  size_t length = 0;
  check(ucp.ucp_worker_get_address(worker_, &address, &length), "ucp_worker_get_address");
  const auto* bytes = reinterpret_cast<const uint8_t*>(address);
  std::vector<uint8_t> copy(bytes, bytes + length);
  ucp.ucp_worker_release_address(worker_, address);
  return copy;
}

void Worker::connect(int index, const std::vector<uint8_t>& address) {
  if (static_cast<int>(endpoints_.size()) <= index) {
    endpoints_.resize(index + 1);
  }
  Endpoint& endpoint = endpoints_[index];
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = [](void* lost, ucp_ep_h, ucs_status_t status) {
    static_cast<std::atomic<int>*>(lost)->store(status);
  };
  params.err_handler.arg = endpoint.lost.get();
  check(api().ucp_ep_create(worker_, &params, &endpoint.ep), "ucp_ep_create");
}

void Worker::closeAll() {
  const Api& ucp = api();
  std::vector<ucs_status_ptr_t> closing;
  for (auto& endpoint : endpoints_) {
    if (endpoint.ep == nullptr) {
      continue;
    }
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    params.flags = UCP_EP_CLOSE_FLAG_FORCE; // no goodbye: a peer may be gone already
    const ucs_status_ptr_t request = ucp.ucp_ep_close_nbx(endpoint.ep, &params);
    if (UCS_PTR_IS_PTR(request)) {
      closing.push_back(request);
    }
    endpoint.ep = nullptr;
  }
  for (const ucs_status_ptr_t request : closing) {
    while (ucp.ucp_request_check_status(request) == UCS_INPROGRESS) {
      ucp.ucp_worker_progress(worker_);
    }
    ucp.ucp_request_free(request);
  }
}

std::string Worker::lostReason(int index) const {
  const auto status = static_cast<ucs_status_t>(endpoints_.at(index).lost->load());
  return status == UCS_OK ? "" : api().ucs_status_string(status);
}

std::string Worker::transports(int index) const {
  const ucp_ep_h ep = endpoints_.at(index).ep;
  if (ep == nullptr) {
    return "";
  }
  std::array<ucp_transport_entry_t, 8> entries{};
  ucp_ep_attr_t attr{};
  attr.field_mask = UCP_EP_ATTR_FIELD_TRANSPORTS;
  attr.transports.entries = entries.data();
  attr.transports.num_entries = entries.size();
  attr.transports.entry_size = sizeof(ucp_transport_entry_t);
  if (api().ucp_ep_query(ep, &attr) != UCS_OK) {
    return "";
  }
  std::string text;
  for (unsigned i = 0; i < attr.transports.num_entries; ++i) {
    const std::string entry = c10::str(entries[i].transport_name, "/", entries[i].device_name);
    if (text.find(entry) == std::string::npos) {
      text += (text.empty() ? "" : ", ") + entry;
    }
  }
  return text;
}

void Worker::progress() {
  const Api& ucp = api();
  while (ucp.ucp_worker_progress(worker_) != 0) {
  }
}

bool Worker::sleepUntil(std::chrono::steady_clock::time_point until) {
  const ucs_status_t armed = api().ucp_worker_arm(worker_);
  if (armed == UCS_ERR_BUSY) {
    return true; // events came in meanwhile
  }
  check(armed, "ucp_worker_arm");
  int waitMs = -1;
  if (until != std::chrono::steady_clock::time_point::max()) {
    const auto left = until - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) {
      return false;
    }
    // Rounded up: a wait rounded down to 0 ms would spin until the deadline.
    waitMs = static_cast<int>(
        std::chrono::ceil<std::chrono::milliseconds>(left).count());
  }
  pollfd events{eventFd_, POLLIN, 0};
  const int ready = ::poll(&events, 1, waitMs);
  if (ready < 0 && errno != EINTR) {
    throw std::runtime_error(c10::str("poll on UCX's event fd: ", std::strerror(errno)));
  }
  return ready != 0;
}

} // namespace dummy_collectives::ucx

#include "c10d/host_staging.hpp"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace dummy_collectives {

HostStaging::HostStaging(at::Tensor user) : user_(std::move(user)) {
  if (!user_.device().is_cpu()) {
    // Device-generic (c10::Event, not CUDA APIs), so the CPU-only build compiles it unchanged.
    c10::impl::VirtualGuardImpl guard(user_.device().type());
    ready_.emplace(user_.device().type());
    ready_->record(guard.getStream(user_.device()));
  }
}

at::Tensor& HostStaging::acquire(bool copyIn) {
  if (ready_) {
    ready_->synchronize();
    c10::DeviceGuard device(user_.device());
    host_ = copyIn ? user_.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true,
                              at::MemoryFormat::Contiguous)
                   : at::empty(user_.sizes(), user_.options().device(at::kCPU));
  } else if (!user_.is_contiguous()) {
    host_ = copyIn ? user_.contiguous() : at::empty(user_.sizes(), user_.options());
  } else {
    return user_; // used in place (no copy of the handle: that is two atomic updates)
  }
  return host_;
}

void HostStaging::release(bool copyOut) {
  if (copyOut && host_.defined()) { // staged
    c10::OptionalDeviceGuard device;
    if (ready_) {
      device.reset_device(user_.device());
    }
    user_.copy_(host_);
    if (ready_) {
      // copy_ from pageable host memory returns once the data is on the device's stream; wait
      // for it so a completed Work means the tensor holds the result.
      c10::impl::VirtualGuardImpl guard(user_.device().type());
      guard.getStream(user_.device()).synchronize();
    }
  }
  host_ = at::Tensor();
}

HostStagingList::HostStagingList(const std::vector<at::Tensor>& users)
    : items_(users.begin(), users.end()) {}

std::vector<at::Tensor> HostStagingList::acquire(bool copyIn) {
  std::vector<at::Tensor> hosts;
  hosts.reserve(items_.size());
  for (auto& item : items_) {
    hosts.push_back(item.acquire(copyIn));
  }
  return hosts;
}

void HostStagingList::release(bool copyOut) {
  for (auto& item : items_) {
    item.release(copyOut);
  }
}

} // namespace dummy_collectives

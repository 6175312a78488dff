#include <dummy_collectives/device_collectives.hpp>

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

namespace dummy_collectives {

#if defined(DUMMY_COLLECTIVES_WITH_CUDA)
namespace cuda {
std::shared_ptr<DeviceCollectives> makeCudaCollectives(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    const BackendOptions& options);
} // namespace cuda
#endif

std::shared_ptr<DeviceCollectives> makeDeviceCollectives(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    const BackendOptions& options) {
#if defined(DUMMY_COLLECTIVES_WITH_CUDA)
  return cuda::makeCudaCollectives(store, rank, size, options);
#else
  (void)store, (void)rank, (void)size, (void)options;
  return nullptr;
#endif
}

void waitForDevice(const at::Tensor& t) {
  if (t.device().is_cpu()) {
    return;
  }
  const c10::impl::VirtualGuardImpl device(t.device().type());
  device.getStream(t.device()).synchronize();
}

#if !defined(DUMMY_COLLECTIVES_WITH_CUDA)
void foldOnDevice(const ReduceSpec&, const at::Tensor& out, const std::vector<at::Tensor>&) {
  TORCH_CHECK(false, "dummy_collectives: this build folds no ", out.device(),
              " tensors (a CPU-only build)");
}
#endif

} // namespace dummy_collectives

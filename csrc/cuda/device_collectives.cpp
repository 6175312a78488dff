#include <dummy_collectives/device_collectives.hpp>

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

} // namespace dummy_collectives

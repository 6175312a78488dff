// foldOnDevice (device_collectives.hpp) on CUDA: the device twin of the host kernels, for the
// folds of collectives across hosts whose tensors stay in CUDA memory.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include "cuda/device_reduce.hpp"
#include <dummy_collectives/device_collectives.hpp>

namespace dummy_collectives {

static_assert(kMaxDeviceFoldSources <= cuda::kMaxDeviceSources,
              "one kernel folds every source");

void foldOnDevice(const ReduceSpec& spec, const at::Tensor& out,
                  const std::vector<at::Tensor>& sources) {
  TORCH_CHECK(out.is_cuda() && out.is_contiguous(),
              "dummy_collectives: a device fold into a contiguous CUDA tensor, not ", out.device());
  TORCH_CHECK(!sources.empty() && sources.size() <= kMaxDeviceFoldSources,
              "dummy_collectives: a device fold of 1 to ", kMaxDeviceFoldSources,
              " sources, not ", sources.size());
  std::vector<const void*> addresses;
  for (const at::Tensor& source : sources) {
    TORCH_CHECK(source.device() == out.device() && source.numel() == out.numel() &&
                    source.scalar_type() == out.scalar_type() && source.is_contiguous(),
                "dummy_collectives: a device fold's sources are like its output");
    addresses.push_back(source.data_ptr());
  }
  if (out.numel() == 0) {
    return;
  }
  const c10::cuda::CUDAGuard guard(out.device());
  cuda::launchReduce(spec, out.data_ptr(), nullptr, addresses.data(),
                     static_cast<int>(addresses.size()), out.numel(),
                     c10::cuda::getCurrentCUDAStream(out.device().index()));
}

} // namespace dummy_collectives

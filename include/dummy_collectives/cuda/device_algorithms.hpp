#pragma once

// Collectives over CudaIpcTransport (CUDA builds only). Each queues its device work on the
// transport's stream (which the caller has made current and ordered after the user's stream);
// the host only takes part in the step() handshakes. Tensors are contiguous, on the transport's
// device.

#include <ATen/core/Tensor.h>

#include <dummy_collectives/cuda/ipc_transport.hpp>
#include <dummy_collectives/reduce_ops.hpp>
#include <dummy_collectives/transport.hpp>

namespace dummy_collectives::cuda {

// In place. Up to kDeviceOneShotMaxBytes (and always for two ranks) every rank folds every
// rank's chunk; larger messages on more ranks reduce-scatter then all-gather through the buffers.
constexpr size_t kDeviceOneShotMaxBytes = size_t{1} << 20;
void allreduce(CudaIpcTransport& dev, Transport& host, at::Tensor& tensor, const ReduceSpec& spec);

void broadcast(CudaIpcTransport& dev, Transport& host, at::Tensor& tensor, int root);

// output: size() * input.numel() elements, rank r's input at r * input.numel().
void allgatherBase(CudaIpcTransport& dev, Transport& host, at::Tensor& output,
                   const at::Tensor& input);

// input: size() * output.numel() elements; output receives part rank() of the reduction.
void reduceScatterBase(
    CudaIpcTransport& dev,
    Transport& host,
    at::Tensor& output,
    const at::Tensor& input,
    const ReduceSpec& spec);

} // namespace dummy_collectives::cuda

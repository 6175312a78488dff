#pragma once

// Collectives over CudaIpcTransport (CUDA builds only). Each queues its device work on the
// transport's stream (which the caller has made current and ordered after the user's stream);
// the host only takes part in the step() handshakes. Tensors are contiguous, on the transport's
// device.

#include <ATen/core/Tensor.h>

#include "cuda/ipc_transport.hpp"
#include <dummy_collectives/reduce_ops.hpp>
#include <dummy_collectives/transport.hpp>

namespace dummy_collectives::cuda {

// In place. Up to kDeviceOneShotMaxBytes (and always for two ranks) every rank folds every
// rank's chunk; larger messages on more ranks reduce-scatter then all-gather through the buffers.
constexpr size_t kDeviceOneShotMaxBytes = size_t{1} << 20;
void allreduce(CudaIpcTransport& dev, Transport& host, at::Tensor& tensor, const ReduceSpec& spec);

// The rank that does a collective's GPU work for all where every rank shares one GPU.
constexpr int kSharedGpuLeader = 0;

// In place, where dev.sharesOneGpu(): processes on one GPU take turns on it (time slices), and
// each hand-over costs more than the data (docs/benchmarks.md, "Why the leader does the GPU
// work"). So the leader does all the GPU work: one kernel reads every rank's tensor (opened by
// CUDA IPC, no staging copy) and writes the result into every rank's tensor; the others queue
// nothing on the GPU and return once the leader's kernel has completed. Their tensors must be
// ready (their streams drained) when they call it. Returns false on every rank, having moved
// nothing, when some rank's tensor cannot be exported (see exportMemory); the caller then takes
// allreduce().
bool allreduceOnSharedGpu(
    CudaIpcTransport& dev,
    Transport& host,
    at::Tensor& tensor,
    const ReduceSpec& spec);

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

#pragma once

#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "hierarchy/levels.hpp"
#include <dummy_collectives/reduce_ops.hpp>

// The collectives of a group that spans hosts, written once against Levels: the host's level
// (shared memory) inside each host, a cross-host engine between hosts. Every function takes
// contiguous host tensors and starts with the agreement (agreement.hpp) unless its name says
// `Data` (the caller agreed already, as coalesced collectives do once for all their tensors).
//
// Uniform topologies (every host runs L ranks) use every rank's rail: rank (h, k) exchanges
// across hosts only with the ranks (h', k), so each of the L rails carries 1/L of the traffic
// and the fold work. Otherwise the hosts' leaders carry the cross-host stage (reduce to the
// leader, exchange among leaders, broadcast inside the host). Large messages are cut into
// chunks and pipelined (pipeline.hpp). Folds across hosts use dummy's reduction kernels in host
// order, so results are bit-identical on every rank.
namespace dummy_collectives::hierarchy::two_level {

// Pipelines cut a message into at least kMinChunks chunks of at least
// inter_host_min_chunk_bytes (256 KiB on a slow link: inter_host/link_probe.hpp), at most
// inter_host_chunk_bytes each: on a link slower than memory the in-host stages of one chunk then
// hide behind the cross-host stage of another, and only the first chunk's reduce-scatter and the
// last one's all-gather are exposed; large messages keep large chunks, fewer operations on the
// engine. Fewer chunks, or a larger least size, leave a slow link idle around the exposed
// stages; more chunks cost unshaped links a core hand-off per operation (docs/benchmarks.md,
// "Chunk size and count").
constexpr int64_t kMinChunks = 8;

// In place; every dtype and ReduceOp of the one-host path (AVG divides the total once).
void allreduce(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& data,
    const ReduceSpec& spec);
void allreduceData(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& data,
    const ReduceSpec& spec);

// Only `root` receives the result; every other rank's tensor is left as it was.
void reduce(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& data,
    const ReduceSpec& spec,
    int root);

void broadcast(const Levels& levels, const OpContext& ctx, at::Tensor& data, int root);

// output (size() * input.numel() elements) receives every rank's input, in rank order.
void allgather(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output);
void allgatherData(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output);

// output (n elements) receives part rank() of the reduction of every rank's input (size() * n
// elements, part d for rank d).
void reduceScatter(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output,
    const ReduceSpec& spec);
void reduceScatterData(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output,
    const ReduceSpec& spec);

void barrier(const Levels& levels, const OpContext& ctx);

// allreduce:device, broadcast:device and allgather:device (on_device.cpp), whatever the table
// says: each tensor stays in the memory it lives in, host or CUDA. Inside a host the steps take
// the host's device path (CUDA IPC); between hosts the leaders' links move that memory where it
// lies (UCX moves CUDA memory itself: GPUDirect RDMA where the network has it, else through
// buffers of its own) and the device folds it. The path of CUDA tensors on a group whose every
// host's UCX moves CUDA memory (TwoLevelLowering::deviceFor); host tensors take it only where
// DUMMY_COLLECTIVES_ALGO asks, which tests that path where no GPU is. Contiguous tensors.
void allreduceOnDevice(
    const Levels& levels, const OpContext& ctx, at::Tensor& data, const ReduceSpec& spec);
void broadcastOnDevice(const Levels& levels, const OpContext& ctx, at::Tensor& data, int root);
void allgatherOnDevice(
    const Levels& levels, const OpContext& ctx, const at::Tensor& input, at::Tensor& output);

// Through the engine over every rank, after the agreement (no two-level form pays for these).
// On root, outputs[r] receives rank r's input; elsewhere outputs is empty.
void gather(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    std::vector<at::Tensor>& outputs,
    int root);
// Rank r receives root's inputs[r]; elsewhere inputs is empty.
void scatter(
    const Levels& levels,
    const OpContext& ctx,
    std::vector<at::Tensor>& inputs,
    at::Tensor& output,
    int root);
// Rank r's bytes [sendOffsets[d], +sendBytes[d]) of `input` land in rank d's `output` at its
// recvOffsets[r]. Every rank's sizes are checked against its peers' first (an exchange over the
// engine), so mismatched splits raise on every rank before data moves.
void alltoall(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output,
    const std::vector<int64_t>& sendBytes,
    const std::vector<int64_t>& recvBytes);
// The sum of every rank's sparse COO tensor, as gloo computes it.
at::Tensor allreduceSparse(const Levels& levels, const OpContext& ctx, const at::Tensor& input);

} // namespace dummy_collectives::hierarchy::two_level

#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kernels/reduce_kernel.hpp"
#include <dummy_collectives/transport.hpp>
#include "shm/worker_pool.hpp"

// The collectives, written once against Transport. Every function expects Transport::beginOp()
// to have been called, takes contiguous host tensors, streams any size through the fixed-size
// slots, and performs at least one exchange (so even empty collectives check descriptors).
namespace dummy_collectives::algorithms {

// The message sizes (bytes of the tensor a rank ends up with) at which a collective reaches the
// peers' memory directly (Transport::sharePointers) instead of streaming through the slots,
// where the transport can. The default covers nothing.
struct PeerAccessWindow {
  size_t minBytes = SIZE_MAX;
  size_t maxBytes = 0;
  bool covers(size_t bytes) const {
    return bytes >= minBytes && bytes <= maxBytes;
  }
};

// Where allreduce changes algorithm (BackendOptions; every rank of a group uses the same).
struct AllreducePlan {
  size_t oneShotMaxBytes;
  PeerAccessWindow peerAccess;
};

// Up to oneShotMaxBytes: every rank reduces every slot (one exchange). In the peer-access window,
// where the transport lets ranks reach each other's memory: rank r reads part r of every peer's
// tensor straight from the peer, a cache-sized piece at a time, folds it into its own and writes
// the result straight into every peer's tensor (two exchanges in all). Otherwise, per slot-sized
// chunk, rank r reduces part r of all slots (reduce-scatter), then all copy every part out
// (all-gather), two exchanges per chunk, pipelined through the double-buffered slots.
// Large messages split each rank's copies and folds over `workers`.
void allreduce(
    Transport& t,
    at::Tensor& data,
    const ReduceSpec& spec,
    const AllreducePlan& plan,
    WorkerPool& workers);

// Like allreduce, but only `root` receives the result; other ranks' tensors are left unchanged.
void reduce(
    Transport& t,
    at::Tensor& data,
    const ReduceSpec& spec,
    int root,
    size_t oneShotMaxBytes,
    WorkerPool& workers);

// The gathers stream through the slots (two copies per byte, one exchange per
// slot-sized chunk) or, for messages in `window` where the transport can, read the peers' tensors
// straight into the outputs (one copy per byte, two exchanges in all), split over `workers` when
// given.

// outputs[r] receives rank r's input.
void allgather(
    Transport& t,
    const at::Tensor& input,
    std::vector<at::Tensor>& outputs,
    const PeerAccessWindow& window = {},
    WorkerPool* workers = nullptr);

// output (world size * input.numel() elements) receives the inputs concatenated in rank order.
void allgatherInto(
    Transport& t,
    const at::Tensor& input,
    at::Tensor& output,
    const PeerAccessWindow& window = {},
    WorkerPool* workers = nullptr);

// The sum of every rank's sparse COO tensor `input` (on the CPU, same sizes everywhere), as gloo
// computes it: each rank's nnz is gathered, then every rank's indices and values padded to the
// largest nnz; the tensors are added in rank order and coalesced.
at::Tensor allreduceSparse(Transport& t, const at::Tensor& input);

// On root, outputs[r] receives rank r's input; other ranks pass an empty outputs list.
void gather(
    Transport& t,
    const at::Tensor& input,
    std::vector<at::Tensor>& outputs,
    int root,
    const PeerAccessWindow& window = {},
    WorkerPool* workers = nullptr);

// Rank r receives root's inputs[r]; other ranks pass an empty inputs list.
void scatter(Transport& t, const std::vector<at::Tensor>& inputs, at::Tensor& output, int root);

// output = reduction over ranks of each rank's inputs[rank()]: each slot is cut into one sub-slot
// per destination rank, so every step moves every destination's share with one exchange.
void reduceScatter(
    Transport& t,
    const std::vector<at::Tensor>& inputs,
    at::Tensor& output,
    const ReduceSpec& spec);

// reduceScatter over one contiguous input of world size * output.numel() elements (part d for
// rank d), as reduce_scatter_tensor passes it. In `window` (bytes of the output), where the
// transport can, rank r reads part r of every peer's input straight from the peer and folds it
// into its output (two exchanges in all).
void reduceScatterTensor(
    Transport& t,
    const at::Tensor& input,
    at::Tensor& output,
    const ReduceSpec& spec,
    const PeerAccessWindow& window,
    WorkerPool& workers);

// A contiguous byte range of a tensor; all-to-all moves whole ranges per peer.
struct Span {
  std::byte* data;
  size_t bytes;
};

// Rank r's sends[d] lands in rank d's receives[r]. Ranges may differ per pair (uneven splits):
// a first exchange publishes every rank's send and receive sizes so every rank validates every
// pair identically (and raises identically) before any data moves.
void alltoall(Transport& t, const std::vector<Span>& sends, const std::vector<Span>& receives);

// Through the slots only: the root copies each chunk in while the others copy the previous one
// out, so two cores share the work; reading the root's tensor would leave it all to the readers,
// which is slower (docs/benchmarks.md, "Peer access").
void broadcast(Transport& t, at::Tensor& data, int root);

void barrier(Transport& t);

} // namespace dummy_collectives::algorithms

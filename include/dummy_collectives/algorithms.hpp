#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include <dummy_collectives/reduce_kernel.hpp>
#include <dummy_collectives/transport.hpp>
#include <dummy_collectives/worker_pool.hpp>

// The collectives, written once against Transport. Every function expects Transport::beginOp()
// to have been called, takes contiguous host tensors, streams any size through the fixed-size
// slots, and performs at least one exchange (so even empty collectives check descriptors).
namespace dummy_collectives::algorithms {

// Where allreduce changes algorithm (BackendOptions; every rank of a group uses the same).
struct AllreducePlan {
  size_t oneShotMaxBytes;
  size_t peerReadMinBytes; // peer reads from here...
  size_t peerReadMaxBytes; // ...to here, where the transport has them
};

// Up to oneShotMaxBytes: every rank reduces every slot (one exchange). From peerReadMinBytes to
// peerReadMaxBytes, where the transport lets ranks read each other's memory: rank r reads part r of every peer's
// tensor straight from the peer, folds it into its own, then reads the other reduced parts from
// their owners (three exchanges in all, one copy per byte moved). Otherwise, per slot-sized
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

// outputs[r] receives rank r's input.
void allgather(Transport& t, const at::Tensor& input, std::vector<at::Tensor>& outputs);

// output (world size * input.numel() elements) receives the inputs concatenated in rank order.
void allgatherInto(Transport& t, const at::Tensor& input, at::Tensor& output);

// The sum of every rank's sparse COO tensor `input` (on the CPU, same sizes everywhere), as gloo
// computes it: each rank's nnz is gathered, then every rank's indices and values padded to the
// largest nnz; the tensors are added in rank order and coalesced.
at::Tensor allreduceSparse(Transport& t, const at::Tensor& input);

// On root, outputs[r] receives rank r's input; other ranks pass an empty outputs list.
void gather(Transport& t, const at::Tensor& input, std::vector<at::Tensor>& outputs, int root);

// Rank r receives root's inputs[r]; other ranks pass an empty inputs list.
void scatter(Transport& t, const std::vector<at::Tensor>& inputs, at::Tensor& output, int root);

// output = reduction over ranks of each rank's inputs[rank()]: each slot is cut into one sub-slot
// per destination rank, so every step moves every destination's share with one exchange.
void reduceScatter(
    Transport& t,
    const std::vector<at::Tensor>& inputs,
    at::Tensor& output,
    const ReduceSpec& spec);

// A contiguous byte range of a tensor; all-to-all moves whole ranges per peer.
struct Span {
  std::byte* data;
  size_t bytes;
};

// Rank r's sends[d] lands in rank d's receives[r]. Ranges may differ per pair (uneven splits):
// a first exchange publishes every rank's send and receive sizes so every rank validates every
// pair identically (and raises identically) before any data moves.
void alltoall(Transport& t, const std::vector<Span>& sends, const std::vector<Span>& receives);

void broadcast(Transport& t, at::Tensor& data, int root);

void barrier(Transport& t);

} // namespace dummy_collectives::algorithms

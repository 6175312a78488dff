#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include <dummy_collectives/reduce_kernel.hpp>
#include <dummy_collectives/transport.hpp>

// The collectives, written once against Transport. Every function expects Transport::beginOp()
// to have been called, takes contiguous host tensors, streams any size through the fixed-size
// slots, and performs at least one exchange (so even empty collectives check descriptors).
namespace dummy_collectives::algorithms {

// Up to oneShotMaxBytes: every rank reduces every slot (one exchange). Larger: per slot-sized
// chunk, rank r reduces part r of all slots (reduce-scatter), then all copy every part out
// (all-gather), two exchanges per chunk, pipelined through the double-buffered slots.
void allreduce(Transport& t, at::Tensor& data, const ReduceSpec& spec, size_t oneShotMaxBytes);

// outputs[r] receives rank r's input.
void allgather(Transport& t, const at::Tensor& input, std::vector<at::Tensor>& outputs);

// output (world size * input.numel() elements) receives the inputs concatenated in rank order.
void allgatherInto(Transport& t, const at::Tensor& input, at::Tensor& output);

void broadcast(Transport& t, at::Tensor& data, int root);

void barrier(Transport& t);

} // namespace dummy_collectives::algorithms

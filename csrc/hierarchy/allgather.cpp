#include "hierarchy/two_level_forms.hpp"

#include <cstring>

namespace dummy_collectives::hierarchy::two_level {

void allgatherData(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output) {
  at::Tensor in = input.reshape(-1);
  at::Tensor out = output.view(-1);
  const Algorithm algorithm = levels.algorithms.chooseBeyondRecords(
      Collective::kAllgather, static_cast<size_t>(out.numel()) * out.element_size());
  if (algorithm == Algorithm::kAllgatherLeaders || algorithm == Algorithm::kAllgatherDevice) {
    allgatherThroughLeaders(levels, ctx, in, out);
    return;
  }
  if (algorithm == Algorithm::kAllgatherSwap) {
    // Rank order is host order: one all-to-all of the input to every member writes the output
    // in place (one step, where gloo's all-gather ring takes one per other host; two hosts
    // swap: InterHostEngine::allgather).
    debug_log::note("one rank per host, all-to-all of the input");
    at::Tensor outBytes = bytesOf(out);
    at::Tensor inBytes = bytesOf(in);
    levels.rail->wait(levels.rail->allgather(outBytes, inBytes), ctx);
    return;
  }
  allgatherOnRails(levels, ctx, in, out);
}

void allgather(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output) {
  const Topology& topology = levels.topology;
  const size_t bytes = static_cast<size_t>(input.numel()) * input.element_size();
  if (levels.algorithms.choose(Collective::kAllgather, bytes * topology.size()) !=
      Algorithm::kAllgatherRecords) {
    agree(levels, ctx);
    allgatherData(levels, ctx, input, output);
    return;
  }
  // Small: every host's inputs ride with the agreement, host by host, each host's in local
  // rank order (hosts may differ in size).
  debug_log::note("inline with the agreement");
  const Combine combine{concatenated, concatenated};
  const Bytes result = agree(levels, ctx, viewOf(input.contiguous()), &combine);
  at::Tensor out = output.view(-1);
  placeByRank(topology, result.data(), out, static_cast<int64_t>(bytes));
}

} // namespace dummy_collectives::hierarchy::two_level

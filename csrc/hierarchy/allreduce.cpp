#include "hierarchy/two_level_forms.hpp"

#include <cstring>

namespace dummy_collectives::hierarchy::two_level {

namespace {

// `algorithm`: one beyond the records. `agreement`, if given, is still to be finished.
void allreduceData(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& data,
    const ReduceSpec& spec,
    Algorithm algorithm,
    Agreement* agreement) {
  at::Tensor flat = data.view(-1);
  if (algorithm == Algorithm::kAllreduceRails) {
    allreduceOnRails(levels, ctx, flat, spec, agreement);
    return;
  }
  // Every other form's first stage writes the rank's own tensor: agree first.
  if (agreement != nullptr) {
    agreement->finish();
  }
  if (algorithm == Algorithm::kAllreduceLeaders) {
    allreduceThroughLeaders(levels, ctx, flat, spec);
    return;
  }
  if (algorithm == Algorithm::kAllreduceDevice) {
    allreduceOnDeviceData(levels, ctx, flat, spec);
    return;
  }
  allreduceOneRankPerHost(levels, ctx, flat, spec, algorithm);
}

} // namespace

void allreduceData(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& data,
    const ReduceSpec& spec) {
  const size_t bytes = static_cast<size_t>(data.numel()) * data.element_size();
  allreduceData(levels, ctx, data, spec,
                levels.algorithms.chooseBeyondRecords(Collective::kAllreduce, bytes), nullptr);
}

void allreduce(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& data,
    const ReduceSpec& spec) {
  const size_t bytes = static_cast<size_t>(data.numel()) * data.element_size();
  const Algorithm algorithm = levels.algorithms.choose(Collective::kAllreduce, bytes);
  if (algorithm != Algorithm::kAllreduceRecords) {
    Agreement agreement(levels, ctx);
    if (!agreement.hostAgrees()) {
      agreement.finish(); // raises: this host's ranks called different collectives
    }
    allreduceData(levels, ctx, data, spec, algorithm, &agreement);
    return;
  }
  // Small: the data rides with the agreement. Each host folds its ranks' payloads, then every
  // host's sum is folded in host order (the same order on every rank: identical results).
  debug_log::note("inline with the agreement");
  const int64_t numel = data.numel();
  const Combine combine{
      [&](const std::vector<ByteView>& local) {
        return foldPayloads(hostSpec(spec), local, bytes, numel);
      },
      [&](const std::vector<ByteView>& hosts) {
        return foldPayloads(crossSpec(spec), hosts, bytes, numel);
      }};
  const Bytes result = agree(levels, ctx, viewOf(data), &combine);
  if (bytes > 0) {
    std::memcpy(data.data_ptr(), result.data(), bytes);
  }
}

void reduce(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& data,
    const ReduceSpec& spec,
    int root) {
  // The two-level allreduce on a copy: the root keeps the result, the others their input.
  at::Tensor scratch = data.clone();
  allreduce(levels, ctx, scratch, spec);
  if (levels.topology.rank() == root) {
    data.copy_(scratch);
  }
}

} // namespace dummy_collectives::hierarchy::two_level

#pragma once

// The cross-host algorithms (algorithm_table.hpp names them), a file each; the collectives in
// allreduce.cpp, broadcast.cpp and allgather.cpp run the one the group's table chooses.

#include <ATen/core/Tensor.h>

#include "hierarchy/agreement.hpp"
#include "hierarchy/algorithm_table.hpp"
#include "hierarchy/two_level_parts.hpp"

namespace dummy_collectives::hierarchy::two_level {

// allreduce:rails (allreduce_rails.cpp). `agreement`, if given, is finished just before the
// first cross-host step.
void allreduceOnRails(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& flat,
    const ReduceSpec& spec,
    Agreement* agreement);
// allreduce:leaders (allreduce_leaders.cpp).
void allreduceThroughLeaders(
    const Levels& levels, const OpContext& ctx, at::Tensor& flat, const ReduceSpec& spec);
// allreduce:segments, :pieces and :ring (allreduce_one_rank_per_host.cpp).
void allreduceOneRankPerHost(
    const Levels& levels,
    const OpContext& ctx,
    at::Tensor& flat,
    const ReduceSpec& spec,
    Algorithm algorithm);

// This rank's rail folds `flat` across hosts on its links in segments, every member receiving
// the whole result: allreduce:segments' cross-host stage (allreduce_one_rank_per_host.cpp),
// also allreduce:device's. PREMUL_SUM's factor is not applied (the caller applied it).
void allreduceInSegmentsOnLinks(
    const Levels& levels, const OpContext& ctx, at::Tensor& flat, const ReduceSpec& spec);

// The device algorithms (on_device.cpp), after the agreement: allreduce:device and
// broadcast:device (nothing moves for an empty tensor); allgather:device is
// allgatherThroughLeaders on any layout.
void allreduceOnDeviceData(
    const Levels& levels, const OpContext& ctx, at::Tensor& flat, const ReduceSpec& spec);
void broadcastOnDeviceData(const Levels& levels, const OpContext& ctx, at::Tensor& flat, int root);

// The members of `rail` pass `flat` along a chain of them from member `rootHost`'s, each passing
// it on as it lands (on the links): broadcast:chain (broadcast.cpp), broadcast:device's stage.
void broadcastAlongChain(
    const InterHostEngine& rail, const OpContext& ctx, at::Tensor& flat, int rootHost);

// broadcast:pipeline (broadcast_pipeline.cpp), once the root's record was checked; `flat`: the
// data's bytes.
void broadcastPipelined(const Levels& levels, const OpContext& ctx, at::Tensor& flat, int root);

// allgather:rails (allgather_rails.cpp) and allgather:leaders (allgather_leaders.cpp); `in` and
// `out` flat.
void allgatherOnRails(
    const Levels& levels, const OpContext& ctx, const at::Tensor& in, at::Tensor& out);
void allgatherThroughLeaders(
    const Levels& levels, const OpContext& ctx, const at::Tensor& in, at::Tensor& out);

} // namespace dummy_collectives::hierarchy::two_level

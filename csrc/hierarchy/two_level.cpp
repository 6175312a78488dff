#include "hierarchy/two_level_forms.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/exception.h>

#include <dummy_collectives/debug_log.hpp>
#include "hierarchy/agreement.hpp"
#include "hierarchy/pipeline.hpp"
#include "kernels/reduce_kernel.hpp"

namespace dummy_collectives::hierarchy::two_level {

// ---- reduce-scatter ----------------------------------------------------------------------------

void reduceScatterData(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output,
    const ReduceSpec& spec) {
  const Topology& topology = levels.topology;
  at::Tensor in = input.reshape(-1);
  at::Tensor out = output.view(-1);
  const int64_t n = out.numel();
  const int W = topology.size();
  if (!topology.uniform()) {
    // Every rank sends part d to rank d and folds what it receives in rank order: exactly the
    // one-level reduction.
    debug_log::note("an all-to-all over every rank, folded in rank order");
    at::Tensor parts = at::empty_like(in);
    at::Tensor partsBytes = bytesOf(parts);
    at::Tensor inBytes = bytesOf(in);
    levels.everyone.wait(levels.everyone.alltoall(partsBytes, inBytes), ctx);
    std::vector<const void*> srcs;
    for (int r = 0; r < W; ++r) {
      srcs.push_back(bytePtr(parts) + r * n * in.element_size());
    }
    fold(spec, out.data_ptr(), srcs, n);
    return;
  }
  // Per chunk of the parts: inside the host, reduce-scatter the parts destined to each rail
  // (rank k keeps the host's sum of the parts for rail k's ranks), then on the rail an
  // all-to-all of those sums and a fold in host order.
  const InterHostEngine& rail = *levels.rail;
  const int L = levels.host.size();
  const int H = rail.size();
  // One rank per host: one chunk, one engine operation (nothing in-host to overlap, and the
  // leaders' links carry one operation at a time).
  HierarchySettings settings = levels.settings;
  if (levels.oneRankPerHost()) {
    settings.chunkBytes = std::numeric_limits<size_t>::max() / 2;
  }
  const Chunking plan(n, lineElements(in.element_size()), settings, in.element_size(), L * H,
                      /*wholeChunks=*/levels.oneRankPerHost());
  const ReduceSpec across = crossSpec(spec);
  struct State {
    at::Tensor sums;   // [H][m]: this host's sum of the parts for rail peers on each host
    at::Tensor pieces; // [H][m]: every host's sum of this rank's part
  };
  std::vector<State> states(plan.count);
  runPipeline(
      plan.count,
      {[&](int c) -> Pending {
         State& s = states[c];
         const int64_t m = plan.length(c);
         // One chunk of hosts of one rank numbered in host order: the input is in rail order.
         bool inRailOrder = plan.count == 1;
         for (int k = 0; k < L; ++k) {
           for (int h = 0; h < H; ++h) {
             inRailOrder = inRailOrder && topology.ranksOn(h)[k] == k * H + h;
           }
         }
         // memcpy, not ATen's copy_: where ranks share cores its OpenMP threads spin after a
         // large copy and starve the network threads (copiesOf; docs/benchmarks.md, "Three hosts
         // of one rank: pieces on the links").
         at::Tensor byRail = inRailOrder ? in : at::empty({L * H * m}, in.options()); // [k][h][m]
         for (int k = 0; k < L && !inRailOrder; ++k) {
           for (int h = 0; h < H; ++h) {
             const int rank = topology.ranksOn(h)[k];
             copyUnlessSame(byRail.narrow(0, (k * H + h) * m, m),
                            in.narrow(0, rank * n + plan.begin(c), m));
           }
         }
         if (L == 1) {
           // The input itself is never written: premultiplied, it is a new tensor.
           s.sums = spec.premul ? byRail.mul(spec.factor) : byRail;
           return nullptr;
         }
         s.sums = at::empty({H * m}, in.options());
         return levels.host.reduceScatter(ctx, s.sums, byRail, hostSpec(spec));
       },
       [&](int c) {
         State& s = states[c];
         s.pieces = at::empty_like(s.sums);
         at::Tensor outBytes = bytesOf(s.pieces);
         at::Tensor inBytes = bytesOf(s.sums);
         return waitEngine(rail, ctx, rail.alltoall(outBytes, inBytes));
       },
       [&](int c) -> Pending {
         State& s = states[c];
         const int64_t m = plan.length(c);
         std::vector<const void*> srcs;
         for (int h = 0; h < H; ++h) {
           srcs.push_back(bytePtr(s.pieces) + h * m * in.element_size());
         }
         fold(across, bytePtr(out) + plan.begin(c) * in.element_size(), srcs, m);
         s = State();
         return nullptr;
       }});
}

void reduceScatter(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output,
    const ReduceSpec& spec) {
  agree(levels, ctx);
  reduceScatterData(levels, ctx, input, output, spec);
}

void barrier(const Levels& levels, const OpContext& ctx) {
  agree(levels, ctx);
}

// ---- through the engine over every rank --------------------------------------------------------

void gather(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    std::vector<at::Tensor>& outputs,
    int root) {
  agree(levels, ctx);
  debug_log::note("gloo's own gather over every rank");
  std::vector<at::Tensor> in{bytesOf(input.contiguous())};
  std::vector<std::vector<at::Tensor>> out;
  if (levels.topology.rank() == root) {
    out.emplace_back();
    for (auto& t : outputs) {
      out[0].push_back(bytesOf(t));
    }
  }
  c10d::GatherOptions opts;
  opts.rootRank = root;
  opts.timeout = ctx.timeout;
  levels.everyone.wait(levels.everyone->gather(out, in, opts), ctx);
}

void scatter(
    const Levels& levels,
    const OpContext& ctx,
    std::vector<at::Tensor>& inputs,
    at::Tensor& output,
    int root) {
  agree(levels, ctx);
  debug_log::note("gloo's own scatter over every rank");
  std::vector<at::Tensor> out{bytesOf(output)};
  std::vector<std::vector<at::Tensor>> in;
  if (levels.topology.rank() == root) {
    in.emplace_back();
    for (auto& t : inputs) {
      in[0].push_back(bytesOf(t.contiguous()));
    }
  }
  c10d::ScatterOptions opts;
  opts.rootRank = root;
  opts.timeout = ctx.timeout;
  levels.everyone.wait(levels.everyone->scatter(out, in, opts), ctx);
}

void alltoall(
    const Levels& levels,
    const OpContext& ctx,
    const at::Tensor& input,
    at::Tensor& output,
    const std::vector<int64_t>& sendBytes,
    const std::vector<int64_t>& recvBytes) {
  const InterHostEngine& everyone = levels.everyone;
  const int W = everyone.size();
  // Every rank's sizes, so every rank checks every pair alike (and raises alike).
  at::Tensor mine = at::empty({2 * W}, at::kLong);
  std::copy(sendBytes.begin(), sendBytes.end(), mine.data_ptr<int64_t>());
  std::copy(recvBytes.begin(), recvBytes.end(), mine.data_ptr<int64_t>() + W);
  at::Tensor all = at::empty({2 * W * W}, at::kLong);
  const int64_t sizesBytes = static_cast<int64_t>(mine.numel() * mine.element_size());
  if (static_cast<size_t>(sizesBytes * W) <= levels.settings.inlineBytes) {
    // The sizes ride with the agreement (as a small all-gather's data): one exchange, not two.
    const Combine combine{concatenated, concatenated};
    const Bytes result = agree(levels, ctx, viewOf(mine), &combine);
    placeByRank(levels.topology, result.data(), all, sizesBytes);
  } else {
    agree(levels, ctx);
    at::Tensor allBytes = bytesOf(all);
    at::Tensor mineBytes = bytesOf(mine);
    everyone.wait(everyone.allgather(allBytes, mineBytes), ctx);
  }
  const int64_t* sizes = all.data_ptr<int64_t>();
  std::string mismatches;
  for (int s = 0; s < W; ++s) {
    for (int d = 0; d < W; ++d) {
      const int64_t sent = sizes[s * 2 * W + d];
      const int64_t expected = sizes[d * 2 * W + W + s];
      if (sent != expected) {
        mismatches += c10::str(
            "\n  rank ", s, " sends ", sent, " bytes to rank ", d, ", which expects ", expected);
      }
    }
  }
  // As on one host (algorithms::alltoall): every rank saw every size, so every rank raises.
  TORCH_CHECK_VALUE(
      mismatches.empty(),
      "dummy alltoall (rank ",
      ctx.rank,
      "): input and output split sizes do not match across ranks; no data was exchanged:",
      mismatches);
  at::Tensor outBytes = bytesOf(output);
  at::Tensor inBytes = bytesOf(input.contiguous());
  // One rank per host numbered in host order: the rail's members are the ranks, and its links
  // move the parts with no thread hand-off (docs/benchmarks.md, "All-to-all across hosts").
  if (levels.oneRankPerHost() && levels.rail->hasLinks() &&
      hostOrderIsRankOrder(levels.topology)) {
    debug_log::note("one rank per host, on the links");
    levels.rail->wait(
        levels.rail->alltoall(outBytes, inBytes, recvBytes, sendBytes, /*alone=*/true), ctx);
    return;
  }
  debug_log::note("gloo's own alltoall over every rank");
  everyone.wait(everyone.alltoall(outBytes, inBytes, recvBytes, sendBytes), ctx);
}

at::Tensor allreduceSparse(const Levels& levels, const OpContext& ctx, const at::Tensor& input) {
  agree(levels, ctx);
  debug_log::note("gloo's own sparse allreduce over every rank");
  std::vector<at::Tensor> tensors{input.clone()};
  auto work = levels.everyone->allreduce_sparse(tensors);
  levels.everyone.wait(work, ctx);
  return work->result()[0];
}

} // namespace dummy_collectives::hierarchy::two_level

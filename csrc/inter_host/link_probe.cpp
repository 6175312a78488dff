#include "inter_host/link_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

namespace dummy_collectives::inter_host {
namespace {

// 4 MiB: long enough on a 1 Gbit/s link (about 34 ms a step) that a slow link cannot pass for
// a fast one through latency, short enough that creation stays cheap on a fast one (a few ms).
constexpr int64_t kProbeBytes = int64_t{4} << 20;
constexpr int kProbeRounds = 3; // after one warm-up; the fastest counts (noise only slows)

const std::string kVerdictKey = "dummy_collectives/link_probe";

// Bits per second an allreduce among the leaders moved through each leader's link: a ring
// sends 2 (n - 1) / n of the message from every member.
double measure(c10d::Backend& leaders) {
  at::Tensor data = at::zeros({kProbeBytes / 4}, at::kFloat);
  std::vector<at::Tensor> tensors{data};
  double best = 0;
  for (int round = 0; round <= kProbeRounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    leaders.allreduce(tensors)->wait();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (round > 0) {
      const int n = leaders.getSize();
      const double sent = 2.0 * (n - 1) / n * static_cast<double>(kProbeBytes) * 8;
      best = std::max(best, sent / std::max(took.count(), 1e-9));
    }
  }
  return best;
}

} // namespace

LinkVerdict chooseMinChunkBytes(
    const Topology& topology,
    c10d::Backend* leaders,
    c10d::Store& store,
    size_t chunkBytes) {
  LinkVerdict verdict;
  const int publisher = topology.ranksOn(0)[0]; // the first host's leader
  if (leaders != nullptr) {
    // Every leader takes the slowest leader's rate (one more allreduce), so all agree.
    at::Tensor rate = at::full({1}, measure(*leaders), at::kDouble);
    std::vector<at::Tensor> tensors{rate};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::MIN;
    leaders->allreduce(tensors, opts)->wait();
    verdict.gbitPerSecond = rate.item<double>() / 1e9;
    verdict.minChunkBytes = rate.item<double>() < kSlowLinkBitsPerSecond
        ? std::min(chunkBytes, kSlowLinkMinChunkBytes)
        : chunkBytes;
    if (topology.rank() == publisher) {
      const std::string text = c10::str(verdict.minChunkBytes, " ", verdict.gbitPerSecond);
      store.set(kVerdictKey, std::vector<uint8_t>(text.begin(), text.end()));
    }
  }
  if (topology.rank() != publisher) {
    const std::vector<uint8_t> got = store.get(kVerdictKey); // waits for the publisher
    const std::string text(got.begin(), got.end());
    const size_t space = text.find(' ');
    verdict.minChunkBytes = std::stoull(text.substr(0, space));
    verdict.gbitPerSecond = std::stod(text.substr(space + 1));
  }
  return verdict;
}

} // namespace dummy_collectives::inter_host

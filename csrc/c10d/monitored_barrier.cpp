#include "c10d/monitored_barrier.hpp"

#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

namespace dummy_collectives {

void monitoredBarrier(
    c10d::Backend& group,
    const c10d::BarrierOptions& opts,
    bool waitAllRanks,
    std::chrono::milliseconds defaultTimeout) {
  using Clock = std::chrono::steady_clock;
  // Tags of their own, negative: user code passes tags from 0 up.
  constexpr int kToRoot = -1001;
  constexpr int kFromRoot = -1002;
  const auto timeout = opts.timeout == c10d::kUnsetTimeout ? defaultTimeout : opts.timeout;
  auto token = [] { return at::zeros({1}, at::kByte); }; // a fresh one per message (gloo's rule)
  if (group.getRank() != 0) {
    try {
      std::vector<at::Tensor> out{token()};
      group.send(out, 0, kToRoot)->wait(timeout);
      std::vector<at::Tensor> in{token()};
      group.recv(in, 0, kFromRoot)->wait(timeout);
    } catch (const std::exception& e) {
      TORCH_CHECK(
          false,
          "Rank ",
          group.getRank(),
          " successfully reached monitoredBarrier, but received errors while waiting for "
          "send/recv from rank 0. Please check rank 0 logs for faulty rank.\n",
          e.what());
    }
    return;
  }
  const auto start = Clock::now();
  std::vector<int> processed;
  std::vector<int> failed;
  for (int r = 1; r < group.getSize(); ++r) {
    auto remaining =
        timeout - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (waitAllRanks) {
      remaining = timeout; // every rank gets the full timeout to be heard
    } else {
      TORCH_CHECK(
          remaining.count() > 0,
          "Rank 0 timed out in monitoredBarrier after ",
          timeout.count(),
          " ms. ",
          processed.empty()
              ? std::string("No ranks successfully processed in monitoredBarrier.")
              : c10::str("Successfully processed ranks: ", c10::Join(", ", processed)));
    }
    try {
      std::vector<at::Tensor> in{token()};
      group.recv(in, r, kToRoot)->wait(remaining);
      processed.push_back(r);
    } catch (const std::exception& e) {
      TORCH_CHECK(
          waitAllRanks,
          "[Rank 0]: Rank ",
          r,
          " failed to pass monitoredBarrier in ",
          timeout.count(),
          " ms\n Original exception: \n",
          e.what());
      failed.push_back(r);
    }
  }
  TORCH_CHECK(
      failed.empty(),
      "[Rank 0]: Ranks ",
      c10::Join(", ", failed),
      " failed to pass monitoredBarrier in ",
      timeout.count(),
      " ms");
  for (int r = 1; r < group.getSize(); ++r) {
    std::vector<at::Tensor> out{token()};
    group.send(out, r, kFromRoot)->wait(timeout);
  }
}

} // namespace dummy_collectives

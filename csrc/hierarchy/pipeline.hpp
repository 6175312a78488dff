#pragma once

#include <functional>
#include <vector>

namespace dummy_collectives::hierarchy {

// What a pipeline stage left running: wait() returns once it is done (empty: done already).
using Pending = std::function<void()>;

// One stage of a pipelined collective: issue(c) starts stage work on chunk c and returns what
// to wait for before the chunk's next stage (an in-host collective, a cross-host exchange, or
// nothing for work done on the spot).
using Stage = std::function<Pending(int chunk)>;

// Runs `chunks` chunks through `stages` as a software pipeline: at step t it issues stage s of
// chunk t - s, first stage first, each after waiting for the chunk's previous stage. So while
// the cross-host engine moves chunk c, the host's level already works on chunk c + 1 and on
// chunk c - 1's last stage, and chunk c + 1's exchange is queued on the engine before chunk c's
// is waited for: the link never idles between chunks (issued last stage first, the waits for
// chunk c's exchange came first and the link idled: docs/benchmarks.md, "Pipeline order").
// The order in which operations are issued depends only on the number of chunks and stages,
// never on timing: every rank issues the same in-host and cross-host collectives in the same
// order, as every level requires.
inline void runPipeline(int chunks, const std::vector<Stage>& stages) {
  const int depth = static_cast<int>(stages.size());
  std::vector<std::vector<Pending>> pending(depth, std::vector<Pending>(chunks));
  for (int step = 0; step < chunks + depth - 1; ++step) {
    for (int s = 0; s < depth; ++s) {
      const int chunk = step - s;
      if (chunk < 0 || chunk >= chunks) {
        continue;
      }
      if (s > 0 && pending[s - 1][chunk]) {
        pending[s - 1][chunk]();
        pending[s - 1][chunk] = nullptr;
      }
      pending[s][chunk] = stages[s](chunk);
    }
  }
  for (int chunk = 0; chunk < chunks; ++chunk) {
    if (pending[depth - 1][chunk]) {
      pending[depth - 1][chunk]();
    }
  }
}

} // namespace dummy_collectives::hierarchy

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
//
// `blocking`, if >= 0, is a stage that runs to completion when issued (the cross-host stage on
// the leaders' links, which move bytes only while a thread drives them, one operation at a
// time): each step issues it last, after the other stages, and calls `beforeBlocking` first
// (the host level starts what was just queued now, not at its worker's next poll), so the
// host level works on the other chunks while this thread moves one across hosts.
//
// The order in which operations are issued depends only on the number of chunks and stages,
// never on timing: every rank issues the same in-host and cross-host collectives in the same
// order, as every level requires (where it sits in a step is the same on every rank too, so a
// blocking stage may issue an in-host step as well: the all-gather's gathers its host's own
// pieces before it swaps the chunk across hosts).
inline void runPipeline(
    int chunks,
    const std::vector<Stage>& stages,
    int blocking = -1,
    const std::function<void()>& beforeBlocking = {}) {
  const int depth = static_cast<int>(stages.size());
  std::vector<std::vector<Pending>> pending(depth, std::vector<Pending>(chunks));
  auto issue = [&](int s, int chunk) {
    if (chunk < 0 || chunk >= chunks) {
      return;
    }
    if (s > 0 && pending[s - 1][chunk]) {
      pending[s - 1][chunk]();
      pending[s - 1][chunk] = nullptr;
    }
    if (s == blocking && beforeBlocking) {
      beforeBlocking();
    }
    pending[s][chunk] = stages[s](chunk);
  };
  for (int step = 0; step < chunks + depth - 1; ++step) {
    for (int s = 0; s < depth; ++s) {
      if (s != blocking) {
        issue(s, step - s);
      }
    }
    if (blocking >= 0) {
      issue(blocking, step - blocking);
    }
  }
  for (int chunk = 0; chunk < chunks; ++chunk) {
    if (pending[depth - 1][chunk]) {
      pending[depth - 1][chunk]();
    }
  }
}

} // namespace dummy_collectives::hierarchy

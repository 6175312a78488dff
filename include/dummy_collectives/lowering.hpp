#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <dummy_collectives/arrival.hpp>
#include <dummy_collectives/device_collectives.hpp>
#include <dummy_collectives/op_context.hpp>
#include <dummy_collectives/reduce_ops.hpp>

namespace dummy_collectives {

class DummyWork;
namespace flight_recorder {
struct Group;
}

// A point-to-point operation as the face numbered and recorded it.
struct PointToPoint {
  int peer;             // group rank; -1: any source (recvAnysource, one-host groups only)
  int tag;
  uint64_t number;      // the group's point-to-point count, for the debug log
  uint64_t record;      // its flight recorder entry, completed when it completes (0: none)
  const char* title;    // the profiler's name for it; null where nobody listens
  flight_recorder::Group* recorded; // where a failure seen in its wait dumps (null: nowhere)
};

// The collectives every lowering implements, as X(result, name, (parameters)): the one list the
// interface and each lowering's declarations are made from. Tensors are contiguous host tensors,
// in place where named `data`; every method runs inside Lowering::run().
//   allreduceSparse:      the sum of every rank's sparse COO tensor, as gloo computes it.
//   reduce:               only `root` receives the result.
//   allgather:            perRank[r] receives rank r's input.
//   allgatherInto:        output receives every rank's input, in rank order.
//   allgatherCoalesced:   outputs[i] receives every rank's inputs[i]; with `byRank`, outputs holds
//                         size() * inputs.size() tensors, rank-major (allgather_coalesced).
//   gather / scatter:     on root, outputs[r] is rank r's input / rank r receives inputs[r];
//                         elsewhere the list is empty.
//   reduceScatter:        output = the reduction of every rank's inputs[rank()].
//   reduceScatterTensors: outputs[i] receives part rank() of the reduction of every inputs[i].
//   alltoall:             rank r's bytes [sum(sendBytes[..d]), +sendBytes[d]) of `input` land in
//                         rank d's `output` at sum(recvBytes[..r]); sizes are checked against
//                         the peers' first. alltoallLists: rank r's inputs[d] -> d's outputs[r].
#define DC_LOWERING_COLLECTIVES(X)                                                              \
  X(void, allreduce, (const OpContext& call, at::Tensor& data, const ReduceSpec& spec))         \
  X(void, allreduceCoalesced,                                                                   \
    (const OpContext& call, std::vector<at::Tensor>& data,                                      \
     const std::vector<ReduceSpec>& specs))                                                     \
  X(at::Tensor, allreduceSparse, (const OpContext& call, const at::Tensor& input))             \
  X(void, reduce,                                                                               \
    (const OpContext& call, at::Tensor& data, const ReduceSpec& spec, int root))                \
  X(void, broadcast, (const OpContext& call, at::Tensor& data, int root))                      \
  X(void, allgather,                                                                            \
    (const OpContext& call, const at::Tensor& input, std::vector<at::Tensor>& perRank))         \
  X(void, allgatherInto, (const OpContext& call, const at::Tensor& input, at::Tensor& output)) \
  X(void, allgatherCoalesced,                                                                   \
    (const OpContext& call, const std::vector<at::Tensor>& inputs,                              \
     std::vector<at::Tensor>& outputs, bool byRank))                                            \
  X(void, gather,                                                                               \
    (const OpContext& call, const at::Tensor& input, std::vector<at::Tensor>& outputs,          \
     int root))                                                                                 \
  X(void, scatter,                                                                              \
    (const OpContext& call, const std::vector<at::Tensor>& inputs, at::Tensor& output,          \
     int root))                                                                                 \
  X(void, reduceScatter,                                                                        \
    (const OpContext& call, const std::vector<at::Tensor>& inputs, at::Tensor& output,          \
     const ReduceSpec& spec))                                                                   \
  X(void, reduceScatterTensors,                                                                 \
    (const OpContext& call, const std::vector<at::Tensor>& inputs,                              \
     std::vector<at::Tensor>& outputs, const std::vector<ReduceSpec>& specs))                   \
  X(void, alltoall,                                                                             \
    (const OpContext& call, const at::Tensor& input, at::Tensor& output,                        \
     const std::vector<int64_t>& sendBytes, const std::vector<int64_t>& recvBytes))             \
  X(void, alltoallLists,                                                                        \
    (const OpContext& call, const std::vector<at::Tensor>& inputs,                              \
     std::vector<at::Tensor>& outputs))                                                         \
  X(void, barrier, (const OpContext& call))

// In a lowering's class: declares its implementation of every collective.
#define DC_LOWERING_OVERRIDE(result, name, params) result name params override;

// How one group's collectives move data: the face (backend.hpp) checks a collective's
// arguments, numbers and records it, stages its tensors into contiguous host memory and hands it
// here. Three lowerings: shared memory on one host (shm_lowering.hpp, which also carries the CUDA
// IPC path), and two levels across hosts (hierarchy/two_level_lowering.hpp) that drive a
// shared-memory lowering of the host's ranks and cross-host engines directly.
//
// Every method but the point-to-point ones runs inside run(), on whichever thread runs the
// group's collectives (one at a time, in issue order).
class Lowering {
 public:
  virtual ~Lowering() = default;

  // ---- The group ---------------------------------------------------------------------------
  // "shm" or "two_level" (Python's DummyBackend.lowering).
  virtual const char* name() const = 0;
  // The group ranks on each host, hosts ordered by their smallest rank.
  virtual std::vector<std::vector<int>> hosts() const = 0;
  // Whether large allreduces and gathers reach the peers' memory directly: "on", "off", or
  // "undecided" until the first collective in the peer-access window (of this host's ranks).
  virtual std::string peerAccess() const = 0;
  // The cross-host algorithm table a group spanning hosts runs, a line per collective
  // ("allreduce: 0-256K @records (...); >256K-inf @segments (...)"); empty on one host.
  virtual std::vector<std::string> algorithms() const = 0;
  // Whether the host's ranks outnumber the CPUs they may run on (waits then hand cores over
  // rather than poll); empty until the first collective.
  virtual std::optional<bool> sharesCores() const = 0;
  // Why the group can no longer be used (a dead peer, a timeout, an abort); empty while it can.
  virtual std::string brokenReason() const = 0;
  // Fails the group for every rank with `reason`.
  virtual void abort(const std::string& reason) = 0;
  // The group ranks this rank knows to be gone, ascending: their process ended (a pid it can
  // see), or a rank that saw it end said so, or the cross-host connection to them was lost.
  // What a survivor passes to shrink_group (DummyBackend::deadRanks). Any thread.
  virtual std::vector<int> deadRanks() const = 0;
  virtual void setTimeout(std::chrono::milliseconds timeout) = 0;
  // Who made whom wait (see arrival.hpp), in group ranks.
  virtual WaitLedger::Totals waitTotals() const = 0;
  virtual void resetWaits() = 0;
  // At exit, after the face's queue drained: finishes what is posted outside it.
  virtual void finishForExit() {}
  // Before a healthy group is released (shutdown): waits, up to `limit`, until every rank of
  // this host has joined its shared memory, or one that has not died. A rank may return from
  // new_group before its peers join (rank 0 creates the segment and goes on), and releasing
  // the segment then would leave them nothing to join. Gloo's groups wait in their constructor.
  virtual void awaitJoined(std::chrono::milliseconds limit) {}
  // DUMMY_COLLECTIVES_DEBUG=INFO: what the lowering found and chose, once; rankPlacement()
  // ends the group's first line ("; this rank is local rank 1 of 2 on host 0", or nothing).
  virtual void logCreation(int me) const = 0;
  virtual std::string rankPlacement() const {
    return {};
  }

  // ---- One collective ----------------------------------------------------------------------
  // Runs `collective` (calls to the methods below) as `call`: begins it on every level (the
  // descriptor every rank checks travels with its first step), turns an error of this rank alone
  // into the group's failure naming this rank (its peers would wait for steps it never takes),
  // and fills call.arrival, where set, with who the group waited for.
  virtual void run(OpContext& call, const std::function<void()>& collective) = 0;

  // The collectives, on contiguous host tensors: DC_LOWERING_COLLECTIVES above lists them, one
  // line each, and every lowering declares its overrides from that list.
#define DC_LOWERING_PURE(result, name, params) virtual result name params = 0;
  DC_LOWERING_COLLECTIVES(DC_LOWERING_PURE)
#undef DC_LOWERING_PURE

  // ---- Device tensors ----------------------------------------------------------------------
  // The device path (CUDA IPC) for a collective over `tensors`, where they take it; null where
  // they are staged through host memory (CPU tensors, CPU-only builds, groups across hosts).
  virtual DeviceCollectives* deviceFor(const std::vector<at::Tensor>& tensors) {
    return nullptr;
  }
  // Like run(), for a collective deviceFor() accepted: `body` queues its device work.
  virtual void runOnDevice(
      OpContext& call,
      DeviceCollectives::Ticket& ticket,
      DummyWork& work,
      const std::function<void(DeviceCollectives&, Transport&)>& body) {
    TORCH_CHECK(false, "dummy_collectives: this lowering has no device path");
  }

  // ---- Point-to-point ----------------------------------------------------------------------
  // Posts the operation (the face checked and recorded it); the Work completes it.
  virtual c10::intrusive_ptr<c10d::Work> send(
      std::vector<at::Tensor>& tensors, const PointToPoint& p2p) = 0;
  virtual c10::intrusive_ptr<c10d::Work> recv(
      std::vector<at::Tensor>& tensors, const PointToPoint& p2p) = 0;
};

} // namespace dummy_collectives

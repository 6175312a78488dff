#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <dummy_collectives/op_descriptor.hpp>
#include <dummy_collectives/reduce_ops.hpp>

// The argument checks of every collective. They run on the caller's thread before anything is
// enqueued, so a bad call raises at once (a ValueError naming the collective, the rank and what
// was wrong) and leaves the group usable. The face (DummyBackend) calls them for every lowering,
// so a bad call reads the same on one host and across hosts; each returns the collective's
// descriptor (what every rank compares before data moves).
namespace dummy_collectives {

class Checker {
 public:
  Checker(const char* collective, int rank, int size)
      : collective_(collective), rank_(rank), size_(size) {}

  template <typename... Args>
  void require(bool ok, const Args&... why) const {
    TORCH_CHECK_VALUE(ok, "dummy ", collective_, " (rank ", rank_, "): ", why...);
  }

  const char* collective() const {
    return collective_;
  }
  int rank() const {
    return rank_;
  }
  int size() const {
    return size_;
  }

  void tensor(const at::Tensor& t, const char* what) const;
  // A list of exactly one tensor (one tensor per process).
  void single(const std::vector<at::Tensor>& tensors, const char* what) const;
  // A list of `expected` tensors, each shaped like `ref` with `numel` elements.
  void list(
      const std::vector<at::Tensor>& tensors,
      size_t expected,
      const at::Tensor& ref,
      int64_t numel,
      const char* what,
      const char* refWhat = "the input") const;
  // Non-empty list of tensors sharing the first one's dtype and device.
  void uniform(const std::vector<at::Tensor>& tensors, const char* what) const;
  // Non-empty list of tensors on one device; dtypes may differ (coalesced collectives move each
  // tensor on its own, as gloo and NCCL allow).
  void sameDevice(const std::vector<at::Tensor>& tensors, const char* what) const;
  // The per-rank list only the root passes (gather's outputs, scatter's inputs): on the root one
  // list of a tensor per rank, each like `ref`; elsewhere none. Returns the root's list.
  std::vector<at::Tensor> rootList(
      const std::vector<std::vector<at::Tensor>>& lists,
      bool isRoot,
      int root,
      const at::Tensor& ref,
      const char* what,
      const char* refWhat) const;
  void root(int64_t root) const;
  // `t` must match `ref` (named `refWhat`) in dtype and device and have `numel` elements.
  void like(
      const at::Tensor& t,
      const at::Tensor& ref,
      int64_t numel,
      const char* what,
      const char* refWhat = "the input") const;
  // Tensors the collective writes its result into must not have elements that share memory (an
  // expand()ed, stride-0 view): refused before anything moves, not by torch's copy_ after.
  void writable(const std::vector<at::Tensor>& outputs) const;
  // The collective's (ReduceOp, dtype) pair resolved for a group of size() ranks.
  ReduceSpec reduction(const c10d::ReduceOp& op, c10::ScalarType dtype) const;

 private:
  const char* collective_;
  int rank_;
  int size_;
};

// The descriptor of a collective over `reference`'s dtype and `numel` elements per rank.
OpDescriptor describe(
    CollectiveKind kind,
    const at::Tensor& reference,
    int64_t numel,
    int root = -1,
    int reduceOp = -1,
    int count = 1);

// Coalesced collectives: every tensor's dtype and element count, in order, folded into the
// descriptor, so ranks whose lists differ in any one tensor fail the descriptor check instead of
// silently reducing unrelated elements (the totals alone can match).
OpDescriptor withLayout(OpDescriptor op, const std::vector<at::Tensor>& tensors);

int64_t totalNumel(const std::vector<at::Tensor>& tensors);
std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists);

// What the checks of a reduction resolve besides the descriptor.
struct CheckedReduction {
  OpDescriptor op;
  std::vector<ReduceSpec> specs; // one per tensor
};

// All-to-all's split sizes, in rows (dim 0) per rank, and the bytes of one row.
struct CheckedAlltoall {
  OpDescriptor op;
  std::vector<int64_t> sendRows;
  std::vector<int64_t> recvRows;
  size_t sendRowBytes;
  size_t recvRowBytes;
};

namespace checks {

CheckedReduction allreduce(const Checker& c, const std::vector<at::Tensor>& tensors,
                           const c10d::ReduceOp& op);
OpDescriptor allreduceSparse(const Checker& c, const std::vector<at::Tensor>& tensors,
                             const c10d::ReduceOp& op);
CheckedReduction allreduceCoalesced(const Checker& c, const std::vector<at::Tensor>& tensors,
                                    const c10d::ReduceOp& op);
CheckedReduction reduce(const Checker& c, const std::vector<at::Tensor>& tensors,
                        const c10d::ReduceOptions& opts);
OpDescriptor broadcast(const Checker& c, const std::vector<at::Tensor>& tensors,
                       const c10d::BroadcastOptions& opts);
OpDescriptor allgather(const Checker& c, const std::vector<std::vector<at::Tensor>>& outputs,
                       const std::vector<at::Tensor>& inputs);
OpDescriptor allgatherBase(const Checker& c, const at::Tensor& output, const at::Tensor& input);
OpDescriptor allgatherCoalesced(const Checker& c,
                                const std::vector<std::vector<at::Tensor>>& outputLists,
                                const std::vector<at::Tensor>& inputs);
OpDescriptor allgatherIntoTensorCoalesced(const Checker& c,
                                          const std::vector<at::Tensor>& outputs,
                                          const std::vector<at::Tensor>& inputs);
// gather and scatter also return the root's per-rank list (empty elsewhere) in `rootTensors`.
OpDescriptor gather(const Checker& c, const std::vector<std::vector<at::Tensor>>& outputs,
                    const std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts,
                    std::vector<at::Tensor>& rootTensors);
OpDescriptor scatter(const Checker& c, const std::vector<at::Tensor>& outputs,
                     const std::vector<std::vector<at::Tensor>>& inputs,
                     const c10d::ScatterOptions& opts, std::vector<at::Tensor>& rootTensors);
CheckedReduction reduceScatter(const Checker& c, const std::vector<at::Tensor>& outputs,
                               const std::vector<std::vector<at::Tensor>>& inputs,
                               const c10d::ReduceOp& op);
// _reduce_scatter_base (coalesced false: one output) and reduce_scatter_tensor_coalesced.
CheckedReduction reduceScatterTensors(const Checker& c, const std::vector<at::Tensor>& outputs,
                                      const std::vector<at::Tensor>& inputs,
                                      const c10d::ReduceOp& op, bool coalesced);
CheckedAlltoall alltoallBase(const Checker& c, const at::Tensor& output, const at::Tensor& input,
                             const std::vector<int64_t>& outputSplitSizes,
                             const std::vector<int64_t>& inputSplitSizes);
OpDescriptor alltoall(const Checker& c, const std::vector<at::Tensor>& outputs,
                      const std::vector<at::Tensor>& inputs);
void send(const Checker& c, const std::vector<at::Tensor>& tensors, int dst);
// `src` empty: any source (recvAnysource).
void recv(const Checker& c, const std::vector<at::Tensor>& tensors, std::optional<int> src);

} // namespace checks
} // namespace dummy_collectives

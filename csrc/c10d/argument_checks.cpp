#include "c10d/argument_checks.hpp"

#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include "kernels/reduce_kernel.hpp"

namespace dummy_collectives {
namespace {

// FNV-1a over 64-bit values: a descriptor's layout digest.
uint64_t digestOf(const std::vector<int64_t>& values) {
  uint64_t digest = 14695981039346656037ULL;
  for (const int64_t v : values) {
    const auto value = static_cast<uint64_t>(v);
    for (int byte = 0; byte < 8; ++byte) {
      digest = (digest ^ ((value >> (8 * byte)) & 0xff)) * 1099511628211ULL;
    }
  }
  return digest;
}

std::vector<ReduceSpec> reductions(
    const Checker& c, const std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op) {
  std::vector<ReduceSpec> specs;
  for (const auto& t : tensors) {
    specs.push_back(c.reduction(op, t.scalar_type()));
  }
  return specs;
}

} // namespace

void Checker::tensor(const at::Tensor& t, const char* what) const {
  require(t.defined(), what, " is an undefined tensor");
  require(
      t.layout() == c10::kStrided,
      what,
      " is a ",
      t.layout(),
      " tensor; only dense (strided) tensors are supported");
  require(
      t.device().is_cpu() || t.device().is_cuda(),
      what,
      " is on device '",
      t.device(),
      "'; dummy supports cpu and cuda tensors");
}

void Checker::single(const std::vector<at::Tensor>& tensors, const char* what) const {
  require(
      tensors.size() == 1,
      "expected a list of exactly 1 ",
      what,
      " tensor, got ",
      tensors.size(),
      " (one tensor per process)");
  tensor(tensors[0], what);
}

void Checker::list(
    const std::vector<at::Tensor>& tensors,
    size_t expected,
    const at::Tensor& ref,
    int64_t numel,
    const char* what,
    const char* refWhat) const {
  require(
      tensors.size() == expected,
      "the ",
      what,
      " list has ",
      tensors.size(),
      " tensors; expected ",
      expected);
  for (const auto& t : tensors) {
    like(t, ref, numel, what, refWhat);
  }
}

void Checker::uniform(const std::vector<at::Tensor>& tensors, const char* what) const {
  require(!tensors.empty(), "the ", what, " list is empty");
  for (const auto& t : tensors) {
    like(t, tensors[0], t.numel(), what, "the first one");
  }
}

void Checker::sameDevice(const std::vector<at::Tensor>& tensors, const char* what) const {
  require(!tensors.empty(), "the ", what, " list is empty");
  for (const auto& t : tensors) {
    tensor(t, what);
    require(
        t.device() == tensors[0].device(),
        "the ", what, " tensors are on different devices (", t.device(), " and ",
        tensors[0].device(), ")");
  }
}

std::vector<at::Tensor> Checker::rootList(
    const std::vector<std::vector<at::Tensor>>& lists,
    bool isRoot,
    int root,
    const at::Tensor& ref,
    const char* what,
    const char* refWhat) const {
  if (!isRoot) {
    require(
        lists.empty() || (lists.size() == 1 && lists[0].empty()),
        "only the root (rank ",
        root,
        ") takes ",
        what,
        " tensors");
    return {};
  }
  require(lists.size() == 1, "the root needs 1 list of ", what, "s, got ", lists.size());
  list(lists[0], size_, ref, ref.numel(), what, refWhat);
  return lists[0];
}

void Checker::root(int64_t root) const {
  require(
      root >= 0 && root < size_,
      "root rank ",
      root,
      " is out of range for a group of ",
      size_,
      " ranks");
}

void Checker::like(
    const at::Tensor& t,
    const at::Tensor& ref,
    int64_t numel,
    const char* what,
    const char* refWhat) const {
  tensor(t, what);
  require(
      t.scalar_type() == ref.scalar_type(),
      what,
      " has dtype ",
      t.scalar_type(),
      " but ",
      refWhat,
      " has dtype ",
      ref.scalar_type());
  require(
      t.device() == ref.device(),
      what,
      " is on ",
      t.device(),
      " but ",
      refWhat,
      " is on ",
      ref.device());
  require(t.numel() == numel, what, " has ", t.numel(), " elements; expected ", numel);
}

void Checker::writable(const std::vector<at::Tensor>& outputs) const {
  for (const auto& t : outputs) {
    require(
        !t.defined() || t.layout() != c10::kStrided ||
            at::has_internal_overlap(t) != at::MemOverlap::Yes,
        "an output tensor (sizes ", t.sizes(), ", strides ", t.strides(), ") has elements that "
        "share memory (an expand()ed or otherwise stride-0 view), so the result cannot be "
        "written into it; pass a tensor whose elements are distinct (.clone() or .contiguous())");
  }
}

ReduceSpec Checker::reduction(const c10d::ReduceOp& op, c10::ScalarType dtype) const {
  return resolveReduce(op, dtype, size_, collective_, rank_);
}

OpDescriptor describe(
    CollectiveKind kind,
    const at::Tensor& reference,
    int64_t numel,
    int root,
    int reduceOp,
    int count) {
  OpDescriptor op;
  op.kind = kind;
  op.dtype = static_cast<int32_t>(reference.scalar_type());
  op.numel = numel;
  op.root = root;
  op.reduceOp = reduceOp;
  op.count = count;
  return op;
}

OpDescriptor withLayout(OpDescriptor op, const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> values;
  for (const auto& t : tensors) {
    values.push_back(static_cast<int64_t>(t.scalar_type()));
    values.push_back(t.numel());
  }
  op.layout = digestOf(values);
  return op;
}

int64_t totalNumel(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) {
    total += t.numel();
  }
  return total;
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all;
  for (const auto& list : lists) {
    all.insert(all.end(), list.begin(), list.end());
  }
  return all;
}

namespace checks {

CheckedReduction allreduce(
    const Checker& c, const std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op) {
  c.single(tensors, "input");
  const at::Tensor& tensor = tensors[0];
  ReduceSpec spec = c.reduction(op, tensor.scalar_type());
  return {describe(CollectiveKind::kAllreduce, tensor, tensor.numel(), -1, op.op_), {spec}};
}

OpDescriptor allreduceSparse(
    const Checker& c, const std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op) {
  c.require(tensors.size() == 1, "expected a list of exactly 1 tensor, got ", tensors.size());
  const at::Tensor& tensor = tensors[0];
  c.require(
      tensor.defined() && tensor.layout() == c10::kSparse,
      "expected a sparse COO tensor, got a ",
      tensor.layout(),
      " one");
  c.require(
      tensor.device().is_cpu(),
      "sparse tensors must be on the CPU here, got one on '",
      tensor.device(),
      "'; move it with .cpu() or use a dense tensor");
  c.require(
      op.op_ == c10d::ReduceOp::SUM,
      "sparse tensors are summed (ReduceOp.SUM, as with gloo); got another ReduceOp");
  OpDescriptor described = describe(
      CollectiveKind::kAllreduceSparse, tensor, tensor.numel(), -1, c10d::ReduceOp::SUM);
  // Ranks must agree on the sizes and the sparse/dense split, not only the element count.
  std::vector<int64_t> shape = tensor.sizes().vec();
  shape.push_back(tensor.sparse_dim());
  described.layout = digestOf(shape);
  return described;
}

CheckedReduction allreduceCoalesced(
    const Checker& c, const std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op) {
  c.sameDevice(tensors, "input");
  std::vector<ReduceSpec> specs = reductions(c, tensors, op);
  return {
      withLayout(
          describe(
              CollectiveKind::kAllreduceCoalesced,
              tensors[0],
              totalNumel(tensors),
              -1,
              op.op_,
              static_cast<int>(tensors.size())),
          tensors),
      std::move(specs)};
}

CheckedReduction reduce(
    const Checker& c, const std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  c.single(tensors, "input");
  c.root(opts.rootRank);
  c.require(opts.rootTensor == 0, "rootTensor must be 0, got ", opts.rootTensor);
  const at::Tensor& tensor = tensors[0];
  ReduceSpec spec = c.reduction(opts.reduceOp, tensor.scalar_type());
  return {
      describe(
          CollectiveKind::kReduce,
          tensor,
          tensor.numel(),
          static_cast<int>(opts.rootRank),
          opts.reduceOp.op_),
      {spec}};
}

OpDescriptor broadcast(
    const Checker& c, const std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  c.single(tensors, "input");
  c.root(opts.rootRank);
  c.require(opts.rootTensor == 0, "rootTensor must be 0, got ", opts.rootTensor);
  return describe(
      CollectiveKind::kBroadcast,
      tensors[0],
      tensors[0].numel(),
      static_cast<int>(opts.rootRank));
}

OpDescriptor allgather(
    const Checker& c,
    const std::vector<std::vector<at::Tensor>>& outputs,
    const std::vector<at::Tensor>& inputs) {
  c.single(inputs, "input");
  const at::Tensor& input = inputs[0];
  c.require(outputs.size() == 1, "expected 1 list of output tensors, got ", outputs.size());
  c.require(
      static_cast<int>(outputs[0].size()) == c.size(),
      "the output list has ",
      outputs[0].size(),
      " tensors; it needs one per rank (",
      c.size(),
      ")");
  for (const auto& output : outputs[0]) {
    c.like(output, input, input.numel(), "an output tensor");
  }
  return describe(CollectiveKind::kAllgather, input, input.numel());
}

OpDescriptor allgatherBase(const Checker& c, const at::Tensor& output, const at::Tensor& input) {
  c.tensor(input, "input");
  c.like(output, input, input.numel() * c.size(), "the output tensor");
  return describe(CollectiveKind::kAllgatherBase, input, input.numel());
}

OpDescriptor allgatherCoalesced(
    const Checker& c,
    const std::vector<std::vector<at::Tensor>>& outputLists,
    const std::vector<at::Tensor>& inputs) {
  c.sameDevice(inputs, "input");
  c.require(
      static_cast<int>(outputLists.size()) == c.size(),
      "expected one output list per rank (",
      c.size(),
      "), got ",
      outputLists.size());
  for (const auto& list : outputLists) {
    c.require(
        list.size() == inputs.size(),
        "an output list has ",
        list.size(),
        " tensors; expected one per input (",
        inputs.size(),
        ")");
    for (size_t i = 0; i < list.size(); ++i) {
      c.like(list[i], inputs[i], inputs[i].numel(), "an output tensor");
    }
  }
  return withLayout(
      describe(
          CollectiveKind::kAllgatherCoalesced,
          inputs[0],
          totalNumel(inputs),
          -1,
          -1,
          static_cast<int>(inputs.size())),
      inputs);
}

OpDescriptor allgatherIntoTensorCoalesced(
    const Checker& c,
    const std::vector<at::Tensor>& outputs,
    const std::vector<at::Tensor>& inputs) {
  c.sameDevice(inputs, "input");
  c.require(
      outputs.size() == inputs.size(),
      "got ",
      outputs.size(),
      " outputs for ",
      inputs.size(),
      " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    c.like(outputs[i], inputs[i], inputs[i].numel() * c.size(), "an output tensor");
  }
  return withLayout(
      describe(
          CollectiveKind::kAllgatherIntoTensorCoalesced,
          inputs[0],
          totalNumel(inputs),
          -1,
          -1,
          static_cast<int>(inputs.size())),
      inputs);
}

OpDescriptor gather(
    const Checker& c,
    const std::vector<std::vector<at::Tensor>>& outputs,
    const std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts,
    std::vector<at::Tensor>& rootTensors) {
  c.single(inputs, "input");
  c.root(opts.rootRank);
  const at::Tensor& input = inputs[0];
  const int root = static_cast<int>(opts.rootRank);
  rootTensors = c.rootList(outputs, root == c.rank(), root, input, "output", "the input");
  return describe(CollectiveKind::kGather, input, input.numel(), root);
}

OpDescriptor scatter(
    const Checker& c,
    const std::vector<at::Tensor>& outputs,
    const std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts,
    std::vector<at::Tensor>& rootTensors) {
  c.single(outputs, "output");
  c.root(opts.rootRank);
  const at::Tensor& output = outputs[0];
  const int root = static_cast<int>(opts.rootRank);
  rootTensors = c.rootList(inputs, root == c.rank(), root, output, "input", "the output");
  return describe(CollectiveKind::kScatter, output, output.numel(), root);
}

CheckedReduction reduceScatter(
    const Checker& c,
    const std::vector<at::Tensor>& outputs,
    const std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceOp& op) {
  c.single(outputs, "output");
  const at::Tensor& output = outputs[0];
  c.require(inputs.size() == 1, "expected 1 list of inputs, got ", inputs.size());
  c.list(inputs[0], c.size(), output, output.numel(), "input", "the output");
  ReduceSpec spec = c.reduction(op, output.scalar_type());
  return {
      describe(CollectiveKind::kReduceScatter, output, output.numel(), -1, op.op_), {spec}};
}

CheckedReduction reduceScatterTensors(
    const Checker& c,
    const std::vector<at::Tensor>& outputs,
    const std::vector<at::Tensor>& inputs,
    const c10d::ReduceOp& op,
    bool coalesced) {
  c.sameDevice(outputs, "output");
  c.require(
      outputs.size() == inputs.size(),
      "got ",
      outputs.size(),
      " outputs for ",
      inputs.size(),
      " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    c.like(inputs[i], outputs[i], outputs[i].numel() * c.size(), "an input tensor", "its output");
  }
  std::vector<ReduceSpec> specs = reductions(c, outputs, op);
  return {
      withLayout(
          describe(
              coalesced ? CollectiveKind::kReduceScatterTensorCoalesced
                        : CollectiveKind::kReduceScatterBase,
              outputs[0],
              totalNumel(outputs),
              -1,
              op.op_,
              static_cast<int>(outputs.size())),
          outputs),
      std::move(specs)};
}

CheckedAlltoall alltoallBase(
    const Checker& c,
    const at::Tensor& output,
    const at::Tensor& input,
    const std::vector<int64_t>& outputSplitSizes,
    const std::vector<int64_t>& inputSplitSizes) {
  c.tensor(input, "input");
  c.like(output, input, output.numel(), "the output tensor");
  const int ws = c.size();
  // Split sizes count rows (dim 0); none given means equal splits.
  auto rowsOf = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (splits.empty()) {
      c.require(
          rows % ws == 0, what, " has ", rows, " rows, which ", ws, " ranks cannot split evenly");
      return std::vector<int64_t>(ws, rows / ws);
    }
    c.require(
        static_cast<int>(splits.size()) == ws,
        what,
        " split sizes have ",
        splits.size(),
        " entries; expected ",
        ws);
    int64_t total = 0;
    for (int64_t s : splits) {
      c.require(s >= 0, what, " split sizes must not be negative");
      total += s;
    }
    c.require(
        total == rows, what, " split sizes add up to ", total, " but it has ", rows, " rows");
    return splits;
  };
  auto rowBytes = [](const at::Tensor& t) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    return rows == 0 ? size_t{0} : static_cast<size_t>(t.numel() / rows * t.element_size());
  };
  return {
      describe(CollectiveKind::kAlltoallBase, input, 0),
      rowsOf(input, inputSplitSizes, "the input"),
      rowsOf(output, outputSplitSizes, "the output"),
      rowBytes(input),
      rowBytes(output)};
}

OpDescriptor alltoall(
    const Checker& c,
    const std::vector<at::Tensor>& outputs,
    const std::vector<at::Tensor>& inputs) {
  c.uniform(inputs, "input");
  c.require(
      static_cast<int>(inputs.size()) == c.size(),
      "expected one input tensor per rank (",
      c.size(),
      "), got ",
      inputs.size());
  c.require(
      outputs.size() == inputs.size(),
      "expected one output tensor per rank (",
      c.size(),
      "), got ",
      outputs.size());
  for (const auto& output : outputs) {
    c.like(output, inputs[0], output.numel(), "an output tensor");
  }
  return describe(CollectiveKind::kAlltoall, inputs[0], 0);
}

void send(const Checker& c, const std::vector<at::Tensor>& tensors, int dst) {
  c.single(tensors, "input");
  c.require(
      dst >= 0 && dst < c.size() && dst != c.rank(),
      "destination rank ",
      dst,
      " is not another rank of this group of ",
      c.size());
}

void recv(const Checker& c, const std::vector<at::Tensor>& tensors, std::optional<int> src) {
  if (src) {
    c.require(
        *src >= 0 && *src < c.size() && *src != c.rank(),
        "source rank ",
        *src,
        " is not another rank of this group of ",
        c.size());
  }
  c.single(tensors, "output");
}

} // namespace checks
} // namespace dummy_collectives

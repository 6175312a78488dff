#include "hierarchy/in_host.hpp"

#include <mutex>
#include <string>
#include <unordered_map>

#include <ATen/record_function.h>

#include <dummy_collectives/debug_log.hpp>
#include "c10d/engine.hpp"
#include "c10d/work.hpp"

namespace dummy_collectives::hierarchy {
namespace {

// "dummy.host:<collective>": the profiler shows in-host steps inside the group's own event.
// Interned for good: the profiler keeps the title's pointer, not a copy.
const char* stepTitle(CollectiveKind kind) {
  static std::mutex mu;
  static auto* titles = new std::unordered_map<int, std::string>();
  std::lock_guard<std::mutex> lock(mu);
  std::string& title = (*titles)[static_cast<int>(kind)];
  if (title.empty()) {
    title = std::string("dummy.host:") + collectiveName(kind);
  }
  return title.c_str();
}

OpDescriptor stepOf(
    CollectiveKind kind, const at::Tensor& tensor, const ReduceSpec* spec, int root) {
  OpDescriptor op;
  op.kind = kind;
  op.dtype = static_cast<int32_t>(tensor.scalar_type());
  op.numel = tensor.numel();
  op.root = root;
  if (spec != nullptr) {
    op.reduceOp = static_cast<int32_t>(spec->kind);
  }
  return op;
}

// A step where its tensors live: `host(tensors)` on host tensors. On CUDA tensors (a device
// algorithm's: two_level_forms.hpp) `device` on the host's device path where it takes them
// (CUDA IPC), else `host` on host copies of them; either waited for on this thread before it
// returns, since the links read that memory next, outside any stream.
template <typename OnDevice, typename OnHost>
void whereTheyLive(ShmLowering& shm, std::vector<at::Tensor> tensors, OnDevice device,
                   OnHost host) {
  if (!tensors[0].is_cuda()) {
    host(tensors);
    return;
  }
  if (DeviceCollectives* path = shm.deviceFor(tensors)) {
    auto ticket = path->submit(tensors);
    auto done = DummyWork::completed(shm.rank(), c10d::OpType::UNKNOWN, nullptr, {});
    path->run(*ticket, *done, [&] { device(*path, shm.transport()); });
    done->synchronize();
    return;
  }
  std::vector<at::Tensor> copies;
  for (const at::Tensor& t : tensors) {
    copies.push_back(t.cpu());
  }
  host(copies);
  for (size_t i = 0; i < tensors.size(); ++i) {
    tensors[i].copy_(copies[i]);
  }
}

} // namespace

InHostLevel::InHostLevel(std::shared_ptr<ShmLowering> shm, inter_host::GroupHealth& health)
    : shm_(std::move(shm)), health_(health), engine_(std::make_shared<Engine>(Engine::Timing{})) {}

InHostLevel::~InHostLevel() = default;

template <typename Steps>
Pending InHostLevel::post(const OpContext& ctx, OpDescriptor op, Step step, Steps steps) {
  // An injected fault fires before this rank joins the exchange, never after: the engine may
  // finish the exchange before the caller waits, and a fault then fails nobody else.
  ctx.step();
  op.seq = ++seq_;
  OpContext call;
  call.op = op;
  call.rank = shm_->rank();
  call.timeout = step == Step::kFirst ? ctx.timeout : ctx.followingStepTimeout();
  // Unlogged: a step of the group's collective, whose own TRACE line collects its notes.
  const debug_log::Site site{ctx.rank, nullptr, false};
  ShmLowering* shm = shm_.get(); // lives as long as the engine (the level stops it first)
  auto work = c10::make_intrusive<DummyWork>(
      shm_->rank(), c10d::OpType::UNKNOWN, at::hasCallbacks() ? stepTitle(op.kind) : nullptr,
      std::vector<at::Tensor>(), std::vector<at::Tensor>(), op.seq,
      [shm, call, site, steps = std::move(steps)](DummyWork&) mutable {
        debug_log::traced(call.op, site, debug_log::issueTime(), [&] {
          shm->run(call, [&] { steps(*shm, call); });
        });
      },
      engine_);
  engine_->enqueue(work);
  return [this, &ctx, work] {
    try {
      work->wait();
    } catch (const std::exception& e) {
      // Another host's failure reaches this host as an abort whose reason the group agreed on.
      std::string reason = health_.brokenReason();
      if (reason.empty()) {
        reason = shm_->brokenReason();
      }
      health_.fail(ctx.describe(), reason.empty() ? std::string(e.what()) : reason);
    }
  };
}

Pending InHostLevel::allgather(
    const OpContext& ctx, at::Tensor output, at::Tensor input, Step step) {
  return post(
      ctx, stepOf(CollectiveKind::kAllgatherBase, input, nullptr, -1), step,
      [output, input](ShmLowering& shm, const OpContext& call) mutable {
        whereTheyLive(
            shm, {output, input},
            [&](DeviceCollectives& d, Transport& t) { d.allgatherBase(t, output, input); },
            [&](std::vector<at::Tensor>& h) { shm.allgatherInto(call, h[1], h[0]); });
      });
}

Pending InHostLevel::allgather(
    const OpContext& ctx, std::vector<at::Tensor> perRank, at::Tensor input, Step step) {
  return post(
      ctx, stepOf(CollectiveKind::kAllgather, input, nullptr, -1), step,
      [perRank = std::move(perRank), input](ShmLowering& shm, const OpContext& call) mutable {
        shm.allgather(call, input, perRank);
      });
}

void InHostLevel::expedite() const {
  engine_->expedite();
}

Pending InHostLevel::reduceScatter(
    const OpContext& ctx, at::Tensor output, at::Tensor input, const ReduceSpec& spec) {
  return post(
      ctx, stepOf(CollectiveKind::kReduceScatterBase, input, &spec, -1), Step::kFollowing,
      [output, input, spec](ShmLowering& shm, const OpContext& call) mutable {
        whereTheyLive(
            shm, {output, input},
            [&](DeviceCollectives& d, Transport& t) { d.reduceScatterBase(t, output, input, spec); },
            [&](std::vector<at::Tensor>& h) {
              std::vector<at::Tensor> outputs{h[0]};
              shm.reduceScatterTensors(call, {h[1]}, outputs, {spec});
            });
      });
}

Pending InHostLevel::broadcast(const OpContext& ctx, at::Tensor data, int root) {
  return post(
      ctx, stepOf(CollectiveKind::kBroadcast, data, nullptr, root), Step::kFollowing,
      [data, root](ShmLowering& shm, const OpContext& call) mutable {
        whereTheyLive(
            shm, {data}, [&](DeviceCollectives& d, Transport& t) { d.broadcast(t, data, root); },
            [&](std::vector<at::Tensor>& h) { shm.broadcast(call, h[0], root); });
      });
}

Pending InHostLevel::reduce(
    const OpContext& ctx, at::Tensor data, int root, const ReduceSpec& spec) {
  return post(
      ctx, stepOf(CollectiveKind::kReduce, data, &spec, root), Step::kFollowing,
      [data, root, spec](ShmLowering& shm, const OpContext& call) mutable {
        // The device path has no reduce: there every local rank receives the sum.
        whereTheyLive(
            shm, {data}, [&](DeviceCollectives& d, Transport& t) { d.allreduce(t, data, spec); },
            [&](std::vector<at::Tensor>& h) { shm.reduce(call, h[0], spec, root); });
      });
}

} // namespace dummy_collectives::hierarchy

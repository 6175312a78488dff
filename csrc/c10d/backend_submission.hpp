#pragma once

// How the face issues a collective (private to backend.cpp and backend_submission.cpp): number
// it, tell the profiler and the flight recorder, then run it through the group's lowering inside
// the call or on the engine. Kept apart from the table of collectives in backend.cpp, which only
// says what each collective checks and which lowering step it is.

#include <memory>

#include <dummy_collectives/backend.hpp>
#include <dummy_collectives/debug_log.hpp>
#include "c10d/collective_names.hpp"
#include "c10d/engine.hpp"
#include "c10d/work.hpp"

namespace dummy_collectives {

template <typename Start>
void DummyBackend::runCollective(
    const Running& group,
    OpContext call,
    std::chrono::steady_clock::time_point issuedAt,
    uint64_t record,
    const WaitRecord* waits,
    Start&& start) {
  // Who made whom wait, as the lowering finds it: what the flight recorder stores with this
  // collective once it is done, and the profiler's wait record.
  Arrival arrival;
  call.arrival = &arrival;
  try {
    debug_log::traced(call.op, group.site, issuedAt, [&] {
      flight_recorder::started(record);
      start(call);
      flight_recorder::completed(record, arrival);
    });
  } catch (const c10::DistBackendError& e) {
    flight_recorder::dumpOnFailure(group.recorded, e.what()); // before anyone sees the error
    throw;
  }
  if (waits != nullptr) {
    recordArrival(waits->issuer, waits->groupUid, call.op.seq, waits->title, arrival);
  }
}

template <typename Body>
c10::intrusive_ptr<c10d::Work> DummyBackend::submit(
    OpDescriptor op,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs,
    Issue issue,
    Body body,
    const SplitSizes& splits) {
  requireWritable(op, outputs);
  const Stamp stamped = stamp(op, inputs, outputs, issue.timeout, splits);
  const auto issuedAt = debug_log::issueTime();
  if (issue.blocking && !stamped.observed) {
    // The caller waits for this Work next thing: with nothing queued ahead, run it here. That
    // skips the queue, the body's allocation and the hand-offs around them, most of what a
    // small blocking collective costs on top of moving its bytes. (Under a profiler the engine
    // runs it, so the Work's profiling record spans the collective.)
    std::exception_ptr error;
    Lowering& lowering = *lowering_;
    const bool ran = engine_->runNow([&] {
      try {
        runCollective(
            running(), stamped.call, issuedAt, stamped.record, nullptr,
            [&](OpContext& c) { lowering.run(c, [&] { body(lowering, c); }); });
      } catch (...) {
        error = std::current_exception();
      }
    });
    if (ran) {
      return DummyWork::ran(
          getRank(), namesOf(op.kind).opType, std::move(outputs), op.seq, error);
    }
  }
  // The body may own move-only state (HostStaging); a Work's body must be copyable. The
  // lowering outlives the engine that runs bodies (~DummyBackend), the flight recorder's group
  // every backend (the recorder keeps it).
  auto shared = std::make_shared<Body>(std::move(body));
  auto run = [group = running(), call = stamped.call, shared, issuedAt, record = stamped.record,
              waits = waitRecord(stamped.observed, op.kind)](DummyWork&) {
    runCollective(group, call, issuedAt, record, waits.get(), [&](OpContext& c) {
      group.lowering->run(c, [&] { (*shared)(*group.lowering, c); });
    });
  };
  return enqueue(op, inputs, std::move(outputs), std::move(run));
}

template <typename Body>
c10::intrusive_ptr<c10d::Work> DummyBackend::submitDevice(
    DeviceCollectives& device,
    OpDescriptor op,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs,
    Issue issue,
    Body body) {
  op.path = DataPath::kCudaIpc;
  requireWritable(op, outputs);
  const Stamp stamped = stamp(op, inputs, outputs, issue.timeout);
  const auto issuedAt = debug_log::issueTime();
  std::vector<at::Tensor> touched(inputs);
  touched.insert(touched.end(), outputs.begin(), outputs.end());
  auto ticket = device.submit(touched);
  // Traced until the host's part is done; the device's part completes later, on its stream.
  // The flight recorder too marks it completed when the host's part is done.
  auto run = [group = running(), call = stamped.call, ticket, body = std::move(body), issuedAt,
              record = stamped.record,
              waits = waitRecord(stamped.observed, op.kind)](DummyWork& work) mutable {
    runCollective(group, call, issuedAt, record, waits.get(), [&](OpContext& c) {
      group.lowering->runOnDevice(c, *ticket, work, body);
    });
  };
  return enqueue(op, inputs, std::move(outputs), std::move(run));
}

} // namespace dummy_collectives

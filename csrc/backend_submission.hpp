#pragma once

// How DummyBackend issues a collective (private to backend.cpp and backend_submission.cpp): number
// it, tell the profiler, then run it inside the call or queue it on the engine. Kept apart from the
// table of collectives in backend.cpp, which only says what each collective checks and runs.

#include <memory>

#include <dummy_collectives/backend.hpp>
#include <dummy_collectives/debug_log.hpp>
#include <dummy_collectives/device_collectives.hpp>
#include <dummy_collectives/engine.hpp>
#include <dummy_collectives/shm_transport.hpp>
#include <dummy_collectives/work.hpp>

namespace dummy_collectives {

// Runs a collective's body once its number is taken and its first step begun. An error of this
// rank alone (out of memory staging a tensor or padding a sparse one, a bug) leaves it out of
// the collective's remaining steps: its peers would wait for them, or read its next
// collective's steps as this one's (a wrong result, or mismatches for ever after). So it fails
// the group for every rank, naming this rank and its error, as a group spanning hosts does
// (HierarchicalBackend::submit). The group's own failures (DistBackendError: a dead peer, a
// timeout, an abort, a mismatch every rank raises alike) and bad arguments every rank finds
// alike (ValueError: all-to-all split sizes) pass through.
template <typename Body>
void failGroupOnLocalError(ShmTransport& transport, Body&& body) {
  try {
    body();
  } catch (const c10::DistBackendError&) {
    throw;
  } catch (const c10::ValueError&) {
    throw;
  } catch (const c10::Error& e) {
    transport.failOnThisRank(e.what_without_backtrace());
  } catch (const std::exception& e) {
    transport.failOnThisRank(e.what());
  }
}

template <typename Algorithm>
c10::intrusive_ptr<c10d::Work> DummyBackend::submit(
    OpDescriptor op,
    c10d::OpType opType,
    const char* profilingTitle,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs,
    Issue issue,
    Algorithm algorithm,
    const SplitSizes& splits) {
  requireWritable(op, outputs);
  const Stamp stamped = stamp(op, inputs, outputs, issue.timeout, splits);
  const auto limit = stamped.limit;
  const uint64_t record = stamped.record;
  // TRACE: a line per finished collective; a host level's are steps of its group's (unlogged).
  const auto issuedAt = debug_log::issueTime();
  if (issue.blocking && !stamped.observed) {
    // The caller waits for this Work next thing: with nothing queued ahead, run it here. That
    // skips the queue, the body's allocation and the hand-offs around them, most of what a
    // small blocking collective costs on top of moving its bytes. (Under a profiler the engine
    // runs it, so the Work's profiling record spans the collective.)
    std::exception_ptr error;
    ShmTransport& transport = *transport_; // algorithms take it as a Transport
    const bool ran = engine_->runNow([&] {
      try {
        debug_log::traced(op, traceSite_, issuedAt, [&] {
          transport.beginOp(op, limit);
          flight_recorder::started(record);
          failGroupOnLocalError(transport, [&] { algorithm(transport); });
          flight_recorder::completed(record, transport.arrival());
        });
      } catch (...) {
        error = std::current_exception();
      }
    });
    if (ran) {
      if (error) {
        flight_recorder::dumpIfGroupFailure(fr_.get(), error); // before anyone sees the error
      }
      return DummyWork::ran(getRank(), opType, std::move(outputs), op.seq, error);
    }
  }
  // Raw transport pointer: the engine (which runs bodies) is destroyed before the transport.
  // The algorithm may own move-only state (HostStaging); a Work's body must be copyable.
  auto shared = std::make_shared<Algorithm>(std::move(algorithm));
  // The flight recorder's group outlives every backend (the recorder keeps it).
  auto body = [transport = transport_.get(), op, limit, shared, issuedAt, site = traceSite_,
               record, group = fr_.get(),
               waits = waitRecord(stamped.observed, profilingTitle)](DummyWork&) {
    try {
      debug_log::traced(op, site, issuedAt, [&] {
        transport->beginOp(op, limit);
        flight_recorder::started(record);
        failGroupOnLocalError(*transport, [&] { (*shared)(*transport); });
        flight_recorder::completed(record, transport->arrival());
      });
    } catch (const c10::DistBackendError& e) {
      flight_recorder::dumpOnFailure(group, e.what());
      throw;
    }
    if (waits) {
      recordArrival(
          waits->issuer, waits->groupUid, op.seq, waits->title, transport->arrival());
    }
  };
  return enqueue(op, opType, profilingTitle, inputs, std::move(outputs), std::move(body));
}

template <typename Body>
c10::intrusive_ptr<c10d::Work> DummyBackend::submitDevice(
    OpDescriptor op,
    c10d::OpType opType,
    const char* profilingTitle,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs,
    Issue issue,
    Body body) {
  op.path = DataPath::kCudaIpc;
  requireWritable(op, outputs);
  const Stamp stamped = stamp(op, inputs, outputs, issue.timeout);
  const auto limit = stamped.limit;
  const uint64_t record = stamped.record;
  const auto issuedAt = debug_log::issueTime();
  std::vector<at::Tensor> touched(inputs);
  touched.insert(touched.end(), outputs.begin(), outputs.end());
  auto ticket = device_->submit(touched);
  // Raw pointers: the engine (which runs bodies) is destroyed before the transport and device.
  auto run = [transport = transport_.get(), device = device_.get(), op, limit, ticket,
              body = std::move(body), issuedAt, site = traceSite_, record, group = fr_.get(),
              waits = waitRecord(stamped.observed, profilingTitle)](DummyWork& work) mutable {
    // Traced until the host's part is done; the device's part completes later, on its stream.
    // The flight recorder too marks it completed when the host's part is done.
    try {
      debug_log::traced(op, site, issuedAt, [&] {
        transport->beginOp(op, limit);
        flight_recorder::started(record);
        failGroupOnLocalError(*transport, [&] {
          device->run(*ticket, work, [&] { body(*device, *transport); });
        });
        flight_recorder::completed(record, transport->arrival());
      });
    } catch (const c10::DistBackendError& e) {
      flight_recorder::dumpOnFailure(group, e.what());
      throw;
    }
    if (waits) { // the host's part: the arrivals are known once its first step is done
      recordArrival(
          waits->issuer, waits->groupUid, op.seq, waits->title, transport->arrival());
    }
  };
  return enqueue(op, opType, profilingTitle, inputs, std::move(outputs), std::move(run));
}

} // namespace dummy_collectives

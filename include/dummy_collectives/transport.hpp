#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

#include <dummy_collectives/op_descriptor.hpp>

namespace dummy_collectives {

using Clock = std::chrono::steady_clock;

// What the collective algorithms see of the ranks: each rank owns a slot of slotBytes() bytes per
// step; a step is "write my slot, exchange(), read anyone's slot". exchange() is the only
// synchronisation. Slots alternate between two buffers, so writing step s+1 overlaps peers still
// reading step s, and a rank never overwrites a buffer a peer may still read.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual size_t slotBytes() const = 0;

  // Starts a collective: the descriptor travels with its first step and every rank checks that
  // all ranks called the same thing. Waits more than `timeout` after the op's first wait began
  // raise a timeout naming the op (the clock starts when a wait first polls in vain, so a
  // collective whose peers are already there never reads it).
  virtual void beginOp(const OpDescriptor& op, std::chrono::milliseconds timeout) = 0;

  // This rank's slot for the next step (write-only until exchange()).
  virtual void* writeSlot() = 0;

  // Publishes this rank's slot for the step and waits until every rank has published theirs.
  virtual void exchange() = 0;

  // Rank r's slot for the step exchange() last completed.
  virtual const void* readSlot(int r) const = 0;

  // Waits, as exchange() waits for peers, until `ready()` holds (it is polled): for what the
  // transport cannot see itself, such as a peer's GPU work (see cuda/ipc_transport.hpp). Raises
  // like exchange() on abort, a dead peer or past the deadline; `what` names what was awaited.
  virtual void waitUntil(const std::function<bool()>& ready, const std::string& what) = 0;
  // Marks the group broken for every rank (a failure on one rank must not leave peers waiting).
  virtual void abort(const std::string& reason) = 0;
};

} // namespace dummy_collectives

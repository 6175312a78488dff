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

  // Single-copy transfers for large messages (see cross_memory.hpp). Publishes `mine`, an
  // address in this process, with one exchange and fills all[0 .. size()) with every rank's
  // (all[rank()] == mine). Returns false, alike on every rank, where the ranks cannot all read
  // each other's memory: the first call decides that for the group (probing every pair costs
  // one more exchange), and later calls that return false exchange nothing.
  // A peer's memory is valid only while that peer is inside the collective: an algorithm that
  // reads it ends with an exchange after its last read.
  virtual bool sharePointers(const void* mine, const void** all) = 0;

  // Copies `bytes` at `remote`, an address rank r shared, to `local`: one copy, by the kernel.
  // Raises, and aborts the group, if the read fails (the peer died, say). Any thread may call it.
  virtual void readPeer(int r, void* local, const void* remote, size_t bytes) = 0;
  // The other way: copies `bytes` at `local` to `remote`, an address rank r shared.
  virtual void writePeer(int r, void* remote, const void* local, size_t bytes) = 0;

  // Waits, as exchange() waits for peers, until `ready()` holds (it is polled): for what the
  // transport cannot see itself, such as a peer's GPU work (see cuda/ipc_transport.hpp). Raises
  // like exchange() on abort, a dead peer or past the deadline; `what` names what was awaited.
  virtual void waitUntil(const std::function<bool()>& ready, const std::string& what) = 0;
  // Marks the group broken for every rank (a failure on one rank must not leave peers waiting).
  virtual void abort(const std::string& reason) = 0;
};

} // namespace dummy_collectives

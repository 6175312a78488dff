#include "hierarchy/agreement.hpp"

#include <algorithm>
#include <chrono>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/exception.h>

#include <dummy_collectives/arrival.hpp>
#include "hierarchy/agreement_records.hpp"

namespace dummy_collectives::hierarchy {
namespace {

using namespace records; // NOLINT(google-build-using-namespace): this file is their user
using records::recordBytes; // overloaded below for a group's settings

size_t recordBytes(const HierarchySettings& settings) {
  return recordBytes(settings.inlineBytes);
}

// A peer's record may be the last one of a peer that has given up since (a timeout, an abort,
// an error of its own): the engine delivers what was sent before the failure, and it would
// complete our collective as if nothing had happened. Two things say when to ask the store
// whether the group failed, neither reading a clock of another host:
// - on the links, a peer that gives up hangs up (LinkHangUp) after publishing why: its
//   connection then ends right after its last record, in the stream's own order;
// - where the peers waited for this leader's record (an exchange; a broadcast's root waits for
//   nobody), none can have begun its collective before this leader's last record it needed
//   reached it (Levels::lastRecordSentNs), and none times out sooner than its timeout from
//   there: a record read later than that may be one a peer gave up on (through gloo, the only
//   sign).
// A store that does not answer leaves the record trusted: it is not known to be stale.
void failIfPeersMayHaveGivenUp(
    const Levels& levels,
    const OpContext& ctx,
    const c10::intrusive_ptr<c10d::Work>& work,
    bool peersWaitedForUs) {
  const int64_t sinceNs = arrivalClockNs() - levels.lastRecordSentNs;
  const bool pausedLong = peersWaitedForUs &&
      sinceNs >= std::chrono::duration_cast<std::chrono::nanoseconds>(ctx.timeout).count();
  if (!pausedLong && levels.rail->endedAfterRecord(work).empty()) {
    return;
  }
  const GroupHealth::Heard heard = levels.health.published();
  if (heard.what == GroupHealth::Heard::What::kReason) {
    levels.health.fail(ctx.describe(), heard.reason);
  }
}

[[noreturn]] void raiseMismatch(const std::string& message) {
  C10_THROW_ERROR(DistBackendError, message);
}

// The one-host message, naming each of this host's ranks' call.
std::string hostMismatch(const Topology& topology, const std::vector<Record>& local) {
  std::string calls;
  for (const auto& r : local) {
    calls += c10::str("\n  rank ", r.header.writer, ": ", r.header.op.describe());
  }
  return c10::str(
      "dummy_collectives: ranks called different collectives (seen on rank ", topology.rank(),
      ", on ", topology.describeHost(topology.host()), "); no data was exchanged:", calls);
}

// Empty if every host agreed on `op`; otherwise the message every rank raises.
std::string groupMismatch(
    const Topology& topology, const OpDescriptor& op, const std::vector<Record>& hosts) {
  bool same = true;
  for (const auto& r : hosts) {
    same = same && r.header.verdict == kAgreed && r.header.op == op;
  }
  if (same) {
    return {};
  }
  std::string calls;
  for (const auto& r : hosts) {
    const int writer = r.header.writer;
    calls += c10::str(
        "\n  ", topology.describeRank(writer), ": ",
        r.header.verdict == kHostDisagrees
            ? c10::str("the ranks of ", topology.describeHost(topology.hostOf(writer)),
                       " called different collectives")
            : r.header.op.describe());
  }
  return inter_host::differentCallsMessage(topology, calls);
}

// Step 1 of either form (the same step, so ranks that called collectives of different forms
// meet here): every rank's header and payload inside the host, into `records` (kept where it
// has the size already), and what they say. Alone on its host a rank's record goes nowhere:
// it is its own view of `payload`.
struct HostVerdict {
  Header mine;               // this rank's header
  std::vector<Record> local; // local rank order
  bool agrees = true;
  // Every rank of the host reads the same records, so all name the same last rank (ties: the
  // lowest local rank), on the host's one steady clock.
  int32_t lastRank = -1;
  int64_t inHostWaitNs = 0; // this rank's wait for it
};
HostVerdict gatherHostRecords(
    const Levels& levels, const OpContext& ctx, ByteView payload, at::Tensor& records) {
  const int localSize = levels.host.size();
  HostVerdict host;
  Header& mine = host.mine;
  mine.op = ctx.op;
  mine.writer = levels.topology.rank();
  mine.payloadBytes = payload.size;
  mine.arrivedNs = ctx.arrivedNs;
  if (localSize == 1) {
    host.local = {Record{mine, payload}};
  } else {
    const size_t bytes = recordBytes(levels.settings);
    const auto total = static_cast<int64_t>(bytes) * localSize;
    if (!records.defined() || records.numel() != total) {
      records = at::empty({total}, at::kByte);
    }
    // The first step: who does not come is named here (OpContext).
    levels.host.allgather(ctx, records, makeRecord(bytes, mine, payload),
                          InHostLevel::Step::kFirst)();
    host.local = readRecords(records, localSize, bytes);
  }
  Header last = host.local[0].header;
  for (const auto& r : host.local) {
    host.agrees = host.agrees && r.header.op == ctx.op;
    if (r.header.arrivedNs > last.arrivedNs) {
      last = r.header;
    }
  }
  host.lastRank = last.writer;
  host.inHostWaitNs = last.arrivedNs - ctx.arrivedNs;
  return host;
}

// Step 3 of either form: the leader tells its host its verdict -- `mismatch`, or agreement and
// `result` (both cut to inlineBytes) -- in `told` (a record of recordBytes(settings); the
// leader's is overwritten); every rank raises the mismatch it was told, or returns the record.
// The record's payload is a view of `told`: a named tensor the caller keeps while it reads
// the payload (a non-const reference, so a temporary that dies with the call cannot bind).
Record tellHost(
    const Levels& levels,
    const OpContext& ctx,
    Header verdict,
    const std::string& mismatch,
    ByteView result,
    at::Tensor& told) {
  if (levels.leader()) {
    verdict.verdict = mismatch.empty() ? kAgreed : kGroupDisagrees;
    const ByteView carried = mismatch.empty()
        ? result
        : ByteView{reinterpret_cast<const std::byte*>(mismatch.data()),
                   std::min(mismatch.size(), levels.settings.inlineBytes)};
    verdict.payloadBytes = carried.size;
    writeRecord(told, verdict, carried);
  }
  levels.host.broadcast(ctx, told, 0)();
  const Record heard = readRecords(told, 1, static_cast<size_t>(told.numel()))[0];
  if (heard.header.verdict != kAgreed) {
    raiseMismatch(
        std::string(reinterpret_cast<const char*>(heard.payload.data), heard.payload.size));
  }
  return heard;
}

// Who made this rank wait, and how long (arrival.hpp): its in-host wait for its host's last
// rank, plus what its host waited across hosts.
void noteArrival(
    const OpContext& ctx, int32_t lastRank, int64_t inHostWaitNs, int64_t crossHostWaitNs) {
  if (ctx.arrival != nullptr) {
    *ctx.arrival = {lastRank, std::max<int64_t>(0, inHostWaitNs) + crossHostWaitNs,
                    ctx.arrivedNs};
  }
}

} // namespace

Agreement::Agreement(
    const Levels& levels, const OpContext& ctx, ByteView payload, const Combine* combine)
    : levels_(levels), ctx_(ctx), combine_(combine) {
  // 1. Inside the host: every rank's header and payload.
  const HostVerdict gathered = gatherHostRecords(levels, ctx, payload, hostRecords_);
  mine_ = gathered.mine;
  hostAgrees_ = gathered.agrees;
  hostLastRank_ = gathered.lastRank;
  inHostWaitNs_ = gathered.inHostWaitNs;

  // 2. Across hosts, issued here: the leaders exchange their host's verdict and combined
  // payload. A host whose ranks disagree knows it already: its leader only tells the others.
  if (levels.leader()) {
    Header host = mine_;
    host.verdict = hostAgrees_ ? kAgreed : kHostDisagrees;
    Bytes combined;
    if (hostAgrees_ && combine != nullptr) {
      combined = combine->host(payloadsOf(gathered.local));
    }
    host.payloadBytes = combined.size();
    host.lastRank = hostLastRank_;
    exchangeIssuedNs_ = arrivalClockNs();
    host.sinceSyncNs = exchangeIssuedNs_ - levels.lastExchangeDoneNs;
    InterHostEngine& leaders = *levels.rail; // a leader's rail: the hosts' leaders
    // Only the header and what the host combined cross hosts (a 4-byte allreduce sends 132
    // bytes, not a whole record); every leader receives into whole records.
    const auto sent = static_cast<int64_t>(kHeaderBytes + combined.size());
    at::Tensor out = makeRecord(sent, host, {combined.data(), combined.size()});
    const auto slot = static_cast<int64_t>(recordBytes(levels.settings));
    leaderRecords_ = at::empty({leaders.recordsBytes(sent, slot)}, at::kByte);
    exchange_ = leaders.exchangeRecords(leaderRecords_, out, slot);
  }
}

Bytes Agreement::finish() {
  TORCH_CHECK(!finished_, "dummy_collectives: an agreement finished twice");
  finished_ = true;
  const Topology& topology = levels_.topology;
  const size_t bytes = recordBytes(levels_.settings);
  const int localSize = levels_.host.size();
  std::string mismatch;
  Bytes result;
  if (exchange_) {
    InterHostEngine& leaders = *levels_.rail;
    leaders.wait(exchange_, ctx_);
    const int64_t doneNs = arrivalClockNs();
    const int64_t crossHostWaitNs = doneNs - exchangeIssuedNs_;
    std::vector<int64_t> offsets;
    for (int m = 0; m < leaders.size(); ++m) {
      offsets.push_back(leaders.recordOffset(m, static_cast<int64_t>(bytes)));
    }
    const int otherForm = InterHostEngine::otherFormFrom(exchange_);
    if (otherForm >= 0) {
      // A broadcast's one-way record met this exchange (inter_host/peer_links.hpp): its host is
      // done or waits for nobody, so only failing the group tells everyone.
      const Header other = readHeader(leaderRecords_, offsets[otherForm]);
      levels_.health.fail(ctx_.describe(),
                          inter_host::differentCalls(
                              topology, {{other.writer, other.op}, {topology.rank(), ctx_.op}}));
    }
    failIfPeersMayHaveGivenUp(levels_, ctx_, exchange_, /*peersWaitedForUs=*/true);
    levels_.lastRecordSentNs = exchangeIssuedNs_;
    levels_.lastExchangeDoneNs = doneNs;
    const std::vector<Record> hosts = readRecords(leaderRecords_, offsets);
    // The last host: the one whose leader sent its record longest after the previous exchange
    // completed, which every leader completes within a network latency of the others (hosts
    // share no clock). Its last rank is the group's.
    const Record* lastHost = &hosts[0];
    for (const auto& r : hosts) {
      if (r.header.sinceSyncNs > lastHost->header.sinceSyncNs) {
        lastHost = &r;
      }
    }
    lastRank_ = lastHost->header.lastRank;
    // Where this host came last, its leader waited for the network, not for a rank.
    crossHostWaitNs_ = lastHost->header.writer == topology.rank() ? 0 : crossHostWaitNs;
    mismatch = groupMismatch(topology, ctx_.op, hosts);
    if (mismatch.empty() && combine_ != nullptr) {
      result = combine_->all(payloadsOf(hosts));
    }
  }
  if (!hostAgrees_) {
    raiseMismatch(hostMismatch(topology, readRecords(hostRecords_, localSize, bytes)));
  }

  // 3. Inside the host: the leader's verdict, and the result (or the mismatch's message).
  if (localSize > 1) {
    Header verdict = mine_;
    verdict.lastRank = lastRank_;
    verdict.crossHostWaitNs = crossHostWaitNs_;
    at::Tensor told = at::empty({static_cast<int64_t>(bytes)}, at::kByte);
    const Record heard =
        tellHost(levels_, ctx_, verdict, mismatch, {result.data(), result.size()}, told);
    result.assign(heard.payload.data, heard.payload.data + heard.payload.size);
    lastRank_ = heard.header.lastRank;
    crossHostWaitNs_ = heard.header.crossHostWaitNs;
  } else if (!mismatch.empty()) {
    raiseMismatch(mismatch);
  }
  noteArrival(ctx_, lastRank_, inHostWaitNs_, crossHostWaitNs_);
  return result;
}

namespace {

// A buffer of the group's, at least `bytes` long, kept between collectives (a fresh one costs
// page faults on every broadcast). A group runs one collective at a time.
at::Tensor& keptBuffer(at::Tensor& buffer, size_t bytes) {
  if (!buffer.defined() || static_cast<size_t>(buffer.numel()) < bytes) {
    buffer = at::empty({static_cast<int64_t>(bytes)}, at::kByte);
  }
  return buffer;
}

// What a receiving host's leader makes of the root's record: the mismatch every rank of its
// host raises (empty where the calls agree), and whether the group fails with it (the root's
// host, done already, cannot be told otherwise).
struct Judgement {
  std::string mismatch;
  bool groupFails = false;
};
// `otherForm`: what arrived is an exchange's record (inter_host/peer_links.hpp), not a one-way one.
Judgement judge(const Levels& levels, const OpContext& ctx, const HostVerdict& host,
                const Header& root, size_t capacity, bool otherForm) {
  const Topology& topology = levels.topology;
  if (!host.agrees) {
    return {hostMismatch(topology, host.local), true};
  }
  if (otherForm) {
    return {inter_host::differentCalls(
                topology, {{root.writer, root.op}, {topology.rank(), ctx.op}}),
            true};
  }
  if (root.verdict == kHostDisagrees) {
    // Every rank of the root's host raises too: nobody moved data, the group stays usable.
    Header ours = host.local[0].header;
    std::vector<Record> hosts{{root, {}}, {ours, {}}};
    if (ours.writer < root.writer) {
      std::swap(hosts[0], hosts[1]);
    }
    return {groupMismatch(topology, ctx.op, hosts), false};
  }
  if (root.op != ctx.op || root.payloadBytes > capacity - kHeaderBytes) {
    return {inter_host::differentCalls(
                topology, {{root.writer, root.op}, {topology.rank(), ctx.op}}),
            true};
  }
  return {};
}

} // namespace

OneWayAgreement agreeOneWay(
    const Levels& levels,
    const OpContext& ctx,
    ByteView payload,
    int root,
    const std::function<ByteView()>& rootsHostData) {
  const Topology& topology = levels.topology;
  const int rootHost = topology.hostOf(root);
  const int localSize = levels.host.size();
  const size_t bytes = recordBytes(levels.settings);

  // A receiving host's leader posts its receive first: whatever the root's host sends fits it,
  // and the network's time then overlaps step 1. (Where its host's ranks turn out to disagree
  // it would hear the root's record anyway, to fail the group: below.)
  const bool receiving = topology.host() != rootHost && levels.leader();
  const size_t capacity = recordBytes(levels.settings.oneWayBytes);
  at::Tensor heard;
  c10::intrusive_ptr<c10d::Work> heardWork;
  if (receiving) {
    heard = keptBuffer(levels.announcements, capacity).narrow(0, 0, capacity);
    heardWork = levels.rail->announce(heard, rootHost);
  }

  // 1. Inside the host, as in the exchange.
  const HostVerdict host = gatherHostRecords(levels, ctx, payload, levels.hostRecords);
  int32_t lastRank = host.lastRank;
  int64_t crossHostWaitNs = 0;
  OneWayAgreement agreed;

  // 2. The root's host: its leader announces; nobody there waits for the other hosts.
  if (topology.host() == rootHost) {
    ByteView data;
    if (host.agrees) {
      data = rootsHostData ? rootsHostData() : host.local[topology.localRankOf(root)].payload;
    }
    if (levels.leader()) {
      Header record = host.mine;
      record.verdict = host.agrees ? kAgreed : kHostDisagrees;
      record.payloadBytes = data.size;
      record.lastRank = host.lastRank;
      const int64_t nowNs = arrivalClockNs();
      record.sinceSyncNs = nowNs - levels.lastExchangeDoneNs;
      // Every other leader needs this record to finish the broadcast, so none begins a later
      // collective before it arrived (failIfPeersMayHaveGivenUp).
      levels.lastRecordSentNs = nowNs;
      // Only the header and the payload cross hosts; the others receive into whole records.
      // Written into the group's kept buffer (the caller waits for `announced` before its
      // collective returns; on this host nothing else uses it): a fresh 1 MiB record cost
      // page faults on every broadcast.
      const auto sent = static_cast<int64_t>(kHeaderBytes + data.size);
      at::Tensor out = keptBuffer(levels.announcements, sent).narrow(0, 0, sent);
      writeRecord(out, record, data);
      agreed.announced = levels.rail->announce(out, rootHost);
    }
    if (!host.agrees) {
      if (agreed.announced) {
        levels.rail->wait(agreed.announced, ctx);
      }
      raiseMismatch(hostMismatch(topology, host.local));
    }
    agreed.payload = data;
    noteArrival(ctx, lastRank, host.inHostWaitNs, crossHostWaitNs);
    return agreed;
  }

  // 2. Every other host: its leader hears the root's record and judges it. A host whose ranks
  // disagree knows it already, and raises without step 3 (as in the exchange: its leader may be
  // in either form).
  Judgement judgement;
  ByteView rootPayload;
  if (!receiving) {
    if (!host.agrees) {
      raiseMismatch(hostMismatch(topology, host.local));
    }
  } else {
    // From here on this host waits only for the root's.
    const int64_t readyNs = arrivalClockNs();
    levels.rail->wait(heardWork, ctx);
    const Header rootRecord = readHeader(heard, 0);
    failIfPeersMayHaveGivenUp(levels, ctx, heardWork, /*peersWaitedForUs=*/false);
    // The root's host came last if its record left later after the last exchange than this
    // host was ready (each on its own steady clock); then this host waited for it.
    if (rootRecord.sinceSyncNs > readyNs - levels.lastExchangeDoneNs) {
      lastRank = rootRecord.lastRank;
      crossHostWaitNs = arrivalClockNs() - readyNs;
    }
    judgement = judge(levels, ctx, host, rootRecord, capacity,
                      InterHostEngine::otherFormFrom(heardWork) >= 0);
    if (judgement.groupFails) {
      levels.health.fail(ctx.describe(), judgement.mismatch); // wakes this host's ranks too
    }
    if (judgement.mismatch.empty()) {
      rootPayload = payloadOf(heard); // a record the judgement refused may claim any length
    }
    if (localSize == 1) {
      if (!judgement.mismatch.empty()) {
        raiseMismatch(judgement.mismatch);
      }
      agreed.payload = rootPayload;
      noteArrival(ctx, lastRank, host.inHostWaitNs, crossHostWaitNs);
      return agreed;
    }
  }

  // 3. Inside the host: the verdict, and the root's payload or the mismatch's message. A
  // payload larger than the in-host records stays with the leader (the caller takes it from
  // there); the others' lands in the group's kept buffer (the leader's holds the root's record).
  Header verdict = host.mine;
  verdict.lastRank = lastRank;
  verdict.crossHostWaitNs = crossHostWaitNs;
  at::Tensor told = receiving
      ? at::empty({static_cast<int64_t>(bytes)}, at::kByte)
      : keptBuffer(levels.announcements, bytes).narrow(0, 0, static_cast<int64_t>(bytes));
  const Record heardInHost = tellHost(
      levels, ctx, verdict, judgement.mismatch,
      rootPayload.size <= levels.settings.inlineBytes ? rootPayload : ByteView{}, told);
  agreed.payload = receiving ? rootPayload : heardInHost.payload;
  noteArrival(ctx, heardInHost.header.lastRank, host.inHostWaitNs,
              heardInHost.header.crossHostWaitNs);
  return agreed;
}

Bytes agree(const Levels& levels, const OpContext& ctx, ByteView payload, const Combine* combine) {
  return Agreement(levels, ctx, payload, combine).finish();
}

} // namespace dummy_collectives::hierarchy

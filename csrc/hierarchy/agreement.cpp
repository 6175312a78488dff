#include "hierarchy/agreement.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/exception.h>

#include <dummy_collectives/arrival.hpp>

namespace dummy_collectives::hierarchy {
namespace {

enum Verdict : int32_t {
  kAgreed = 0,
  kHostDisagrees = 1,  // the ranks of the writer's host called different collectives
  kGroupDisagrees = 2, // a leader's broadcast: the group disagrees (its message is the payload)
};

// Every record starts with this; its payload follows at kHeaderBytes.
using Header = Agreement::Header;

// A peer's record that crossed hosts this much earlier than ours may be the last exchange of a
// rank that has given up since (a timeout, an abort): the engine delivers what was sent before
// the failure, and it would complete our collective as if nothing had happened. Before trusting
// such a record, ask the store whether the group failed (one round trip, paid only by a rank
// that arrives late). Clocks of different hosts may disagree a little; a large disagreement
// only costs the round trip on every collective.
constexpr std::chrono::milliseconds kStaleRecord{20};

int64_t wallClockUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
constexpr size_t kHeaderBytes = 128;
static_assert(sizeof(Header) <= kHeaderBytes, "the header outgrew its space");
static_assert(std::is_trivially_copyable_v<Header>, "headers travel as bytes");

// A record's size: the header and room for `payloadBytes`, in whole cache lines.
size_t recordBytes(size_t payloadBytes) {
  return kHeaderBytes + (payloadBytes + 63) / 64 * 64;
}
size_t recordBytes(const HierarchySettings& settings) {
  return recordBytes(settings.inlineBytes);
}

// See kStaleRecord: where a peer's record crossed hosts this long before ours (wall clock,
// microseconds), fails the group with a published failure, if any. Whether it was stale.
bool failIfStaleAndPublished(
    const Levels& levels, const OpContext& ctx, int64_t oursUs, int64_t theirsUs) {
  if (oursUs - theirsUs <= kStaleRecord.count() * 1000) {
    return false;
  }
  if (auto reason = levels.health.published()) {
    levels.health.fail(ctx.describe(), *reason);
  }
  return true;
}

at::Tensor makeRecord(size_t bytes, const Header& header, ByteView payload) {
  TORCH_CHECK(
      kHeaderBytes + payload.size <= bytes,
      "dummy_collectives: ", payload.size, " bytes do not fit a ", bytes, "-byte record");
  // Only the header's padding is zeroed (a record crosses hosts as bytes): the payload is
  // copied over the rest, and what follows it is never read.
  at::Tensor record = at::empty({static_cast<int64_t>(bytes)}, at::kByte);
  auto* base = static_cast<std::byte*>(record.data_ptr());
  std::memset(base, 0, kHeaderBytes);
  std::memcpy(base, &header, sizeof(Header));
  if (payload.size > 0) {
    std::memcpy(base + kHeaderBytes, payload.data, payload.size);
  }
  return record;
}

// Record i of `records` (count records of `bytes` each).
struct Record {
  Header header;
  ByteView payload;
};
std::vector<Record> readRecords(const at::Tensor& records, const std::vector<int64_t>& offsets) {
  std::vector<Record> out;
  const auto* base = static_cast<const std::byte*>(records.data_ptr());
  for (const int64_t offset : offsets) {
    Record r;
    std::memcpy(&r.header, base + offset, sizeof(Header));
    r.payload = {base + offset + kHeaderBytes, static_cast<size_t>(r.header.payloadBytes)};
    out.push_back(r);
  }
  return out;
}
std::vector<Record> readRecords(const at::Tensor& records, int count, size_t bytes) {
  std::vector<int64_t> offsets;
  for (int i = 0; i < count; ++i) {
    offsets.push_back(static_cast<int64_t>(i * bytes));
  }
  return readRecords(records, offsets);
}

std::vector<ByteView> payloadsOf(const std::vector<Record>& records) {
  std::vector<ByteView> views;
  for (const auto& r : records) {
    views.push_back(r.payload);
  }
  return views;
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

std::string differentCallsMessage(const Topology& topology, const std::string& calls) {
  return c10::str(
      "dummy_collectives: ranks called different collectives (seen on rank ", topology.rank(),
      ", across ", topology.hostCount(), " hosts); no data was exchanged:", calls);
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
  return differentCallsMessage(topology, calls);
}

} // namespace

Agreement::Agreement(
    const Levels& levels, const OpContext& ctx, ByteView payload, const Combine* combine)
    : levels_(levels), ctx_(ctx), combine_(combine) {
  const Topology& topology = levels.topology;
  const size_t bytes = recordBytes(levels.settings);
  const int localSize = levels.host.size();

  // 1. Inside the host: every rank's header and payload.
  mine_.op = ctx.op;
  mine_.writer = topology.rank();
  mine_.payloadBytes = payload.size;
  mine_.arrivedNs = ctx.arrivedNs;
  // Alone on its host a rank's record goes nowhere but into its leader's (its own) exchange.
  at::Tensor record = makeRecord(localSize > 1 ? bytes : kHeaderBytes + payload.size, mine_, payload);
  hostRecords_ = record;
  if (localSize > 1) {
    hostRecords_ = at::empty({static_cast<int64_t>(bytes) * localSize}, at::kByte);
    // The first step: who does not come is named here (OpContext).
    levels.host.allgather(ctx, hostRecords_, record, InHostLevel::Step::kFirst)();
  }
  // Every rank of the host reads the same records, so all name the same last rank (ties: the
  // lowest local rank), on the host's one steady clock.
  const std::vector<Record> local = readRecords(hostRecords_, localSize, bytes);
  Header hostLast = local[0].header;
  for (const auto& r : local) {
    hostAgrees_ = hostAgrees_ && r.header.op == ctx.op;
    if (r.header.arrivedNs > hostLast.arrivedNs) {
      hostLast = r.header;
    }
  }
  hostLastRank_ = hostLast.writer;
  inHostWaitNs_ = hostLast.arrivedNs - ctx.arrivedNs;

  // 2. Across hosts, issued here: the leaders exchange their host's verdict and combined
  // payload. A host whose ranks disagree knows it already: its leader only tells the others.
  if (levels.leader()) {
    Header host = mine_;
    host.verdict = hostAgrees_ ? kAgreed : kHostDisagrees;
    Bytes combined;
    if (hostAgrees_ && combine != nullptr) {
      combined = combine->host(payloadsOf(readRecords(hostRecords_, localSize, bytes)));
    }
    host.payloadBytes = combined.size();
    host.lastRank = hostLastRank_;
    host.sentAtUs = wallClockUs();
    sentAtUs_ = host.sentAtUs;
    InterHostEngine& leaders = *levels.rail; // a leader's rail: the hosts' leaders
    // Only the header and what the host combined cross hosts (a 4-byte allreduce sends 132
    // bytes, not a whole record); every leader receives into whole records.
    const auto sent = static_cast<int64_t>(kHeaderBytes + combined.size());
    at::Tensor out = makeRecord(sent, host, {combined.data(), combined.size()});
    const auto slot = static_cast<int64_t>(bytes);
    leaderRecords_ = at::empty({leaders.recordsBytes(sent, slot)}, at::kByte);
    exchangeIssuedNs_ = arrivalClockNs();
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
    const int64_t crossHostWaitNs = arrivalClockNs() - exchangeIssuedNs_;
    std::vector<int64_t> offsets;
    for (int m = 0; m < leaders.size(); ++m) {
      offsets.push_back(leaders.recordOffset(m, static_cast<int64_t>(bytes)));
    }
    const std::vector<Record> hosts = readRecords(leaderRecords_, offsets);
    // The last host: the one whose leader sent its record last, by the wall clock (hosts share
    // no steady clock; see docs/design.md for what that costs). Its last rank is the group's.
    const Record* lastHost = &hosts[0];
    for (const auto& r : hosts) {
      if (r.header.sentAtUs > lastHost->header.sentAtUs) {
        lastHost = &r;
      }
    }
    lastRank_ = lastHost->header.lastRank;
    // Where this host came last, its leader waited for the network, not for a rank.
    crossHostWaitNs_ = lastHost->header.writer == topology.rank() ? 0 : crossHostWaitNs;
    for (const auto& r : hosts) {
      if (failIfStaleAndPublished(levels_, ctx_, sentAtUs_, r.header.sentAtUs)) {
        break;
      }
    }
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
    verdict.verdict = mismatch.empty() ? kAgreed : kGroupDisagrees;
    const ByteView carried = mismatch.empty()
        ? ByteView{result.data(), result.size()}
        : ByteView{reinterpret_cast<const std::byte*>(mismatch.data()),
                   std::min(mismatch.size(), levels_.settings.inlineBytes)};
    verdict.payloadBytes = carried.size;
    verdict.lastRank = lastRank_;
    verdict.crossHostWaitNs = crossHostWaitNs_;
    at::Tensor told = makeRecord(bytes, verdict, levels_.leader() ? carried : ByteView{});
    levels_.host.broadcast(ctx_, told, 0)();
    const Record heard = readRecords(told, 1, bytes)[0];
    if (heard.header.verdict != kAgreed) {
      raiseMismatch(std::string(
          reinterpret_cast<const char*>(heard.payload.data), heard.payload.size));
    }
    result.assign(heard.payload.data, heard.payload.data + heard.payload.size);
    lastRank_ = heard.header.lastRank;
    crossHostWaitNs_ = heard.header.crossHostWaitNs;
  } else if (!mismatch.empty()) {
    raiseMismatch(mismatch);
  }
  if (ctx_.arrival != nullptr) {
    *ctx_.arrival = {lastRank_, std::max<int64_t>(0, inHostWaitNs_) + crossHostWaitNs_,
                     ctx_.arrivedNs};
  }
  return result;
}

std::string differentCalls(
    const Topology& topology, std::vector<std::pair<int, OpDescriptor>> calls) {
  std::sort(calls.begin(), calls.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string lines;
  for (const auto& [rank, op] : calls) {
    lines += c10::str("\n  ", topology.describeRank(rank), ": ", op.describe());
  }
  return differentCallsMessage(topology, lines);
}

c10::intrusive_ptr<c10d::Work> announceToAll(
    const Levels& levels, const OpContext& ctx, ByteView payload) {
  Header header;
  header.op = ctx.op;
  header.writer = levels.topology.rank();
  header.payloadBytes = payload.size;
  header.arrivedNs = ctx.arrivedNs;
  header.lastRank = levels.topology.rank();
  header.sentAtUs = wallClockUs();
  // Only the header and the payload cross hosts; the others receive into whole records.
  at::Tensor record = makeRecord(kHeaderBytes + payload.size, header, payload);
  return levels.rail->broadcast(record, levels.topology.host());
}

ByteView hearAnnouncement(const Levels& levels, const OpContext& ctx, int rootHost) {
  const Topology& topology = levels.topology;
  InterHostEngine& rail = *levels.rail;
  const size_t bytes = recordBytes(levels.settings.oneWayBytes);
  const int64_t sentAtUs = wallClockUs();
  const int64_t issuedNs = arrivalClockNs();
  if (!levels.announcements.defined()) {
    levels.announcements = at::empty({static_cast<int64_t>(bytes)}, at::kByte);
  }
  at::Tensor& record = levels.announcements;
  rail.wait(rail.broadcast(record, rootHost), ctx);
  Header root;
  std::memcpy(&root, record.data_ptr(), sizeof(Header));
  // A record sent long before ours may be the last of a root that gave up.
  failIfStaleAndPublished(levels, ctx, sentAtUs, root.sentAtUs);
  if (root.op != ctx.op || root.payloadBytes > bytes - kHeaderBytes) {
    levels.health.fail(
        ctx.describe(),
        differentCalls(topology, {{root.writer, root.op}, {topology.rank(), ctx.op}}));
  }
  if (ctx.arrival != nullptr) {
    // The root came last if it sent its record after this rank posted its receive (wall
    // clocks: the hosts share no steady clock); then this rank waited for it.
    const bool rootLast = root.sentAtUs > sentAtUs;
    *ctx.arrival = {rootLast ? root.writer : topology.rank(),
                    rootLast ? arrivalClockNs() - issuedNs : 0, ctx.arrivedNs};
  }
  return {static_cast<const std::byte*>(record.data_ptr()) + kHeaderBytes,
          static_cast<size_t>(root.payloadBytes)};
}

Bytes agree(const Levels& levels, const OpContext& ctx, ByteView payload, const Combine* combine) {
  return Agreement(levels, ctx, payload, combine).finish();
}

} // namespace dummy_collectives::hierarchy

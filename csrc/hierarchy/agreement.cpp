#include <dummy_collectives/hierarchy/agreement.hpp>

#include <chrono>
#include <cstring>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/exception.h>

namespace dummy_collectives::hierarchy {
namespace {

enum Verdict : int32_t {
  kAgreed = 0,
  kHostDisagrees = 1,  // the ranks of the writer's host called different collectives
  kGroupDisagrees = 2, // a leader's broadcast: the group disagrees (its message is the payload)
};

// Every record starts with this; its payload follows at kHeaderBytes.
struct Header {
  OpDescriptor op;
  int32_t verdict = kAgreed;
  int32_t writer = -1; // group rank
  uint64_t payloadBytes = 0;
  int64_t sentAtUs = 0; // wall clock (microseconds since the epoch) when it crossed hosts
};

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

size_t recordBytes(const HierarchySettings& settings) {
  return kHeaderBytes + (settings.inlineBytes + 63) / 64 * 64;
}

at::Tensor makeRecord(size_t bytes, const Header& header, ByteView payload) {
  TORCH_CHECK(
      kHeaderBytes + payload.size <= bytes,
      "dummy_collectives: ", payload.size, " bytes do not fit a ", bytes, "-byte record");
  at::Tensor record = at::zeros({static_cast<int64_t>(bytes)}, at::kByte);
  auto* base = static_cast<std::byte*>(record.data_ptr());
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
std::vector<Record> readRecords(const at::Tensor& records, int count, size_t bytes) {
  std::vector<Record> out;
  const auto* base = static_cast<const std::byte*>(records.data_ptr());
  for (int i = 0; i < count; ++i) {
    Record r;
    std::memcpy(&r.header, base + i * bytes, sizeof(Header));
    r.payload = {base + i * bytes + kHeaderBytes, static_cast<size_t>(r.header.payloadBytes)};
    out.push_back(r);
  }
  return out;
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
  return c10::str(
      "dummy_collectives: ranks called different collectives (seen on rank ", topology.rank(),
      ", across ", topology.hostCount(), " hosts); no data was exchanged:", calls);
}

} // namespace

Bytes agree(const Levels& levels, const OpContext& ctx, ByteView payload, const Combine* combine) {
  const Topology& topology = levels.topology;
  const size_t bytes = recordBytes(levels.settings);
  const int localSize = levels.host.size();

  // 1. Inside the host: every rank's header and payload.
  Header mine;
  mine.op = ctx.op;
  mine.writer = topology.rank();
  mine.payloadBytes = payload.size;
  at::Tensor record = makeRecord(bytes, mine, payload);
  at::Tensor hostRecords = record;
  if (localSize > 1) {
    hostRecords = at::empty({static_cast<int64_t>(bytes) * localSize}, at::kByte);
    levels.host.wait(levels.host->_allgather_base(hostRecords, record), ctx);
  }
  const std::vector<Record> local = readRecords(hostRecords, localSize, bytes);
  bool hostAgrees = true;
  for (const auto& r : local) {
    hostAgrees = hostAgrees && r.header.op == ctx.op;
  }

  // 2. Across hosts: the leaders exchange their host's verdict and combined payload. A host
  // whose ranks disagree knows it already (step 1): its leader only tells the other hosts.
  std::string mismatch;
  Bytes result;
  if (levels.leader()) {
    InterHostEngine& leaders = *levels.rail; // a leader's rail: the hosts' leaders
    Header host = mine;
    host.verdict = hostAgrees ? kAgreed : kHostDisagrees;
    Bytes combined;
    if (hostAgrees && combine != nullptr) {
      combined = combine->host(payloadsOf(local));
    }
    host.payloadBytes = combined.size();
    host.sentAtUs = wallClockUs();
    at::Tensor out = makeRecord(bytes, host, {combined.data(), combined.size()});
    at::Tensor all = at::empty({static_cast<int64_t>(bytes) * leaders.size()}, at::kByte);
    leaders.wait(leaders.allgather(all, out), ctx);
    const std::vector<Record> hosts = readRecords(all, leaders.size(), bytes);
    for (const auto& r : hosts) {
      if (host.sentAtUs - r.header.sentAtUs > kStaleRecord.count() * 1000) {
        if (auto reason = levels.health.published()) {
          levels.health.fail(ctx.describe(), *reason);
        }
        break;
      }
    }
    mismatch = groupMismatch(topology, ctx.op, hosts);
    if (mismatch.empty() && combine != nullptr) {
      result = combine->all(payloadsOf(hosts));
    }
  }
  if (!hostAgrees) {
    raiseMismatch(hostMismatch(topology, local));
  }

  // 3. Inside the host: the leader's verdict, and the result (or the mismatch's message).
  if (localSize > 1) {
    Header verdict = mine;
    verdict.verdict = mismatch.empty() ? kAgreed : kGroupDisagrees;
    const ByteView carried = mismatch.empty()
        ? ByteView{result.data(), result.size()}
        : ByteView{reinterpret_cast<const std::byte*>(mismatch.data()),
                   std::min(mismatch.size(), levels.settings.inlineBytes)};
    verdict.payloadBytes = carried.size;
    at::Tensor told = makeRecord(bytes, verdict, levels.leader() ? carried : ByteView{});
    std::vector<at::Tensor> tensors{told};
    c10d::BroadcastOptions opts;
    opts.rootRank = 0;
    opts.timeout = ctx.timeout;
    levels.host.wait(levels.host->broadcast(tensors, opts), ctx);
    const Record heard = readRecords(told, 1, bytes)[0];
    if (heard.header.verdict != kAgreed) {
      raiseMismatch(std::string(
          reinterpret_cast<const char*>(heard.payload.data), heard.payload.size));
    }
    result.assign(heard.payload.data, heard.payload.data + heard.payload.size);
  } else if (!mismatch.empty()) {
    raiseMismatch(mismatch);
  }
  return result;
}

} // namespace dummy_collectives::hierarchy

// The lowering of a group that spans hosts: which two-level collective (two_level.hpp) each
// collective is, what a collective of the group does around it (the agreement's arrival, the
// store watcher, the fault injection of tests), and point-to-point across hosts.
#include "hierarchy/two_level_lowering.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <thread>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <dummy_collectives/arrival.hpp>
#include <dummy_collectives/debug_log.hpp>
#include <dummy_collectives/flight_recorder.hpp>
#include "hierarchy/agreement.hpp"
#include "hierarchy/cross_host_device.hpp"
#include "hierarchy/cross_host_p2p.hpp"
#include "hierarchy/in_host.hpp"
#include "inter_host/links_choice.hpp"
#include "shm/wait_policy.hpp"
#include "inter_host/link_probe.hpp"
#include "hierarchy/two_level.hpp"
#include "c10d/local_error.hpp"
#include "c10d/this_process.hpp"

namespace dummy_collectives::hierarchy {
namespace {

// A receive from another host into a tensor the engine cannot write directly (a CUDA or
// non-contiguous one): the engine receives into a host copy, copied into the tensor on wait().
class StagedRecvWork final : public c10d::Work {
 public:
  StagedRecvWork(c10::intrusive_ptr<c10d::Work> inner, at::Tensor user, at::Tensor host)
      : c10d::Work(-1, c10d::OpType::RECV),
        inner_(std::move(inner)),
        user_(std::move(user)),
        host_(std::move(host)) {}
  bool isCompleted() override {
    return inner_->isCompleted();
  }
  bool wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    user_.copy_(host_);
    return true;
  }
  int sourceRank() const override {
    return inner_->sourceRank();
  }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  at::Tensor user_;
  at::Tensor host_;
};

// A point-to-point operation the flight recorder follows: completed when a wait on it returns
// or it is found complete; a group failure seen in wait() writes the dump.
class RecordedWork final : public c10d::Work {
 public:
  RecordedWork(
      c10::intrusive_ptr<c10d::Work> inner, uint64_t record, flight_recorder::Group* group)
      : c10d::Work(-1, inner->retrieveOpType()),
        inner_(std::move(inner)),
        record_(record),
        group_(group) {}
  bool isCompleted() override {
    const bool done = inner_->isCompleted();
    if (done && inner_->exception() == nullptr) {
      flight_recorder::completed(record_);
    }
    return done;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    try {
      inner_->wait(timeout);
    } catch (const c10::DistBackendError& e) {
      flight_recorder::dumpOnFailure(group_, e.what());
      throw;
    }
    flight_recorder::completed(record_);
    return true;
  }
  int sourceRank() const override {
    return inner_->sourceRank();
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return inner_->getFuture();
  }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  uint64_t record_;
  flight_recorder::Group* group_;
};

// A collective of the group running on this rank, for the store watcher (GroupHealth).
class InFlight {
 public:
  explicit InFlight(GroupHealth& health) : health_(health) {
    health_.collectiveBegins();
  }
  ~InFlight() {
    health_.collectiveEnds();
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  GroupHealth& health_;
};

// gloo takes tags from 0 up; dummy's own messages (the monitored barrier's) use negative ones,
// which go to the top of gloo's range instead, far from any tag user code counts up to.
int engineTag(int tag) {
  return tag >= 0 ? tag : std::numeric_limits<int>::max() + (tag + 1); // -1: INT_MAX
}

// Tensors grouped by dtype, each group concatenated: coalesced allreduces run one two-level
// allreduce per dtype instead of one per tensor.
std::map<at::ScalarType, std::vector<size_t>> byDtype(const std::vector<at::Tensor>& tensors) {
  std::map<at::ScalarType, std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    groups[tensors[i].scalar_type()].push_back(i);
  }
  return groups;
}


} // namespace

TwoLevelLowering::TwoLevelLowering(
    const c10::intrusive_ptr<c10d::Store>& store,
    const c10::intrusive_ptr<c10d::Store>& hostStore,
    c10::intrusive_ptr<BackendOptions> options,
    Topology topology,
    int ranksOnMachine,
    c10::intrusive_ptr<c10d::Backend> rail,
    c10::intrusive_ptr<c10d::Backend> everyone,
    c10::intrusive_ptr<c10d::Backend> linkProbe)
    : options_(std::move(options)),
      topology_(std::move(topology)),
      waits_(std::make_unique<WaitLedger>(topology_.size())) {
  // Before this rank takes part in anything its peers' creation waits for: no peer can begin
  // its first collective earlier (Levels::lastRecordSentNs).
  const int64_t creationBeganNs = arrivalClockNs();
  const int rank = topology_.rank();
  const int size = topology_.size();
  // The host's ranks: their own segment, through the host's store prefix. Messages name them by
  // their group rank; every rank of the group on this machine counts for core sharing.
  hostShm_ = std::make_shared<ShmLowering>(
      hostStore,
      topology_.localRank(),
      topology_.localSize(),
      options_,
      GroupJoin{options_->timeout, {}},
      Placement{topology_.ranksOn(topology_.host()), ranksOnMachine},
      debug_log::Site{rank, &options_->group_name, false});
  // A rank that gives up tells its host (shared memory) and hangs up its links, so a peer
  // reading a record it sent before knows (agreement.cpp).
  auto hangUp = std::make_shared<inter_host::LinkHangUp>();
  health_ = std::make_unique<GroupHealth>(
      store,
      [shm = hostShm_.get(), hangUp](const std::string& reason) {
        shm->abort(reason);
        hangUp->now();
      },
      [shm = hostShm_.get()] { return shm->brokenReason(); },
      [this] { return seenDead(); },
      c10::str("rank ", rank, " (", topology_.describeHost(topology_.host()), ", pid ",
               thisProcessId(), ")"),
      /*watch=*/topology_.localRank() == 0,
      topology_.hostCount());
  host_ = std::make_unique<InHostLevel>(hostShm_, *health_);
  links_ = inter_host::LinksChoice::decide(*options_, topology_, *store);
  const bool needsRail = topology_.uniform() || topology_.localRank() == 0;
  TORCH_CHECK(
      needsRail == static_cast<bool>(rail),
      "dummy_collectives: rank ", rank, needsRail ? " needs" : " takes no", " cross-host rail");
  if (rail) {
    rail_ = std::make_unique<InterHostEngine>(
        std::move(rail), topology_.rail(topology_.uniform() ? topology_.localRank() : 0),
        topology_, *health_);
    // The leaders' rail: broadcasts begin with the root's host's one-way record there
    // (agreement.hpp, agreeOneWay), so leaders that called different collectives may meet
    // nobody there.
    rail_->compareStuckCalls(topology_.localRank() == 0);
    if (linksBetweenHosts()) {
      // The leaders' links carry the agreement's records. Every rail gets its own (uniform
      // hosts: rail k links the hosts' local ranks k), for the pipelines' cross-host stages run
      // to completion on this thread (pipeline.hpp, a blocking stage). One rank per host runs
      // one engine operation at a time (no pipeline): all its data goes on the links.
      const int railIndex = topology_.uniform() ? topology_.localRank() : 0;
      std::unique_ptr<inter_host::PeerLinks> links;
      try {
        // The host's waits' policy (wait_policy.hpp): poll a while where ranks have a core
        // each. Until the host's first exchange decides (a host of one rank never has one):
        // shared where the machine's ranks outnumber its CPUs, or this host's this process's.
        const bool guess = ranksOnMachine > static_cast<int>(std::thread::hardware_concurrency()) ||
            topology_.localSize() > countCpus(affinityMask());
        auto pollFor = [shm = hostShm_.get(), spinMicros = options_->spinMicros, guess] {
          return WaitPolicy::make(shm->sharesCores().value_or(guess), spinMicros,
                                  /*hostLevel=*/true)
              .spin;
        };
        links = inter_host::makeLinks(links_, store, topology_, railIndex, options_->timeout,
                                      hangUp, pollFor);
      } catch (const std::exception& e) {
        C10_THROW_ERROR(DistBackendError,
                        c10::str("dummy_collectives: rank ", rank, " (",
                                 topology_.describeHost(topology_.host()),
                                 "): ", inter_host::errorText(e),
                                 " (DUMMY_COLLECTIVES_INTER_HOST=gloo sends everything "
                                 "between hosts through gloo)"));
      }
      linksText_ = inter_host::describeLinks(*links);
      rail_->useLinks(std::move(links), /*carryData=*/topology_.oneRankPerHost());
    }
  }
  std::vector<int> all(size);
  for (int r = 0; r < size; ++r) {
    all[r] = r;
  }
  p2p_ = std::make_unique<CrossHostP2P>(everyone, rank);
  everyone_ = std::make_unique<InterHostEngine>(std::move(everyone), all, topology_, *health_);
  HierarchySettings settings;
  settings.inlineBytes = options_->interHostInlineBytes;
  settings.chunkBytes = options_->interHostChunkBytes;
  // The link is measured where a plan depends on its rate: hosts of several ranks cut their
  // pipelines by it (unless inter_host_min_chunk_bytes says how), and three or more hosts of
  // one rank choose between records and gloo's ring by it. Two hosts of one rank send the same
  // bytes either way (a record or a segment's halves: N each way, as the ring).
  const bool pipelines = !topology_.oneRankPerHost();
  const bool recordsOrRing = topology_.oneRankPerHost() && topology_.hostCount() > 2;
  if ((pipelines && options_->interHostMinChunkBytes < 0) || recordsOrRing) {
    TORCH_CHECK(
        (topology_.localRank() == 0) == static_cast<bool>(linkProbe), "dummy_collectives: rank ",
        rank, topology_.localRank() == 0 ? " needs" : " takes no", " link probe group");
    const inter_host::LinkVerdict link =
        inter_host::chooseMinChunkBytes(topology_, linkProbe.get(), *store, settings.chunkBytes);
    settings.minChunkBytes = link.minChunkBytes;
    settings.linkGbitPerSecond = link.gbitPerSecond;
  }
  if (options_->interHostMinChunkBytes >= 0) {
    settings.minChunkBytes = static_cast<size_t>(options_->interHostMinChunkBytes);
  }
  const GroupLayout layout{topology_.hostCount(), topology_.oneRankPerHost(),
                           topology_.uniform(), linksBetweenHosts()};
  sizeRecords(settings, layout);
  levels_ = std::unique_ptr<Levels>(new Levels{topology_, *host_, rail_.get(), *everyone_,
                                               *health_, settings,
                                               AlgorithmTable(layout, settings, options_->algo)});
  device_ = std::make_unique<CrossHostDevice>(
      *levels_, store, topology_.addresses().at(topology_.host()),
      !linksBetweenHosts() ? "no links between hosts: inter_host gloo, or UCX does not load"
          : topology_.hostCount() > kMaxDeviceFoldSources
          ? c10::str("more than ", kMaxDeviceFoldSources, " hosts for one fold")
          : "");
  levels_->lastRecordSentNs = creationBeganNs;
  levels_->lastExchangeDoneNs = arrivalClockNs();
  fault_ = fault_injection::fromEnv(); // DUMMY_COLLECTIVES_FAULT_INJECT (tests)
}

TwoLevelLowering::~TwoLevelLowering() {
  host_.reset(); // runs the host's queued steps, while the levels are alive
  if (!health_->brokenReason().empty()) {
    // A failed group may have given up a cross-host wait the engine cannot interrupt: its
    // destructor would join a thread still blocked in it. The process's exit closes it.
    leaveToExit(std::move(rail_), std::move(everyone_), std::move(p2p_));
  }
}

bool TwoLevelLowering::linksBetweenHosts() const {
  return links_.any(); // every rank decided alike (LinksChoice::decide)
}

std::string TwoLevelLowering::rankPlacement() const {
  return c10::str("; this rank is local rank ", topology_.localRank(), " of ",
                  topology_.localSize(), " on host ", topology_.host());
}

std::vector<std::vector<int>> TwoLevelLowering::hosts() const {
  std::vector<std::vector<int>> hosts;
  for (int h = 0; h < topology_.hostCount(); ++h) {
    hosts.push_back(topology_.ranksOn(h));
  }
  return hosts;
}

std::vector<std::string> TwoLevelLowering::algorithms() const {
  std::vector<std::string> lines = levels_->algorithms.describe();
  lines.push_back("CUDA tensors: " + device_->describe());
  return lines;
}

std::string TwoLevelLowering::peerAccess() const {
  return hostShm_->peerAccess();
}

std::optional<bool> TwoLevelLowering::sharesCores() const {
  return hostShm_->sharesCores();
}

std::string TwoLevelLowering::brokenReason() const {
  return health_->brokenReason();
}

void TwoLevelLowering::abort(const std::string& reason) {
  // Fails the group on every rank of every host (the reason travels through the store).
  health_->markFailed(reason);
}

std::vector<int> TwoLevelLowering::seenDead() const {
  // Only this host's: another host's processes are for its own ranks to see.
  return hostShm_->deadRanks(); // labelled by group rank
}

std::vector<int> TwoLevelLowering::deadRanks() const {
  return health_->lostRanks(topology_.size(),
                            std::chrono::steady_clock::now() + options_->timeout);
}

void TwoLevelLowering::setTimeout(std::chrono::milliseconds timeout) {
  hostShm_->setTimeout(timeout);
  if (rail_) {
    (*rail_)->setTimeout(timeout);
  }
  (*everyone_)->setTimeout(timeout);
}

void TwoLevelLowering::awaitJoined(std::chrono::milliseconds limit) {
  hostShm_->awaitJoined(limit); // across hosts, the engines connected when the group was made
}

void TwoLevelLowering::finishForExit() {
  hostShm_->finishForExit();
}

// ---- One collective ----------------------------------------------------------------------------

void TwoLevelLowering::run(OpContext& call, const std::function<void()>& collective) {
  const auto now = std::chrono::steady_clock::now();
  call.deadline = now + call.timeout;
  call.arrivedNs =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  if (call.arrival != nullptr) {
    call.arrival->arrivedNs = call.arrivedNs;
  }
  if (fault_) {
    call.fault = &*fault_;
    call.faultStep = fault_->stepFor(call.rank, call.op.seq);
  }
  const InFlight inFlight(*health_); // the host's watcher asks the store meanwhile
  health_->raiseIfBroken(call.describe());
  // Every rank on every host raises an error of this rank alone, naming this rank.
  failGroupOnLocalError(collective, [&](const std::string& error) {
    health_->fail(call.describe(), c10::str("failed on ", health_->self(), ": ", error));
  });
  if (call.arrival != nullptr && call.arrival->known()) {
    waits_->add(call.arrival->lastRank, call.arrival->waitedNs);
  }
}

DeviceCollectives* TwoLevelLowering::deviceFor(const std::vector<at::Tensor>& tensors) {
  return device_->accepts(tensors) && device_->groupTakes() ? device_.get() : nullptr;
}

void TwoLevelLowering::runOnDevice(
    OpContext& call,
    DeviceCollectives::Ticket& ticket,
    DummyWork& work,
    const std::function<void(DeviceCollectives&, Transport&)>& body) {
  run(call, [&] {
    device_->setCall(&call);
    device_->run(ticket, work, [&] { body(*device_, hostShm_->transport()); });
    device_->setCall(nullptr);
  });
}

void TwoLevelLowering::allreduce(
    const OpContext& call, at::Tensor& data, const ReduceSpec& spec) {
  two_level::allreduce(*levels_, call, data, spec);
}

void TwoLevelLowering::allreduceCoalesced(
    const OpContext& call,
    std::vector<at::Tensor>& data,
    const std::vector<ReduceSpec>& specs) {
  agree(*levels_, call);
  for (const auto& [dtype, members] : byDtype(data)) {
    std::vector<at::Tensor> flat;
    for (size_t i : members) {
      flat.push_back(data[i].reshape(-1));
    }
    at::Tensor all = at::cat(flat);
    two_level::allreduceData(*levels_, call, all, specs[members[0]]);
    int64_t offset = 0;
    for (size_t i : members) {
      data[i].view(-1).copy_(all.narrow(0, offset, data[i].numel()));
      offset += data[i].numel();
    }
  }
}

at::Tensor TwoLevelLowering::allreduceSparse(const OpContext& call, const at::Tensor& input) {
  return two_level::allreduceSparse(*levels_, call, input);
}

void TwoLevelLowering::reduce(
    const OpContext& call, at::Tensor& data, const ReduceSpec& spec, int root) {
  two_level::reduce(*levels_, call, data, spec, root);
}

void TwoLevelLowering::broadcast(const OpContext& call, at::Tensor& data, int root) {
  two_level::broadcast(*levels_, call, data, root);
}

void TwoLevelLowering::allgather(
    const OpContext& call, const at::Tensor& input, std::vector<at::Tensor>& perRank) {
  at::Tensor all = at::empty({input.numel() * topology_.size()}, input.options());
  two_level::allgather(*levels_, call, input, all);
  for (size_t r = 0; r < perRank.size(); ++r) {
    perRank[r].view(-1).copy_(all.narrow(0, r * input.numel(), input.numel()));
  }
}

void TwoLevelLowering::allgatherInto(
    const OpContext& call, const at::Tensor& input, at::Tensor& output) {
  two_level::allgather(*levels_, call, input, output);
}

void TwoLevelLowering::allgatherCoalesced(
    const OpContext& call,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor>& outputs,
    bool byRank) {
  agree(*levels_, call);
  const size_t count = inputs.size();
  for (size_t i = 0; i < count; ++i) {
    if (!byRank) {
      two_level::allgatherData(*levels_, call, inputs[i], outputs[i]);
      continue;
    }
    const int64_t n = inputs[i].numel();
    at::Tensor all = at::empty({n * topology_.size()}, inputs[i].options());
    two_level::allgatherData(*levels_, call, inputs[i], all);
    for (int r = 0; r < topology_.size(); ++r) {
      outputs[r * count + i].view(-1).copy_(all.narrow(0, r * n, n));
    }
  }
}

void TwoLevelLowering::gather(
    const OpContext& call, const at::Tensor& input, std::vector<at::Tensor>& outputs, int root) {
  two_level::gather(*levels_, call, input, outputs, root);
}

void TwoLevelLowering::scatter(
    const OpContext& call, const std::vector<at::Tensor>& inputs, at::Tensor& output, int root) {
  std::vector<at::Tensor> parts(inputs);
  two_level::scatter(*levels_, call, parts, output, root);
}

void TwoLevelLowering::reduceScatter(
    const OpContext& call,
    const std::vector<at::Tensor>& inputs,
    at::Tensor& output,
    const ReduceSpec& spec) {
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : inputs) {
    parts.push_back(t.reshape(-1));
  }
  two_level::reduceScatter(*levels_, call, at::cat(parts), output, spec);
}

void TwoLevelLowering::reduceScatterTensors(
    const OpContext& call,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor>& outputs,
    const std::vector<ReduceSpec>& specs) {
  if (call.op.kind == CollectiveKind::kReduceScatterBase) {
    two_level::reduceScatter(*levels_, call, inputs[0], outputs[0], specs[0]);
    return;
  }
  agree(*levels_, call);
  for (size_t i = 0; i < inputs.size(); ++i) {
    two_level::reduceScatterData(*levels_, call, inputs[i], outputs[i], specs[i]);
  }
}

void TwoLevelLowering::alltoall(
    const OpContext& call,
    const at::Tensor& input,
    at::Tensor& output,
    const std::vector<int64_t>& sendBytes,
    const std::vector<int64_t>& recvBytes) {
  two_level::alltoall(*levels_, call, input, output, sendBytes, recvBytes);
}

void TwoLevelLowering::alltoallLists(
    const OpContext& call,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor>& outputs) {
  std::vector<at::Tensor> sendParts;
  std::vector<int64_t> sendBytes;
  std::vector<int64_t> recvBytes;
  int64_t received = 0;
  for (size_t r = 0; r < inputs.size(); ++r) {
    sendParts.push_back(bytesOf(inputs[r]));
    sendBytes.push_back(sendParts.back().numel());
    recvBytes.push_back(outputs[r].numel() * outputs[r].element_size());
    received += recvBytes.back();
  }
  at::Tensor inBytes = at::cat(sendParts);
  at::Tensor outBytes = at::empty({received}, at::kByte);
  two_level::alltoall(*levels_, call, inBytes, outBytes, sendBytes, recvBytes);
  int64_t offset = 0;
  for (size_t r = 0; r < outputs.size(); ++r) {
    bytesOf(outputs[r]).copy_(outBytes.narrow(0, offset, recvBytes[r]));
    offset += recvBytes[r];
  }
}

void TwoLevelLowering::barrier(const OpContext& call) {
  two_level::barrier(*levels_, call);
}

// ---- Point-to-point ----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> TwoLevelLowering::recorded(
    c10::intrusive_ptr<c10d::Work> work, const PointToPoint& p2p) {
  if (p2p.record == 0) {
    return work;
  }
  return c10::make_intrusive<RecordedWork>(std::move(work), p2p.record, p2p.recorded);
}

c10::intrusive_ptr<c10d::Work> TwoLevelLowering::send(
    std::vector<at::Tensor>& tensors, const PointToPoint& p2p) {
  if (sameHost(p2p.peer)) {
    PointToPoint local = p2p;
    local.peer = topology_.localRankOf(p2p.peer);
    return hostShm_->send(tensors, local);
  }
  health_->raiseIfBroken(c10::str("dummy send to rank ", p2p.peer, " on rank ", topology_.rank()));
  // The engine sends from contiguous host memory; the Work keeps the copy alive.
  const at::Tensor host = tensors[0].to(at::kCPU).contiguous();
  return recorded(p2p_->send(host, p2p.peer, static_cast<uint32_t>(engineTag(p2p.tag))), p2p);
}

c10::intrusive_ptr<c10d::Work> TwoLevelLowering::recv(
    std::vector<at::Tensor>& tensors, const PointToPoint& p2p) {
  if (sameHost(p2p.peer)) {
    PointToPoint local = p2p;
    local.peer = topology_.localRankOf(p2p.peer);
    return hostShm_->recv(tensors, local);
  }
  health_->raiseIfBroken(
      c10::str("dummy recv from rank ", p2p.peer, " on rank ", topology_.rank()));
  const at::Tensor& user = tensors[0];
  const auto tag = static_cast<uint32_t>(engineTag(p2p.tag));
  if (user.is_cpu() && user.is_contiguous()) {
    return recorded(p2p_->recv(user, p2p.peer, tag), p2p);
  }
  at::Tensor host = at::empty(user.sizes(), user.options().device(at::kCPU));
  return recorded(
      c10::make_intrusive<StagedRecvWork>(p2p_->recv(host, p2p.peer, tag), user, host), p2p);
}

} // namespace dummy_collectives::hierarchy

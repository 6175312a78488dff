#include "inter_host/ucx_links.hpp"

#include <algorithm>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <dummy_collectives/debug_log.hpp>

#include "inter_host/ucx_wire.hpp"
#include "shm/wait_policy.hpp"
#include "ucx/ucx_api.hpp"

namespace dummy_collectives::inter_host {
namespace {

using Clock = std::chrono::steady_clock;

using namespace ucx_wire; // NOLINT(google-build-using-namespace): the links' own messages

std::string keyOf(int groupRank) {
  return c10::str("dummy_collectives/ucx_links/", groupRank);
}

} // namespace

// An operation on UCX: a frame per send and per receive, moved by progressUntil.
class UcxLinks::UcxOperation final : public PeerLinks::Operation {
 public:
  UcxOperation(UcxLinks& links, Kind kind, std::vector<Send> sends, std::vector<Receive> receives)
      : links_(links), kind_(kind), channel_(channelOf(kind)) {
    std::lock_guard<std::mutex> lock(links.mu_);
    for (auto& send : sends) {
      Outgoing o;
      o.member = send.member;
      o.bytes = std::move(send.bytes);
      o.forwards = send.forwards;
      o.pieces.resize(piecesOf(kind, o.bytes.numel()));
      o.first = links.sent_[channel_][o.member];
      links.sent_[channel_][o.member] += o.pieces.size();
      out_.push_back(std::move(o));
    }
    for (auto& receive : receives) {
      Incoming in;
      in.member = receive.member;
      in.slot = std::move(receive.slot);
      in.pieces.resize(piecesOf(kind, in.slot.numel()));
      in.first = links.received_[channel_][in.member];
      links.received_[channel_][in.member] += in.pieces.size();
      in_.push_back(std::move(in));
    }
  }

  ~UcxOperation() override {
    if (done_) {
      return;
    }
    // Ended early (the group failed): UCX may still write into a receive's memory, or read a
    // send's, so those requests outlive the operation until UCX lets them go.
    links_.breakLinks("an operation ended before all its messages moved");
    std::lock_guard<std::mutex> lock(links_.mu_);
    auto abandon = [&](std::vector<std::unique_ptr<Request>>& requests, bool cancel) {
      for (auto& request : requests) {
        if (request && request->handle != nullptr) {
          if (cancel) {
            ucx::api().ucp_request_cancel(links_.worker_->handle(), request->handle);
          }
          links_.abandoned_.push_back(std::move(request));
        }
      }
    };
    for (auto& o : out_) {
      abandon(o.pieces, false);
    }
    for (auto& in : in_) {
      abandon(in.pieces, true);
    }
  }

  bool progressUntil(Clock::time_point until) override {
    // Polls as the host's waits do (wait_policy.hpp: while its ranks have a core each), then
    // sleeps until UCX has events.
    const auto pollUntil = Clock::now() + links_.pollFor_();
    while (!done_) {
      links_.worker_->progress();
      if (advance()) {
        done_ = true;
        links_.busy_ = false;
        break;
      }
      const auto now = Clock::now();
      if (now < pollUntil && now < until) {
        cpuRelax();
        continue;
      }
      if (now >= until || !links_.worker_->sleepUntil(until)) {
        return false;
      }
    }
    return true;
  }
  bool isCompleted() override {
    return done_;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    // 0 ms is c10d's kNoTimeout: wait for as long as it takes.
    const auto until = timeout.count() == 0 ? Clock::time_point::max() : Clock::now() + timeout;
    TORCH_CHECK(progressUntil(until), "dummy_collectives: timed out after ", timeout.count(),
                " ms on the links between hosts (UCX)");
    return true;
  }

  std::vector<int> awaited() const override {
    std::vector<int> members;
    for (const auto& in : in_) {
      if (in.landed < in.pieces.size()) {
        members.push_back(in.member);
      }
    }
    for (const auto& o : out_) {
      if (o.left < o.pieces.size()) {
        members.push_back(o.member);
      }
    }
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    return members;
  }

  std::vector<int> endedAfterFrame() const override {
    std::vector<int> members;
    for (const auto& in : in_) {
      const auto next = static_cast<uint32_t>(in.first + in.pieces.size());
      if (links_.hungUpBy(channel_, in.member, next)) {
        members.push_back(in.member);
      }
    }
    return members;
  }

 private:
  using Pieces = std::vector<std::unique_ptr<Request>>;
  struct Outgoing {
    int member = -1;
    at::Tensor bytes;
    int forwards = -1;
    uint32_t first = 0; // the first piece's message number
    Pieces pieces;      // posted ones non-null
    size_t posted = 0;
    size_t left = 0;    // pieces UCX is done sending
  };
  struct Incoming {
    int member = -1;
    at::Tensor slot;
    uint32_t first = 0;
    Pieces pieces;
    size_t probed = 0;  // pieces posted (a record's: once found), in order
    size_t landed = 0;  // pieces wholly received, in order
    // A record longer than its slot, or of another kind, lands here, where `aside`; the kind
    // the probe saw.
    at::Tensor spill;
    bool aside = false;
    uint64_t asideKind = 0;
  };

  // One pass over every message; true when the operation is done (or ended early).
  bool advance() {
    bool done = true;
    for (size_t i = 0; i < in_.size(); ++i) {
      if (!receive(in_[i])) {
        return true; // ended: another kind or size arrived
      }
      done = done && in_[i].landed == in_[i].pieces.size();
    }
    for (auto& o : out_) {
      send(o);
      done = done && o.left == o.pieces.size();
    }
    return done;
  }

  void send(Outgoing& o) {
    const int64_t total = o.bytes.numel();
    const size_t ready = o.forwards >= 0 ? in_[o.forwards].landed : o.pieces.size();
    if (o.forwards >= 0 && o.posted == 0 && ready > 0) {
      debug_log::note("relayed as its ", o.pieces.size(), " pieces land");
    }
    while (o.posted < std::min(ready, o.pieces.size())) {
      const size_t k = o.posted;
      const Piece piece = pieceOf(kind_, total, k);
      o.pieces[k] = std::make_unique<Request>();
      o.pieces[k]->keep = o.bytes;
      postSend(*o.pieces[k], links_.worker_->endpoint(o.member),
               static_cast<const char*>(o.bytes.data_ptr()) + piece.at,
               static_cast<size_t>(piece.bytes),
               tagOf(wireKind(), channel_, links_.me_, o.first + k));
      ++o.posted;
    }
    while (o.left < o.posted && o.pieces[o.left]->test()) {
      if (o.pieces[o.left]->status != UCS_OK) {
        links_.lost(o.member, ucx::api().ucs_status_string(o.pieces[o.left]->status));
      }
      ++o.left;
    }
    if (o.left < o.pieces.size()) {
      failIfLost(o.member);
    }
  }

  // Moves `in` on; false where the operation ends here (a frame of another kind or size). A
  // record is probed for before it is taken: it may be of another kind, or longer than its slot.
  bool receive(Incoming& in) {
    if (kind_ == Kind::kData) {
      return receiveData(in);
    }
    const ucx::Api& ucp = ucx::api();
    while (in.probed < in.pieces.size() && !in.aside) {
      const size_t k = in.probed;
      ucp_tag_recv_info_t info{};
      const ucp_tag_message_h message = ucp.ucp_tag_probe_nb(
          links_.worker_->handle(), tagOf(0, channel_, in.member, in.first + k), kAnyKind,
          /*remove=*/1, &info);
      if (message == nullptr) {
        break;
      }
      auto& request = in.pieces[k];
      request = std::make_unique<Request>();
      ++in.probed;
      const uint64_t kind = kindOf(info.sender_tag);
      if (kind == kHangUp) {
        postReceive(*request, links_.worker_->handle(), nullptr, 0, message);
        links_.lost(in.member, "it hung up (its group failed)");
      }
      if (kind == wireKind() && static_cast<int64_t>(info.length) <= in.slot.numel()) {
        request->keep = in.slot;
        postReceive(*request, links_.worker_->handle(),
                    static_cast<char*>(in.slot.data_ptr()) + pieceOf(kind_, in.slot.numel(), k).at,
                    info.length, message);
      } else {
        // Longer than the slot, or not what this receive expects: the whole message lands
        // aside and the slot gets its first bytes; nothing after it is taken.
        in.spill = at::empty({static_cast<int64_t>(info.length)}, in.slot.options());
        request->keep = in.spill;
        in.aside = true;
        in.asideKind = kind;
        postReceive(*request, links_.worker_->handle(), in.spill.data_ptr(), info.length,
                    message);
      }
    }
    while (in.landed < in.probed) {
      const size_t k = in.landed;
      auto& request = in.pieces[k];
      if (!request->test()) {
        break;
      }
      if (request->status != UCS_OK) {
        links_.lost(in.member, ucp.ucs_status_string(request->status));
      }
      if (in.aside && k + 1 == in.probed) {
        return ended(in, k);
      }
      ++in.landed;
    }
    if (in.landed < in.pieces.size()) {
      failIfLost(in.member);
    }
    return true;
  }

  // Data pairs by construction (its sizes were agreed), so each piece's receive is posted at
  // once, into its place in the slot: UCX matches it as it arrives, with no probe and no copy
  // aside. A hang-up or a message of another size matches it too, and ends the operation.
  bool receiveData(Incoming& in) {
    const ucx::Api& ucp = ucx::api();
    for (; in.probed < in.pieces.size(); ++in.probed) {
      const size_t k = in.probed;
      auto& request = in.pieces[k];
      request = std::make_unique<Request>();
      request->keep = in.slot;
      const Piece piece = pieceOf(kind_, in.slot.numel(), k);
      postExpected(*request, links_.worker_->handle(),
                   static_cast<char*>(in.slot.data_ptr()) + piece.at,
                   static_cast<size_t>(piece.bytes), tagOf(0, channel_, in.member, in.first + k),
                   kAnyKind);
    }
    while (in.landed < in.probed && in.pieces[in.landed]->test()) {
      const size_t k = in.landed;
      const Request& request = *in.pieces[k];
      if (request.status == UCS_OK && kindOf(request.senderTag) == kHangUp) {
        links_.lost(in.member, "it hung up (its group failed)");
      }
      const bool truncated = request.status == UCS_ERR_MESSAGE_TRUNCATED;
      if (request.status != UCS_OK && !truncated) {
        links_.lost(in.member, ucp.ucs_status_string(request.status));
      }
      if (truncated || static_cast<int64_t>(request.length) != pieceBytes(in, k)) {
        wrongSize_ = WrongSize{in.member, request.length, pieceBytes(in, k)};
        links_.breakLinks("a data frame of another size than its receive arrived");
        done_ = true;
        links_.busy_ = false;
        return false;
      }
      ++in.landed;
    }
    if (in.landed < in.pieces.size()) {
      failIfLost(in.member);
    }
    return true;
  }

  // A message that is not this receive's arrived in place of piece `k`; false.
  bool ended(Incoming& in, size_t k) {
    const int64_t at = pieceOf(kind_, in.slot.numel(), k).at;
    const int64_t copied = std::min(in.spill.numel(), in.slot.numel() - at);
    if (copied > 0) {
      in.slot.narrow(0, at, copied).copy_(in.spill.narrow(0, 0, copied));
    }
    in.aside = false;
    if (in.asideKind != wireKind()) {
      otherKindFrom_ = in.member;
      links_.breakLinks("a frame of another collective's kind arrived");
    } else {
      ++in.landed; // a record longer than its slot: the slot holds its first bytes
      in.spill = at::Tensor();
      return true;
    }
    done_ = true;
    links_.busy_ = false;
    return false;
  }

  int64_t pieceBytes(const Incoming& in, size_t k) const {
    return pieceOf(kind_, in.slot.numel(), k).bytes;
  }
  uint64_t wireKind() const {
    return kind_ == Kind::kExchange ? kExchange : kind_ == Kind::kOneWay ? kOneWay : kDataKind;
  }
  void failIfLost(int member) const {
    const std::string reason = links_.worker_->lostReason(member);
    if (!reason.empty()) {
      links_.lost(member, reason);
    }
  }

  UcxLinks& links_;
  Kind kind_;
  Channel channel_;
  std::vector<Outgoing> out_;
  std::vector<Incoming> in_;
  bool done_ = false;
};

UcxLinks::UcxLinks(
    const c10::intrusive_ptr<c10d::Store>& store,
    std::vector<int> members,
    int me,
    std::vector<std::string> addresses,
    std::chrono::milliseconds timeout,
    std::shared_ptr<LinkHangUp> hangUp,
    std::function<std::chrono::nanoseconds()> pollFor)
    : members_(std::move(members)),
      me_(me),
      addresses_(std::move(addresses)),
      hangUp_(std::move(hangUp)),
      pollFor_(std::move(pollFor)) {
  const int n = size();
  TORCH_CHECK(n == static_cast<int>(addresses_.size()) && me >= 0 && me < n,
              "dummy_collectives: links of ", n, " members, ", addresses_.size(), " addresses");
  for (int channel = 0; channel < 2; ++channel) {
    sent_[channel].assign(n, 1); // message 0 of the records' channel: the hello below
    received_[channel].assign(n, 1);
  }
  worker_ = std::make_unique<ucx::Worker>(addresses_[me]);
  const std::vector<uint8_t> address = worker_->address();
  store->set(keyOf(members_[me]), address);
  for (int j = 0; j < n; ++j) {
    if (j != me) {
      worker_->connect(j, store->get(keyOf(members_[j]))); // waits for it to publish
    }
  }
  // A first message each way makes UCX connect now, so the first collective does not pay for
  // it, and a peer that cannot be reached is named here.
  std::vector<std::unique_ptr<Request>> hellos;
  std::vector<char> none(1);
  for (int j = 0; j < n; ++j) {
    if (j != me) {
      auto request = std::make_unique<Request>();
      postSend(*request, worker_->endpoint(j), none.data(), 0, tagOf(kHello, kRecords, me, 0));
      hellos.push_back(std::move(request));
    }
  }
  const auto until = Clock::now() + timeout;
  for (int j = 0; j < n; ++j) {
    if (j == me) {
      continue;
    }
    for (;;) {
      worker_->progress();
      ucp_tag_recv_info_t info{};
      const ucp_tag_message_h message = ucx::api().ucp_tag_probe_nb(
          worker_->handle(), tagOf(kHello, kRecords, j, 0), kWholeTag, 1, &info);
      if (message != nullptr) {
        Request request;
        postReceive(request, worker_->handle(), none.data(), 0, message);
        while (!request.test()) {
          worker_->progress();
        }
        break;
      }
      const std::string reason = worker_->lostReason(j);
      TORCH_CHECK(reason.empty(), "dummy_collectives: UCX could not reach member ", j,
                  " of the links (group rank ", members_[j], ", at ", addresses_[j], "): ",
                  reason);
      TORCH_CHECK(Clock::now() < until, "dummy_collectives: timed out after ", timeout.count(),
                  " ms waiting for group rank ", members_[j], " (at ", addresses_[j],
                  ") to answer on UCX");
      worker_->sleepUntil(until);
    }
  }
  for (auto& hello : hellos) {
    while (!hello->test()) {
      worker_->progress();
    }
  }
  if (hangUp_) {
    hangUpId_ = hangUp_->enlist([this] { hangUpNow(); });
  }
}

UcxLinks::~UcxLinks() {
  if (hangUp_) {
    hangUp_->forget(hangUpId_);
  }
  worker_->closeAll(); // cancels what the abandoned requests still wait for
  reapAbandoned(/*all=*/true);
}

c10::intrusive_ptr<c10d::Work> UcxLinks::start(
    Kind kind, std::vector<Send> sends, std::vector<Receive> receives) {
  TORCH_CHECK(broken_.empty(), "dummy_collectives: the links between hosts are unusable (",
              broken_, ")");
  TORCH_CHECK(!busy_, "dummy_collectives: an operation on the links is still in flight");
  reapAbandoned(/*all=*/false);
  busy_ = true;
  return c10::make_intrusive<UcxOperation>(*this, kind, std::move(sends), std::move(receives));
}

std::string UcxLinks::describe() const {
  const ucx::Api& ucp = ucx::api();
  std::string transports;
  for (int j = 0; j < size() && transports.empty(); ++j) {
    if (j != me_) {
      transports = worker_->transports(j);
    }
  }
  return c10::str("UCX ", ucp.version, " (", ucp.why, ": ", ucp.path, ")",
                  transports.empty() ? "" : ", " + transports);
}

void UcxLinks::hangUpNow() {
  std::vector<std::unique_ptr<Request>> hangUps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<char> none(1);
    for (int j = 0; j < size(); ++j) {
      if (j == me_ || !worker_->lostReason(j).empty()) {
        continue;
      }
      for (int channel = 0; channel < 2; ++channel) {
        auto request = std::make_unique<Request>();
        postSend(*request, worker_->endpoint(j), none.data(), 0,
                 tagOf(kHangUp, channel, me_, sent_[channel][j]));
        hangUps.push_back(std::move(request));
      }
    }
  }
  // Zero bytes each: they leave at once where the connection is up. What UCX still holds is
  // pushed here, shortly; a peer that cannot take it has its own deadline.
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  for (auto& request : hangUps) {
    while (!request->test() && Clock::now() < until) {
      worker_->progress();
    }
    if (!request->done) {
      std::lock_guard<std::mutex> lock(mu_);
      abandoned_.push_back(std::move(request));
    }
  }
}

bool UcxLinks::hungUpBy(Channel channel, int member, uint32_t sequence) {
  ucp_tag_recv_info_t info{};
  return ucx::api().ucp_tag_probe_nb(worker_->handle(), tagOf(kHangUp, channel, member, sequence),
                                     kWholeTag, /*remove=*/0, &info) != nullptr;
}

void UcxLinks::breakLinks(const std::string& why) {
  if (broken_.empty()) {
    broken_ = why;
  }
  busy_ = false;
}

void UcxLinks::reapAbandoned(bool all) {
  std::lock_guard<std::mutex> lock(mu_);
  // Closed endpoints fail what was in flight on them; the deadline only guards against a
  // request UCX never ends, which is then left to it (with its memory).
  const auto until = Clock::now() + std::chrono::seconds(1);
  auto finished = [&](const std::unique_ptr<Request>& request) {
    while (all && !request->test() && Clock::now() < until) {
      worker_->progress();
    }
    return request->test();
  };
  abandoned_.erase(std::remove_if(abandoned_.begin(), abandoned_.end(), finished),
                   abandoned_.end());
  if (all) {
    for (auto& request : abandoned_) {
      (void)request.release(); // UCX may still touch its memory: never freed
    }
    abandoned_.clear();
  }
}

void UcxLinks::lost(int member, const std::string& why) const {
  throw LinkLost(c10::str("Connection closed by peer [", addresses_[member], "]:ucx (UCX: ", why,
                          ")"),
                 member);
}

} // namespace dummy_collectives::inter_host

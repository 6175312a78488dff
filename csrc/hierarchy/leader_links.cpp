#include "hierarchy/leader_links.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <random>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <dummy_collectives/debug_log.hpp>

namespace dummy_collectives::hierarchy {
namespace {

using Clock = std::chrono::steady_clock;

// What a connecting member's hello starts with (LeaderLinks::Hello).
constexpr uint32_t kHello = 0x44434c33; // "DCL3"
} // namespace

// A connecting member's first bytes: who it is and which of the pair's connections this is
// (records or data: leader_links.hpp), so the accepting side files it right whatever order
// they arrive in, and the token the accepting member published with its port.
struct LeaderLinks::Hello {
  uint32_t magic;
  uint32_t member;
  uint32_t channel;
  uint32_t reserved;
  uint64_t token;
};

namespace {

// A frame's header: its kind and its payload's length (64 bits: a broadcast of a tensor of
// more than 4 GiB is one frame).
struct FrameHeader {
  uint32_t kind;
  uint32_t reserved;
  uint64_t bytes;
};
// A frame's bytes beyond its receive's slot are read into this and dropped.
constexpr size_t kDropBytes = 64 << 10;
// What a relay asks of each of its pipes: one splice moves at most a pipe's worth, and 1 MiB is
// what Linux lets any user set (fs.pipe-max-size); where refused, the pipe keeps its 64 KiB.
constexpr int kRelayPipeBytes = 1 << 20;

// 64 random bits, from the system's entropy (not a seeded generator: two ranks started in the
// same microsecond must not draw the same).
uint64_t randomToken() {
  std::random_device entropy;
  return (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
}

std::string keyOf(int member) {
  return c10::str("dummy_collectives/leader_links/", member);
}

std::string systemError(const char* call) {
  return c10::str(call, ": ", std::strerror(errno));
}

[[noreturn]] void creationFails(const std::string& what) {
  C10_THROW_ERROR(DistBackendError, c10::str("dummy_collectives: connecting the hosts' leaders: ",
                                             what));
}

int pollMs(Clock::time_point until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()) + 1);
}

// Reads or writes exactly `bytes` on a blocking-by-poll socket before `until` (creation only).
void exactly(int fd, void* data, size_t bytes, bool reading, Clock::time_point until,
             const std::string& peer) {
  auto* at = static_cast<char*>(data);
  while (bytes > 0) {
    pollfd p{fd, static_cast<short>(reading ? POLLIN : POLLOUT), 0};
    if (::poll(&p, 1, pollMs(until)) == 0 && Clock::now() >= until) {
      creationFails(c10::str("timed out ", reading ? "reading from " : "writing to ", peer));
    }
    const ssize_t n = reading ? ::recv(fd, at, bytes, MSG_DONTWAIT)
                              : ::send(fd, at, bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == 0 && reading) {
      creationFails(c10::str(peer, " closed the connection"));
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        continue;
      }
      creationFails(c10::str(peer, ": ", systemError(reading ? "recv" : "send")));
    }
    at += n;
    bytes -= static_cast<size_t>(n);
  }
}

sockaddr_in ipv4(const std::string& address, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    creationFails(c10::str("'", address, "' is not an IPv4 address"));
  }
  return addr;
}

void tune(int fd) {
  const int one = 1;
  // Records are small and every one is waited for: Nagle's delay would be pure latency.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// SIGPIPE held back on this thread while it lives. splice() into a socket whose peer has gone
// raises SIGPIPE (it has no MSG_NOSIGNAL, which every send here passes), and a process that left
// SIGPIPE at its default (Python ignores it; a C++ program or a script that restores the
// default does not) would die of it instead of reporting the lost peer. A SIGPIPE raised
// meanwhile is taken before the mask is restored; the call's EPIPE reports it.
class SigpipeHeld {
 public:
  // `hold`: whether to hold it at all (only a relay splices).
  explicit SigpipeHeld(bool hold) : holds_(hold) {
    if (holds_) {
      sigemptyset(&pipe_);
      sigaddset(&pipe_, SIGPIPE);
      ::pthread_sigmask(SIG_BLOCK, &pipe_, &before_);
    }
  }
  ~SigpipeHeld() {
    if (!holds_ || sigismember(&before_, SIGPIPE)) {
      return; // not held, or held before us: whoever held it takes it
    }
    sigset_t pending;
    if (::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
      const timespec now{};
      ::sigtimedwait(&pipe_, nullptr, &now);
    }
    ::pthread_sigmask(SIG_SETMASK, &before_, nullptr);
  }
  SigpipeHeld(const SigpipeHeld&) = delete;
  SigpipeHeld& operator=(const SigpipeHeld&) = delete;

 private:
  bool holds_;
  sigset_t pipe_{};
  sigset_t before_{};
};

} // namespace

struct LeaderLinks::Peer {
  int fd = -1;
  std::string where; // "[10.0.0.2]:4567", as gloo names a peer
  int member = -1;
  ~Peer() {
    if (fd >= 0) {
      ::close(fd);
    }
  }
  // What a non-blocking send or recv returned: the bytes it moved (0: interrupted, try
  // again), or -1 where the socket would block. A closed connection or a failure throws.
  ssize_t moved(ssize_t n, const char* call) const {
    if (n > 0) {
      return n;
    }
    if (n == 0) { // recv: the peer closed (a send of some bytes never returns 0)
      errno = 0;
      lost(call);
    }
    if (errno == EINTR) {
      return 0;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return -1;
    }
    lost(call);
  }
  [[noreturn]] void lost(const char* call) const {
    if (errno == 0 || errno == ECONNRESET || errno == EPIPE) {
      throw LinkLost(c10::str("Connection closed by peer ", where), member);
    }
    throw LinkLost(c10::str("Connection to peer ", where, " failed: ", systemError(call)), member);
  }
};

LeaderLinks::LeaderLinks(
    const c10::intrusive_ptr<c10d::Store>& store,
    std::vector<int> members,
    int me,
    const std::vector<std::string>& addresses,
    std::chrono::milliseconds timeout,
    bool carriesRecords,
    std::shared_ptr<LinkHangUp> hangUp)
    : me_(me), hangUp_(std::move(hangUp)), channels_(carriesRecords ? 2 : 1) {
  const int n = static_cast<int>(members.size());
  TORCH_CHECK(n == static_cast<int>(addresses.size()) && me >= 0 && me < n,
              "dummy_collectives: leader links of ", n, " members, ", addresses.size(),
              " addresses");
  const int channels = static_cast<int>(channels_.size());
  for (auto& peers : channels_) {
    peers.resize(n);
  }
  const auto until = Clock::now() + timeout;
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listener < 0) {
    creationFails(systemError("socket"));
  }
  Peer listening{listener, ""};
  sockaddr_in addr = ipv4(addresses[me], 0);
  socklen_t length = sizeof(addr);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, SOMAXCONN) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    creationFails(c10::str(addresses[me], ": ", systemError("bind/listen")));
  }
  // The port and a token only this group's members read in the store: a hello without it is
  // not from a member, whatever else it says.
  const uint64_t token = randomToken();
  const std::string published = c10::str(ntohs(addr.sin_port), " ", token);
  store->set(keyOf(members[me]), std::vector<uint8_t>(published.begin(), published.end()));

  // Each member connects to those before it and accepts those after it, once per channel.
  auto connectTo = [&](int j, uint16_t peerPort, uint64_t peerToken, int channel) {
    auto peer = std::make_unique<Peer>();
    peer->where = c10::str("[", addresses[j], "]:", peerPort);
    peer->member = j;
    peer->fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (peer->fd < 0) {
      creationFails(systemError("socket"));
    }
    tune(peer->fd); // non-blocking: the connect below waits only until the group's timeout
    const sockaddr_in to = ipv4(addresses[j], peerPort);
    if (::connect(peer->fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0) {
      if (errno != EINPROGRESS) {
        creationFails(c10::str(peer->where, ": ", systemError("connect")));
      }
      pollfd p{peer->fd, POLLOUT, 0};
      int error = 0;
      socklen_t errorLength = sizeof(error);
      if (::poll(&p, 1, pollMs(until)) <= 0) {
        creationFails(c10::str("timed out after ", timeout.count(), " ms connecting to ",
                               peer->where));
      }
      if (::getsockopt(peer->fd, SOL_SOCKET, SO_ERROR, &error, &errorLength) != 0 || error != 0) {
        errno = error;
        creationFails(c10::str(peer->where, ": ", systemError("connect")));
      }
    }
    Hello hello{kHello, static_cast<uint32_t>(me), static_cast<uint32_t>(channel), 0, peerToken};
    exactly(peer->fd, &hello, sizeof(hello), false, until, peer->where);
    channels_[channel][j] = std::move(peer);
  };
  for (int j = 0; j < me; ++j) {
    const std::vector<uint8_t> got = store->get(keyOf(members[j])); // waits for it to listen
    const std::string text(got.begin(), got.end());
    const size_t space = text.find(' ');
    const auto peerPort = static_cast<uint16_t>(std::stoi(text.substr(0, space)));
    const uint64_t peerToken = std::stoull(text.substr(space + 1));
    for (int channel = 0; channel < channels; ++channel) {
      connectTo(j, peerPort, peerToken, channel);
    }
  }
  acceptLaterMembers(listener, addresses, token, until, timeout, members[me]);
  if (hangUp_) {
    std::vector<int> fds;
    for (const auto& peers : channels_) {
      for (const auto& peer : peers) {
        if (peer) {
          fds.push_back(peer->fd);
        }
      }
    }
    hangUpId_ = hangUp_->enlist([fds] {
      for (const int fd : fds) {
        ::shutdown(fd, SHUT_WR);
      }
    });
  }
}

void LeaderLinks::acceptLaterMembers(
    int listener,
    const std::vector<std::string>& addresses,
    uint64_t token,
    std::chrono::steady_clock::time_point until,
    std::chrono::milliseconds timeout,
    int groupRank) {
  const int n = size();
  const int channels = static_cast<int>(channels_.size());
  // Accepted connections whose hello is still coming in: they are read side by side, so a
  // stranger that connects and sends nothing holds up nobody.
  struct Arriving {
    std::unique_ptr<Peer> peer;
    Hello hello{};
    size_t got = 0;
  };
  std::vector<Arriving> arriving;
  int refused = 0;
  auto refuse = [&](size_t i, const std::string& why) {
    DC_LOG(kWarn, groupRank, "refused a connection from ", arriving[i].peer->where,
           " while connecting the hosts' leaders: ", why);
    ++refused;
    arriving.erase(arriving.begin() + static_cast<std::ptrdiff_t>(i));
  };
  for (int accepted = 0; accepted < channels * (n - 1 - me_);) {
    std::vector<pollfd> fds{{listener, POLLIN, 0}};
    for (const auto& a : arriving) {
      fds.push_back({a.peer->fd, POLLIN, 0});
    }
    if (::poll(fds.data(), fds.size(), pollMs(until)) <= 0 && Clock::now() >= until) {
      creationFails(c10::str("timed out after ", timeout.count(), " ms waiting for ",
                             channels * (n - 1 - me_) - accepted,
                             " connections from leaders of later hosts",
                             refused > 0 ? c10::str(" (refused ", refused, " from elsewhere)")
                                         : std::string()));
    }
    for (size_t i = arriving.size(); i-- > 0;) {
      if (fds[i + 1].revents == 0) {
        continue;
      }
      Arriving& a = arriving[i];
      const ssize_t got = ::recv(a.peer->fd, reinterpret_cast<char*>(&a.hello) + a.got,
                                 sizeof(Hello) - a.got, MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        refuse(i, "it closed before it said who it is");
        continue;
      }
      a.got += static_cast<size_t>(std::max<ssize_t>(got, 0));
      if (a.got < sizeof(Hello)) {
        continue;
      }
      const auto j = static_cast<int>(a.hello.member);
      const auto channel = static_cast<int>(a.hello.channel);
      if (a.hello.magic != kHello || a.hello.token != token) {
        refuse(i, "it is not a leader of this group (its first bytes are not a hello with the "
                  "group's token)");
      } else if (j <= me_ || j >= n || channel < 0 || channel >= channels ||
                 channels_[channel][j]) {
        refuse(i, c10::str("its hello names member ", j, ", channel ", channel,
                           ", which no connection is awaited from"));
      } else {
        a.peer->member = j;
        a.peer->where = c10::str("[", addresses[j], "]:", a.peer->where.substr(
                                                         a.peer->where.rfind(':') + 1));
        channels_[channel][j] = std::move(a.peer);
        arriving.erase(arriving.begin() + static_cast<std::ptrdiff_t>(i));
        ++accepted;
      }
    }
    if ((fds[0].revents & POLLIN) != 0) {
      sockaddr_in from{};
      socklen_t fromLength = sizeof(from);
      auto peer = std::make_unique<Peer>();
      peer->fd =
          ::accept4(listener, reinterpret_cast<sockaddr*>(&from), &fromLength, SOCK_CLOEXEC);
      if (peer->fd >= 0) {
        tune(peer->fd);
        std::array<char, INET_ADDRSTRLEN> text{};
        ::inet_ntop(AF_INET, &from.sin_addr, text.data(), text.size());
        peer->where = c10::str("[", text.data(), "]:", ntohs(from.sin_port));
        arriving.push_back(Arriving{std::move(peer)});
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                 errno != ECONNABORTED) {
        creationFails(systemError("accept"));
      }
    }
  }
}

LeaderLinks::~LeaderLinks() {
  if (hangUp_) {
    hangUp_->forget(hangUpId_); // before the connections close: their numbers may be reused
  }
}

bool LeaderLinks::usable(const std::vector<std::string>& addresses) {
  for (const auto& address : addresses) {
    in_addr parsed{};
    if (::inet_pton(AF_INET, address.c_str(), &parsed) != 1) {
      return false;
    }
  }
  return true;
}

void LeaderLinks::breakLinks(const std::string& why) {
  if (broken_.empty()) {
    broken_ = why;
  }
}

// Two pipes for a relay (SocketOperation::Relay): the received bytes go into the first, a tee of them
// into the second, which feeds the next host's socket.
struct LeaderLinks::RelayPipes {
  std::array<int, 2> first{-1, -1};
  std::array<int, 2> second{-1, -1};
  size_t capacity = 0; // bytes each pipe holds
  ~RelayPipes() {
    for (const int fd : {first[0], first[1], second[0], second[1]}) {
      if (fd >= 0) {
        ::close(fd);
      }
    }
  }
};

LeaderLinks::RelayPipes* LeaderLinks::relayPipes() {
  if (relayPipes_ || relayPipesRefused_) {
    return relayPipes_.get();
  }
  auto pipes = std::make_unique<RelayPipes>();
  if (::pipe2(pipes->first.data(), O_NONBLOCK | O_CLOEXEC) != 0 ||
      ::pipe2(pipes->second.data(), O_NONBLOCK | O_CLOEXEC) != 0) {
    relayPipesRefused_ = true; // the copying relay works without them
    return nullptr;
  }
  int capacity = kRelayPipeBytes;
  for (const int fd : {pipes->first[1], pipes->second[1]}) {
    ::fcntl(fd, F_SETPIPE_SZ, kRelayPipeBytes);
    capacity = std::min(capacity, ::fcntl(fd, F_GETPIPE_SZ));
  }
  if (capacity <= 0) {
    relayPipesRefused_ = true;
    return nullptr;
  }
  pipes->capacity = static_cast<size_t>(capacity);
  relayPipes_ = std::move(pipes);
  return relayPipes_.get();
}

c10::intrusive_ptr<c10d::Work> LeaderLinks::start(
    Kind kind, std::vector<Send> sends, std::vector<Receive> receives) {
  if (!broken_.empty()) {
    C10_THROW_ERROR(DistBackendError,
                    c10::str("dummy_collectives: the hosts' leaders' links failed earlier (",
                             broken_, "); the group cannot be used"));
  }
  TORCH_CHECK(!busy_, "dummy_collectives: two operations on the leaders' links at once");
  return c10::make_intrusive<SocketOperation>(*this, kind, std::move(sends), std::move(receives));
}

struct LeaderLinks::SocketOperation::Outgoing {
  Peer* peer;
  FrameHeader header;
  at::Tensor bytes;
  int forwards; // Send::forwards
  size_t sent = 0; // of sizeof(header) + bytes
};

struct LeaderLinks::SocketOperation::Incoming {
  Peer* peer;
  int member;
  at::Tensor slot;
  FrameHeader header{};
  size_t got = 0; // of sizeof(header) + header.bytes
};

// A send that forwards a receive of its operation (a chain's broadcast passing the message on).
// Copying, the host recv()s each byte into its tensor and send()s it on from there: two copies
// of every byte on the host's CPU, where the root and the last host make one each. Splicing,
// the receive's payload moves from its socket into a pipe and is duplicated (tee) into a second
// pipe, which is spliced into the next host's socket; the kernel moves page references, so the
// only copy is the first pipe's read into the tensor. A relay splices once its receive's header
// is in and says the agreed data (else the receive takes the copying path, which checks it).
struct LeaderLinks::SocketOperation::Relay {
  size_t incoming; // in_'s index
  size_t outgoing; // out_'s index
  enum class Mode { kUndecided, kSplice, kCopy } mode = Mode::kUndecided;
  RelayPipes* pipes = nullptr;
  uint64_t spliced = 0; // payload bytes moved from the socket into the first pipe
  uint64_t teed = 0; // of those, duplicated into the second pipe and read into the slot
  uint64_t passed = 0; // of those, spliced from the second pipe into the next host's socket
};

LeaderLinks::SocketOperation::SocketOperation(
    LeaderLinks& links, Kind kind, std::vector<Send> sends, std::vector<Receive> receives)
    : links_(links), kind_(kind) {
  links_.busy_ = true;
  for (auto& s : sends) {
    TORCH_CHECK(s.member != links_.me_ && s.bytes.is_contiguous(),
                "dummy_collectives: a leader link send to ", s.member);
    const auto bytes = static_cast<uint64_t>(s.bytes.numel());
    TORCH_CHECK(s.forwards < static_cast<int>(receives.size()) &&
                    (s.forwards < 0 ||
                     (receives[s.forwards].slot.data_ptr() == s.bytes.data_ptr() &&
                      receives[s.forwards].slot.numel() == s.bytes.numel())),
                "dummy_collectives: a leader link send forwards what no receive of it lands");
    if (s.forwards >= 0) {
      TORCH_CHECK(!relay_, "dummy_collectives: two leader link sends forward at once");
      relay_ = std::make_unique<Relay>(Relay{static_cast<size_t>(s.forwards), out_.size()});
    }
    out_.push_back(Outgoing{links_.peer(kind, s.member),
                            {static_cast<uint32_t>(kind), 0, bytes}, std::move(s.bytes),
                            s.forwards});
  }
  for (auto& r : receives) {
    TORCH_CHECK(r.member != links_.me_ && r.slot.is_contiguous(),
                "dummy_collectives: a leader link receive from ", r.member);
    in_.push_back(Incoming{links_.peer(kind, r.member), r.member, std::move(r.slot)});
  }
  // Whatever the kernel takes now leaves now: a record's frame, usually whole.
  try {
    const SigpipeHeld held(relay_ != nullptr); // a relay may splice already
    if (moveBytes()) {
      finish();
    }
  } catch (const LinkLost&) {
    // Told at the wait, where the group's failure model handles it.
  }
}

LeaderLinks::SocketOperation::~SocketOperation() {
  if (!done_) {
    links_.breakLinks("an operation ended before all its bytes moved");
    links_.busy_ = false;
  }
}

void LeaderLinks::SocketOperation::finish() {
  done_ = true;
  links_.busy_ = false;
}

size_t LeaderLinks::SocketOperation::sendable(const Outgoing& o) const {
  const size_t total = sizeof(FrameHeader) + o.header.bytes;
  if (o.forwards < 0) {
    return total;
  }
  // The header at once (the length is agreed), the payload as far as it has landed (splicing:
  // as far as it is in the second pipe, which is what has landed).
  const size_t landed = in_[o.forwards].got;
  return std::min(total, std::max(landed, sizeof(FrameHeader)));
}

bool LeaderLinks::SocketOperation::moveBytes() {
  if (!relay_) {
    return movePass();
  }
  // Passes until one moves nothing: a forwarding send goes on with what its receive just landed.
  auto moved = [this] {
    size_t bytes = 0;
    for (const auto& o : out_) {
      bytes += o.sent;
    }
    for (const auto& in : in_) {
      bytes += in.got;
    }
    return bytes;
  };
  for (;;) {
    const size_t before = moved();
    if (movePass()) {
      return true;
    }
    if (moved() == before) {
      return false;
    }
  }
}

bool LeaderLinks::SocketOperation::movePass() {
  bool done = true;
  for (auto& o : out_) {
    sendPass(o);
    done = done && o.sent == sizeof(FrameHeader) + o.header.bytes;
  }
  for (size_t i = 0; i < in_.size(); ++i) {
    Incoming& in = in_[i];
    receivePass(in);
    if (relay_ && relay_->incoming == i && relay_->mode == Relay::Mode::kUndecided &&
        in.got >= sizeof(FrameHeader)) {
      decideRelay();
    }
    if (kind_ == Kind::kData && in.got >= sizeof(FrameHeader) &&
        in.header.kind == static_cast<uint32_t>(kind_) &&
        in.header.bytes != static_cast<uint64_t>(in.slot.numel())) {
      wrongSize_ = WrongSize{in.member, in.header.bytes, in.slot.numel()};
      links_.breakLinks("a data frame of another size than its receive arrived");
      return true;
    }
    const bool whole = in.got >= sizeof(FrameHeader) &&
        in.got == sizeof(FrameHeader) + in.header.bytes;
    if (whole && in.header.kind != static_cast<uint32_t>(kind_)) {
      // The peer is in another collective: the streams no longer pair. End here; the caller
      // fails the group.
      otherKindFrom_ = in.member;
      links_.breakLinks("a frame of another collective's kind arrived");
      return true;
    }
    done = done && whole;
  }
  if (splicing()) {
    relayPass();
    const Outgoing& o = out_[relay_->outgoing];
    done = done && o.sent == sizeof(FrameHeader) + o.header.bytes;
  }
  return done;
}

bool LeaderLinks::SocketOperation::splicing() const {
  return relay_ && relay_->mode == Relay::Mode::kSplice;
}

void LeaderLinks::SocketOperation::sendPass(Outgoing& o) {
  const bool spliced = splicing() && &o == &out_[relay_->outgoing];
  // Splicing, the payload leaves from the second pipe (relayPass); here only the header.
  const size_t limit = spliced ? std::min(sendable(o), sizeof(FrameHeader)) : sendable(o);
  while (o.sent < limit) {
    std::array<iovec, 2> parts{};
    int count = 0;
    if (o.sent < sizeof(FrameHeader)) {
      parts[count++] = {reinterpret_cast<char*>(&o.header) + o.sent,
                        sizeof(FrameHeader) - o.sent};
    }
    const size_t dataSent = o.sent > sizeof(FrameHeader) ? o.sent - sizeof(FrameHeader) : 0;
    const size_t dataLimit = limit - sizeof(FrameHeader);
    if (dataSent < dataLimit) {
      parts[count++] = {static_cast<char*>(o.bytes.data_ptr()) + dataSent,
                        dataLimit - dataSent};
    }
    msghdr message{};
    message.msg_iov = parts.data();
    message.msg_iovlen = count;
    const ssize_t n =
        o.peer->moved(::sendmsg(o.peer->fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL), "send");
    if (n < 0) {
      break;
    }
    o.sent += static_cast<size_t>(n);
  }
}

void LeaderLinks::SocketOperation::receivePass(Incoming& in) {
  if (splicing() && &in == &in_[relay_->incoming]) {
    return; // its payload moves in relayPass
  }
  static thread_local std::array<char, kDropBytes> dropped;
  while (in.got < sizeof(FrameHeader) || in.got < sizeof(FrameHeader) + in.header.bytes) {
    char* into = nullptr;
    size_t want = 0;
    if (in.got < sizeof(FrameHeader)) {
      into = reinterpret_cast<char*>(&in.header) + in.got;
      want = sizeof(FrameHeader) - in.got;
    } else {
      const size_t at = in.got - sizeof(FrameHeader);
      const auto room = static_cast<size_t>(in.slot.numel());
      if (at < room) {
        into = static_cast<char*>(in.slot.data_ptr()) + at;
        want = std::min<size_t>(room, in.header.bytes) - at;
      } else {
        into = dropped.data();
        want = std::min(kDropBytes, in.header.bytes - at);
      }
    }
    const ssize_t n = in.peer->moved(::recv(in.peer->fd, into, want, MSG_DONTWAIT), "recv");
    if (n < 0) {
      break;
    }
    in.got += static_cast<size_t>(n);
    if (relay_ && relay_->mode == Relay::Mode::kUndecided && &in == &in_[relay_->incoming] &&
        in.got == sizeof(FrameHeader)) {
      break; // the header is in: the relay decides how its payload moves
    }
  }
}

void LeaderLinks::SocketOperation::decideRelay() {
  Relay& relay = *relay_;
  const Incoming& in = in_[relay.incoming];
  // Only the agreed data splices; anything else (another collective's frame, a wrong size)
  // takes the copying path, which checks and reports it.
  const bool agreed = in.got == sizeof(FrameHeader) && kind_ == Kind::kData &&
      in.header.kind == static_cast<uint32_t>(kind_) && in.header.bytes > 0 &&
      in.header.bytes == static_cast<uint64_t>(in.slot.numel());
  relay.pipes = agreed ? links_.relayPipes() : nullptr;
  relay.mode = relay.pipes != nullptr ? Relay::Mode::kSplice : Relay::Mode::kCopy;
  if (relay.mode == Relay::Mode::kSplice) {
    debug_log::note("relayed by splice");
  }
}

void LeaderLinks::SocketOperation::relayPass() {
  Relay& relay = *relay_;
  Incoming& in = in_[relay.incoming];
  Outgoing& out = out_[relay.outgoing];
  const uint64_t total = in.header.bytes;
  const size_t capacity = relay.pipes->capacity;
  const int first[2] = {relay.pipes->first[0], relay.pipes->first[1]};
  const int second[2] = {relay.pipes->second[0], relay.pipes->second[1]};
  auto* slot = static_cast<char*>(in.slot.data_ptr());
  for (bool moving = true; moving;) {
    moving = false;
    // The socket into the first pipe, as far as it has room.
    const uint64_t held = relay.spliced - relay.teed;
    if (relay.spliced < total && held < capacity) {
      const ssize_t n = in.peer->moved(
          ::splice(in.peer->fd, nullptr, first[1], nullptr,
                   std::min<uint64_t>(total - relay.spliced, capacity - held),
                   SPLICE_F_NONBLOCK | SPLICE_F_MOVE),
          "splice");
      if (n > 0) {
        relay.spliced += static_cast<uint64_t>(n);
        moving = true;
      }
    }
    // The first pipe's head into the second (both keep it), then its copy into the slot: tee
    // always starts at the head, so what is read is exactly what was teed.
    if (relay.spliced > relay.teed) {
      const ssize_t n = ::tee(first[0], second[1], relay.spliced - relay.teed, SPLICE_F_NONBLOCK);
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        in.peer->lost("tee");
      }
      for (ssize_t copied = 0; copied < n;) {
        const ssize_t got = ::read(first[0], slot + relay.teed + copied, n - copied);
        if (got < 0 && errno == EINTR) {
          continue;
        }
        if (got <= 0) {
          // The pipe holds what tee just duplicated: nothing else can end this read.
          errno = got == 0 ? EIO : errno;
          in.peer->lost("read from the relay's pipe");
        }
        copied += got;
      }
      if (n > 0) {
        relay.teed += static_cast<uint64_t>(n);
        in.got += static_cast<size_t>(n);
        moving = true;
      }
    }
    // The second pipe into the next host's socket, once the header is out.
    if (out.sent >= sizeof(FrameHeader) && relay.passed < relay.teed) {
      const ssize_t n = out.peer->moved(
          ::splice(second[0], nullptr, out.peer->fd, nullptr, relay.teed - relay.passed,
                   SPLICE_F_NONBLOCK | SPLICE_F_MOVE),
          "splice");
      if (n > 0) {
        relay.passed += static_cast<uint64_t>(n);
        out.sent += static_cast<size_t>(n);
        moving = true;
      }
    }
  }
}

bool LeaderLinks::SocketOperation::wantsInput(size_t index) const {
  const Incoming& in = in_[index];
  if (in.got >= sizeof(FrameHeader) && in.got >= sizeof(FrameHeader) + in.header.bytes) {
    return false;
  }
  // A splicing relay whose first pipe holds bytes could not tee them: the second pipe is full,
  // so it waits for its next host (POLLOUT), not for its socket, which may stay readable all
  // the while (a pipe fills by buffers, not bytes: one page or a smaller piece each).
  return !(splicing() && relay_->incoming == index && relay_->spliced > relay_->teed);
}

bool LeaderLinks::SocketOperation::progressUntil(Clock::time_point until) {
  // Held for the whole wait, not per splice: a relay passes over its sockets thousands of times
  // per message, and two more system calls a pass cost 3x1's 64 MiB broadcast 10-20%.
  const SigpipeHeld held(relay_ != nullptr);
  while (!done_) {
    if (moveBytes()) {
      finish();
      break;
    }
    std::vector<pollfd> fds;
    for (const auto& o : out_) {
      // A forwarding send with nothing landed to send waits on its receive, not on POLLOUT.
      if (o.sent < sendable(o)) {
        fds.push_back({o.peer->fd, POLLOUT, 0});
      }
    }
    for (size_t i = 0; i < in_.size(); ++i) {
      if (wantsInput(i)) {
        fds.push_back({in_[i].peer->fd, POLLIN, 0});
      }
    }
    const auto now = Clock::now();
    if (now >= until) {
      return false;
    }
    timespec wait{};
    const timespec* limit = nullptr; // none: until is time_point::max()
    if (until != Clock::time_point::max()) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - now);
      wait = {static_cast<time_t>(left.count() / 1000000000),
              static_cast<long>(left.count() % 1000000000)};
      limit = &wait;
    }
    if (::ppoll(fds.data(), fds.size(), limit, nullptr) < 0 && errno != EINTR) {
      throw LinkLost(systemError("ppoll"), -1);
    }
  }
  return true;
}

std::vector<int> LeaderLinks::SocketOperation::awaited() const {
  std::vector<int> members;
  for (const auto& in : in_) {
    if (in.got < sizeof(FrameHeader) || in.got < sizeof(FrameHeader) + in.header.bytes) {
      members.push_back(in.member);
    }
  }
  for (const auto& o : out_) {
    if (o.sent < sizeof(FrameHeader) + o.header.bytes) {
      members.push_back(o.peer->member);
    }
  }
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  return members;
}

std::vector<int> LeaderLinks::SocketOperation::endedAfterFrame() const {
  std::vector<int> members;
  for (const auto& in : in_) {
    char next = 0;
    if (::recv(in.peer->fd, &next, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
      members.push_back(in.member);
    }
  }
  return members;
}

bool LeaderLinks::SocketOperation::isCompleted() {
  return done_;
}

bool LeaderLinks::SocketOperation::wait(std::chrono::milliseconds timeout) {
  // 0 ms is c10d's kNoTimeout: wait for as long as it takes.
  const auto until = timeout.count() == 0 ? Clock::time_point::max() : Clock::now() + timeout;
  TORCH_CHECK(progressUntil(until), "dummy_collectives: timed out after ", timeout.count(),
              " ms on the hosts' leaders' links");
  return true;
}

} // namespace dummy_collectives::hierarchy

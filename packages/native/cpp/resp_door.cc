// The RESP door's native socket layer (resp.engine: native).
//
// Design
// - One door thread owns the listening socket and every client socket (epoll, level-triggered, nonblocking).
//   JavaScript keeps the whole command set, the catalog (packages/core/src/server/resp/keyspace.ts, manifest.ts)
//   and every per-client state (AUTH, HELLO/RESP3, CLIENT SETNAME): for each client it runs the same
//   RespConnection as the Node engine over a socket-like object (core/server/resp/native-engine.ts).
// - The door thread follows the RESP framing of each client's input (array of bulk strings). A command is either
//   * forwarded: its raw bytes go to JavaScript (Data events) as they arrive, and JavaScript's parser and command
//     table run it exactly as with the Node engine (errors, limits, options, streaming of long values), or
//   * landed: `SET key value` (three arguments, a client JavaScript marked fast, i.e. authenticated) whose value
//     fits the granted slot pool: the value is received straight from the socket into host-tier slots granted in
//     advance (the peer plane's SlotPool, reserved in the tier by JavaScript like the peer server's pool), each
//     page's CRC32C computed as its bytes land (the only pass over them). JavaScript then gets one Set event per
//     value (batched with everything else that happened meanwhile: one call per batch) and runs the ordinary SET
//     command on it, with the landed slots as the value's writer: commit in place, catalog update, and the reply
//     (`+OK` at once with the memory catalog; after the manifest is committed with the durable one).
//   Anything the door thread cannot follow (an inline command, a malformed or out-of-limit header, end of input
//   mid-command) switches the client to passthrough: from that command boundary on every byte goes to JavaScript,
//   whose parser answers it exactly as the Node engine would.
// - GETs, MGETs and EXISTS of values whose pages sit in host-tier slots are answered on the door thread from a
//   mirror of the catalog: resp_mirror.cc.
// - Replies: JavaScript writes them with Write() on its own thread (writev at once when nothing is queued, the rest
//   copied and flushed by the door thread on EPOLLOUT), under the client's mutex.
//
// Ordering (per client): JavaScript answers the commands it gets in the order it gets them. The door thread counts
// commands handed to JavaScript and not yet answered (`outstanding`, decremented by Done() after the reply is
// queued). A command is forwarded at once whatever is outstanding (JavaScript queues it behind the others), but a
// SET is only landed when nothing is outstanding: then JavaScript's parser holds no bytes, so the landed SET is the
// next command it runs, and its reply follows every earlier one. A GET after an acknowledged SET runs in
// JavaScript after that SET's catalog update, so it sees the new value; a DEL runs there too. A GET is answered
// here under the same rule (nothing outstanding: every earlier reply is queued, so its reply follows them), and sees
// the catalog as of the last reply JavaScript queued for any client: JavaScript applies mirror changes before it
// writes the replies of the commands that made them (the same flush), so a GET sent after a SET's `+OK` or a DEL's
// reply was read finds the new entry or none.
#include "resp_door.h"

#include <fcntl.h>
#include <pthread.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <utility>

#include "crc32c.h"
#include "resp_door_state.h"
#include "resp_parse.h"
#include "status.h"

namespace tiersync::resp {

namespace {

constexpr uint64_t kListenTag = UINT64_MAX;
constexpr uint64_t kWakeTag = UINT64_MAX - 1;
constexpr size_t kReadChunk = 64 * 1024;
// A read at a command boundary (nothing buffered): a landed SET's header is ~50 bytes and its value is better
// received straight into its slots (CRC32C only) than through the input buffer (copy + CRC32C), so such a read takes
// at most this much; a pipelined burst of small commands still fits in one.
constexpr size_t kHeaderChunk = 4 * 1024;
constexpr int64_t kDrainCloseMs = 1000;
// Replies up to this size are copied and written by the door thread (one wake for a whole batch of them, off the
// JavaScript thread); longer ones (values) are written at once from the caller's memory.
constexpr size_t kQueuedReply = 16 * 1024;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Door::Door(const DoorOptions& options, std::shared_ptr<Memory> arena, std::function<void()> notify)
    : options_(options), arena_(std::move(arena)), notify_(std::move(notify)), hot_(std::make_unique<Hot>()) {
  if (!arena_ || !arena_->host()) throw NativeError(Code::InvalidArgument, "the RESP door lands values in a host arena");
  if (options_.pageBytes == 0) throw NativeError(Code::InvalidArgument, "pageBytes must be positive");
  if (options_.slotVersions && options_.slotCount == 0) throw NativeError(Code::InvalidArgument, "slotVersions must hold one word per slot");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string service = std::to_string(options_.port);
  int rc = getaddrinfo(options_.host.empty() ? nullptr : options_.host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) throw NativeError(Code::InvalidArgument, "cannot resolve listen address '" + options_.host + "': " + gai_strerror(rc));
  std::string why;
  int inUse = 0;
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 511) == 0) {
      listenFd_ = fd;
      break;
    }
    if (errno == EADDRINUSE) inUse = 1;
    why = ErrnoText(errno);
    close(fd);
  }
  freeaddrinfo(res);
  if (listenFd_ < 0)
    throw NativeError(inUse ? Code::Unavailable : Code::Io, "cannot listen on " + options_.host + ":" + std::to_string(options_.port) + ": " + why);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(listenFd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  epollFd_ = epoll_create1(EPOLL_CLOEXEC);
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  epoll_ctl(epollFd_, EPOLL_CTL_ADD, listenFd_, &ev);
  ev.data.u64 = kWakeTag;
  epoll_ctl(epollFd_, EPOLL_CTL_ADD, wakeFd_, &ev);
  thread_ = std::thread([this] { Loop(); });
}

Door::~Door() { Close(); }

void Door::Close() {
  if (closing_.exchange(true)) return;
  uint64_t one = 1;
  (void)!write(wakeFd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  std::vector<std::shared_ptr<Conn>> all;
  {
    std::lock_guard<std::mutex> lock(connsMutex_);
    for (auto& [id, c] : conns_) all.push_back(c);
    conns_.clear();
  }
  for (auto& c : all) {
    std::lock_guard<std::mutex> lock(c->m);
    if (!c->closed) {
      c->closed = true;
      close(c->fd);
    }
    for (double s : c->slots) pool_.Return(s);
    c->slots.clear();
  }
  close(listenFd_);
  close(epollFd_);
  close(wakeFd_);
}

std::shared_ptr<Door::Conn> Door::Find(uint64_t conn) {
  std::lock_guard<std::mutex> lock(connsMutex_);
  auto it = conns_.find(conn);
  return it == conns_.end() ? nullptr : it->second;
}

// The door whose Loop() runs on this thread (none on JavaScript's).
static thread_local const Door* tlsLoopDoor = nullptr;

void Door::Emit(Event e) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(eventsMutex_);
    events_.push_back(std::move(e));
    wake = !drainScheduled_;
    drainScheduled_ = true;
  }
  if (!wake) return;
  // On the door thread, JavaScript is woken once the epoll round is handled, as Redis writes its replies before it
  // sleeps: the events of every client ready in this round reach it as one batch (one wake, one flush).
  if (tlsLoopDoor == this) notifyDue_ = true;
  else notify_();
}

std::vector<Event> Door::Drain() {
  std::lock_guard<std::mutex> lock(eventsMutex_);
  drainScheduled_ = false;
  std::vector<Event> out;
  out.swap(events_);
  return out;
}

void Door::Wake(uint64_t conn) {
  {
    std::lock_guard<std::mutex> lock(wakeMutex_);
    woken_.push_back(conn);
  }
  if (wakesHeld_ > 0) {
    wakeDeferred_ = true;
    return;
  }
  SignalWake();
}

void Door::ReleaseWakes() {
  if (--wakesHeld_ > 0 || !wakeDeferred_) return;
  wakeDeferred_ = false;
  SignalWake();
}

void Door::SignalWake() {
  // The door thread clears the flag before it takes the list, so a conn pushed after that is seen by a new write.
  if (wakePending_.exchange(true)) return;
  uint64_t one = 1;
  (void)!write(wakeFd_, &one, sizeof one);
}

void Door::Arm(Conn& c) {
  // c.m held.
  if (c.closed) return;
  uint32_t want = 0;
  if (!c.paused.load() && !c.eof && !c.holding.load()) want |= EPOLLIN;
  if (c.draining) want |= EPOLLIN;
  if (!c.out.empty()) want |= EPOLLOUT;
  if (want == c.armed) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c.id;
  epoll_ctl(epollFd_, EPOLL_CTL_MOD, c.fd, &ev);
  c.armed = want;
}

bool Door::Flush(Conn& c) {
  // c.m held.
  while (!c.out.empty()) {
    iovec iov[16];
    int n = 0;
    size_t skip = c.outHead;
    for (auto it = c.out.begin(); it != c.out.end() && n < 16; ++it, skip = 0) iov[n++] = {const_cast<uint8_t*>(it->data()) + skip, it->size() - skip};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t w = sendmsg(c.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return false;
    }
    c.outBytes -= w;
    size_t left = static_cast<size_t>(w);
    while (left > 0) {
      size_t rest = c.out.front().size() - c.outHead;
      if (left >= rest) {
        left -= rest;
        c.out.pop_front();
        c.outHead = 0;
      } else {
        c.outHead += left;
        left = 0;
      }
    }
  }
  if (c.out.empty()) {
    if (c.wantDrain) {
      c.wantDrain = false;
      Event e{EventKind::Drain};
      e.conn = c.id;
      Emit(std::move(e));
    }
    if (c.endAfterFlush && !c.draining) {
      // Half-close, then read (and drop) until the client closes: closing with its bytes unread would reset the
      // connection and could destroy the reply before the client reads it.
      shutdown(c.fd, SHUT_WR);
      c.draining = true;
      c.drainSince = NowMs();
    }
  }
  return true;
}

uint64_t Door::Write(uint64_t conn, const std::vector<std::pair<const uint8_t*, size_t>>& parts) {
  auto c = Find(conn);
  if (!c) return 0;
  std::lock_guard<std::mutex> lock(c->m);
  if (c->closed || c->endAfterFlush) return 0;
  size_t first = 0, offset = 0;
  size_t total = 0;
  for (const auto& p : parts) total += p.second;
  const bool queue = total <= kQueuedReply;
  if (c->out.empty() && !queue) {
    // Straight from the caller's memory (the kernel copies it); what the socket does not take is queued.
    while (first < parts.size()) {
      iovec iov[64];
      int n = 0;
      size_t batch = 0;
      for (size_t j = first; j < parts.size() && n < 64; j++) {
        iov[n++] = {const_cast<uint8_t*>(parts[j].first), parts[j].second};
        batch += parts[j].second;
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n;
      ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) break;  // EAGAIN: queue the rest; a failed socket is seen by the door thread (EPOLLERR/HUP)
      size_t left = static_cast<size_t>(w);
      while (first < parts.size() && left >= parts[first].second) {
        left -= parts[first].second;
        first++;
      }
      offset = left;
      if (static_cast<size_t>(w) < batch) break;
    }
  }
  for (size_t i = first; i < parts.size(); i++) {
    const size_t skip = i == first ? offset : 0;
    if (parts[i].second <= skip) continue;
    c->out.push_back(OutChunk{OutBuffer(parts[i].first + skip, parts[i].first + parts[i].second), nullptr});
    c->outBytes += parts[i].second - skip;
  }
  if (queue && !c->out.empty()) {
    Wake(conn);  // flushed by the door thread
  } else if (!c->out.empty()) {
    c->wantDrain = true;
    Arm(*c);
  }
  return c->outBytes;
}

void Door::End(uint64_t conn) {
  auto c = Find(conn);
  if (!c) return;
  std::lock_guard<std::mutex> lock(c->m);
  if (c->closed || c->endAfterFlush) return;
  c->endAfterFlush = true;
  if (c->out.empty()) Flush(*c);
  Arm(*c);
  Wake(conn);
}

void Door::Destroy(uint64_t conn) {
  auto c = Find(conn);
  if (!c) return;
  c->destroy = true;
  Wake(conn);
}

void Door::Pause(uint64_t conn, bool paused) {
  auto c = Find(conn);
  if (!c) return;
  c->paused = paused;
  std::lock_guard<std::mutex> lock(c->m);
  Arm(*c);
}

void Door::Done(uint64_t conn, int64_t count) {
  if (count <= 0) return;
  auto c = Find(conn);
  if (!c) return;
  // Replies queued by Write() woke the door thread already; a wake here is needed only by a SET held for this.
  if (c->outstanding.fetch_sub(count) == count && c->waiting.exchange(false)) Wake(conn);
}

void Door::SetFast(uint64_t conn, bool fast, uint32_t tenant) {
  auto c = Find(conn);
  if (!c) return;
  c->tenant = tenant;
  c->fast = fast;
}

size_t Door::OpenClients() {
  std::lock_guard<std::mutex> lock(connsMutex_);
  return conns_.size();
}

void Door::Passthrough(uint64_t conn) {
  auto c = Find(conn);
  if (!c) return;
  c->passthrough = true;
  Wake(conn);
}

uint64_t Door::LastActiveMs(uint64_t conn) {
  auto c = Find(conn);
  return c ? static_cast<uint64_t>(c->lastActive.load()) : 0;
}

void Door::Loop() {
  // Named so that per-thread CPU (/proc/PID/task/TID/stat, `bench resp --cpu`) tells the door thread apart.
  pthread_setname_np(pthread_self(), "tiersync-resp");
  tlsLoopDoor = this;
  epoll_event evs[64];
  int64_t lastSweep = NowMs();
  while (!closing_) {
    int n = epoll_wait(epollFd_, evs, 64, 100);
    for (int i = 0; i < n && !closing_; i++) {
      const uint64_t tag = evs[i].data.u64;
      if (tag == kListenTag) {
        Accept();
        continue;
      }
      if (tag == kWakeTag) {
        uint64_t v;
        (void)!read(wakeFd_, &v, sizeof v);
        wakePending_ = false;
        std::vector<uint64_t> woken;
        {
          std::lock_guard<std::mutex> lock(wakeMutex_);
          woken.swap(woken_);
        }
        for (uint64_t id : woken) {
          auto c = Find(id);
          if (!c) continue;
          if (c->destroy) {
            CloseConn(c);
            continue;
          }
          bool ok;
          {
            std::lock_guard<std::mutex> lock(c->m);
            ok = c->closed || Flush(*c);
          }
          if (!ok) {
            CloseConn(c);
            continue;
          }
          Process(c);
          std::lock_guard<std::mutex> lock(c->m);
          Arm(*c);
        }
        continue;
      }
      auto c = Find(tag);
      if (!c) continue;
      if (evs[i].events & EPOLLOUT) {
        bool ok;
        {
          std::lock_guard<std::mutex> lock(c->m);
          ok = Flush(*c);
          Arm(*c);
        }
        if (!ok) {
          CloseConn(c);
          continue;
        }
      }
      if ((evs[i].events & (EPOLLHUP | EPOLLERR)) && (c->eof || c->draining)) {
        CloseConn(c);  // the client is gone both ways: nothing more can be read or delivered
        continue;
      }
      if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) OnReadable(c);
    }
    const int64_t now = NowMs();
    if (now - lastSweep >= 100) {
      lastSweep = now;
      Sweep();
    }
    if (notifyDue_) {
      notifyDue_ = false;
      notify_();
    }
  }
}

void Door::Accept() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd = accept4(listenFd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    if (options_.maxClients && OpenClients() >= options_.maxClients) {
      // Refused before a byte of it is read: none of its commands is answered, here or in JavaScript. The line
      // fits any socket buffer of a fresh connection; if it cannot be written, the close alone says it.
      static constexpr char kFull[] = "-ERR max number of clients reached\r\n";
      (void)!send(fd, kFull, sizeof kFull - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      close(fd);
      refusedClients_++;
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_shared<Conn>();
    c->fd = fd;
    c->fast = options_.landBeforeAuth;
    if (options_.landBeforeAuth) c->tenant = options_.acceptTenant;
    c->lastActive = WallMs();
    Event e{EventKind::Accept};
    char host[INET6_ADDRSTRLEN] = "";
    if (ss.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      e.port = ntohs(a->sin6_port);
    } else if (ss.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      e.port = ntohs(a->sin_port);
    }
    e.bytes.assign(host, host + strlen(host));
    {
      std::lock_guard<std::mutex> lock(connsMutex_);
      c->id = ++nextId_;
      conns_[c->id] = c;
    }
    e.conn = c->id;
    // Not read until JavaScript has its side of the client: Accept is emitted first, so it precedes any Data.
    Emit(std::move(e));
    std::lock_guard<std::mutex> lock(c->m);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = c->id;
    epoll_ctl(epollFd_, EPOLL_CTL_ADD, fd, &ev);
    c->armed = EPOLLIN;
  }
}

Door::RecvEnd Door::AfterRecv(const std::shared_ptr<Conn>& c, ssize_t r) {
  if (r == 0) {
    c->eof = true;
    return RecvEnd::Stop;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK) return RecvEnd::Stop;
  if (errno == EINTR) return RecvEnd::Retry;
  CloseConn(c);
  return RecvEnd::Closed;
}

void Door::OnReadable(const std::shared_ptr<Conn>& c) {
  uint8_t* base = arena_->host();
  const uint64_t pb = options_.pageBytes;
  for (int round = 0; round < 32 && !c->eof; round++) {
    if (c->draining) {
      uint8_t sink[4096];
      ssize_t r = recv(c->fd, sink, sizeof sink, 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        CloseConn(c);
        return;
      }
      if (r < 0) return;
      continue;
    }
    if (c->state == Conn::State::Value && c->inPos == c->in.size()) {
      // The value's next bytes, straight into its slot.
      const uint64_t page = c->got / pb, within = c->got % pb;
      const uint64_t pageLength = std::min(pb, c->valueLength - page * pb);
      uint8_t* dst = base + static_cast<uint64_t>(c->slots[page]) + within;
      ssize_t r = recv(c->fd, dst, pageLength - within, 0);
      if (r > 0) {
        c->crc = Crc32c(c->crc, dst, static_cast<size_t>(r));
        c->got += r;
        if (within + r == pageLength) {
          c->crcs.push_back(c->crc);
          c->crc = 0;
        }
        c->lastActive = WallMs();
        if (c->got == c->valueLength) {
          c->state = Conn::State::Tail;
          Process(c);
        }
        continue;
      }
      const RecvEnd end = AfterRecv(c, r);
      if (end == RecvEnd::Retry) continue;
      if (end == RecvEnd::Closed) return;
      break;
    }
    if (c->paused.load() || c->holding.load()) break;
    if (c->inPos > 0 && (c->inPos == c->in.size() || c->inPos > (1u << 20))) {
      c->in.erase(c->in.begin(), c->in.begin() + static_cast<std::ptrdiff_t>(c->inPos));
      c->inPos = 0;
    }
    const size_t old = c->in.size();
    const size_t want = c->state == Conn::State::Parse && c->inPos == old ? kHeaderChunk : kReadChunk;
    c->in.resize(old + want);
    ssize_t r = recv(c->fd, c->in.data() + old, want, 0);
    c->in.resize(old + (r > 0 ? static_cast<size_t>(r) : 0));
    if (r > 0) {
      c->lastActive = WallMs();
      Process(c);
      if (static_cast<size_t>(r) < want) break;
      continue;
    }
    const RecvEnd end = AfterRecv(c, r);
    if (end == RecvEnd::Retry) continue;
    if (end == RecvEnd::Closed) return;
    break;
  }
  Process(c);
  std::lock_guard<std::mutex> lock(c->m);
  Arm(*c);
}

// What one step of Process() leaves: go on parsing, stop until more input arrives, or the client is closed.
enum class Door::Flow { Next, Wait, Closed };

// One Process() call: the bytes handed to JavaScript (one Data event, in order with the events between), and
// whether replies were queued here (one flush at the end).
struct Door::Round {
  std::vector<uint8_t> forwarded;
  bool answered = false;
  void Forward(Conn& k, size_t n) {
    forwarded.insert(forwarded.end(), k.in.begin() + static_cast<std::ptrdiff_t>(k.inPos), k.in.begin() + static_cast<std::ptrdiff_t>(k.inPos + n));
    k.inPos += n;
  }
};

void Door::Process(const std::shared_ptr<Conn>& c) {
  Conn& k = *c;
  if (k.destroy) return;
  Round round;
  for (Flow flow = Flow::Next; flow == Flow::Next;) {
    const size_t avail = k.in.size() - k.inPos;
    const uint8_t* p = k.in.data() + k.inPos;
    switch (k.state) {
      case Conn::State::Value: flow = LandValueBytes(k, p, avail); break;
      case Conn::State::Tail: flow = FinishValue(c, p, avail, round); break;
      case Conn::State::Forward: flow = ForwardArguments(k, p, avail, round); break;
      case Conn::State::Parse: flow = ParseCommand(k, p, avail, round); break;
    }
    if (flow == Flow::Closed) return;
  }
  if (round.answered) {
    // One send for the replies of a pipelined run of GETs. A failed socket is left to the loop (EPOLLOUT|EPOLLERR).
    std::lock_guard<std::mutex> lock(k.m);
    if (!k.closed) Flush(k);
  }
  if (k.state == Conn::State::Parse && k.inPos == k.in.size()) k.midSince = 0;
  // Input held here (a SET waiting for earlier answers): stop reading past the client's bound.
  k.holding = k.state == Conn::State::Parse && k.in.size() - k.inPos > options_.maxPendingBytes;
  bool ended = false;
  if (k.eof && !k.endSent) {
    if (k.state == Conn::State::Value || k.state == Conn::State::Tail) {
      // The value never completed: nothing of it is kept.
      for (double s : k.slots) pool_.Return(s);
      k.slots.clear();
      k.state = Conn::State::Parse;
    }
    // What is held goes to JavaScript, which runs what is complete and closes.
    k.passthrough = true;
    if (k.inPos < k.in.size()) round.Forward(k, k.in.size() - k.inPos);
    k.endSent = true;
    ended = true;
  }
  EmitForwarded(k, round);
  if (ended) {
    Event e{EventKind::End};
    e.conn = k.id;
    Emit(std::move(e));
  }
}

void Door::EmitForwarded(Conn& k, Round& round) {
  if (round.forwarded.empty()) return;
  Event d{EventKind::Data};
  d.conn = k.id;
  d.bytes.swap(round.forwarded);
  Emit(std::move(d));
}

Door::Flow Door::LandValueBytes(Conn& k, const uint8_t* p, size_t avail) {
  if (avail == 0) return Flow::Wait;
  const uint64_t pb = options_.pageBytes;
  const uint64_t page = k.got / pb, within = k.got % pb;
  const uint64_t pageLength = std::min(pb, k.valueLength - page * pb);
  const size_t n = static_cast<size_t>(std::min<uint64_t>(pageLength - within, avail));
  k.crc = CopyCrc32c(k.crc, arena_->host() + static_cast<uint64_t>(k.slots[page]) + within, p, n);
  k.inPos += n;
  k.got += n;
  if (within + n == pageLength) {
    k.crcs.push_back(k.crc);
    k.crc = 0;
  }
  if (k.got == k.valueLength) k.state = Conn::State::Tail;
  return Flow::Next;
}

Door::Flow Door::FinishValue(const std::shared_ptr<Conn>& c, const uint8_t* p, size_t avail, Round& round) {
  Conn& k = *c;
  for (size_t i = 0; i < 2 && i < avail; i++) {
    if (p[i] != "\r\n"[i]) {
      ProtocolError(c, "expected CRLF after a bulk string of " + std::to_string(k.valueLength) + " bytes, got " + ShowByte(p[i]));
      return Flow::Closed;
    }
  }
  if (avail < 2) return Flow::Wait;
  k.inPos += 2;
  const uint64_t pb = options_.pageBytes;
  Event e{EventKind::Set};
  e.conn = k.id;
  e.bytes.swap(k.name);
  e.key.swap(k.key);
  e.offsets.swap(k.slots);
  e.crcs.swap(k.crcs);
  e.valueLength = k.valueLength;
  for (uint64_t at = 0; at < k.valueLength; at += pb) e.lengths.push_back(static_cast<uint32_t>(std::min(pb, k.valueLength - at)));
  k.outstanding++;
  k.state = Conn::State::Parse;
  k.midSince = 0;
  fastSets_++;
  EmitForwarded(k, round);  // what came before the SET reaches JavaScript before it
  Emit(std::move(e));
  return Flow::Next;
}

Door::Flow Door::ForwardArguments(Conn& k, const uint8_t* p, size_t avail, Round& round) {
  if (k.argsLeft == 0) {
    k.state = Conn::State::Parse;
    return Flow::Next;
  }
  if (avail == 0) return Flow::Wait;
  if (k.bulkLeft > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(k.bulkLeft, avail));
    round.Forward(k, n);
    k.bulkLeft -= n;
    if (k.bulkLeft == 0) k.argsLeft--;
    return Flow::Next;
  }
  int64_t v;
  size_t len;
  const int r = ParseLine(p, avail, '$', options_.maxInlineBytes, &v, &len);
  if (r == 0) return Flow::Wait;
  if (r < 0 || v < 0) {
    k.passthrough = true;  // JavaScript's parser says what is wrong
    k.state = Conn::State::Parse;
    return Flow::Next;
  }
  round.Forward(k, len);
  k.bulkLeft = static_cast<uint64_t>(v) + 2;
  return Flow::Next;
}

Door::Flow Door::ParseCommand(Conn& k, const uint8_t* p, size_t avail, Round& round) {
  if (avail == 0) return Flow::Wait;
  if (k.passthrough.load()) {
    round.Forward(k, avail);
    return Flow::Wait;
  }
  if (p[0] != '*') {
    k.passthrough = true;
    return Flow::Next;
  }
  int64_t n;
  size_t head;
  const int r = ParseLine(p, avail, '*', options_.maxInlineBytes, &n, &head);
  if (r == 0) return Flow::Wait;
  if (r < 0 || n < 1 || static_cast<uint64_t>(n) > options_.maxArrayLength) {
    k.passthrough = true;
    return Flow::Next;
  }
  size_t used;
  if (AnswerHere(k, p + head, avail - head, n, &used)) {
    k.inPos += head + used;
    k.midSince = 0;
    round.answered = true;
    return Flow::Next;
  }
  SetHeader set;
  const SetParse parsed = k.fast.load() && n == 3 ? ParseSetHeader(p, avail, head, {options_.maxInlineBytes, options_.maxKeyBytes, options_.maxBulkBytes}, &set) : SetParse::No;
  // Wait for the rest of the header (a key is at most maxKeyBytes); past that, JavaScript sees it.
  if (parsed == SetParse::More && avail <= options_.maxKeyBytes + 4 * options_.maxInlineBytes) {
    if (!k.midSince) k.midSince = NowMs();
    return Flow::Wait;
  }
  if (parsed == SetParse::Land) {
    // Only when JavaScript has answered everything before it (its parser is then empty).
    // Set before the check, read by Done() after its decrement (both seq_cst): one of the two sees the other.
    k.waiting = true;
    if (k.outstanding.load() > 0) {
      k.midSince = 0;
      return Flow::Wait;
    }
    k.waiting = false;
    const uint64_t pb = options_.pageBytes;
    const uint64_t pages = (static_cast<uint64_t>(set.valueLength) + pb - 1) / pb;
    if (pool_.slotBytes() >= pb && pool_.Take(pages, &k.slots)) {
      k.name.assign(p + set.nameAt, p + set.nameAt + 3);
      k.key.assign(p + set.keyAt, p + set.keyAt + set.keyLength);
      k.valueLength = static_cast<uint64_t>(set.valueLength);
      k.got = 0;
      k.crc = 0;
      k.crcs.clear();
      k.inPos += set.valueAt;
      k.state = Conn::State::Value;
      if (!k.midSince) k.midSince = NowMs();
      return Flow::Next;
    }
  }
  // Handed to JavaScript as it arrives.
  k.outstanding++;
  round.Forward(k, head);
  k.argsLeft = n;
  k.bulkLeft = 0;
  k.state = Conn::State::Forward;
  k.midSince = 0;
  return Flow::Next;
}

void Door::ProtocolError(const std::shared_ptr<Conn>& c, const std::string& message) {
  for (double s : c->slots) pool_.Return(s);
  c->slots.clear();
  c->state = Conn::State::Parse;
  c->passthrough = true;
  c->in.clear();
  c->inPos = 0;
  std::string reply = "-ERR Protocol error: " + message + "\r\n";
  std::vector<std::pair<const uint8_t*, size_t>> parts{{reinterpret_cast<const uint8_t*>(reply.data()), reply.size()}};
  Write(c->id, parts);
  End(c->id);
}

void Door::CloseConn(const std::shared_ptr<Conn>& c) {
  {
    std::lock_guard<std::mutex> lock(c->m);
    if (c->closed) return;
    c->closed = true;
    epoll_ctl(epollFd_, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
  }
  for (double s : c->slots) pool_.Return(s);
  c->slots.clear();
  {
    std::lock_guard<std::mutex> lock(connsMutex_);
    conns_.erase(c->id);
  }
  Event e{EventKind::Close};
  e.conn = c->id;
  Emit(std::move(e));
}

void Door::Sweep() {
  const int64_t now = NowMs();
  std::vector<std::shared_ptr<Conn>> all;
  {
    std::lock_guard<std::mutex> lock(connsMutex_);
    for (auto& [id, c] : conns_) all.push_back(c);
  }
  for (auto& c : all) {
    bool close = false;
    {
      std::lock_guard<std::mutex> lock(c->m);
      close = c->draining && now - c->drainSince > kDrainCloseMs;
    }
    if (close || c->destroy) {
      CloseConn(c);
      continue;
    }
    // A command held here (its header, or a value landing) that does not complete in time: as the Node engine does.
    if (c->midSince && now - c->midSince > static_cast<int64_t>(options_.requestTimeoutMs)) {
      c->midSince = 0;
      for (double s : c->slots) pool_.Return(s);
      c->slots.clear();
      c->state = Conn::State::Parse;
      c->passthrough = true;
      c->in.clear();
      c->inPos = 0;
      std::string reply = "-ERR a command took longer than " + std::to_string(options_.requestTimeoutMs) + " ms to arrive\r\n";
      std::vector<std::pair<const uint8_t*, size_t>> parts{{reinterpret_cast<const uint8_t*>(reply.data()), reply.size()}};
      Write(c->id, parts);
      End(c->id);
    }
  }
}

}  // namespace tiersync::resp

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
// - GETs answered here: JavaScript mirrors into the door (MirrorPut / MirrorDrop) each catalog entry whose pages
//   are all in host-tier slots and that has no TTL: per page its arena offset, length, CRC32C and the version its
//   slot had when the page was committed there. JavaScript bumps a slot's version (one 32-bit word per slot, in
//   memory both sides read) whenever it frees the slot (delete, eviction, demotion, pool give-back), and drops the
//   mirror entry of a key before any change of the key's catalog entry is answered (SET over it, DEL, FLUSHDB,
//   eviction) and before the replaced generation's pages are deleted. `GET key` (two arguments, a fast client with
//   a tenant, nothing of it outstanding in JavaScript) of a mirrored key is answered here: each page is copied into
//   the reply with its CRC32C computed in the same pass, its slot's version read before (acquire) and after (behind
//   an acquire fence) the copy, as a seqlock reader does. The reply is queued only if every version is still the
//   recorded one and every CRC32C matches: bytes are never sent unless they are the recorded page's. Otherwise the
//   entry is dropped and the GET forwarded unchanged (JavaScript serves it from the hierarchy or answers nil).
//   A slot freed and reused during the copy changes its version; one freed before it changed it already.
//   The last few replies made (values up to 1 MiB) are kept and sent again for GETs of the same entry while every
//   page's slot version is unchanged (a hot key read by many clients costs one copy, not one per GET); their bytes
//   are the copy that was checked, never re-read from the slots.
//   Each entry a GET is answered from is recorded once per drain window (NoteServed: a flag on the entry, then a
//   shared_ptr in a vector that keeps its capacity), and JavaScript drains the record (TakeServed, every ~200 ms) to
//   count those reads for the host tier's eviction policy: GETs answered here never reach JavaScript otherwise.
//   The record holds at most kServedMax entries per window; GETs of further entries go unrecorded (counted).
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

std::string ShowByte(uint8_t b) {
  if (b >= 0x20 && b < 0x7f) return std::string("'") + static_cast<char>(b) + "'";
  char buf[8];
  snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

// A protocol line `<type><integer>\r\n` at p: 1 (value and length set), 0 (incomplete), -1 (not such a line).
int ParseLine(const uint8_t* p, size_t avail, uint8_t type, uint64_t maxLine, int64_t* value, size_t* length) {
  if (avail == 0) return 0;
  if (p[0] != type) return -1;
  const size_t limit = std::min<size_t>(avail, maxLine + 2);
  const void* nl = memchr(p, '\n', limit);
  if (!nl) return avail > maxLine + 2 ? -1 : 0;
  const size_t end = static_cast<const uint8_t*>(nl) - p;
  if (end < 3 || p[end - 1] != '\r') return -1;
  size_t i = 1;
  bool negative = false;
  if (p[i] == '-') {
    negative = true;
    i++;
  }
  if (i >= end - 1) return -1;
  int64_t v = 0;
  for (; i < end - 1; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    if (v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (p[i] - '0');
  }
  *value = negative ? -v : v;
  *length = end + 1;
  return 1;
}

// std::allocator that leaves new elements of resize() uninitialized: the input buffer grows by a read's worth
// before each recv, and zeroing 64 KiB per read showed as 4% of the door thread's time.
// `*3 $3 SET $k key $v` from p (its array header, `head` bytes, already read): whether the SET's value can land
// (its header whole, key and value within bounds: *out filled, offsets from p), more bytes are needed, or it is not
// such a SET.
enum class SetParse { No, More, Land };
struct SetHeader {
  size_t nameAt = 0, keyAt = 0, valueAt = 0;  // valueAt: the value's first byte
  int64_t keyLength = 0, valueLength = 0;
};
SetParse ParseSetHeader(const uint8_t* p, size_t avail, size_t head, const DoorOptions& o, SetHeader* out) {
  size_t at = head, ll;
  int64_t l;
  int r = ParseLine(p + at, avail - at, '$', o.maxInlineBytes, &l, &ll);
  if (r == 0) return SetParse::More;
  if (r < 0 || l != 3) return SetParse::No;
  at += ll;
  out->nameAt = at;
  if (avail - at < 5) return SetParse::More;
  if ((p[at] | 0x20) != 's' || (p[at + 1] | 0x20) != 'e' || (p[at + 2] | 0x20) != 't' || p[at + 3] != '\r' || p[at + 4] != '\n') return SetParse::No;
  at += 5;
  r = ParseLine(p + at, avail - at, '$', o.maxInlineBytes, &out->keyLength, &ll);
  if (r == 0) return SetParse::More;
  if (r < 0 || out->keyLength < 0 || static_cast<uint64_t>(out->keyLength) > o.maxKeyBytes) return SetParse::No;
  at += ll;
  out->keyAt = at;
  if (avail - at < static_cast<size_t>(out->keyLength) + 2) return SetParse::More;
  if (p[at + out->keyLength] != '\r' || p[at + out->keyLength + 1] != '\n') return SetParse::No;
  at += out->keyLength + 2;
  r = ParseLine(p + at, avail - at, '$', o.maxInlineBytes, &out->valueLength, &ll);
  if (r == 0) return SetParse::More;
  if (r < 0 || out->valueLength < 1 || static_cast<uint64_t>(out->valueLength) > o.maxBulkBytes) return SetParse::No;
  out->valueAt = at + ll;
  return SetParse::Land;
}

template <typename T>
struct NoInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() = default;
  template <typename U>
  NoInitAllocator(const NoInitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Reply buffers: filled by a copy (CopyCrc32c) right after they are made, so not zeroed first.
using OutBuffer = std::vector<uint8_t, NoInitAllocator<uint8_t>>;

// One queued reply: its own bytes, or a GET reply shared with other clients (immutable once made).
struct OutChunk {
  OutBuffer own;
  std::shared_ptr<const OutBuffer> shared;
  const uint8_t* data() const { return shared ? shared->data() : own.data(); }
  size_t size() const { return shared ? shared->size() : own.size(); }
};

// GET replies kept for reuse (door thread): the last few values answered, each up to this size.
constexpr size_t kHotReplies = 8;
constexpr size_t kHotReplyBytes = (1u << 20) + 64;

// MGETs whose values add up to more are answered by JavaScript's thread. The kernel copies a reply into the socket
// on the thread that writes it, and the door thread, which reads every client, should not spend that time on large
// arrays (`bench resp --mget 8`: 8 x 256 KiB values 0.85-0.9 of redis-server from the door thread, 1.0 from
// JavaScript; 8 x 16 KiB 1.05 from the door thread, 0.53-0.6 from JavaScript).
constexpr uint64_t kNativeMgetBytes = 1u << 20;

// `$3\r\nGET\r\n$<n>\r\n<key>\r\n` at p, whole: true, with the key's place and the bytes it takes.
bool ParseGet(const uint8_t* p, size_t avail, uint64_t maxKey, size_t* keyAt, size_t* keyLength, size_t* used) {
  if (avail < 9 || std::memcmp(p, "$3\r\n", 4) != 0) return false;
  if ((p[4] | 0x20) != 'g' || (p[5] | 0x20) != 'e' || (p[6] | 0x20) != 't' || p[7] != '\r' || p[8] != '\n') return false;
  int64_t l;
  size_t ll;
  if (ParseLine(p + 9, avail - 9, '$', 32, &l, &ll) != 1 || l < 0 || static_cast<uint64_t>(l) > maxKey) return false;
  const size_t at = 9 + ll;
  if (avail - at < static_cast<size_t>(l) + 2 || p[at + l] != '\r' || p[at + l + 1] != '\n') return false;
  *keyAt = at;
  *keyLength = static_cast<size_t>(l);
  *used = at + static_cast<size_t>(l) + 2;
  return true;
}

// `$<n>\r\n<name>\r\n` at p, the name in any case (`name`: lower case, under 10 bytes): true, with the bytes it
// takes.
bool ParseName(const uint8_t* p, size_t avail, const char* name, size_t* used) {
  const size_t n = std::strlen(name);
  const size_t total = 4 + n + 2;
  if (avail < total || p[0] != '$' || p[1] != static_cast<uint8_t>('0' + n) || p[2] != '\r' || p[3] != '\n') return false;
  if (p[4 + n] != '\r' || p[5 + n] != '\n') return false;
  for (size_t i = 0; i < n; i++)
    if ((p[4 + i] | 0x20) != name[i]) return false;
  *used = total;
  return true;
}

// The `count` bulk-string keys at p, each whole in hand and at most maxKey bytes: true, with where each one is
// (offset, length from p) and the bytes they take. False: not all in hand, or malformed (JavaScript says what).
bool ParseKeys(const uint8_t* p, size_t avail, int64_t count, uint64_t maxKey, std::vector<std::pair<size_t, size_t>>* keys, size_t* used) {
  size_t at = 0;
  keys->clear();
  for (int64_t i = 0; i < count; i++) {
    int64_t l;
    size_t ll;
    if (ParseLine(p + at, avail - at, '$', 32, &l, &ll) != 1 || l < 0 || static_cast<uint64_t>(l) > maxKey) return false;
    at += ll;
    if (avail - at < static_cast<size_t>(l) + 2 || p[at + l] != '\r' || p[at + l + 1] != '\n') return false;
    keys->emplace_back(at, static_cast<size_t>(l));
    at += static_cast<size_t>(l) + 2;
  }
  *used = at;
  return true;
}

uint32_t LoadAcquire(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
uint32_t LoadRelaxed(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

std::string MirrorKey(uint32_t tenant, const uint8_t* key, size_t keyLength) {
  std::string k(reinterpret_cast<const char*>(&tenant), sizeof tenant);
  k.append(reinterpret_cast<const char*>(key), keyLength);
  return k;
}

}  // namespace

struct Door::Conn {
  uint64_t id = 0;
  int fd = -1;
  // Guards the output queue, the socket's writes and close, and `closed`.
  std::mutex m;
  std::deque<OutChunk> out;
  size_t outHead = 0;  // bytes of out.front() already written
  uint64_t outBytes = 0;
  bool wantDrain = false, endAfterFlush = false, closed = false, draining = false;
  uint32_t armed = 0;
  std::atomic<bool> fast{false}, paused{false}, passthrough{false}, destroy{false}, holding{false};
  std::atomic<uint32_t> tenant{0};  // the mirror's tenant id of the client (0: its GETs go to JavaScript)
  std::atomic<int64_t> outstanding{0};
  // The door thread stopped at a SET to land until `outstanding` reaches 0: Done() must wake it (only then).
  std::atomic<bool> waiting{false};
  std::atomic<int64_t> lastActive{0};
  // Door thread only.
  std::vector<uint8_t, NoInitAllocator<uint8_t>> in;
  size_t inPos = 0;
  enum class State { Parse, Forward, Value, Tail } state = State::Parse;
  int64_t argsLeft = 0;
  uint64_t bulkLeft = 0;
  std::atomic<bool> eof{false};  // read by Arm() on the JavaScript thread too
  bool endSent = false;
  int64_t midSince = 0, drainSince = 0;
  std::vector<uint8_t> name, key;
  std::vector<double> slots;
  std::vector<uint32_t> crcs;
  uint64_t valueLength = 0, got = 0;
  uint32_t crc = 0;
};

struct Door::Hot {
  struct Entry {
    std::shared_ptr<const MirrorValue> value;
    std::shared_ptr<const OutBuffer> reply;
  };
  std::array<Entry, kHotReplies> entries;
  size_t next = 0;
};

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

void Door::MirrorPut(uint32_t tenant, const uint8_t* key, size_t keyLength, std::shared_ptr<const MirrorValue> value) {
  std::string k = MirrorKey(tenant, key, keyLength);
  std::lock_guard<std::mutex> lock(mirrorMutex_);
  mirror_[std::move(k)] = std::move(value);
}

void Door::MirrorDrop(uint32_t tenant, const uint8_t* key, size_t keyLength) {
  std::string k = MirrorKey(tenant, key, keyLength);
  std::lock_guard<std::mutex> lock(mirrorMutex_);
  mirror_.erase(k);
}

size_t Door::OpenClients() {
  std::lock_guard<std::mutex> lock(connsMutex_);
  return conns_.size();
}

size_t Door::mirrorSize() {
  std::lock_guard<std::mutex> lock(mirrorMutex_);
  return mirror_.size();
}

std::vector<uint64_t> Door::TakeServed() {
  std::vector<uint64_t> ids;
  std::lock_guard<std::mutex> lock(servedMutex_);
  ids.reserve(served_.size());
  for (const auto& v : served_) {
    ids.push_back(v->id);
    v->served.store(false, std::memory_order_relaxed);
  }
  served_.clear();
  return ids;
}

void Door::NoteServed(const std::shared_ptr<const MirrorValue>& v) {
  // Recorded already in this window (the common case for a hot key): one relaxed load. A stale `true` just after a
  // drain loses this one read's record, never more: the flag only changes under servedMutex_.
  if (v->id == 0 || v->served.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(servedMutex_);
  if (served_.size() >= kServedMax) {
    // Bounded: the read is not recorded (the flag stays clear, so each such GET is counted).
    unrecordedGets_++;
    return;
  }
  v->served.store(true, std::memory_order_relaxed);
  served_.push_back(v);
}

// Replies the door thread queues for one command: an optional head of its own (an array's `*N`), then bulk
// replies shared with the hot list.
struct Door::Replies {
  OutBuffer head;
  std::vector<std::shared_ptr<const OutBuffer>> bulks;
};

bool Door::ReplyFor(const std::shared_ptr<const MirrorValue>& v, Replies& out, bool* reused) {
  // A reply made for this very entry (same object: the mirror replaces, never edits, an entry) is reused while
  // every page's slot still has its recorded version: the pages are then still where they were, and the reply's
  // bytes are a copy that matched their CRC32Cs when it was made.
  *reused = false;
  for (Hot::Entry& h : hot_->entries) {
    if (h.value != v) continue;
    for (const MirrorPage& pg : v->pages) {
      if (LoadAcquire(options_.slotVersions + pg.slot) != pg.version) {
        h = Hot::Entry{};
        getMismatches_++;
        return false;
      }
    }
    *reused = true;
    out.bulks.push_back(h.reply);
    return true;
  }
  char head[32];
  const int hl = snprintf(head, sizeof head, "$%llu\r\n", static_cast<unsigned long long>(v->length));
  auto made = std::make_shared<OutBuffer>();
  made->resize(static_cast<size_t>(hl) + v->length + 2);
  std::memcpy(made->data(), head, static_cast<size_t>(hl));
  uint8_t* dst = made->data() + hl;
  const uint8_t* base = arena_->host();
  for (const MirrorPage& pg : v->pages) {
    // Seqlock read: the version before (acquire) and after the copy (behind an acquire fence) must be the recorded
    // one; a slot freed meanwhile (and perhaps rewritten) has a newer one. The CRC32C then says the bytes copied
    // are the page's.
    bool ok = LoadAcquire(options_.slotVersions + pg.slot) == pg.version;
    if (ok) {
      const uint32_t crc = CopyCrc32c(0, dst, base + pg.offset, pg.length);
      std::atomic_thread_fence(std::memory_order_acquire);
      ok = LoadRelaxed(options_.slotVersions + pg.slot) == pg.version && crc == pg.crc;
    }
    if (!ok) {
      getMismatches_++;
      return false;
    }
    dst += pg.length;
  }
  dst[0] = '\r';
  dst[1] = '\n';
  if (made->size() <= kHotReplyBytes) {
    hot_->entries[hot_->next] = Hot::Entry{v, made};
    hot_->next = (hot_->next + 1) % kHotReplies;
  }
  out.bulks.push_back(std::move(made));
  return true;
}

void Door::DropMirrored(uint32_t tenant, const uint8_t* key, size_t keyLength, const std::shared_ptr<const MirrorValue>& v) {
  const std::string k = MirrorKey(tenant, key, keyLength);
  std::lock_guard<std::mutex> lock(mirrorMutex_);
  auto it = mirror_.find(k);
  if (it != mirror_.end() && it->second == v) mirror_.erase(it);
}

bool Door::Enqueue(Conn& k, Replies& replies) {
  uint64_t bytes = replies.head.size();
  for (const auto& r : replies.bulks) bytes += r->size();
  std::lock_guard<std::mutex> lock(k.m);
  // A client that does not read its replies: JavaScript's flow control answers this command (and waits for it).
  if (!k.out.empty() && k.outBytes + bytes > options_.maxOutputBytes) return false;
  if (!k.closed && !k.endAfterFlush) {
    k.outBytes += bytes;
    if (!replies.head.empty()) k.out.push_back(OutChunk{std::move(replies.head), nullptr});
    for (auto& r : replies.bulks) k.out.push_back(OutChunk{OutBuffer(), std::move(r)});
  }
  return true;
}

bool Door::ServeGet(Conn& k, uint32_t tenant, const uint8_t* key, size_t keyLength) {
  std::shared_ptr<const MirrorValue> v;
  lookup_.assign(reinterpret_cast<const char*>(&tenant), sizeof tenant);
  lookup_.append(reinterpret_cast<const char*>(key), keyLength);
  {
    std::lock_guard<std::mutex> lock(mirrorMutex_);
    auto it = mirror_.find(lookup_);
    if (it == mirror_.end()) return false;
    v = it->second;
  }
  Replies replies;
  bool reused;
  if (!ReplyFor(v, replies, &reused)) {
    DropMirrored(tenant, key, keyLength, v);
    return false;
  }
  if (!Enqueue(k, replies)) return false;
  // Counted only now: past the output limit, the GET still goes to JavaScript.
  nativeGets_++;
  if (reused) hotGets_++;
  NoteServed(v);
  return true;
}

bool Door::FindMirrored(uint32_t tenant, const uint8_t* p, size_t avail, int64_t count, std::vector<std::shared_ptr<const MirrorValue>>* values, size_t* used) {
  std::vector<std::pair<size_t, size_t>>& keys = keysScratch_;
  if (!ParseKeys(p, avail, count, options_.maxKeyBytes, &keys, used)) return false;
  values->clear();
  values->reserve(keys.size());
  std::lock_guard<std::mutex> lock(mirrorMutex_);
  for (const auto& [keyAt, keyLength] : keys) {
    lookup_.assign(reinterpret_cast<const char*>(&tenant), sizeof tenant);
    lookup_.append(reinterpret_cast<const char*>(p + keyAt), keyLength);
    auto it = mirror_.find(lookup_);
    if (it == mirror_.end()) return false;
    values->push_back(it->second);
  }
  return true;
}

bool Door::ServeMget(Conn& k, uint32_t tenant, const uint8_t* p, size_t avail, int64_t count, size_t* used) {
  // Every key whole in hand and a mirrored value whose pages all still match: the array is answered here. Any
  // other key may live on a lower tier, hold another type, or be gone: JavaScript answers the whole command.
  std::vector<std::shared_ptr<const MirrorValue>> values;
  size_t at;
  if (!FindMirrored(tenant, p, avail, count, &values, &at)) return false;
  const std::vector<std::pair<size_t, size_t>>& keys = keysScratch_;
  uint64_t bytes = 0;
  for (const auto& v : values) bytes += v->length;
  if (bytes > kNativeMgetBytes) return false;
  Replies replies;
  replies.bulks.reserve(values.size());
  uint64_t reusedCount = 0;
  for (size_t i = 0; i < values.size(); i++) {
    bool reused;
    if (!ReplyFor(values[i], replies, &reused)) {
      DropMirrored(tenant, p + keys[i].first, keys[i].second, values[i]);
      return false;
    }
    reusedCount += reused ? 1 : 0;
  }
  char head[32];
  const int hl = snprintf(head, sizeof head, "*%lld\r\n", static_cast<long long>(count));
  replies.head.assign(head, head + hl);
  if (!Enqueue(k, replies)) return false;
  nativeMgets_++;
  hotGets_ += reusedCount;
  for (const auto& v : values) NoteServed(v);
  *used = at;
  return true;
}

bool Door::ServeExists(Conn& k, uint32_t tenant, const uint8_t* p, size_t avail, int64_t count, size_t* used) {
  // The keys all whole in hand (otherwise JavaScript answers: it has the rest of the command as it arrives), each a
  // mirrored value whose pages all still hold the versions they were committed with: then it exists (its pages are
  // in the first tier). Any other key may exist on a lower tier, or be gone: JavaScript asks.
  std::vector<std::shared_ptr<const MirrorValue>> values;
  size_t at;
  if (!FindMirrored(tenant, p, avail, count, &values, &at)) return false;
  for (const auto& v : values)
    for (const MirrorPage& pg : v->pages)
      if (LoadAcquire(options_.slotVersions + pg.slot) != pg.version) return false;
  char reply[32];
  const int n = snprintf(reply, sizeof reply, ":%lld\r\n", static_cast<long long>(count));
  Replies replies;
  replies.head.assign(reply, reply + n);
  if (!Enqueue(k, replies)) return false;
  nativeExists_++;
  *used = at;
  return true;
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

bool Door::AnswerHere(Conn& k, const uint8_t* p, size_t avail, int64_t n, size_t* used) {
  // Only for a client whose tenant the mirror knows, with nothing of it outstanding in JavaScript (replies stay in
  // order), and the command whole in hand.
  if (!options_.slotVersions || !k.fast.load() || k.outstanding.load() != 0) return false;
  const uint32_t tenant = k.tenant.load();
  if (tenant == 0) return false;
  // `GET key` of a mirrored value.
  size_t keyAt, keyLength;
  if (n == 2 && ParseGet(p, avail, options_.maxKeyBytes, &keyAt, &keyLength, used) && ServeGet(k, tenant, p + keyAt, keyLength)) return true;
  // `EXISTS key...` (connectors ask it per chunk before they read: LMCache's contains) and `MGET key...` (batched
  // connectors read chunks so) of mirrored values.
  size_t nameUsed, keysUsed;
  const bool served = n >= 2 &&
                      ((ParseName(p, avail, "exists", &nameUsed) && ServeExists(k, tenant, p + nameUsed, avail - nameUsed, n - 1, &keysUsed)) ||
                       (ParseName(p, avail, "mget", &nameUsed) && ServeMget(k, tenant, p + nameUsed, avail - nameUsed, n - 1, &keysUsed)));
  if (served) *used = nameUsed + keysUsed;
  return served;
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
  const SetParse parsed = k.fast.load() && n == 3 ? ParseSetHeader(p, avail, head, options_, &set) : SetParse::No;
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

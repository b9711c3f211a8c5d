#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <openssl/crypto.h>

#include "crc32c.h"
#include "peer.h"

namespace tiersync::peer {
namespace {

// Connects with a deadline (non-blocking connect + poll), then returns a blocking socket.
int Connect(const std::string& host, uint16_t port, uint64_t timeoutMs) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) throw NativeError(Code::Io, "cannot resolve peer '" + host + "': " + gai_strerror(rc));
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int r = connect(fd, a->ai_addr, a->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      r = poll(&p, 1, static_cast<int>(timeoutMs));
      if (r == 0) {
        why = "connect timed out after " + std::to_string(timeoutMs) + " ms";
        errno = ETIMEDOUT;
        r = -1;
      } else if (r > 0) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        r = err ? -1 : 0;
        if (err) why = ErrnoText(err);
      } else {
        why = ErrnoText(errno);
      }
    } else if (r != 0) {
      why = ErrnoText(errno);
    }
    if (r != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) throw NativeError(Code::Io, "cannot connect to peer " + host + ":" + std::to_string(port) + ": " + why);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// The CRC32Cs after a GET response's bytes of one page: none for a whole page, one after a range, two after an
// announced range (kEntryRangeAnnounced).
size_t TrailerBytes(const Entry& asked, const Entry& answer) {
  if (!(asked.flags & kEntryRange)) return 0;
  return answer.flags & kEntryRangeAnnounced ? 8 : 4;
}

void ClientHandshake(Link& link, const std::string& secret, bool encrypt) {
  std::string challenge = RecvSimple(link, kChallenge, kMaxControl, nullptr);
  if (challenge.size() != kNonce + 4) throw NativeError(Code::Protocol, "CHALLENGE has the wrong size");
  uint32_t flags;
  std::memcpy(&flags, challenge.data() + kNonce, 4);
  if ((flags & kFlagSecret) && secret.empty()) throw NativeError(Code::Auth, "the peer requires a secret and none is configured");
  if (secret.empty() && !IsLoopback(link.fd, true)) throw NativeError(Code::Auth, "no secret configured: only loopback peers are allowed");
  if (!secret.empty() && !(flags & kFlagSecret))
    throw NativeError(Code::Auth, "a secret is configured but the peer does not use one (frames could not be authenticated)");
  const uint8_t* sn = reinterpret_cast<const uint8_t*>(challenge.data());
  uint32_t clientFlags = (!secret.empty() && (encrypt || (flags & kFlagEncrypt)) ? kFlagEncrypt : 0) | kFlagRangeCrcs;
  uint8_t cn[kNonce], mac[kMac] = {};
  RandomBytes(cn, kNonce);
  if (!secret.empty()) HandshakeMac(secret, "client", sn, cn, flags, clientFlags, mac);
  std::string hello(reinterpret_cast<char*>(cn), kNonce);
  hello.append(reinterpret_cast<char*>(&clientFlags), 4);
  hello.append(reinterpret_cast<char*>(mac), kMac);
  SendSimple(link, kHello, 0, hello);
  std::string welcome = RecvSimple(link, kWelcome, kMaxControl, nullptr);
  if (secret.empty()) return;
  uint8_t expect[kMac];
  HandshakeMac(secret, "server", sn, cn, flags, clientFlags, expect);
  if (welcome.size() != kMac || !ConstantTimeEqual(expect, reinterpret_cast<const uint8_t*>(welcome.data()), kMac))
    throw NativeError(Code::Auth, "the peer failed the HMAC challenge (it does not know the secret)");
  uint8_t c2s[kKey], s2c[kKey];
  DeriveFrameKey(secret, "c2s", sn, cn, clientFlags, c2s);
  DeriveFrameKey(secret, "s2c", sn, cn, clientFlags, s2c);
  link.tx.Init(c2s, clientFlags & kFlagEncrypt, true);
  link.rx.Init(s2c, clientFlags & kFlagEncrypt, false);
  OPENSSL_cleanse(c2s, kKey);
  OPENSSL_cleanse(s2c, kKey);
}

}  // namespace

Client::Client(const ClientOptions& options, Sink sink) : options_(options), sink_(std::move(sink)) {
  if (options_.streams == 0) options_.streams = 1;
  try {
    for (unsigned i = 0; i < options_.streams; i++) {
      auto s = std::make_unique<Stream>();
      s->link.fd = Connect(options_.host, options_.port, options_.timeoutMs);
      streams_.push_back(std::move(s));
      SetSocketOptions(streams_.back()->link.fd, options_.timeoutMs);
      ClientHandshake(streams_.back()->link, options_.secret, options_.encrypt);
    }
  } catch (...) {
    for (auto& s : streams_) close(s->link.fd);
    streams_.clear();
    throw;
  }
  for (auto& s : streams_) {
    Stream* p = s.get();
    p->sender = std::thread([this, p] { SendLoop(*p); });
    p->receiver = std::thread([this, p] { ReceiveLoop(*p); });
  }
}

Client::~Client() { Close(); }

void Client::Close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closing_ && streams_.empty()) return;
    closing_ = true;
  }
  std::deque<std::shared_ptr<ClientRequest>> dropped;
  for (auto& s : streams_) {
    {
      std::lock_guard<std::mutex> lock(s->m);
      s->closing = true;
      for (auto& r : s->queued) dropped.push_back(std::move(r));
      s->queued.clear();
    }
    s->cv.notify_all();
  }
  // Requests on the wire finish first: the receivers wait for their responses.
  for (auto& s : streams_) {
    if (s->sender.joinable()) s->sender.join();
    if (s->receiver.joinable()) s->receiver.join();
    close(s->link.fd);
  }
  streams_.clear();
  for (auto& r : dropped) {
    r->failed = true;
    r->errorCode = Code::Closed;
    r->error = "peer client closed before the request was sent";
    sink_(r);
  }
}

void Client::Submit(std::shared_ptr<ClientRequest> r) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closing_) throw NativeError(Code::Closed, "peer client is closed");
  r->id = ++nextId_;
  Stream* best = nullptr;
  size_t bestLoad = SIZE_MAX;
  for (auto& s : streams_) {
    std::lock_guard<std::mutex> sl(s->m);
    // A broken stream fails its share fast (the caller reconnects): only chosen when every stream is broken.
    size_t load = (s->broken ? SIZE_MAX / 2 : 0) + s->queued.size() + s->inflight.size();
    if (load < bestLoad) {
      bestLoad = load;
      best = s.get();
    }
  }
  {
    std::lock_guard<std::mutex> sl(best->m);
    best->queued.push_back(std::move(r));
  }
  best->cv.notify_all();
}

void Client::Fail(Stream& s, const NativeError& e) {
  // A failure mid-frame leaves the stream out of sync: never reuse it. Everything on it fails with the cause.
  std::deque<std::shared_ptr<ClientRequest>> failed;
  {
    std::lock_guard<std::mutex> lock(s.m);
    if (!s.broken) shutdown(s.link.fd, SHUT_RDWR);
    s.broken = true;
    failed.swap(s.inflight);
  }
  s.cv.notify_all();
  for (auto& r : failed) {
    r->failed = true;
    r->errorCode = e.code();
    r->error = e.what();
    sink_(r);
  }
}

void Client::SendLoop(Stream& s) {
  for (;;) {
    std::shared_ptr<ClientRequest> r;
    bool broken;
    {
      std::unique_lock<std::mutex> lock(s.m);
      s.cv.wait(lock, [&] { return (s.closing && s.queued.empty()) || (!s.queued.empty() && (s.broken || s.inflight.size() < kStreamDepth)); });
      if (s.queued.empty()) break;  // closing
      r = std::move(s.queued.front());
      s.queued.pop_front();
      broken = s.broken;
      if (!broken) s.inflight.push_back(r);  // before sending: the receiver reads responses in this order
    }
    s.cv.notify_all();  // the receiver waits for something in flight
    if (broken) {
      r->failed = true;
      r->errorCode = Code::Io;
      r->error = "peer connection is broken";
      sink_(r);
      continue;
    }
    try {
      Send(s.link, *r);
    } catch (const NativeError& e) {
      Fail(s, e);
    }
  }
  {
    std::lock_guard<std::mutex> lock(s.m);
    s.senderDone = true;
  }
  s.cv.notify_all();
}

void Client::ReceiveLoop(Stream& s) {
  for (;;) {
    std::shared_ptr<ClientRequest> r;
    {
      std::unique_lock<std::mutex> lock(s.m);
      s.cv.wait(lock, [&] { return !s.inflight.empty() || s.senderDone; });
      if (s.inflight.empty()) break;  // the sender finished and every response arrived
      if (s.broken) continue;
      r = s.inflight.front();
    }
    try {
      Receive(s.link, *r);
    } catch (const NativeError& e) {
      Fail(s, e);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(s.m);
      if (s.inflight.empty() || s.inflight.front() != r) continue;  // failed meanwhile by the sender
      s.inflight.pop_front();
    }
    s.cv.notify_all();
    sink_(r);
  }
}

void Client::Send(Link& link, ClientRequest& r) {
  const size_t n = r.entries.size();
  std::vector<iovec> payload;
  if (r.op == kPut) {
    for (size_t i = 0; i < n; i++) {
      // Unknown checksums are computed once, by the server as the pages land (returned in the ack).
      if (r.computeCrc) r.entries[i].flags |= kEntryComputeCrc;
      payload.push_back({r.arena->host() + r.offsets[i], r.entries[i].length});
    }
  }
  SendFrame(link, r.op, r.id, static_cast<uint32_t>(n), EncodeEntries(r.entries), payload);
}

void Client::Receive(Link& link, ClientRequest& r) {
  const size_t n = r.entries.size();
  Header a = RecvHeader(link, options_.maxPayload);
  std::vector<uint8_t> ackMeta = RecvMeta(link, a);
  if (a.op == kError) {
    if (a.metaBytes) throw NativeError(Code::Protocol, "peer ERROR frame carries an entry table");
    std::string why(a.payloadBytes, '\0');
    if (a.payloadBytes) RecvBody(link, reinterpret_cast<uint8_t*>(why.data()), why.size(), 0, false);
    RecvTag(link);
    throw NativeError(Code::Io, "peer failed the request: " + why);
  }
  uint16_t expect = r.op == kPut ? kPutAck : r.op == kGet ? kGetData : r.op == kHas ? kHasAck : kDeleteAck;
  if (a.op != expect || a.requestId != r.id || a.count != n) throw NativeError(Code::Protocol, "response does not match the request");
  std::vector<Entry> ack = DecodeEntries(a, ackMeta.data());
  r.statuses.resize(n);
  r.lengths.assign(n, 0);
  r.crcs.assign(n, 0);
  uint64_t payloadBytes = 0;
  for (size_t i = 0; i < n; i++) {
    if (ack[i].key != r.entries[i].key) throw NativeError(Code::Protocol, "response entries are out of order");
    r.statuses[i] = ack[i].status;
    r.lengths[i] = ack[i].length;
    r.crcs[i] = ack[i].crc32c;
    if (r.op == kGet && ack[i].status == kOk) payloadBytes += ack[i].length + TrailerBytes(r.entries[i], ack[i]);
  }
  if (payloadBytes != a.payloadBytes) throw NativeError(Code::Protocol, "payload length does not match its entries");
  if (r.op == kGet) {
    for (size_t i = 0; i < n; i++) {
      if (r.statuses[i] != kOk) continue;
      uint32_t len = r.lengths[i];
      const bool ranged = (r.entries[i].flags & kEntryRange) != 0;
      if (len > r.capacity[i] || (ranged && len != r.entries[i].length)) {
        DrainBody(link, len + TrailerBytes(r.entries[i], ack[i]), false);  // cannot land where asked: drain it, the stream stays in sync
        r.statuses[i] = kFailed;
        continue;
      }
      // A whole page is checked as each chunk lands against the stored copy's CRC32C (catches damage at rest on
      // the serving host). A range is followed by the CRC32C it must have: either the server checked the range
      // against CRC32Cs derived from the page's committed CRC32C before it left (peer_server.cc, CheckRange), or it
      // announced that CRC32C (kEntryRangeAnnounced) and follows it with the one of the bytes as it sent them, which
      // must agree. On an authenticated link the frame's tag (checked below, before any status counts) proves these
      // are the bytes the server checksummed, so a CRC32C pass here would only repeat it; without a secret
      // (loopback) it is kept.
      const bool check = !ranged || !link.rx.active();
      uint32_t crc = RecvBody(link, r.arena->host() + r.offsets[i], len, 0, check);
      uint32_t expect = r.crcs[i];
      if (ranged) {
        uint32_t trailer[2];  // the range's CRC32C; announced: then that of the bytes as sent
        const size_t bytes = TrailerBytes(r.entries[i], ack[i]);
        RecvBody(link, reinterpret_cast<uint8_t*>(trailer), bytes, 0, false);
        expect = trailer[0];
        if (bytes == 8 && trailer[1] != trailer[0]) r.statuses[i] = kBadChecksum;
      }
      if (check && crc != expect) r.statuses[i] = kBadChecksum;
    }
  }
  // Statuses and bytes count only once the frame's tag checked; on failure the request fails whole.
  RecvTag(link);
}

}  // namespace tiersync::peer

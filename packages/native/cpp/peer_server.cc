#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <chrono>
#include <cstring>

#include <openssl/crypto.h>

#include "crc32c.h"
#include "peer.h"

namespace tiersync::peer {

void ServerRequest::Answer(const std::string& why) {
  std::lock_guard<std::mutex> lock(m);
  refusal = why;
  answered = true;
  cv.notify_all();
}

bool ServerRequest::Wait(uint64_t timeoutMs) {
  std::unique_lock<std::mutex> lock(m);
  return cv.wait_for(lock, std::chrono::milliseconds(timeoutMs), [&] { return answered; });
}

void PageTable::Hold(std::vector<std::string> keys, const std::vector<PageLoc>& locs) {
  std::lock_guard<std::mutex> lock(m_);
  for (size_t i = 0; i < keys.size(); i++) {
    if (locs.empty()) pages_.try_emplace(std::move(keys[i]));
    else pages_.insert_or_assign(std::move(keys[i]), locs[i]);
  }
}

void PageTable::Drop(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(m_);
  for (const std::string& k : keys) pages_.erase(k);
}

void PageTable::Claim(const std::vector<Entry>& entries, const std::vector<PageLoc>& locs, std::vector<uint8_t>* outcome) {
  std::lock_guard<std::mutex> lock(m_);
  for (size_t i = 0; i < entries.size(); i++)
    if ((*outcome)[i] == kOk && !pages_.try_emplace(entries[i].key, locs[i]).second) (*outcome)[i] = kExisting;
}

bool PageTable::Locate(const std::vector<Entry>& entries, std::vector<PageLoc>* locs, std::vector<uint8_t>* found) {
  std::lock_guard<std::mutex> lock(m_);
  locs->assign(entries.size(), PageLoc{});
  found->assign(entries.size(), 0);
  for (size_t i = 0; i < entries.size(); i++) {
    auto it = pages_.find(entries[i].key);
    if (it == pages_.end()) continue;
    if (it->second.offset < 0) return false;
    (*locs)[i] = it->second;
    (*found)[i] = 1;
  }
  return true;
}

void PageTable::Contains(const std::vector<Entry>& entries, std::vector<uint8_t>* found) {
  std::lock_guard<std::mutex> lock(m_);
  found->assign(entries.size(), 0);
  for (size_t i = 0; i < entries.size(); i++) (*found)[i] = pages_.count(entries[i].key) ? 1 : 0;
}

size_t PageTable::size() {
  std::lock_guard<std::mutex> lock(m_);
  return pages_.size();
}

void SlotPool::Grant(const std::vector<double>& offsets, uint64_t slotBytes) {
  std::lock_guard<std::mutex> lock(m_);
  slotBytes_.store(slotBytes);
  free_.insert(free_.end(), offsets.begin(), offsets.end());
}

bool SlotPool::Take(size_t n, std::vector<double>* out) {
  std::lock_guard<std::mutex> lock(m_);
  if (free_.size() < n) return false;
  out->assign(free_.end() - static_cast<std::ptrdiff_t>(n), free_.end());
  free_.resize(free_.size() - n);
  return true;
}

void SlotPool::Return(double offset) {
  std::lock_guard<std::mutex> lock(m_);
  free_.push_back(offset);
}

std::vector<double> SlotPool::TakeAll() {
  std::lock_guard<std::mutex> lock(m_);
  std::vector<double> out;
  out.swap(free_);
  return out;
}

size_t SlotPool::size() {
  std::lock_guard<std::mutex> lock(m_);
  return free_.size();
}

ChunkCrcCache::Crcs ChunkCrcCache::Find(double offset, uint32_t length, uint32_t crc, uint64_t version) {
  std::lock_guard<std::mutex> lock(m_);
  auto it = index_.find(Key{offset, length, crc, version});
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ChunkCrcCache::Put(double offset, uint32_t length, uint32_t crc, uint64_t version, Crcs chunks) {
  std::lock_guard<std::mutex> lock(m_);
  const Key k{offset, length, crc, version};
  auto it = index_.find(k);
  if (it != index_.end()) {
    it->second->second = std::move(chunks);
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.emplace_front(k, std::move(chunks));
  index_.emplace(k, lru_.begin());
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

void ChunkCrcCache::Forget(double offset, uint32_t length, uint32_t crc, uint64_t version) {
  std::lock_guard<std::mutex> lock(m_);
  auto it = index_.find(Key{offset, length, crc, version});
  if (it == index_.end()) return;
  lru_.erase(it->second);
  index_.erase(it);
}

size_t ChunkCrcCache::size() {
  std::lock_guard<std::mutex> lock(m_);
  return lru_.size();
}

namespace {

// Receives one PUT page into dst, or drains it when dst is null (a page not kept), filling in the CRC32C the client
// left to the server. Returns kOk or kBadChecksum for a page that landed, `notKept` for a drained one. A page that
// landed leaves its chunk CRC32Cs in *chunks (ChunkCrcCache), computed in the same pass, for its later ranged reads.
uint8_t ReceivePutPage(Link& link, Entry& e, uint8_t* dst, uint8_t notKept, ChunkCrcCache::Crcs* chunks) {
  const bool compute = (e.flags & kEntryComputeCrc) != 0;
  if (!dst) {
    const uint32_t crc = DrainBody(link, e.length, compute);
    if (compute) e.crc32c = crc;
    return notKept;
  }
  // Checksummed as each chunk lands, while it is still in cache: the only pass over the page here.
  constexpr uint64_t kChunk = ChunkCrcCache::kChunkBytes;
  auto table = std::make_shared<std::vector<uint32_t>>((e.length + kChunk - 1) / kChunk);
  const uint32_t crc = RecvBodyChunks(link, dst, e.length, kChunk, table->data());
  if (compute) e.crc32c = crc;
  if (crc != e.crc32c) return kBadChecksum;
  *chunks = std::move(table);
  return kOk;
}

// One pass over chunks [first, last] of a page (ChunkCrcCache::kChunkBytes each, the last one shorter): each
// chunk's CRC32C into crcs[k - first], the chunks that hold the range's ends read in pieces cut there, so the
// CRC32C of the range [from, from + count) comes out of the same reads (joined with Crc32cCombine) and is returned.
uint32_t ChunkPass(const uint8_t* page, uint64_t length, size_t first, size_t last, uint64_t from, uint64_t count, uint32_t* crcs) {
  constexpr uint64_t kChunk = ChunkCrcCache::kChunkBytes;
  const uint64_t to = from + count;
  uint32_t range = 0;
  for (size_t k = first; k <= last; k++) {
    const uint64_t cs = k * kChunk, ce = std::min<uint64_t>(cs + kChunk, length);
    const uint64_t a = std::clamp(from, cs, ce), b = std::clamp(to, cs, ce);
    uint32_t c = a > cs ? Crc32c(0, page + cs, a - cs) : 0;
    if (b > a) {
      const uint32_t in = Crc32c(0, page + a, b - a);
      c = Crc32cCombine(c, in, b - a);
      range = Crc32cCombine(range, in, b - a);
    }
    if (ce > b) c = Crc32cCombine(c, Crc32c(0, page + b, ce - b), ce - b);
    crcs[k - first] = c;
  }
  return range;
}

int Listen(const std::string& host, uint16_t port, uint16_t* bound) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) throw NativeError(Code::InvalidArgument, "cannot resolve listen address '" + host + "': " + gai_strerror(rc));
  int fd = -1;
  std::string why;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) break;
    why = ErrnoText(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) throw NativeError(Code::Io, "cannot listen on " + host + ":" + std::to_string(port) + ": " + why);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

}  // namespace

Server::Server(const ServerOptions& options, std::shared_ptr<Memory> arena, PlanFn plan, NotifyFn notify)
    : options_(options), arena_(std::move(arena)), plan_(std::move(plan)), notify_(std::move(notify)) {
  if (!arena_ || !arena_->host()) throw NativeError(Code::InvalidArgument, "a peer server serves a host arena");
  listenFd_ = Listen(options_.host, options_.port, &port_);
  if (options_.secret.empty()) {
    // Without a secret only loopback peers are served: refuse to listen anywhere else.
    if (!IsLoopback(listenFd_, false)) {
      close(listenFd_);
      throw NativeError(Code::InvalidArgument, "a peer server without a secret may only listen on loopback, not '" + options_.host + "'");
    }
  }
  acceptThread_ = std::thread([this] { AcceptLoop(); });
}

Server::~Server() { Close(); }

void Server::Close() {
  if (closing_.exchange(true)) return;
  {
    // Connection threads waiting on the control plane must not wait for a JS thread that is busy closing us.
    std::lock_guard<std::mutex> lock(pendingMutex_);
    for (auto& r : pending_) r->Answer("peer server is closing");
  }
  shutdown(listenFd_, SHUT_RDWR);
  if (acceptThread_.joinable()) acceptThread_.join();
  close(listenFd_);
  decltype(connThreads_) threads;
  {
    std::lock_guard<std::mutex> lock(connMutex_);
    for (int fd : connFds_) shutdown(fd, SHUT_RDWR);
    threads.swap(connThreads_);
  }
  for (auto& t : threads)
    if (t.first.joinable()) t.first.join();
}

void Server::AcceptLoop() {
  while (!closing_) {
    pollfd p{listenFd_, POLLIN, 0};
    int r = poll(&p, 1, 200);
    if (r <= 0) continue;
    int fd = accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(connMutex_);
    if (closing_) {
      close(fd);
      break;
    }
    // Join connections that ended, so a stream of short connections does not pile up threads.
    for (auto it = connThreads_.begin(); it != connThreads_.end();) {
      if (it->second->load()) {
        it->first.join();
        it = connThreads_.erase(it);
      } else {
        ++it;
      }
    }
    if (active_.load() >= options_.maxConnections) {
      refused_++;
      close(fd);
      continue;
    }
    active_++;
    connFds_.push_back(fd);
    auto done = std::make_shared<std::atomic<bool>>(false);
    connThreads_.emplace_back(std::thread([this, fd, done] {
      Serve(fd);
      active_--;
      done->store(true);
    }), done);
  }
}

void Server::Handshake(Link& link) {
  uint8_t sn[kNonce], cn[kNonce], mac[kMac];
  RandomBytes(sn, kNonce);
  std::string challenge(reinterpret_cast<char*>(sn), kNonce);
  const bool secret = !options_.secret.empty();
  uint32_t flags = (secret ? kFlagSecret : 0) | (secret && options_.encrypt ? kFlagEncrypt : 0);
  challenge.append(reinterpret_cast<char*>(&flags), 4);
  SendSimple(link, kChallenge, 0, challenge);
  std::string hello = RecvSimple(link, kHello, kMaxControl, nullptr);
  if (hello.size() != kNonce + 4 + kMac) throw NativeError(Code::Protocol, "HELLO has the wrong size");
  std::memcpy(cn, hello.data(), kNonce);
  uint32_t clientFlags;
  std::memcpy(&clientFlags, hello.data() + kNonce, 4);
  link.peerFlags = clientFlags;
  if (!secret) {
    if (!IsLoopback(link.fd, true)) throw NativeError(Code::Auth, "no secret configured: only loopback peers are served");
  } else {
    HandshakeMac(options_.secret, "client", sn, cn, flags, clientFlags, mac);
    if (!ConstantTimeEqual(mac, reinterpret_cast<const uint8_t*>(hello.data()) + kNonce + 4, kMac))
      throw NativeError(Code::Auth, "client failed the HMAC challenge (wrong secret?)");
    if ((flags & kFlagEncrypt) && !(clientFlags & kFlagEncrypt))
      throw NativeError(Code::Auth, "this peer server requires encrypted frames and the client did not agree to encrypt");
  }
  uint8_t reply[kMac] = {};
  if (secret) HandshakeMac(options_.secret, "server", sn, cn, flags, clientFlags, reply);
  SendSimple(link, kWelcome, 0, std::string(reinterpret_cast<char*>(reply), kMac));
  if (secret) {
    // Every later frame is authenticated with keys only the two ends of this handshake hold.
    uint8_t c2s[kKey], s2c[kKey];
    DeriveFrameKey(options_.secret, "c2s", sn, cn, clientFlags, c2s);
    DeriveFrameKey(options_.secret, "s2c", sn, cn, clientFlags, s2c);
    const bool encrypt = (clientFlags & kFlagEncrypt) != 0;
    link.rx.Init(c2s, encrypt, false);
    link.tx.Init(s2c, encrypt, true);
    OPENSSL_cleanse(c2s, kKey);
    OPENSSL_cleanse(s2c, kKey);
  }
}

void Server::Serve(int fd) {
  connections_++;
  SetSocketOptions(fd, options_.timeoutMs);
  Link link;
  link.fd = fd;
  try {
    Handshake(link);
  } catch (const NativeError& e) {
    authFailures_++;
    try {
      SendSimple(link, kError, 0, e.what());
    } catch (...) {
    }
    {
      std::lock_guard<std::mutex> lock(connMutex_);
      connFds_.erase(std::remove(connFds_.begin(), connFds_.end(), fd), connFds_.end());
    }
    shutdown(fd, SHUT_RDWR);
    close(fd);
    return;
  }
  // Between requests the connection may idle indefinitely; inside one, every read has the socket deadline.
  timeval none{};
  for (;;) {
    try {
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
      uint8_t peek;
      ssize_t got = recv(fd, &peek, 1, MSG_PEEK);
      if (got <= 0) break;
      SetSocketOptions(fd, options_.timeoutMs);
      Header h = RecvHeader(link, options_.maxPayload);
      std::vector<uint8_t> meta = RecvMeta(link, h);
      HandleRequest(link, h, DecodeEntries(h, meta.data()));
    } catch (const NativeError& e) {
      if (e.code() == Code::Auth) authFailures_++;
      try {
        SendSimple(link, kError, 0, e.what());
      } catch (...) {
      }
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(connMutex_);
    connFds_.erase(std::remove(connFds_.begin(), connFds_.end(), fd), connFds_.end());
  }
  shutdown(fd, SHUT_RDWR);
  close(fd);
}

void Server::Ask(const std::shared_ptr<ServerRequest>& r) {
  {
    std::lock_guard<std::mutex> lock(r->m);
    r->answered = false;
    r->refusal.clear();
  }
  {
    std::lock_guard<std::mutex> lock(pendingMutex_);
    if (closing_) throw NativeError(Code::Closed, "peer server is closing");
    pending_.push_back(r);
  }
  plan_(r);
  bool answered = r->Wait(options_.timeoutMs);
  {
    std::lock_guard<std::mutex> lock(pendingMutex_);
    pending_.erase(std::remove(pending_.begin(), pending_.end(), r), pending_.end());
  }
  if (!answered)
    throw NativeError(Code::Timeout, "the page table did not answer within " + std::to_string(options_.timeoutMs) + " ms");
}

uint8_t* Server::ArenaSpan(double offset, uint64_t length) const {
  const uint64_t size = arena_->size();
  if (!(offset >= 0) || static_cast<uint64_t>(offset) > size || length > size - static_cast<uint64_t>(offset)) return nullptr;
  return arena_->host() + static_cast<uint64_t>(offset);
}

bool Server::CheckRange(double offset, const uint8_t* page, uint32_t length, uint32_t pageCrc, uint64_t from, uint64_t count, uint32_t* rangeCrc) {
  constexpr uint64_t kChunk = ChunkCrcCache::kChunkBytes;
  const size_t first = from / kChunk, last = (from + count - 1) / kChunk;
  // Warm: only the chunks the range overlaps are read, each compared with the CRC32C a whole pass found for it.
  // Why this never lets a bad byte out: the table was accepted only because its chunks joined to the committed page
  // CRC32C; every byte sent lies in a chunk read again now and matched against that table. Bytes damaged at rest
  // since (or a stale table, where slots are not shared and no version tells a reused slot's page apart) can make
  // the comparison fail, never pass for bytes the table does not describe. A failure drops the table and falls back
  // to the whole check below, so a stale table costs one extra pass and never refuses an intact page.
  const uint64_t version = SlotVersion(offset);
  if (ChunkCrcCache::Crcs table = chunkCrcs_.Find(offset, length, pageCrc, version)) {
    if (table->size() == (length + kChunk - 1) / kChunk) {
      uint32_t stackCrcs[32];
      std::vector<uint32_t> heapCrcs;
      uint32_t* got = stackCrcs;
      if (last - first + 1 > 32) {
        heapCrcs.resize(last - first + 1);
        got = heapCrcs.data();
      }
      const uint32_t range = ChunkPass(page, length, first, last, from, count, got);
      if (std::equal(got, got + (last - first + 1), table->begin() + static_cast<std::ptrdiff_t>(first))) {
        rangesByChunk_++;
        *rangeCrc = range;
        return true;
      }
    }
    chunkCrcs_.Forget(offset, length, pageCrc, version);
  }
  // Cold: the whole page, chunk by chunk in one pass; the chunks joined must give the committed CRC32C.
  const size_t chunks = (length + kChunk - 1) / kChunk;
  auto table = std::make_shared<std::vector<uint32_t>>(chunks);
  const uint32_t range = ChunkPass(page, length, 0, chunks - 1, from, count, table->data());
  uint32_t whole = 0;
  for (size_t k = 0; k < chunks; k++) whole = Crc32cCombine(whole, (*table)[k], std::min<uint64_t>(kChunk, length - k * kChunk));
  rangesWhole_++;
  if (whole != pageCrc) return false;
  chunkCrcs_.Put(offset, length, pageCrc, version, std::move(table));
  *rangeCrc = range;
  return true;
}

bool Server::ExpectedRangeCrc(double offset, uint32_t length, uint32_t pageCrc, uint64_t from, uint64_t count, uint32_t* expected) {
  constexpr uint64_t kChunk = ChunkCrcCache::kChunkBytes;
  const uint64_t to = from + count;
  if (from % kChunk != 0 || (to % kChunk != 0 && to != length)) return false;
  const uint64_t version = SlotVersion(offset);
  if (version == ChunkCrcCache::kNoVersion) return false;  // nothing ties a table to the bytes in the slot now
  ChunkCrcCache::Crcs table = chunkCrcs_.Find(offset, length, pageCrc, version);
  if (!table || table->size() != (length + kChunk - 1) / kChunk) return false;
  uint32_t crc = 0;
  for (uint64_t k = from / kChunk; k * kChunk < to; k++) crc = Crc32cCombine(crc, (*table)[k], std::min(kChunk, length - k * kChunk));
  *expected = crc;
  return true;
}

uint64_t Server::SlotVersion(double offset) const {
  const uint32_t* versions = slotVersions_.load(std::memory_order_acquire);
  const uint64_t slotBytes = pool_.slotBytes();
  const double from = offset - slotsDataOffset_;
  if (!versions || slotBytes == 0 || !(from >= 0)) return ChunkCrcCache::kNoVersion;
  const uint64_t slot = static_cast<uint64_t>(from) / slotBytes;
  if (slot >= slotCount_ || static_cast<double>(slot * slotBytes) != from) return ChunkCrcCache::kNoVersion;
  return __atomic_load_n(&versions[slot], __ATOMIC_ACQUIRE);
}

std::vector<Landed> Server::DrainLanded() {
  std::lock_guard<std::mutex> lock(landedMutex_);
  drainScheduled_ = false;
  std::vector<Landed> out;
  out.swap(landed_);
  return out;
}

bool Server::ScheduleDrainLocked() {
  const bool wake = !drainScheduled_;
  drainScheduled_ = true;
  return wake;
}

Server::Served Server::TakeServed() {
  std::lock_guard<std::mutex> lock(landedMutex_);
  Served out;
  std::swap(out, served_);
  return out;
}

void Server::ShareSlots(const uint32_t* versions, int32_t* pins, size_t count, double dataOffset) {
  slotPins_ = pins;
  slotCount_ = count;
  slotsDataOffset_ = dataOffset;
  slotVersions_.store(versions, std::memory_order_release);
}

bool Server::PlanGetHere(ServerRequest& r) {
  const uint32_t* versions = slotVersions_.load(std::memory_order_acquire);
  if (!versions || !notify_) return false;
  const size_t n = r.entries.size();
  std::vector<PageLoc> locs;
  std::vector<uint8_t> found;
  if (!table_.Locate(r.entries, &locs, &found)) return false;
  r.offsets.assign(n, -1);
  r.statuses.assign(n, kMiss);
  r.lengths.assign(n, 0);
  r.crcs.assign(n, 0);
  r.pinnedSlots.clear();
  for (size_t i = 0; i < n; i++) {
    if (!found[i]) continue;
    const PageLoc& l = locs[i];
    if (l.slot >= slotCount_) return FinishGetHere(r, false), false;
    // Pin, then read the version (the control plane bumps the version, then reads the pins): an unchanged version
    // means no free of the slot began before the pin, and any later one sees it.
    __atomic_add_fetch(&slotPins_[l.slot], 1, __ATOMIC_SEQ_CST);
    r.pinnedSlots.push_back(l.slot);
    if (__atomic_load_n(&versions[l.slot], __ATOMIC_SEQ_CST) != l.version) return FinishGetHere(r, false), false;
    r.offsets[i] = l.offset;
    r.statuses[i] = kOk;
    r.lengths[i] = l.length;
    r.crcs[i] = l.crc;
  }
  r.plannedHere = true;
  getsPlannedHere_++;
  return true;
}

std::vector<PageLoc> Server::LandedLocations(const std::vector<Entry>& entries, const std::vector<double>& slots, const std::vector<uint8_t>& outcome) const {
  std::vector<PageLoc> locs(entries.size());
  const uint32_t* versions = slotVersions_.load(std::memory_order_acquire);
  const uint64_t slotBytes = pool_.slotBytes();
  if (!versions || slotBytes == 0) return locs;
  for (size_t i = 0; i < entries.size(); i++) {
    const double from = slots[i] - slotsDataOffset_;
    if (outcome[i] != kOk || from < 0) continue;
    const uint64_t slot = static_cast<uint64_t>(from) / slotBytes;
    if (slot >= slotCount_ || static_cast<double>(slot * slotBytes) != from) continue;
    locs[i] = PageLoc{slots[i], entries[i].length, entries[i].crc32c, static_cast<uint32_t>(slot), __atomic_load_n(&versions[slot], __ATOMIC_ACQUIRE)};
  }
  return locs;
}

bool Server::AnswerHasHere(ServerRequest& r) {
  // The table mirrors the tier only once the control plane shared its slots (servePeer does both together).
  if (!slotVersions_.load(std::memory_order_acquire) || !notify_) return false;
  std::vector<uint8_t> found;
  table_.Contains(r.entries, &found);
  r.offsets.assign(found.size(), -1);
  r.statuses.resize(found.size());
  for (size_t i = 0; i < found.size(); i++) r.statuses[i] = found[i] ? kOk : kMiss;
  hasAnsweredHere_++;
  return true;
}

void Server::FinishGetHere(ServerRequest& r, bool sent) {
  for (uint32_t s : r.pinnedSlots) __atomic_sub_fetch(&slotPins_[s], 1, __ATOMIC_SEQ_CST);
  r.pinnedSlots.clear();
  if (!sent) return;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(landedMutex_);
    for (size_t i = 0; i < r.entries.size(); i++) {
      if (r.statuses[i] == kOk) {
        // Bounded while the control plane does not drain (its thread busy): the pages past it are counted only.
        if (served_.keys.size() < kServedKeys) served_.keys.push_back(r.entries[i].key);
        served_.pages++;
        served_.bytes += r.lengths[i];
      } else if (r.statuses[i] == kMiss) {
        served_.misses++;
      }
    }
    wake = ScheduleDrainLocked();
  }
  if (wake && !closing_) notify_();
}

void Server::KeepSlotRecords(uint64_t dataOffset, uint64_t recordBytes) {
  if (recordBytes < 16 + kMaxKey || dataOffset > arena_->size())
    throw NativeError(Code::InvalidArgument, "slot records need at least " + std::to_string(16 + kMaxKey) + " bytes each, before the slots");
  recordBytes_.store(recordBytes);
  recordsDataOffset_.store(dataOffset);
}

// The host tier's slot record (packages/tiers/src/host/index.ts), in the form without page meta: u32 state, u32
// length, u32 CRC32C, u32 key length, key bytes, zeros. The state is written last: a process killed earlier
// leaves the slot free, never a torn record.
void Server::WriteSlotRecord(double offset, const Entry& e) {
  constexpr uint32_t kValid = 0x50414745;  // "PAGE"
  const uint64_t recordBytes = recordBytes_.load(), dataOffset = recordsDataOffset_.load(), slotBytes = pool_.slotBytes();
  if (recordBytes == 0 || slotBytes == 0 || !(offset >= static_cast<double>(dataOffset))) return;
  const uint64_t slot = (static_cast<uint64_t>(offset) - dataOffset) / slotBytes;
  if ((slot + 1) * recordBytes > dataOffset) return;  // not a slot of this arena's table (checked like input)
  uint8_t* r = arena_->host() + slot * recordBytes;
  uint32_t* state = reinterpret_cast<uint32_t*>(r);
  __atomic_store_n(state, 0u, __ATOMIC_RELEASE);
  std::memset(r + 4, 0, recordBytes - 4);
  const uint32_t fields[3] = {e.length, e.crc32c, static_cast<uint32_t>(e.key.size())};
  std::memcpy(r + 4, fields, sizeof fields);
  std::memcpy(r + 16, e.key.data(), e.key.size());
  __atomic_store_n(state, kValid, __ATOMIC_RELEASE);
}

void Server::Post(const std::shared_ptr<ServerRequest>& r) {
  if (closing_) return;
  plan_(r);
}

bool Server::PutPooled(Link& link, const Header& h, std::vector<Entry>& entries) {
  const size_t n = entries.size();
  const uint64_t slotBytes = pool_.slotBytes();
  if (!notify_ || slotBytes == 0 || n == 0) return false;
  for (const Entry& e : entries)
    if (e.length > slotBytes) return false;  // the control plane's plan refuses it (kOutOfRange), ReceivePut too
  std::vector<double> slots;
  if (!pool_.Take(n, &slots)) return false;
  pooledPuts_++;
  std::vector<uint8_t> outcome(n, kOk);
  std::vector<ChunkCrcCache::Crcs> tables(n);
  try {
    // A granted slot is checked like input: one outside the arena drains its page.
    for (size_t i = 0; i < n; i++) outcome[i] = ReceivePutPage(link, entries[i], ArenaSpan(slots[i], entries[i].length), kFailed, &tables[i]);
    RecvTag(link);  // nothing of a frame that fails its tag is committed
  } catch (...) {
    for (double s : slots) pool_.Return(s);
    throw;
  }
  // ok or existing is decided here, against the keys the tier holds (and those earlier PUTs claimed): the ack
  // waits for nobody. Read-your-writes: the landed pages reach the control plane on the queue its later plans
  // share (and a daemon's control requests record them first), so any request after the ack finds them. A claimed
  // page is located where it landed, with its slot's version now: the control plane neither frees nor reuses a
  // landed slot before it records the page (and frees one it does not keep only after its pins), so a GET of the
  // page is planned here even before then.
  table_.Claim(entries, LandedLocations(entries, slots, outcome), &outcome);
  Landed landed;
  std::vector<Entry> ack(n);
  for (size_t i = 0; i < n; i++) {
    if (outcome[i] == kOk) {
      WriteSlotRecord(slots[i], entries[i]);
      landed.entries.push_back(entries[i]);
      landed.offsets.push_back(slots[i]);
      // Its first ranged read then needs no whole pass (the table joins to the CRC32C the page landed with).
      if (tables[i]) chunkCrcs_.Put(slots[i], entries[i].length, entries[i].crc32c, SlotVersion(slots[i]), std::move(tables[i]));
    } else {
      pool_.Return(slots[i]);
    }
    ack[i].key = entries[i].key;
    ack[i].status = outcome[i];
    ack[i].length = entries[i].length;
    ack[i].crc32c = entries[i].crc32c;
  }
  if (!landed.entries.empty()) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(landedMutex_);
      landed_.push_back(std::move(landed));
      wake = ScheduleDrainLocked();
    }
    if (wake && !closing_) notify_();
  }
  SendFrame(link, kPutAck, h.requestId, static_cast<uint32_t>(n), EncodeEntries(ack), {});
  return true;
}

void Server::ReceivePut(Link& link, const Header& h, const std::shared_ptr<ServerRequest>& r, uint16_t ackOp) {
  const size_t n = r->entries.size();
  r->outcome.assign(n, kOk);
  std::vector<ChunkCrcCache::Crcs> tables(n);
  // The plan is checked like input: a page longer than the pool's slots (known once slots were granted) would run
  // into the next slot's page, whatever the arena's bounds allow. It is drained and refused.
  const uint64_t slotBytes = pool_.slotBytes();
  for (size_t i = 0; i < n; i++) {
    Entry& e = r->entries[i];
    uint8_t status = r->statuses[i];
    if (status == kOk && slotBytes != 0 && e.length > slotBytes) status = kOutOfRange;
    uint8_t* dst = status == kOk ? ArenaSpan(r->offsets[i], e.length) : nullptr;
    r->outcome[i] = ReceivePutPage(link, e, dst, status == kOk ? static_cast<uint8_t>(kFailed) : status, &tables[i]);
  }
  RecvTag(link);  // nothing of a frame that fails its tag is committed
  r->finishing = true;
  Ask(r);  // commit: the pages become visible before the client hears they are stored
  std::vector<Entry> ack(n);
  for (size_t i = 0; i < n; i++) {
    ack[i].key = r->entries[i].key;
    ack[i].status = r->outcome[i];
    ack[i].length = r->entries[i].length;
    ack[i].crc32c = r->entries[i].crc32c;
    if (r->outcome[i] == kOk && tables[i]) chunkCrcs_.Put(r->offsets[i], r->entries[i].length, r->entries[i].crc32c, SlotVersion(r->offsets[i]), std::move(tables[i]));
  }
  SendFrame(link, ackOp, h.requestId, static_cast<uint32_t>(n), EncodeEntries(ack), {});
}

// A GET response's payload: pages and ranges in entry order, each range followed by its CRC32C word(s).
struct Server::GetPayload {
  explicit GetPayload(size_t entries) { words.reserve(2 * entries); }  // iov points into words: no reallocation
  std::vector<iovec> iov;
  std::vector<uint32_t*> sentCrcs;  // per iov, or empty: where SendFrame leaves the CRC32C of an announced range
  std::vector<uint32_t> words;
  void Bytes(const uint8_t* p, uint64_t n) { iov.push_back({const_cast<uint8_t*>(p), n}); }
  // A range and the CRC32C it has (checked here) or must have (the client checksums it as it lands).
  void Range(const uint8_t* p, uint64_t n, uint32_t crc) {
    Bytes(p, n);
    words.push_back(crc);
    iov.push_back({&words.back(), 4});
  }
  // A range, the CRC32C it must have, and the one of its bytes as SendFrame sends them (kEntryRangeAnnounced).
  void AnnouncedRange(const uint8_t* p, uint64_t n, uint32_t expected) {
    Bytes(p, n);
    words.push_back(expected);
    words.push_back(0);
    sentCrcs.resize(iov.size());
    sentCrcs.back() = &words.back();
    iov.push_back({&words[words.size() - 2], 8});
  }
};

void Server::AddPage(const Link& link, const ServerRequest& r, size_t i, Entry* ack, GetPayload* out) {
  const uint32_t len = r.lengths.at(i);
  const uint8_t* page = ArenaSpan(r.offsets[i], len);
  if (!page) {
    ack->status = kFailed;
    return;
  }
  ack->crc32c = r.crcs.at(i);
  if (!(r.entries[i].flags & kEntryRange)) {
    ack->length = len;
    out->Bytes(page, len);
    return;
  }
  const uint64_t from = r.entries[i].crc32c, count = r.entries[i].length;
  if (count == 0 || from + count > len) {
    ack->status = kOutOfRange;
    return;
  }
  // Where the chunk table gives the CRC32C the range must have, it goes out unchecked (no pass over cold memory
  // here) with that CRC32C announced, for the client to check against: without a secret every client checksums a
  // range as it lands; on an authenticated link only one that compares announced CRC32Cs (kFlagRangeCrcs) gets
  // them, with the CRC32C of the bytes as sent, computed in the pass that authenticates them.
  const bool clientChecks = !link.tx.active() || (link.peerFlags & kFlagRangeCrcs) != 0;
  uint32_t crc;
  if (clientChecks && ExpectedRangeCrc(r.offsets[i], len, r.crcs.at(i), from, count, &crc)) {
    rangesAnnounced_++;
    ack->length = static_cast<uint32_t>(count);
    if (link.tx.active()) {
      ack->flags = kEntryRangeAnnounced;
      out->AnnouncedRange(page + from, count, crc);
    } else {
      out->Range(page + from, count, crc);
    }
    return;
  }
  // No byte of the range leaves unless it matched CRC32Cs derived from the page's committed CRC32C: the whole page
  // on its first ranged read, then only the chunks each range overlaps (CheckRange).
  if (!CheckRange(r.offsets[i], page, len, r.crcs.at(i), from, count, &crc)) {
    ack->status = kBadChecksum;
    return;
  }
  ack->length = static_cast<uint32_t>(count);
  out->Range(page + from, count, crc);
}

void Server::HandleRequest(Link& link, const Header& h, std::vector<Entry> entries) {
  auto r = std::make_shared<ServerRequest>();
  r->id = ++nextRequest_;
  r->op = h.op;
  r->entries = std::move(entries);
  const size_t n = r->entries.size();
  uint16_t ackOp;
  switch (h.op) {
    case kPut: ackOp = kPutAck; break;
    case kGet: ackOp = kGetData; break;
    case kHas: ackOp = kHasAck; break;
    case kDelete: ackOp = kDeleteAck; break;
    default: throw NativeError(Code::Protocol, "unexpected op " + std::to_string(h.op));
  }
  requests_[RequestIndex(h.op)]++;
  uint64_t declared = 0;
  for (const Entry& e : r->entries) declared += h.op == kPut ? e.length : 0;
  if (declared != h.payloadBytes) throw NativeError(Code::Protocol, "payload length does not match its entries");
  // A frame without pages is acted on only once its tag checked (a forged DELETE must never run).
  if (h.op != kPut) RecvTag(link);
  if (h.op == kPut && PutPooled(link, h, r->entries)) return;

  const bool here = (h.op == kGet && PlanGetHere(*r)) || (h.op == kHas && AnswerHasHere(*r));
  if (!here) {
    Ask(r);
    if (!r->refusal.empty()) throw NativeError(Code::Io, r->refusal);
  }
  if (r->offsets.size() != n || r->statuses.size() != n) throw NativeError(Code::Io, "page table answered the wrong number of entries");
  // The plan comes from our own control plane, but is checked like input (ArenaSpan): it must never point outside
  // the arena.
  bool sent = false;
  try {
    if (h.op == kPut) return ReceivePut(link, h, r, ackOp);
    std::vector<Entry> ack(n);
    GetPayload payload(n);
    for (size_t i = 0; i < n; i++) {
      ack[i].key = r->entries[i].key;
      ack[i].status = r->statuses[i];
      if (h.op == kGet && r->statuses[i] == kOk) AddPage(link, *r, i, &ack[i], &payload);
    }
    if (!payload.sentCrcs.empty()) payload.sentCrcs.resize(payload.iov.size());
    SendFrame(link, ackOp, h.requestId, static_cast<uint32_t>(n), EncodeEntries(ack), payload.iov, payload.sentCrcs);
    sent = true;
  } catch (...) {
    r->failed = true;
    if (r->plannedHere) {
      FinishGetHere(*r, false);
      throw;
    }
    if (!r->finishing) {
      r->finishing = true;
      try {
        Ask(r);  // release what the plan reserved or pinned
      } catch (...) {
      }
    }
    throw;
  }
  if (h.op == kGet && sent) {
    // Unpin: the bytes are in the kernel's buffers. Planned here: released here; otherwise the control plane
    // unpins (nothing here waits for its answer).
    if (r->plannedHere) return FinishGetHere(*r, true);
    r->finishing = true;
    Post(r);
  }
}

}  // namespace tiersync::peer

#include "peer_protocol.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "crc32c.h"

namespace tiersync::peer {
namespace {

void Put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint16_t Get16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
uint32_t Get32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
uint64_t Get64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian");

[[noreturn]] void Bad(const std::string& why) { throw NativeError(Code::Protocol, "peer frame rejected: " + why); }

bool HexKey(const uint8_t* p, size_t n) {
  if (n < 16 || n > kMaxKey) return false;
  for (size_t i = 0; i < n; i++)
    if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) return false;
  return true;
}

}  // namespace

void EncodeHeader(const Header& h, uint8_t out[kHeaderBytes]) {
  Put32(out, kMagic);
  Put16(out + 4, h.version);
  Put16(out + 6, h.op);
  Put64(out + 8, h.requestId);
  Put32(out + 16, h.count);
  Put32(out + 20, h.metaBytes);
  Put64(out + 24, h.payloadBytes);
  Put32(out + 32, h.metaCrc);
  Put32(out + 36, Crc32c(0, out, 36));
}

void EncodeFrameHeader(uint16_t op, uint64_t requestId, uint32_t count, const std::vector<uint8_t>& meta,
                       uint64_t payloadBytes, uint8_t out[kHeaderBytes]) {
  Header h;
  h.op = op;
  h.requestId = requestId;
  h.count = count;
  h.metaBytes = static_cast<uint32_t>(meta.size());
  h.metaCrc = Crc32c(0, meta.data(), meta.size());
  h.payloadBytes = payloadBytes;
  EncodeHeader(h, out);
}

Header DecodeHeader(const uint8_t in[kHeaderBytes], uint64_t maxPayload) {
  if (Get32(in) != kMagic) Bad("bad magic (not a tiersync peer)");
  if (Get32(in + 36) != Crc32c(0, in, 36)) Bad("header checksum mismatch");
  Header h;
  h.version = Get16(in + 4);
  if (h.version != kVersion) Bad("unsupported protocol version " + std::to_string(h.version) + " (this side speaks 1)");
  h.op = Get16(in + 6);
  h.requestId = Get64(in + 8);
  h.count = Get32(in + 16);
  h.metaBytes = Get32(in + 20);
  h.payloadBytes = Get64(in + 24);
  h.metaCrc = Get32(in + 32);
  if (h.count > kMaxCount) Bad("count " + std::to_string(h.count) + " exceeds " + std::to_string(kMaxCount));
  if (h.metaBytes > kMaxMeta) Bad("entry table of " + std::to_string(h.metaBytes) + " bytes exceeds " + std::to_string(kMaxMeta));
  if (h.payloadBytes > maxPayload)
    Bad("payload of " + std::to_string(h.payloadBytes) + " bytes exceeds the maximum frame payload " + std::to_string(maxPayload));
  if (static_cast<uint64_t>(h.count) * 12 > h.metaBytes) Bad("entry table too short for its count");
  return h;
}

std::vector<uint8_t> EncodeEntries(const std::vector<Entry>& entries) {
  size_t n = 0;
  for (const Entry& e : entries) n += 12 + e.key.size();
  std::vector<uint8_t> out(n);
  uint8_t* p = out.data();
  for (const Entry& e : entries) {
    Put16(p, static_cast<uint16_t>(e.key.size()));
    p[2] = e.status;
    p[3] = e.flags;
    Put32(p + 4, e.length);
    Put32(p + 8, e.crc32c);
    std::memcpy(p + 12, e.key.data(), e.key.size());
    p += 12 + e.key.size();
  }
  return out;
}

std::vector<Entry> DecodeEntries(const Header& h, const uint8_t* meta) {
  if (Crc32c(0, meta, h.metaBytes) != h.metaCrc) Bad("entry table checksum mismatch");
  std::vector<Entry> out;
  out.reserve(h.count);
  size_t at = 0;
  uint64_t payload = 0;
  for (uint32_t i = 0; i < h.count; i++) {
    if (h.metaBytes - at < 12) Bad("entry " + std::to_string(i) + " truncated");
    const uint8_t* p = meta + at;
    uint16_t keyLength = Get16(p);
    if (keyLength > h.metaBytes - at - 12) Bad("entry " + std::to_string(i) + " key runs past the table");
    if (keyLength != 0 && !HexKey(p + 12, keyLength)) Bad("entry " + std::to_string(i) + " key is not 16..128 lower-case hex");
    Entry e;
    e.status = p[2];
    e.flags = p[3];
    e.length = Get32(p + 4);
    e.crc32c = Get32(p + 8);
    e.key.assign(reinterpret_cast<const char*>(p + 12), keyLength);
    payload += e.length;
    out.push_back(std::move(e));
    at += 12 + keyLength;
  }
  if (at != h.metaBytes) Bad("entry table has " + std::to_string(h.metaBytes - at) + " trailing bytes");
  (void)payload;
  return out;
}

void HandshakeMac(const std::string& secret, const char* role, const uint8_t serverNonce[kNonce],
                  const uint8_t clientNonce[kNonce], uint32_t serverFlags, uint32_t clientFlags, uint8_t out[kMac]) {
  std::string transcript = std::string("tiersync-peer-v1 ") + role;
  transcript.append(reinterpret_cast<const char*>(serverNonce), kNonce);
  transcript.append(reinterpret_cast<const char*>(clientNonce), kNonce);
  transcript.append(reinterpret_cast<const char*>(&serverFlags), 4);
  transcript.append(reinterpret_cast<const char*>(&clientFlags), 4);
  unsigned len = kMac;
  if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(transcript.data()), transcript.size(), out, &len))
    throw NativeError(Code::Auth, "HMAC-SHA256 failed");
}

void DeriveFrameKey(const std::string& secret, const char* direction, const uint8_t serverNonce[kNonce],
                    const uint8_t clientNonce[kNonce], uint32_t flags, uint8_t out[kKey]) {
  // RFC 5869: PRK = HMAC(salt, IKM); OKM = T(1) = HMAC(PRK, info | 0x01) (one block: 32 bytes).
  uint8_t salt[2 * kNonce], prk[32];
  std::memcpy(salt, serverNonce, kNonce);
  std::memcpy(salt + kNonce, clientNonce, kNonce);
  unsigned len = 32;
  if (!HMAC(EVP_sha256(), salt, sizeof salt, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), prk, &len))
    throw NativeError(Code::Auth, "HKDF-SHA256 (extract) failed");
  std::string info = std::string("tiersync-peer-v1 ") + direction;
  info.append(reinterpret_cast<const char*>(&flags), 4);
  info.push_back('\x01');
  len = 32;
  if (!HMAC(EVP_sha256(), prk, sizeof prk, reinterpret_cast<const unsigned char*>(info.data()), info.size(), out, &len))
    throw NativeError(Code::Auth, "HKDF-SHA256 (expand) failed");
  OPENSSL_cleanse(prk, sizeof prk);
}

bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

void RandomBytes(uint8_t* out, size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1) throw NativeError(Code::Io, "RAND_bytes failed");
}

void SendAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) throw NativeError(Code::Timeout, "peer send timed out");
      throw NativeError(Code::Io, "peer send failed: " + ErrnoText(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void SendVec(int fd, iovec* iov, int count) {
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(std::min(count, 1024));
    ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) throw NativeError(Code::Timeout, "peer send timed out");
      throw NativeError(Code::Io, "peer send failed: " + ErrnoText(errno));
    }
    size_t done = static_cast<size_t>(w);
    while (count > 0 && done >= iov->iov_len) {
      done -= iov->iov_len;
      iov++;
      count--;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + done;
      iov->iov_len -= done;
    }
  }
}

void RecvAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = recv(fd, p, n, MSG_WAITALL);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) throw NativeError(Code::Timeout, "peer receive timed out");
      throw NativeError(Code::Io, "peer receive failed: " + ErrnoText(errno));
    }
    if (r == 0) throw NativeError(Code::Protocol, "peer closed the connection mid-frame");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

void SetSocketOptions(int fd, uint64_t timeoutMs) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int buf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  if (timeoutMs) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeoutMs / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeoutMs % 1000) * 1000);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
}

bool IsLoopback(int fd, bool peerSide) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  int r = peerSide ? getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) : getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (r != 0) return false;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) && a->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

namespace {
constexpr size_t kBodyChunk = 256 << 10;  // authenticated/encrypted in pieces that stay in cache between passes
}

void SendFrame(Link& link, uint16_t op, uint64_t requestId, uint32_t count, const std::vector<uint8_t>& meta,
               const std::vector<iovec>& payload, const std::vector<uint32_t*>& crcs) {
  if (!crcs.empty() && crcs.size() != payload.size()) throw NativeError(Code::InvalidArgument, "SendFrame: one CRC32C slot per payload range");
  uint64_t payloadBytes = 0;
  for (const iovec& v : payload) payloadBytes += v.iov_len;
  uint8_t head[kHeaderBytes];
  EncodeFrameHeader(op, requestId, count, meta, payloadBytes, head);
  if (!link.tx.active()) {
    // One send of everything: the CRC32Cs asked for are computed first.
    for (size_t i = 0; i < crcs.size(); i++)
      if (crcs[i]) *crcs[i] = Crc32c(0, payload[i].iov_base, payload[i].iov_len);
    std::vector<iovec> iov;
    iov.reserve(payload.size() + 2);
    iov.push_back({head, kHeaderBytes});
    if (!meta.empty()) iov.push_back({const_cast<uint8_t*>(meta.data()), meta.size()});
    iov.insert(iov.end(), payload.begin(), payload.end());
    SendVec(link.fd, iov.data(), static_cast<int>(iov.size()));
    return;
  }
  FrameAead& a = link.tx;
  a.Begin(head);
  std::vector<uint8_t> sealedMeta;
  const uint8_t* metaOut = meta.data();
  if (a.encrypts() && !meta.empty()) {
    sealedMeta.resize(meta.size());
    a.Body(meta.data(), sealedMeta.data(), meta.size());
    metaOut = sealedMeta.data();
  } else {
    a.Body(meta.data(), nullptr, meta.size());
  }
  iovec first[2] = {{head, kHeaderBytes}, {const_cast<uint8_t*>(metaOut), meta.size()}};
  SendVec(link.fd, first, meta.empty() ? 1 : 2);
  // Pieces go out in sends of up to kBodyChunk bytes, several pieces to one send: a ranged GET's payload is many
  // ranges each followed by a 4-byte CRC32C, which sent one by one would cost a syscall and a segment each.
  std::vector<uint8_t> bounce;
  if (a.encrypts() && payloadBytes) bounce.resize(std::min<uint64_t>(payloadBytes + kTag, kBodyChunk));
  size_t sealed = 0;  // encrypting: bytes of bounce filled
  std::vector<iovec> batch;
  size_t batchBytes = 0;
  auto flush = [&] {
    if (a.encrypts()) {
      if (sealed) SendAll(link.fd, bounce.data(), sealed);
      sealed = 0;
    } else if (!batch.empty()) {
      SendVec(link.fd, batch.data(), static_cast<int>(batch.size()));
      batch.clear();
      batchBytes = 0;
    }
  };
  for (size_t i = 0; i < payload.size(); i++) {
    const iovec& v = payload[i];
    const uint8_t* p = static_cast<const uint8_t*>(v.iov_base);
    uint32_t* crc = crcs.empty() ? nullptr : crcs[i];
    if (crc) *crc = 0;
    for (size_t off = 0; off < v.iov_len;) {
      if (a.encrypts()) {
        size_t k = std::min(bounce.size() - sealed, v.iov_len - off);
        if (crc) *crc = Crc32c(*crc, p + off, k);  // the plaintext, read into cache for the cipher just after
        a.Body(p + off, bounce.data() + sealed, k);
        sealed += k;
        off += k;
        if (sealed == bounce.size()) flush();
      } else {
        size_t k = std::min(kBodyChunk - batchBytes, v.iov_len - off);
        if (crc) *crc = Crc32c(*crc, p + off, k);
        a.Body(p + off, nullptr, k);  // checksum, authenticate, then send while the piece is in cache
        batch.push_back({const_cast<uint8_t*>(p + off), k});
        batchBytes += k;
        off += k;
        if (batchBytes == kBodyChunk || batch.size() == 64) flush();
      }
    }
  }
  uint8_t tag[kTag];
  a.SealTag(tag);
  if (a.encrypts() && sealed + kTag <= bounce.size()) {
    std::memcpy(bounce.data() + sealed, tag, kTag);
    sealed += kTag;
    flush();
  } else if (!a.encrypts() && batch.size() < 64) {
    batch.push_back({tag, kTag});
    flush();
  } else {
    flush();
    SendAll(link.fd, tag, kTag);
  }
}

Header RecvHeader(Link& link, uint64_t maxPayload) {
  uint8_t head[kHeaderBytes];
  RecvAll(link.fd, head, kHeaderBytes);
  Header h = DecodeHeader(head, maxPayload);
  link.rx.Begin(head);
  return h;
}

std::vector<uint8_t> RecvMeta(Link& link, const Header& h) {
  std::vector<uint8_t> meta(h.metaBytes);
  if (h.metaBytes) {
    RecvAll(link.fd, meta.data(), meta.size());
    link.rx.Body(meta.data(), meta.data(), meta.size());
  }
  return meta;
}

uint32_t RecvBody(Link& link, uint8_t* dst, size_t n, uint32_t crc, bool computeCrc) {
  for (size_t off = 0; off < n; off += kBodyChunk) {
    size_t k = std::min(kBodyChunk, n - off);
    RecvAll(link.fd, dst + off, k);
    link.rx.Body(dst + off, dst + off, k);
    if (computeCrc) crc = Crc32c(crc, dst + off, k);  // while the chunk is still in cache
  }
  return crc;
}

uint32_t RecvBodyChunks(Link& link, uint8_t* dst, size_t n, size_t chunkBytes, uint32_t* chunkCrcs) {
  if (chunkBytes == 0 || kBodyChunk % chunkBytes != 0) throw NativeError(Code::InvalidArgument, "chunk size must divide the receive piece");
  uint32_t crc = 0;
  for (size_t off = 0; off < n; off += kBodyChunk) {
    size_t k = std::min(kBodyChunk, n - off);
    RecvAll(link.fd, dst + off, k);
    link.rx.Body(dst + off, dst + off, k);
    for (size_t c = off; c < off + k; c += chunkBytes) {  // while the piece is still in cache
      size_t m = std::min(chunkBytes, off + k - c);
      chunkCrcs[c / chunkBytes] = Crc32c(0, dst + c, m);
      crc = Crc32cCombine(crc, chunkCrcs[c / chunkBytes], m);
    }
  }
  return crc;
}

uint32_t DrainBody(Link& link, size_t n, bool computeCrc) {
  std::vector<uint8_t> scratch(std::min(n, kBodyChunk));
  uint32_t crc = 0;
  for (size_t off = 0; off < n; off += kBodyChunk) {
    size_t k = std::min(kBodyChunk, n - off);
    RecvAll(link.fd, scratch.data(), k);
    link.rx.Body(scratch.data(), scratch.data(), k);
    if (computeCrc) crc = Crc32c(crc, scratch.data(), k);
  }
  return crc;
}

void RecvTag(Link& link) {
  if (!link.rx.active()) return;
  uint8_t tag[kTag];
  RecvAll(link.fd, tag, kTag);
  if (!link.rx.CheckTag(tag))
    throw NativeError(Code::Auth, "peer frame failed authentication (tampered, replayed or reordered on the path): connection dropped");
}

void SendSimple(Link& link, uint16_t op, uint64_t requestId, const std::string& payload) {
  std::vector<iovec> iov;
  if (!payload.empty()) iov.push_back({const_cast<char*>(payload.data()), payload.size()});
  SendFrame(link, op, requestId, 0, {}, iov);
}

std::string RecvSimple(Link& link, uint16_t expectOp, uint64_t maxPayload, Header* headerOut) {
  Header h = RecvHeader(link, maxPayload);
  if (h.metaBytes) Bad("unexpected entry table in a control frame");
  std::string payload(h.payloadBytes, '\0');
  if (!payload.empty()) RecvBody(link, reinterpret_cast<uint8_t*>(payload.data()), payload.size(), 0, false);
  RecvTag(link);
  if (headerOut) *headerOut = h;
  if (h.op == kError) throw NativeError(Code::Auth, "peer refused: " + payload);
  if (h.op != expectOp) Bad("expected op " + std::to_string(expectOp) + ", got " + std::to_string(h.op));
  return payload;
}

}  // namespace tiersync::peer

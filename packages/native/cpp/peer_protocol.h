// The peer data plane's wire format: framed, versioned, little-endian.
//
//   frame   = header(40) entry-table(metaBytes) payload(payloadBytes)
//   header  = magic u32 'TSYN' | version u16 | op u16 | requestId u64 | count u32 | metaBytes u32 |
//             payloadBytes u64 | metaCrc u32 (CRC32C of the entry table) | headerCrc u32 (CRC32C of bytes 0..35)
//   entry   = keyLength u16 | status u8 | reserved u8 | length u32 | crc32c u32 | key bytes (ASCII hex)
//
// A request carries one entry per page; payloads follow in entry order (PUT requests, GET responses), each
// checked against its entry's CRC32C by the receiver. Limits (kMaxCount, kMaxMeta, a per-connection payload cap)
// are enforced before anything is allocated, so a hostile peer cannot make us allocate or read unbounded data.
//
// Handshake (HMAC-SHA256, RFC 2104, keyed with the shared secret):
//   server -> CHALLENGE  payload: server nonce (32) | flags u32 (bit 0: secret required)
//   client -> HELLO      payload: client nonce (32) | HMAC(secret, "tiersync-peer-v1 client" | sn | cn)
//   server -> WELCOME    payload: HMAC(secret, "tiersync-peer-v1 server" | sn | cn)     (or ERROR)
// Both sides prove the secret without sending it; fresh nonces make replays useless. Without a secret both sides
// only talk over loopback.
#pragma once
#include <sys/uio.h>

#include <cstdint>
#include <string>
#include <vector>

#include "status.h"

namespace tiersync::peer {

constexpr uint32_t kMagic = 0x4E595354;  // "TSYN" little-endian
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 40;
constexpr uint32_t kMaxCount = 65536;
constexpr uint32_t kMaxMeta = 16u << 20;
constexpr size_t kMaxKey = 128;
constexpr size_t kNonce = 32;
constexpr size_t kMac = 32;
constexpr uint64_t kMaxControl = 4096;  // handshake and error frames

enum Op : uint16_t {
  kChallenge = 1,
  kHello = 2,
  kWelcome = 3,
  kPut = 10,
  kPutAck = 11,
  kGet = 12,
  kGetData = 13,
  kHas = 14,
  kHasAck = 15,
  kDelete = 16,
  kDeleteAck = 17,
  kError = 99,
};

// Entry statuses.
enum Status : uint8_t { kOk = 0, kMiss = 1, kExisting = 2, kFull = 3, kBadChecksum = 4, kFailed = 5, kPinned = 6 };

struct Header {
  uint16_t version = kVersion;
  uint16_t op = 0;
  uint64_t requestId = 0;
  uint32_t count = 0;
  uint32_t metaBytes = 0;
  uint64_t payloadBytes = 0;
  uint32_t metaCrc = 0;
};

struct Entry {
  std::string key;
  uint8_t status = 0;
  uint32_t length = 0;
  uint32_t crc32c = 0;
};

void EncodeHeader(const Header& h, uint8_t out[kHeaderBytes]);
// Header of a frame carrying an encoded entry table (and `payloadBytes` of pages after it).
void EncodeFrameHeader(uint16_t op, uint64_t requestId, uint32_t count, const std::vector<uint8_t>& meta,
                       uint64_t payloadBytes, uint8_t out[kHeaderBytes]);
// Throws NativeError(Protocol) naming what is wrong; `maxPayload` bounds payloadBytes.
Header DecodeHeader(const uint8_t in[kHeaderBytes], uint64_t maxPayload);

std::vector<uint8_t> EncodeEntries(const std::vector<Entry>& entries);
// Checks the table's CRC against the header and every key's length and alphabet.
std::vector<Entry> DecodeEntries(const Header& h, const uint8_t* meta);

// HMAC-SHA256 of the handshake transcript (OpenSSL's, as exported by Node).
void HandshakeMac(const std::string& secret, const char* role, const uint8_t serverNonce[kNonce],
                  const uint8_t clientNonce[kNonce], uint8_t out[kMac]);
bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n);
void RandomBytes(uint8_t* out, size_t n);

// Blocking socket I/O that always moves the whole range or throws (Io with the OS reason, or Protocol when the
// peer closed mid-frame). Timeouts come from SO_RCVTIMEO / SO_SNDTIMEO on the socket.
void SendAll(int fd, const void* data, size_t n);
void SendVec(int fd, struct iovec* iov, int count);
void RecvAll(int fd, void* data, size_t n);
void SetSocketOptions(int fd, uint64_t timeoutMs);
bool IsLoopback(int fd, bool peerSide);

// Sends a frame whose payload is one contiguous byte string (handshake, errors).
void SendSimple(int fd, uint16_t op, uint64_t requestId, const std::string& payload);
// Receives a frame expected to carry a small payload (<= maxPayload) with no entries.
std::string RecvSimple(int fd, uint16_t expectOp, uint64_t maxPayload, Header* headerOut);

}  // namespace tiersync::peer

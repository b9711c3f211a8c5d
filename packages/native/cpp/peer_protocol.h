// The peer data plane's wire format: framed, versioned, little-endian.
//
//   frame   = header(40) entry-table(metaBytes) payload(payloadBytes)
//   header  = magic u32 'TSYN' | version u16 | op u16 | requestId u64 | count u32 | metaBytes u32 |
//             payloadBytes u64 | metaCrc u32 (CRC32C of the entry table as encoded, before any encryption) |
//             headerCrc u32 (CRC32C of bytes 0..35)
//   entry   = keyLength u16 | status u8 | flags u8 | length u32 | crc32c u32 | key bytes (ASCII hex)
//
// A request carries one entry per page; payloads follow in entry order (PUT requests, GET responses), each
// checked against its entry's CRC32C by the receiver. In requests, status is 0; a PUT entry's length and crc32c
// are its page's (crc32c 0 with kEntryComputeCrc); a GET of a whole page, HAS and DELETE send length and crc32c 0.
// Answers carry one entry per request entry, in order: its status, and for PUT and GET the page's length and
// CRC32C. Limits (kMaxCount, kMaxMeta, a per-connection payload cap)
// are enforced before anything is allocated, so a hostile peer cannot make us allocate or read unbounded data.
//
// Handshake (HMAC-SHA256, RFC 2104, keyed with the shared secret):
//   server -> CHALLENGE  payload: server nonce (32) | flags u32 (bit 0: secret required)
//   client -> HELLO      payload: client nonce (32) | HMAC(secret, "tiersync-peer-v1 client" | sn | cn)
//   server -> WELCOME    payload: HMAC(secret, "tiersync-peer-v1 server" | sn | cn)     (or ERROR)
// Both sides prove the secret without sending it; fresh nonces make replays useless. Without a secret both sides
// only talk over loopback. CHALLENGE flags: bit 0 secret required, bit 1 encryption required. HELLO carries the
// client's flags (u32, bit 1: encrypt, bit 2: kFlagRangeCrcs) between its nonce and its MAC; both MACs cover both
// flag words, so a party on the path cannot strip them (a downgrade fails the handshake). A server ignores client
// flags it does not know.
//
// Authenticated frames (whenever a secret is set): every frame after WELCOME carries a 16-byte AES-256-GCM tag
// after its payload. Keys: HKDF-SHA256(secret, salt = sn | cn, info = "tiersync-peer-v1 c2s|s2c" | flags), one per
// direction. Nonce: 4 zero bytes | the frame's counter (u64 LE, per direction, from 0, never sent): a replayed,
// dropped or reordered frame fails its tag. The header is always authenticated data; entry table and payload are
// encrypted when the session encrypts, else authenticated data too (GMAC). A frame is acted on only after its tag
// checked (PUT pages are committed, GET pages reported, only then); a failed tag drops the connection.
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
constexpr size_t kTag = 16;
constexpr size_t kKey = 32;
constexpr uint32_t kFlagSecret = 1, kFlagEncrypt = 2;
// HELLO flag: the client honours kEntryRangeAnnounced in GET responses (it compares the two CRC32Cs).
constexpr uint32_t kFlagRangeCrcs = 4;
// Entry.flags bit 0 (PUT): the client did not compute the page's CRC32C; the server computes it on arrival and
// returns it in the ack (each page is checksummed once).
constexpr uint8_t kEntryComputeCrc = 1;
// Entry.flags bit 1 (GET): a ranged read of bytes [crc32c, crc32c + length) of the page (the request's crc32c field
// carries the range's offset). The range follows, then the CRC32C it must have (u32). Either the server checked the
// range before it left (its first ranged read checks the page whole against its CRC32C and keeps its 64 KiB chunk
// CRC32Cs, later ones check the chunks they overlap against those: Server::CheckRange), or, for a chunk-aligned
// range of a page with a chunk table, the CRC32C is joined from the table and the client does the check: on a link
// without a secret the client checksums every range as it lands; on an authenticated one see kEntryRangeAnnounced
// (a client without kFlagRangeCrcs gets checked ranges only: the frame's tag proves the bytes are those the server
// checked). The response entry carries the range's length and the page's CRC32C. A range past the page:
// kOutOfRange, no bytes.
constexpr uint8_t kEntryRange = 2;
// Entry.flags bit 2 (GET response, ranged entry, only to a client that set kFlagRangeCrcs on an authenticated link):
// the server did not check the range before sending it. The range is followed by two u32 instead of one: the CRC32C
// the range must have, joined from the page's chunk table (the range is chunk-aligned), then the CRC32C of the bytes
// as they were sent, computed in the pass that authenticates them (no separate pass over cold memory). The client
// refuses the range (kBadChecksum) when the two differ; the frame's tag covers both.
constexpr uint8_t kEntryRangeAnnounced = 4;

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

// Entry statuses. kOutOfRange: a GET range past the page, or a PUT page longer than the server's slots (drained, not stored).
enum Status : uint8_t { kOk = 0, kMiss = 1, kExisting = 2, kFull = 3, kBadChecksum = 4, kFailed = 5, kPinned = 6, kOutOfRange = 7 };

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
  uint8_t flags = 0;
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

// HMAC-SHA256 of the handshake transcript (OpenSSL's, as exported by Node): role | sn | cn | server flags | client flags.
void HandshakeMac(const std::string& secret, const char* role, const uint8_t serverNonce[kNonce],
                  const uint8_t clientNonce[kNonce], uint32_t serverFlags, uint32_t clientFlags, uint8_t out[kMac]);
// HKDF-SHA256 (RFC 5869) of one direction's frame key from the secret and the handshake nonces.
void DeriveFrameKey(const std::string& secret, const char* direction, const uint8_t serverNonce[kNonce],
                    const uint8_t clientNonce[kNonce], uint32_t flags, uint8_t out[kKey]);

// Which library seals the frames (frame_aead.cc): "ipsec-mb" (Intel's IPsec-MB, where its VAES AVX-512 GCM runs),
// else "system" (libcrypto.so.3) or "node" (Node's own OpenSSL), whichever is newer (the system's at equal
// versions); and its version text ("Intel IPsec-MB 1.3.0 (VAES AVX-512)", "OpenSSL 3.5.9 30 Sep 2025"). Both, and
// FrameAead::Init, throw NativeError(InvalidArgument) when TIERSYNC_PEER_FRAME_CRYPTO names no library.
const char* FrameCryptoSource();
const char* FrameCryptoVersion();

// One direction of an authenticated session: AES-256-GCM, a counter nonce per frame. Inactive (no secret): every
// call is a no-op and frames carry no tag.
class FrameAead {
 public:
  FrameAead() = default;
  ~FrameAead();
  FrameAead(const FrameAead&) = delete;
  FrameAead& operator=(const FrameAead&) = delete;
  void Init(const uint8_t key[kKey], bool encrypt, bool sending);
  bool active() const { return state_ != nullptr; }
  bool encrypts() const { return encrypt_; }
  // Starts the next frame: its nonce is the next counter; the header is authenticated data.
  void Begin(const uint8_t header[kHeaderBytes]);
  // Entry table and payload bytes, in frame order. Sending: `out` gets the ciphertext when encrypting (it may be
  // `in`), nothing otherwise. Receiving: decrypts in place when encrypting.
  void Body(const uint8_t* in, uint8_t* out, size_t n);
  void SealTag(uint8_t tag[kTag]);
  bool CheckTag(const uint8_t tag[kTag]);

  struct State;  // the library's key schedule and running frame (frame_aead.cc)

 private:
  void Reset();
  State* state_ = nullptr;
  bool encrypt_ = false, sending_ = false;
  uint64_t counter_ = 0;
};

// A connected socket and its two frame directions.
struct Link {
  int fd = -1;
  FrameAead tx, rx;
  uint32_t peerFlags = 0;  // server side: the client's HELLO flags
};

// Sends one frame: header for (op, requestId, count, meta, payload), the entry table, the payload ranges, then the
// tag when the link authenticates. Encrypting sessions copy through a bounce buffer (the payload stays untouched).
// `crcs`, when not empty, has one slot per payload range: where a slot is set, the CRC32C of that range's bytes is
// written there as they are sent (on an authenticated link, piece by piece while each is in cache for its tag),
// before any later range goes out; a later range may be that very word.
void SendFrame(Link& link, uint16_t op, uint64_t requestId, uint32_t count, const std::vector<uint8_t>& meta,
               const std::vector<iovec>& payload, const std::vector<uint32_t*>& crcs = {});
// Receives and decodes a header (starting the frame's tag), then its entry table.
Header RecvHeader(Link& link, uint64_t maxPayload);
std::vector<uint8_t> RecvMeta(Link& link, const Header& h);
// Receives n payload bytes into dst; returns the CRC32C `crc` continued over them (computed as each chunk lands).
uint32_t RecvBody(Link& link, uint8_t* dst, size_t n, uint32_t crc, bool computeCrc);
// RecvBody that also leaves the CRC32C of each chunkBytes chunk of dst in chunkCrcs[(n + chunkBytes - 1) /
// chunkBytes] (chunkBytes must divide the receive piece, 256 KiB); returns the CRC32C of all n bytes, joined from them.
uint32_t RecvBodyChunks(Link& link, uint8_t* dst, size_t n, size_t chunkBytes, uint32_t* chunkCrcs);
// Receives and discards n payload bytes (still authenticated); returns their CRC32C when asked.
uint32_t DrainBody(Link& link, size_t n, bool computeCrc);
// Receives the frame's tag and checks it; throws NativeError(Auth) when it fails (tampered, replayed, reordered).
void RecvTag(Link& link);
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
void SendSimple(Link& link, uint16_t op, uint64_t requestId, const std::string& payload);
// Receives a frame expected to carry a small payload (<= maxPayload) with no entries.
std::string RecvSimple(Link& link, uint16_t expectOp, uint64_t maxPayload, Header* headerOut);

}  // namespace tiersync::peer

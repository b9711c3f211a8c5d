// The peer data plane: a server that exposes one host arena to other hosts, and a client with several parallel
// streams. Page bytes move socket <-> arena on native threads. The server asks its control plane (JavaScript:
// the host tier's page table) where each page lives through PlanFn, once per request batch, so the data path
// never waits on JavaScript per page. PUTs into granted slots (SlotPool) and GETs ask nothing: the tier's page table
// is mirrored here (PageTable), so such a PUT is acknowledged on its connection thread and recorded afterwards, and
// a GET is planned there, its slots pinned through words shared with the control plane (ShareSlots).
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "memory.h"
#include "peer_protocol.h"

namespace tiersync::peer {

// A request batch on the server, handed to the control plane twice: to plan (where bytes go or come from) and
// to finish (commit what arrived intact, unpin what was sent).
struct ServerRequest {
  uint64_t id = 0;  // unique per server: pairs a plan with its finish
  uint16_t op = 0;
  std::vector<Entry> entries;
  // Plan (filled by the control plane): per entry an arena offset (-1: no bytes), status, and for GET the
  // stored length and CRC32C.
  std::vector<double> offsets;
  std::vector<uint8_t> statuses;
  std::vector<uint32_t> lengths, crcs;
  // Finish: per entry, what the data plane did (PUT: kOk or kBadChecksum).
  std::vector<uint8_t> outcome;
  // A GET planned on the connection thread (PageTable): the slots it pinned, released there after the send.
  bool plannedHere = false;
  std::vector<uint32_t> pinnedSlots;
  bool finishing = false;
  bool failed = false;  // connection failed mid-request; finish must release everything planned

  std::mutex m;
  std::condition_variable cv;
  bool answered = false;
  std::string refusal;  // non-empty: the control plane refused the batch
  void Answer(const std::string& why = "");
  // Waits for Answer; false at the deadline.
  bool Wait(uint64_t timeoutMs);
};

using PlanFn = std::function<void(std::shared_ptr<ServerRequest>)>;

// Pages a PUT stored into pool slots (intact, tag checked) and acknowledged, on their way to the control plane: one
// batched call records every PUT that landed meanwhile, on any connection.
struct Landed {
  std::vector<Entry> entries;  // key, length, CRC32C (computed on arrival when the client asked)
  std::vector<double> offsets;
};

// Where a page of the served tier is, as the control plane last said: arena offset, length, CRC32C, slot, and the
// slot's version then. offset < 0: a key a pooled PUT claimed that the control plane has not located yet.
struct PageLoc {
  double offset = -1;
  uint32_t length = 0, crc = 0, slot = 0, version = 0;
};

// The served tier's page table, mirrored here by the control plane (Hold when its table gains keys, with where they
// are; Drop when it loses them) and claimed by pooled PUTs as they land. A PUT's ack says ok or existing from it,
// and a GET is planned from it, on the connection thread. A key a PUT claimed stays, located where it landed: the
// control plane records it (or already held it) when the PUT's Landed batch reaches it, locates it again (Hold), and
// Drops it only when its table loses it.
class PageTable {
 public:
  // `locs` empty: the keys are held, not located.
  void Hold(std::vector<std::string> keys, const std::vector<PageLoc>& locs);
  void Drop(const std::vector<std::string>& keys);
  // Per entry whose outcome is kOk: kOk when this claims the key (held from now on, at locs[i]: where the PUT
  // landed it; offset -1 when unknown), kExisting when it was held (or named twice).
  void Claim(const std::vector<Entry>& entries, const std::vector<PageLoc>& locs, std::vector<uint8_t>* outcome);
  // Where each entry's key is (found[i] false: not held). False when a key is held but not located.
  bool Locate(const std::vector<Entry>& entries, std::vector<PageLoc>* locs, std::vector<uint8_t>* found);
  // Whether each entry's key is held (the tier's, or claimed by a PUT acknowledged and not recorded yet).
  void Contains(const std::vector<Entry>& entries, std::vector<uint8_t>* found);
  size_t size();

 private:
  std::mutex m_;
  std::unordered_map<std::string, PageLoc> pages_;
};

// Called (from a connection thread) when landed pages wait and no drain is scheduled yet.
using NotifyFn = std::function<void()>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port
  std::string secret;
  // With a secret: refuse sessions that do not encrypt frames (they are authenticated either way).
  bool encrypt = false;
  uint64_t timeoutMs = 30000;
  uint64_t maxPayload = 1ull << 30;
  // Connections served at once (each has a thread); more are closed as soon as they are accepted.
  uint64_t maxConnections = 256;
};

// The server's slot pool: free page slots of the arena the control plane granted in advance, so a PUT lands and
// is acknowledged without waiting on the control plane. Pages that land intact are queued for it (DrainLanded);
// their slots leave the pool for good. Slots of refused pages, and of keys already held, return to the pool.
class SlotPool {
 public:
  void Grant(const std::vector<double>& offsets, uint64_t slotBytes);
  // All-or-nothing: n slots, or false.
  bool Take(size_t n, std::vector<double>* out);
  void Return(double offset);
  std::vector<double> TakeAll();
  uint64_t slotBytes() const { return slotBytes_.load(); }
  size_t size();

 private:
  std::mutex m_;
  std::vector<double> free_;
  std::atomic<uint64_t> slotBytes_{0};
};

// Per-chunk CRC32Cs of served pages (kChunkBytes chunks; for a 2 MiB page 32 x 4 bytes), so that a ranged GET
// checks only the chunks it overlaps. Filled when a page lands by PUT (in the receive pass) or by the first ranged
// GET of a page stored otherwise (one whole check). Keyed by (arena offset, stored length, page CRC32C, slot
// version), bounded (least recently used out). An entry is only a claim about what the bytes were when a whole pass
// over them matched the committed page CRC32C. The slot's version (bumped by the control plane whenever it frees the
// slot; kNoVersion where the slots are not shared) makes the entry of a slot since reused unreachable. Bytes damaged
// at rest after the entry was filled are caught where it is used: a range checked before it leaves re-reads its
// chunks against the entry; a range announced with its expected CRC32C (kEntryRangeAnnounced) is checksummed as it
// is sent and compared by the client.
class ChunkCrcCache {
 public:
  static constexpr uint32_t kChunkBytes = 64 * 1024;
  static constexpr uint64_t kNoVersion = UINT64_MAX;
  using Crcs = std::shared_ptr<const std::vector<uint32_t>>;
  explicit ChunkCrcCache(size_t capacity) : capacity_(capacity) {}
  Crcs Find(double offset, uint32_t length, uint32_t crc, uint64_t version);
  void Put(double offset, uint32_t length, uint32_t crc, uint64_t version, Crcs chunks);
  void Forget(double offset, uint32_t length, uint32_t crc, uint64_t version);
  size_t size();

 private:
  struct Key {
    double offset;
    uint32_t length, crc;
    uint64_t version;
    bool operator==(const Key& o) const { return offset == o.offset && length == o.length && crc == o.crc && version == o.version; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<double>()(k.offset) ^ (static_cast<size_t>(k.length) << 32 | k.crc) * 0x9E3779B97F4A7C15ull ^ k.version * 0xC2B2AE3D27D4EB4Full;
    }
  };
  using Lru = std::list<std::pair<Key, Crcs>>;
  std::mutex m_;
  size_t capacity_;
  Lru lru_;  // most recent first
  std::unordered_map<Key, Lru::iterator, KeyHash> index_;
};

class Server {
 public:
  Server(const ServerOptions& options, std::shared_ptr<Memory> arena, PlanFn plan, NotifyFn notify = nullptr);
  ~Server();
  uint16_t port() const { return port_; }
  void Close();
  uint64_t connections() const { return connections_.load(); }
  uint64_t authFailures() const { return authFailures_.load(); }
  uint64_t refused() const { return refused_.load(); }
  uint64_t active() const { return active_.load(); }
  SlotPool& pool() { return pool_; }
  PageTable& table() { return table_; }
  // Slot words shared with the control plane (one per slot, `count` slots): versions it bumps before freeing a
  // slot, and pins a GET planned here holds while it sends. The control plane bumps the version, then reads the
  // pins; a GET pins, then reads the version (all seq_cst): one of the two sees the other, so a slot is never
  // freed under a send. Without them every GET asks the control plane. The memory outlives the server.
  void ShareSlots(const uint32_t* versions, int32_t* pins, size_t count, double dataOffset);
  // GETs planned here, and what they sent (for the control plane's counters and eviction policy): taken at each
  // drain, with the landed pages.
  struct Served {
    std::vector<std::string> keys;  // at most kServedKeys between two drains (pages counts them all)
    uint64_t pages = 0, bytes = 0, misses = 0;
  };
  static constexpr size_t kServedKeys = 65536;
  Served TakeServed();
  // The served tier persists slot records in its arena (a host tier on /dev/shm): a pooled PUT writes each landed
  // page's record before its ack, so an acknowledged page survives a SIGKILL of this process (the tier recovers
  // it from the record at its next open). Records are `recordBytes` apart from arena offset 0, slot s's at
  // s * recordBytes; slots start at `dataOffset`.
  void KeepSlotRecords(uint64_t dataOffset, uint64_t recordBytes);
  // Landed pages not yet handed to the control plane (clears the scheduled flag first). Close leaves them here, so
  // the control plane records every acknowledged page even when the server closes right after.
  std::vector<Landed> DrainLanded();
  // Requests received, by op (kPut, kGet, kHas, kDelete), however they were answered.
  uint64_t requests(uint16_t op) const { return requests_[RequestIndex(op)].load(); }
  uint64_t pooledPuts() const { return pooledPuts_.load(); }
  uint64_t getsPlannedHere() const { return getsPlannedHere_.load(); }
  uint64_t hasAnsweredHere() const { return hasAnsweredHere_.load(); }
  // Ranged GETs served from cached chunk CRC32Cs (only the chunks they overlap read), and those that checked whole.
  uint64_t rangesByChunk() const { return rangesByChunk_.load(); }
  uint64_t rangesWhole() const { return rangesWhole_.load(); }
  // Ranged GETs sent unchecked with their expected CRC32C announced (kEntryRangeAnnounced): checksummed as sent.
  uint64_t rangesAnnounced() const { return rangesAnnounced_.load(); }

 private:
  void AcceptLoop();
  void Serve(int fd);
  void Handshake(Link& link);
  void HandleRequest(Link& link, const Header& h, std::vector<Entry> entries);
  // A PUT the control plane planned: receives its pages, commits them, acknowledges.
  void ReceivePut(Link& link, const Header& h, const std::shared_ptr<ServerRequest>& r, uint16_t ackOp);
  struct GetPayload;
  // Entry i of a planned GET (found): its bytes, or its range with the range's CRC32C(s), into *out; *ack says what
  // was sent (status, length, the page's CRC32C, flags).
  void AddPage(const Link& link, const ServerRequest& r, size_t i, Entry* ack, GetPayload* out);
  void Ask(const std::shared_ptr<ServerRequest>& r);
  // A PUT into pool slots, acknowledged on this thread: no control-plane round trip. False (nothing taken) when the
  // pool is short.
  bool PutPooled(Link& link, const Header& h, std::vector<Entry>& entries);
  // The arena bytes [offset, offset + length), or null when a plan or granted slot points outside the arena.
  uint8_t* ArenaSpan(double offset, uint64_t length) const;
  void Post(const std::shared_ptr<ServerRequest>& r);  // a finish nobody waits for (GET unpin)
  // Plans a GET from the page table, pinning its pages; false (nothing pinned) when the control plane must.
  bool PlanGetHere(ServerRequest& r);
  // Where each kOk entry of a pooled PUT landed (slots[i]), with its slot's index and version now; offset -1 for
  // the others, or when the slots are not shared.
  std::vector<PageLoc> LandedLocations(const std::vector<Entry>& entries, const std::vector<double>& slots, const std::vector<uint8_t>& outcome) const;
  // Answers a HAS from the page table; false when it does not mirror the tier (the control plane answers).
  bool AnswerHasHere(ServerRequest& r);
  // Unpins what PlanGetHere pinned and records what was sent (sent: the send completed).
  void FinishGetHere(ServerRequest& r, bool sent);
  // Wakes the control plane for a drain unless one is scheduled (landedMutex_ held by the caller).
  bool ScheduleDrainLocked();
  // Writes the slot record of a page that landed at `offset` (KeepSlotRecords); nothing without records.
  void WriteSlotRecord(double offset, const Entry& e);
  // Checks the bytes of a range [from, from + count) of a stored page and gives the range's CRC32C; false when they
  // (or, on a first read, the page) do not match the CRC32Cs derived from the page's committed CRC32C.
  bool CheckRange(double offset, const uint8_t* page, uint32_t length, uint32_t pageCrc, uint64_t from, uint64_t count, uint32_t* rangeCrc);
  // The CRC32C a range [from, from + count) of a stored page must have, joined from its chunk table without reading
  // a byte; false when there is no table for the page as it is in its slot now, or the range is not chunk-aligned.
  bool ExpectedRangeCrc(double offset, uint32_t length, uint32_t pageCrc, uint64_t from, uint64_t count, uint32_t* expected);
  // The version of the shared slot at arena offset `offset` (ChunkCrcCache::kNoVersion: slots not shared, or not a
  // slot's start). Read while the page is pinned or just committed, it is the page's.
  uint64_t SlotVersion(double offset) const;

  ServerOptions options_;
  std::shared_ptr<Memory> arena_;
  PlanFn plan_;
  NotifyFn notify_;
  SlotPool pool_;
  PageTable table_;
  // Published last (release) by ShareSlots, read first (acquire): pins and count are set when it is.
  std::atomic<const uint32_t*> slotVersions_{nullptr};
  int32_t* slotPins_ = nullptr;
  size_t slotCount_ = 0;
  double slotsDataOffset_ = 0;  // the arena offset of slot 0 (a slot's offset: dataOffset + slot * slotBytes)
  Served served_;  // guarded by landedMutex_
  std::atomic<uint64_t> recordsDataOffset_{0}, recordBytes_{0};
  std::mutex landedMutex_;
  std::vector<Landed> landed_;
  bool drainScheduled_ = false;
  static size_t RequestIndex(uint16_t op) { return (op - kPut) / 2 & 3; }  // kPut, kGet, kHas, kDelete: 10, 12, 14, 16
  std::atomic<uint64_t> requests_[4] = {};
  std::atomic<uint64_t> pooledPuts_{0}, getsPlannedHere_{0}, hasAnsweredHere_{0};
  ChunkCrcCache chunkCrcs_{8192};
  std::atomic<uint64_t> rangesByChunk_{0}, rangesWhole_{0}, rangesAnnounced_{0};
  int listenFd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> closing_{false};
  std::thread acceptThread_;
  std::mutex connMutex_;
  std::vector<int> connFds_;
  // Connection threads with a flag each sets as it ends, so the accept loop joins finished ones (no growth).
  std::list<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> connThreads_;
  std::atomic<uint64_t> connections_{0}, authFailures_{0}, nextRequest_{0}, refused_{0}, active_{0};
  std::mutex pendingMutex_;
  std::vector<std::shared_ptr<ServerRequest>> pending_;  // waiting on the control plane; answered on Close
};

struct ClientOptions {
  std::string host;
  uint16_t port = 0;
  std::string secret;
  // With a secret: encrypt frames (AES-256-GCM); they are authenticated either way.
  bool encrypt = false;
  unsigned streams = 4;
  uint64_t timeoutMs = 30000;
  uint64_t maxPayload = 1ull << 30;
};

struct ClientRequest {
  uint64_t id = 0;
  uint16_t op = 0;
  std::shared_ptr<Memory> arena;  // PUT: source; GET: destination
  std::vector<Entry> entries;     // keys (+ length, crc for PUT)
  std::vector<uint64_t> offsets;  // arena offset per entry
  std::vector<uint64_t> capacity; // GET: room at each offset
  bool computeCrc = false;        // PUT: checksum the pages on the stream thread (crcs come back in the reply)
  // Results
  std::vector<uint8_t> statuses;
  std::vector<uint32_t> lengths, crcs;
  bool failed = false;
  Code errorCode = Code::Io;
  std::string error;
  void* context = nullptr;
};

// Requests a stream pipelines: sent while earlier ones await their responses (the server answers in order).
constexpr size_t kStreamDepth = 4;

class Client {
 public:
  using Sink = std::function<void(std::shared_ptr<ClientRequest>)>;
  // Connects every stream and runs the handshake; throws NativeError (Io, Timeout, Auth, Protocol).
  Client(const ClientOptions& options, Sink sink);
  ~Client();
  // Queues a request on the least loaded healthy stream.
  void Submit(std::shared_ptr<ClientRequest> r);
  void Close();
  unsigned streams() const { return static_cast<unsigned>(streams_.size()); }

 private:
  // One TCP connection: a sender thread writes queued requests (up to kStreamDepth unanswered), a receiver thread
  // reads their responses in order.
  struct Stream {
    Link link;
    std::mutex m;
    std::condition_variable cv;
    std::deque<std::shared_ptr<ClientRequest>> queued, inflight;
    bool broken = false;
    bool closing = false;
    bool senderDone = false;
    std::thread sender, receiver;
  };
  void SendLoop(Stream& s);
  void ReceiveLoop(Stream& s);
  void Send(Link& link, ClientRequest& r);
  void Receive(Link& link, ClientRequest& r);
  void Fail(Stream& s, const NativeError& e);
  ClientOptions options_;
  Sink sink_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::mutex mutex_;  // closing_, nextId_
  bool closing_ = false;
  uint64_t nextId_ = 0;
};

}  // namespace tiersync::peer

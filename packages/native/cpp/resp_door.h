// The RESP door's native socket layer (resp.engine: native): one thread owns the listening socket and every client
// socket (epoll, nonblocking), follows the RESP framing of each client's input, lands the value of `SET key value`
// straight into host-tier slots granted in advance (CRC32C as the bytes land), and hands everything else to
// JavaScript as the client's raw bytes, and answers `GET key` of values JavaScript mirrors here (pages in host-tier
// slots, checked by slot version and CRC32C as they are copied out). The design and its ordering argument:
// resp_door.cc; the answers from the mirror: resp_mirror.cc.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "memory.h"
#include "peer.h"

namespace tiersync::resp {

struct DoorOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  uint64_t pageBytes = 0;       // slot size of the granted pool
  uint64_t maxBulkBytes = 512ull << 20;
  uint64_t maxArrayLength = 65536;
  uint64_t maxInlineBytes = 64 * 1024;
  uint64_t maxKeyBytes = 4096;
  uint64_t maxPendingBytes = 8ull << 20;  // input held natively per client before its socket is not read
  uint64_t requestTimeoutMs = 30000;
  // Clients served at once; a client past it is answered `-ERR max number of clients reached` and closed before
  // anything it sent is read (as Redis's maxclients). 0: no bound.
  uint64_t maxClients = 0;
  // SETs of a new client may land before JavaScript has seen it (no AUTH needed); otherwise after SetFast().
  bool landBeforeAuth = false;
  // With landBeforeAuth: the mirror's tenant id a new client has (the door's only one), so its GETs, MGETs and
  // EXISTS are answered here from its first command; 0: only after SetFast() names it.
  uint32_t acceptTenant = 0;
  // GETs are answered here only while the client's queued replies stay under this (JavaScript's flow control then).
  uint64_t maxOutputBytes = 64ull << 20;
  // One 32-bit version per slot of the host tier (slot s at offset dataOffset + s * pageBytes), bumped by JavaScript
  // whenever the slot is freed; read here with acquire loads. nullptr: no GET is answered here. The memory is kept
  // alive by the caller for the door's life.
  const uint32_t* slotVersions = nullptr;
  size_t slotCount = 0;
};

// A value the door thread may answer GETs of: every page in a host-tier slot, as JavaScript recorded it.
struct MirrorPage {
  uint64_t offset = 0;  // in the arena
  uint32_t length = 0, crc = 0;
  uint32_t slot = 0, version = 0;  // the slot's version when the page was committed in it
};
struct MirrorValue {
  uint64_t length = 0;
  std::vector<MirrorPage> pages;
  // JavaScript's id of the entry, reported by TakeServed() once a GET of it was answered here (0: never reported).
  uint64_t id = 0;
  // In the record TakeServed() drains (set and cleared under the door's servedMutex_; read without it as a filter).
  mutable std::atomic<bool> served{false};
};

// Mirror entries recorded as served between two TakeServed() calls, at most (one shared_ptr each).
constexpr size_t kServedMax = 65536;

enum class EventKind : uint8_t { Accept, Data, End, Close, Set, Drain };

// What the door thread tells JavaScript, in order per connection.
struct Event {
  EventKind kind;
  uint64_t conn = 0;
  std::vector<uint8_t> bytes;  // Data: raw client bytes; Set: the command name as sent; Accept: peer address
  std::vector<uint8_t> key;    // Set
  std::vector<double> offsets; // Set: one granted slot per page, handed over to JavaScript
  std::vector<uint32_t> lengths, crcs;
  uint64_t valueLength = 0;
  uint16_t port = 0;           // Accept: peer port
};

class Door {
 public:
  // `notify` is called (door thread) when events wait and no drain is scheduled.
  Door(const DoorOptions& options, std::shared_ptr<Memory> arena, std::function<void()> notify);
  ~Door();
  uint16_t port() const { return port_; }
  void Close();

  // ---- JavaScript thread ----
  std::vector<Event> Drain();
  // Queues reply bytes (written at once when nothing is queued); returns the bytes still queued afterwards.
  uint64_t Write(uint64_t conn, const std::vector<std::pair<const uint8_t*, size_t>>& parts);
  // Closes the client once its queued replies are written.
  void End(uint64_t conn);
  void Destroy(uint64_t conn);
  void Pause(uint64_t conn, bool paused);
  // One command handed to JavaScript (forwarded bytes or a landed SET) has been answered.
  // `count` commands handed to JavaScript were answered (their replies are queued).
  void Done(uint64_t conn, int64_t count = 1);
  // Whether `SET key value` of this client may land natively (the client is authenticated), and the tenant id its
  // GETs look up in the mirror (0: none, GETs go to JavaScript).
  void SetFast(uint64_t conn, bool fast, uint32_t tenant = 0);
  // The mirror of the catalog (JavaScript thread): Put installs or replaces, Drop removes (absent: nothing).
  void MirrorPut(uint32_t tenant, const uint8_t* key, size_t keyLength, std::shared_ptr<const MirrorValue> value);
  void MirrorDrop(uint32_t tenant, const uint8_t* key, size_t keyLength);
  size_t mirrorSize();
  // The ids of the mirror entries a GET was answered from since the last call (each once, in the order first
  // served); the record starts empty again.
  std::vector<uint64_t> TakeServed();
  // Forwards everything this client sends from now on (JavaScript keeps per-client state the native path lacks).
  void Passthrough(uint64_t conn);
  // Between these, wakes of the door thread (replies queued, commands answered) are collected and sent as one at
  // the end: a batch of replies wakes it once instead of once per client, each of which could preempt this thread
  // on a busy core and make the two contend for the clients' locks.
  void HoldWakes() { wakesHeld_++; }
  void ReleaseWakes();
  uint64_t LastActiveMs(uint64_t conn);
  peer::SlotPool& pool() { return pool_; }
  uint64_t fastSets() const { return fastSets_.load(); }
  uint64_t nativeGets() const { return nativeGets_.load(); }
  // `EXISTS key...` answered on the door thread: every key a mirrored value with all its pages in place.
  uint64_t nativeExists() const { return nativeExists_.load(); }
  // `MGET key...` answered on the door thread: every key a mirrored value whose pages all matched.
  uint64_t nativeMgets() const { return nativeMgets_.load(); }
  // GETs of a mirrored key whose slot version or CRC32C no longer matched: forwarded, the entry dropped.
  uint64_t getMismatches() const { return getMismatches_.load(); }
  // Native GETs answered with a reply kept from an earlier GET of the same entry (no copy).
  uint64_t hotGets() const { return hotGets_.load(); }
  // Native GETs not recorded for TakeServed(): kServedMax entries were recorded already in that window.
  uint64_t unrecordedGets() const { return unrecordedGets_.load(); }
  // Connections refused at accept: maxClients were open (never seen by JavaScript).
  uint64_t refusedClients() const { return refusedClients_.load(); }

  struct Conn;

 private:
  void Loop();
  void Accept();
  size_t OpenClients();
  void OnReadable(const std::shared_ptr<Conn>& c);
  // After a recv that returned r <= 0: Stop reading for now (would block, or end of input: eof set), Retry
  // (interrupted), or Closed (an error: the client is closed).
  enum class RecvEnd { Stop, Retry, Closed };
  RecvEnd AfterRecv(const std::shared_ptr<Conn>& c, ssize_t r);
  // Parses what the client sent, step by step (one per state of its Conn): lands SET values, answers what it can,
  // forwards the rest to JavaScript.
  void Process(const std::shared_ptr<Conn>& c);
  enum class Flow;
  struct Round;
  Flow LandValueBytes(Conn& k, const uint8_t* p, size_t avail);
  Flow FinishValue(const std::shared_ptr<Conn>& c, const uint8_t* p, size_t avail, Round& round);
  Flow ForwardArguments(Conn& k, const uint8_t* p, size_t avail, Round& round);
  Flow ParseCommand(Conn& k, const uint8_t* p, size_t avail, Round& round);
  // Answers the command whose arguments start at p (`n` of them, the array header read) from the mirror: GET, EXISTS
  // or MGET of mirrored values, whole in hand; *used: the arguments' bytes. False: not here.
  bool AnswerHere(Conn& k, const uint8_t* p, size_t avail, int64_t n, size_t* used);
  void EmitForwarded(Conn& k, Round& round);
  // Answers `GET key` from the mirror (door thread); false: forward it to JavaScript.
  bool ServeGet(Conn& c, uint32_t tenant, const uint8_t* key, size_t keyLength);
  // Answers `MGET key...` (the `count` keys at p, whole in hand; *used: their bytes) when every key is a mirrored
  // value whose pages all match and the values add up to at most 1 MiB; false: forward it to JavaScript.
  bool ServeMget(Conn& c, uint32_t tenant, const uint8_t* p, size_t avail, int64_t count, size_t* used);
  // Answers `EXISTS key...` (as ServeMget) from the mirror; false: forward it to JavaScript, which asks the
  // hierarchy about values not in the first tier's slots.
  bool ServeExists(Conn& c, uint32_t tenant, const uint8_t* p, size_t avail, int64_t count, size_t* used);
  // The mirror entries for `tenant` of the `count` keys at p, each whole in hand: all of them (where the keys are:
  // keysScratch_; *used: their bytes), or false.
  bool FindMirrored(uint32_t tenant, const uint8_t* p, size_t avail, int64_t count, std::vector<std::shared_ptr<const MirrorValue>>* values, size_t* used);
  struct Replies;
  // Appends `v`'s bulk reply (kept, or copied from its slots with their versions and CRC32Cs checked); false when
  // a page no longer matches (counted as a mismatch; the caller drops the entry).
  bool ReplyFor(const std::shared_ptr<const MirrorValue>& v, Replies& out, bool* reused);
  void DropMirrored(uint32_t tenant, const uint8_t* key, size_t keyLength, const std::shared_ptr<const MirrorValue>& v);
  // Queues one command's replies on the client; false past its output limit (JavaScript's flow control answers).
  bool Enqueue(Conn& c, Replies& replies);
  // Records that a GET of `v` was answered here (door thread), once per TakeServed() window.
  void NoteServed(const std::shared_ptr<const MirrorValue>& v);
  bool Flush(Conn& c);  // c.m held; false when the socket failed
  void CloseConn(const std::shared_ptr<Conn>& c);
  void Arm(Conn& c);
  void Emit(Event e);
  void Wake(uint64_t conn);
  void SignalWake();  // the eventfd write that wakes the door thread, unless one is pending
  void ProtocolError(const std::shared_ptr<Conn>& c, const std::string& message);
  void Sweep();
  std::shared_ptr<Conn> Find(uint64_t conn);

  DoorOptions options_;
  std::shared_ptr<Memory> arena_;
  std::function<void()> notify_;
  peer::SlotPool pool_;
  int listenFd_ = -1, epollFd_ = -1, wakeFd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> closing_{false};
  std::thread thread_;
  std::mutex connsMutex_;
  std::unordered_map<uint64_t, std::shared_ptr<Conn>> conns_;
  uint64_t nextId_ = 0;
  std::mutex eventsMutex_;
  std::vector<Event> events_;
  bool drainScheduled_ = false;
  bool notifyDue_ = false;  // door thread only: events emitted in this epoll round, JavaScript not woken yet
  std::mutex wakeMutex_;
  std::vector<uint64_t> woken_;
  std::atomic<bool> wakePending_{false};  // an eventfd write the door thread has not consumed: later wakes skip theirs
  int wakesHeld_ = 0;          // JavaScript thread (every caller of Wake): HoldWakes() depth
  bool wakeDeferred_ = false;  // JavaScript thread: a wake held back until ReleaseWakes()
  std::atomic<uint64_t> nativeExists_{0}, nativeMgets_{0}, refusedClients_{0};
  std::atomic<uint64_t> fastSets_{0}, nativeGets_{0}, getMismatches_{0}, hotGets_{0}, unrecordedGets_{0};
  // Door thread: GET replies kept for reuse, by the mirror entry they were made from (resp_door_state.h).
  struct Hot;
  std::unique_ptr<Hot> hot_;
  // (tenant as 4 bytes, key) -> value. Entries are immutable once in; the door thread copies the pointer out.
  std::mutex mirrorMutex_;
  std::unordered_map<std::string, std::shared_ptr<const MirrorValue>> mirror_;
  std::string lookup_;  // door thread: the key being looked up
  std::vector<std::pair<size_t, size_t>> keysScratch_;  // door thread: where a command's keys are (MGET, EXISTS)
  // Entries GETs were answered from since the last TakeServed() (each once: its `served` flag), at most kServedMax.
  // The vector keeps its capacity across drains, so recording an entry allocates nothing once it has grown.
  std::mutex servedMutex_;
  std::vector<std::shared_ptr<const MirrorValue>> served_;
};

}  // namespace tiersync::resp

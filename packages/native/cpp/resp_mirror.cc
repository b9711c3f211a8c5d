// The RESP door's answers from the catalog's mirror (door thread), and the mirror itself.
//
// GETs answered here: JavaScript mirrors into the door (MirrorPut / MirrorDrop) each catalog entry whose pages
// are all in host-tier slots and that has no TTL: per page its arena offset, length, CRC32C and the version its
// slot had when the page was committed there. JavaScript bumps a slot's version (one 32-bit word per slot, in
// memory both sides read) whenever it frees the slot (delete, eviction, demotion, pool give-back), and drops the
// mirror entry of a key before any change of the key's catalog entry is answered (SET over it, DEL, FLUSHDB,
// eviction) and before the replaced generation's pages are deleted. `GET key` (two arguments, a fast client with
// a tenant, nothing of it outstanding in JavaScript) of a mirrored key is answered here: each page is copied into
// the reply with its CRC32C computed in the same pass, its slot's version read before (acquire) and after (behind
// an acquire fence) the copy, as a seqlock reader does. The reply is queued only if every version is still the
// recorded one and every CRC32C matches: bytes are never sent unless they are the recorded page's. Otherwise the
// entry is dropped and the GET forwarded unchanged (JavaScript serves it from the hierarchy or answers nil).
// A slot freed and reused during the copy changes its version; one freed before it changed it already.
// The last few replies made (values up to 1 MiB) are kept and sent again for GETs of the same entry while every
// page's slot version is unchanged (a hot key read by many clients costs one copy, not one per GET); their bytes
// are the copy that was checked, never re-read from the slots.
// Each entry a GET is answered from is recorded once per drain window (NoteServed: a flag on the entry, then a
// shared_ptr in a vector that keeps its capacity), and JavaScript drains the record (TakeServed, every ~200 ms) to
// count those reads for the host tier's eviction policy: GETs answered here never reach JavaScript otherwise.
// The record holds at most kServedMax entries per window; GETs of further entries go unrecorded (counted).
#include <algorithm>
#include <cstring>

#include "crc32c.h"
#include "resp_door_state.h"
#include "resp_parse.h"

namespace tiersync::resp {

namespace {

// MGETs whose values add up to more are answered by JavaScript's thread. The kernel copies a reply into the socket
// on the thread that writes it, and the door thread, which reads every client, should not spend that time on large
// arrays (`bench resp --mget 8`: 8 x 256 KiB values 0.85-0.9 of redis-server from the door thread, 1.0 from
// JavaScript; 8 x 16 KiB 1.05 from the door thread, 0.53-0.6 from JavaScript).
constexpr uint64_t kNativeMgetBytes = 1u << 20;


uint32_t LoadAcquire(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
uint32_t LoadRelaxed(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

std::string MirrorKey(uint32_t tenant, const uint8_t* key, size_t keyLength) {
  std::string k(reinterpret_cast<const char*>(&tenant), sizeof tenant);
  k.append(reinterpret_cast<const char*>(key), keyLength);
  return k;
}

}  // namespace

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

}  // namespace tiersync::resp

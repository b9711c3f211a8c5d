// The door's per-client state and reply buffers, shared by its socket layer (resp_door.cc) and the answers it
// gives from the catalog's mirror (resp_mirror.cc). Internal to those two files.
#pragma once
#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "resp_door.h"

namespace tiersync::resp {

// std::allocator that leaves new elements of resize() uninitialized: the input buffer grows by a read's worth
// before each recv, and zeroing 64 KiB per read showed as 4% of the door thread's time.
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

}  // namespace tiersync::resp

// The CUDA runtime, loaded at run time with dlopen so that the addon builds and runs on machines without CUDA
// headers, libraries, driver or device. Only the handful of runtime calls the engine needs are bound; their
// signatures and enum values follow the CUDA Runtime API reference.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>

namespace tiersync::cuda {

using Error = int;     // cudaError_t
using Stream = void*;  // cudaStream_t
using Event = void*;   // cudaEvent_t
enum MemcpyKind { HostToHost = 0, HostToDevice = 1, DeviceToHost = 2, DeviceToDevice = 3 };

struct Api {
  Error (*GetDeviceCount)(int*);
  Error (*SetDevice)(int);
  Error (*Malloc)(void**, size_t);
  Error (*Free)(void*);
  Error (*MemcpyAsync)(void*, const void*, size_t, int, Stream);
  Error (*StreamCreateWithFlags)(Stream*, unsigned);
  Error (*StreamSynchronize)(Stream);
  Error (*StreamDestroy)(Stream);
  Error (*HostRegister)(void*, size_t, unsigned);
  Error (*HostUnregister)(void*);
  const char* (*GetErrorString)(Error);
  Error (*RuntimeGetVersion)(int*);
  Error (*EventCreateWithFlags)(Event*, unsigned);
  Error (*EventRecord)(Event, Stream);
  Error (*EventSynchronize)(Event);
  Error (*EventDestroy)(Event);
};

struct Status {
  bool available = false;
  int devices = 0;
  int runtimeVersion = 0;
  std::string library;  // path that was loaded
  std::string reason;   // why unavailable, in CUDA's own words where it gave any
};

// Loads libcudart once and asks for the device count. Never throws.
const Status& GetStatus();
// The bound API; throws NativeError(Unavailable) with GetStatus().reason when CUDA is unusable.
const Api& Require();
// Throws NativeError(Io) naming the call when err != 0.
void Check(Error err, const char* call);

// One worker thread's copies: a non-blocking stream per device, and an event recorded after every copy. Copies
// are only enqueued; the caller waits on a copy's event when it needs that copy's bytes (to checksum them, or
// before it reports the work done), so consecutive copies run back to back on the copy engine instead of one
// stream synchronization per piece. A stream runs its copies in order: waiting on a copy's event also covers
// every copy enqueued before it on that stream. Not thread-safe: one per worker thread.
class CopyQueue {
 public:
  CopyQueue() = default;
  CopyQueue(const CopyQueue&) = delete;
  CopyQueue& operator=(const CopyQueue&) = delete;
  // Waits for what is still in flight (errors ignored: the memory must not be released under a running copy),
  // then destroys streams and events.
  ~CopyQueue();

  // Enqueues cudaMemcpyAsync(to, from, n, kind) on `device`'s stream and records an event after it. Returns the
  // copy's ticket (increasing). Throws NativeError(Io) naming the failed call.
  uint64_t Copy(int device, void* to, const void* from, size_t n, MemcpyKind kind);
  // Blocks until copy `ticket` has finished (a no-op for one already waited on). Throws NativeError(Io) when the
  // copy failed.
  void Wait(uint64_t ticket);
  // Waits for every enqueued copy; rethrows the first failure after all have finished.
  void Drain();
  // Copies enqueued and not yet waited on.
  size_t InFlight() const { return inflight_.size(); }

 private:
  struct Pending {
    uint64_t ticket;
    int device;
    Event event;
  };
  void Use(int device);
  Stream StreamFor(int device);
  Event TakeEvent(int device);
  void Finish(const Pending& p);  // waits on p's event and keeps it for reuse

  std::unordered_map<int, Stream> streams_;
  std::deque<Pending> inflight_;                        // in ticket order
  std::unordered_map<int, std::deque<Event>> spare_;    // waited events by device (an event belongs to one)
  int device_ = -1;                                     // this thread's current device, as last set here
  uint64_t next_ = 1;
};

}  // namespace tiersync::cuda

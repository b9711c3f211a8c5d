#include "cuda.h"

#include <dlfcn.h>

#include <mutex>

#include "status.h"

namespace tiersync::cuda {
namespace {

Api api{};
Status status;
std::once_flag once;

template <typename Fn>
bool Bind(void* lib, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(lib, name));
  return out != nullptr;
}

void Load() {
  const char* candidates[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                              "/usr/local/cuda/lib64/libcudart.so", "/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so"};
  void* lib = nullptr;
  std::string lastError;
  for (const char* name : candidates) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      status.library = name;
      break;
    }
    const char* e = dlerror();
    lastError = e ? e : name;
  }
  if (!lib) {
    status.reason = "libcudart not found: " + lastError;
    return;
  }
  bool ok = Bind(lib, "cudaGetDeviceCount", api.GetDeviceCount) && Bind(lib, "cudaSetDevice", api.SetDevice) &&
            Bind(lib, "cudaMalloc", api.Malloc) && Bind(lib, "cudaFree", api.Free) &&
            Bind(lib, "cudaMemcpyAsync", api.MemcpyAsync) &&
            Bind(lib, "cudaStreamCreateWithFlags", api.StreamCreateWithFlags) &&
            Bind(lib, "cudaStreamSynchronize", api.StreamSynchronize) &&
            Bind(lib, "cudaStreamDestroy", api.StreamDestroy) && Bind(lib, "cudaHostRegister", api.HostRegister) &&
            Bind(lib, "cudaHostUnregister", api.HostUnregister) &&
            Bind(lib, "cudaGetErrorString", api.GetErrorString) &&
            Bind(lib, "cudaRuntimeGetVersion", api.RuntimeGetVersion) &&
            Bind(lib, "cudaEventCreateWithFlags", api.EventCreateWithFlags) &&
            Bind(lib, "cudaEventRecord", api.EventRecord) && Bind(lib, "cudaEventSynchronize", api.EventSynchronize) &&
            Bind(lib, "cudaEventDestroy", api.EventDestroy);
  if (!ok) {
    status.reason = status.library + " lacks a required symbol";
    return;
  }
  api.RuntimeGetVersion(&status.runtimeVersion);
  int count = 0;  // cudaGetDeviceCount leaves it untouched on failure, so it must start at 0
  Error err = api.GetDeviceCount(&count);
  if (err != 0) {
    status.reason = std::string("cudaGetDeviceCount failed: ") + api.GetErrorString(err) + " (error " +
                    std::to_string(err) + ")";
    return;
  }
  if (count <= 0) {
    status.reason = "CUDA runtime loaded but reports no device";
    return;
  }
  status.devices = count;
  status.available = true;
}

}  // namespace

const Status& GetStatus() {
  std::call_once(once, Load);
  return status;
}

const Api& Require() {
  const Status& s = GetStatus();
  if (!s.available) throw NativeError(Code::Unavailable, "CUDA backend unavailable: " + s.reason);
  return api;
}

void Check(Error err, const char* call) {
  if (err == 0) return;
  throw NativeError(Code::Io, std::string(call) + " failed: " + api.GetErrorString(err) + " (error " +
                                  std::to_string(err) + ")");
}

// cudaEventDisableTiming | cudaEventBlockingSync: no timestamps to record, and a waiting worker sleeps instead of
// spinning on a core the caller's thread or other workers may need.
constexpr unsigned kEventFlags = 0x02 | 0x01;
constexpr unsigned kStreamNonBlocking = 0x01;  // no implicit synchronization with the legacy default stream

void CopyQueue::Use(int device) {
  if (device == device_) return;
  Check(Require().SetDevice(device), "cudaSetDevice");
  device_ = device;
}

Stream CopyQueue::StreamFor(int device) {
  Use(device);
  auto it = streams_.find(device);
  if (it != streams_.end()) return it->second;
  Stream s = nullptr;
  Check(Require().StreamCreateWithFlags(&s, kStreamNonBlocking), "cudaStreamCreateWithFlags");
  streams_[device] = s;
  return s;
}

Event CopyQueue::TakeEvent(int device) {
  auto& spare = spare_[device];
  if (!spare.empty()) {
    Event e = spare.front();
    spare.pop_front();
    return e;
  }
  Event e = nullptr;
  Check(Require().EventCreateWithFlags(&e, kEventFlags), "cudaEventCreateWithFlags");
  return e;
}

uint64_t CopyQueue::Copy(int device, void* to, const void* from, size_t n, MemcpyKind kind) {
  const Api& api = Require();
  Stream s = StreamFor(device);
  Event e = TakeEvent(device);
  Error err = api.MemcpyAsync(to, from, n, kind, s);
  if (err == 0) err = api.EventRecord(e, s);
  if (err != 0) {
    spare_[device].push_back(e);
    Check(err, "cudaMemcpyAsync/cudaEventRecord");
  }
  uint64_t ticket = next_++;
  inflight_.push_back({ticket, device, e});
  return ticket;
}

void CopyQueue::Finish(const Pending& p) {
  Error err = Require().EventSynchronize(p.event);
  spare_[p.device].push_back(p.event);
  Check(err, "cudaEventSynchronize (an earlier cudaMemcpyAsync failed)");
}

void CopyQueue::Wait(uint64_t ticket) {
  // Copies finish in order on a stream, so the earlier ones are done by then too; wait on them first so that
  // every event between is recycled and the first failure is the one reported.
  while (!inflight_.empty() && inflight_.front().ticket <= ticket) {
    Pending p = inflight_.front();
    inflight_.pop_front();
    Finish(p);
  }
}

void CopyQueue::Drain() {
  std::string first;
  while (!inflight_.empty()) {
    Pending p = inflight_.front();
    inflight_.pop_front();
    try {
      Finish(p);
    } catch (const NativeError& e) {
      if (first.empty()) first = e.what();
    }
  }
  if (!first.empty()) throw NativeError(Code::Io, first);
}

CopyQueue::~CopyQueue() {
  if (streams_.empty() && spare_.empty() && inflight_.empty()) return;
  const Api& api = Require();
  for (const Pending& p : inflight_) {
    api.EventSynchronize(p.event);
    api.EventDestroy(p.event);
  }
  for (auto& [device, events] : spare_) {
    api.SetDevice(device);
    for (Event e : events) api.EventDestroy(e);
  }
  for (auto& [device, s] : streams_) {
    api.SetDevice(device);
    api.StreamDestroy(s);
  }
}

}  // namespace tiersync::cuda

// JS classes HostArena and DeviceArena.
#include "binding.h"
#include "cuda.h"

namespace tiersync {
namespace {
// Views are carved from one external ArrayBuffer per 1 GiB segment of the arena: V8 refuses to wrap the same
// address twice, and ArrayBuffers cannot span a whole large arena. A view may not cross a segment boundary.
constexpr uint64_t kSegment = 1ull << 30;
}  // namespace

HostArenaWrap::HostArenaWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<HostArenaWrap>(info) {
  Napi::Env env = info.Env();
  Napi::Object o = OptionsArg(info, 0);
  HostArenaOptions opts;
  opts.capacity = OptUint(o, "capacity", 0);
  opts.pageSize = OptUint(o, "pageSize", 4096);
  opts.shmPath = OptString(o, "shmPath", "");
  opts.fingerprint = OptString(o, "fingerprint", "");
  opts.create = OptBool(o, "create", true);
  opts.attach = OptBool(o, "attach", true);
  opts.lock = OptBool(o, "lock", false);
  opts.hugePages = OptBool(o, "hugePages", false);
  opts.prefault = OptBool(o, "prefault", false);
  if (opts.pageSize == 0) Throw(env, Code::InvalidArgument, "pageSize must be > 0");
  arena = Guard(env, [&] { return std::make_shared<HostArena>(opts); });
  segments_.resize((arena->size() + kSegment - 1) / kSegment);
}

Napi::Value HostArenaWrap::View(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t offset = UintArg(info, 0, "offset");
  uint64_t length = UintArg(info, 1, "length");
  if (!arena) Throw(env, Code::Closed, "host arena is closed");
  if (offset > arena->size() || length > arena->size() - offset)
    Throw(env, Code::OutOfRange, "view [" + std::to_string(offset) + ", +" + std::to_string(length) +
                                     ") exceeds arena size " + std::to_string(arena->size()));
  uint64_t seg = offset / kSegment;
  uint64_t segStart = seg * kSegment;
  uint64_t segLen = std::min(kSegment, arena->size() - segStart);
  if (offset + length > segStart + segLen)
    Throw(env, Code::InvalidArgument, "a view may not cross a 1 GiB boundary of the arena");
  Napi::ArrayBuffer buffer;
  if (!segments_[seg].IsEmpty()) buffer = segments_[seg].Value();
  if (buffer.IsEmpty()) {
    // The buffer holds the arena alive: a view stays valid after close() until it is garbage collected.
    auto* keep = new std::shared_ptr<HostArena>(arena);
    buffer = Napi::ArrayBuffer::New(
        env, arena->host() + segStart, segLen, [](Napi::Env, void*, std::shared_ptr<HostArena>* k) { delete k; }, keep);
    segments_[seg] = Napi::Reference<Napi::ArrayBuffer>::New(buffer, 0);
  }
  return Napi::Uint8Array::New(env, length, buffer, offset - segStart);
}

// Close refuses new work at once; the memory is unmapped when the last queued batch and lent view let go.
Napi::Value HostArenaWrap::Close(const Napi::CallbackInfo& info) {
  if (arena) arena->Close();
  arena.reset();
  segments_.clear();
  return info.Env().Undefined();
}

Napi::Value HostArenaWrap::Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  if (!arena) Throw(env, Code::Closed, "host arena is closed");
  o.Set("capacity", Napi::Number::New(env, static_cast<double>(arena->size())));
  o.Set("pageSize", Napi::Number::New(env, static_cast<double>(arena->pageSize())));
  o.Set("attached", arena->attached());
  o.Set("attachNote", arena->attachNote());
  o.Set("locked", arena->locked());
  o.Set("closed", arena->closed());
  return o;
}

DeviceArenaWrap::DeviceArenaWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DeviceArenaWrap>(info) {
  Napi::Env env = info.Env();
  Napi::Object o = OptionsArg(info, 0);
  std::string backend = OptString(o, "backend", "sim");
  uint64_t capacity = OptUint(o, "capacity", 0);
  if (backend == "sim") {
    SimDeviceOptions opts;
    opts.capacity = capacity;
    opts.bandwidthBytesPerSec = OptNumber(o, "bandwidthBytesPerSec", 0);
    opts.latencyNs = OptUint(o, "latencyNs", 0);
    memory = Guard(env, [&] { return std::make_shared<SimDevice>(opts); });
  } else if (backend == "cuda") {
    int device = static_cast<int>(OptUint(o, "device", 0));
    memory = Guard(env, [&] { return std::make_shared<CudaDevice>(device, capacity); });
  } else {
    Throw(env, Code::InvalidArgument, "backend must be 'sim' or 'cuda', got '" + backend + "'");
  }
}

Napi::Value DeviceArenaWrap::Close(const Napi::CallbackInfo& info) {
  if (memory) memory->Close();
  memory.reset();
  return info.Env().Undefined();
}

Napi::Value DeviceArenaWrap::Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  if (!memory) Throw(env, Code::Closed, "device arena is closed");
  o.Set("capacity", Napi::Number::New(env, static_cast<double>(memory->size())));
  o.Set("backend", memory->kind() == MemoryKind::Cuda ? "cuda" : "sim");
  o.Set("device", memory->device());
  o.Set("closed", memory->closed());
  return o;
}

void InitArenas(Napi::Env env, Napi::Object exports) {
  Napi::Function host = HostArenaWrap::DefineClass(env, "HostArena",
                                                   {
                                                       HostArenaWrap::InstanceMethod("view", &HostArenaWrap::View),
                                                       HostArenaWrap::InstanceMethod("close", &HostArenaWrap::Close),
                                                       HostArenaWrap::InstanceMethod("info", &HostArenaWrap::Info),
                                                   });
  Napi::Function device = DeviceArenaWrap::DefineClass(env, "DeviceArena",
                                                       {
                                                           DeviceArenaWrap::InstanceMethod("close", &DeviceArenaWrap::Close),
                                                           DeviceArenaWrap::InstanceMethod("info", &DeviceArenaWrap::Info),
                                                       });
  Data(env).hostArena = Napi::Persistent(host);
  Data(env).deviceArena = Napi::Persistent(device);
  exports.Set("HostArena", host);
  exports.Set("DeviceArena", device);
}

}  // namespace tiersync

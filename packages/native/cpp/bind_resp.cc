// JS class RespDoorNative over the RESP door's native socket layer (resp_door.h).
#include "binding.h"
#include "resp_door.h"

namespace tiersync {
namespace {

class RespDoorWrap;
void CallEvents(Napi::Env env, Napi::Function, RespDoorWrap* self, void* data);
using EventCalls = Napi::TypedThreadSafeFunction<RespDoorWrap, void, CallEvents>;

const char* KindName(resp::EventKind k) {
  switch (k) {
    case resp::EventKind::Accept: return "accept";
    case resp::EventKind::Data: return "data";
    case resp::EventKind::End: return "end";
    case resp::EventKind::Close: return "close";
    case resp::EventKind::Set: return "set";
    case resp::EventKind::Drain: return "drain";
  }
  return "?";
}

// new RespDoorNative(arena, options, onEvents): listens on options.host:options.port; `onEvents(events)` runs on the
// JS thread with every event the door thread queued since the last call (in order).
class RespDoorWrap : public Napi::ObjectWrap<RespDoorWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "RespDoorNative",
                       {
                           InstanceAccessor<&RespDoorWrap::Port>("port"),
                           InstanceMethod<&RespDoorWrap::Write>("write"),
                           InstanceMethod<&RespDoorWrap::End>("end"),
                           InstanceMethod<&RespDoorWrap::Destroy>("destroy"),
                           InstanceMethod<&RespDoorWrap::Pause>("pause"),
                           InstanceMethod<&RespDoorWrap::Done>("done"),
                           InstanceMethod<&RespDoorWrap::SetFast>("setFast"),
                           InstanceMethod<&RespDoorWrap::Passthrough>("passthrough"),
                           InstanceMethod<&RespDoorWrap::LastActive>("lastActive"),
                           InstanceMethod<&RespDoorWrap::Grant>("grant"),
                           InstanceMethod<&RespDoorWrap::TakePool>("takePool"),
                           InstanceMethod<&RespDoorWrap::Stats>("stats"),
                           InstanceMethod<&RespDoorWrap::Close>("close"),
                       });
  }

  explicit RespDoorWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<RespDoorWrap>(info) {
    Napi::Env env = info.Env();
    Endpoint arena = EndpointOf(env, info[0], 0);
    if (!arena.memory || arena.memory->kind() != MemoryKind::Host) Throw(env, Code::InvalidArgument, "the RESP door lands values in a HostArena");
    Napi::Object o = OptionsArg(info, 1);
    resp::DoorOptions opts;
    opts.host = OptString(o, "host", "127.0.0.1");
    uint64_t port = OptUint(o, "port", 0);
    if (port > 65535) Throw(env, Code::InvalidArgument, "port must be in [0, 65535]");
    opts.port = static_cast<uint16_t>(port);
    opts.pageBytes = OptUint(o, "pageBytes", 0);
    opts.maxBulkBytes = OptUint(o, "maxBulkBytes", opts.maxBulkBytes);
    opts.maxArrayLength = OptUint(o, "maxArrayLength", opts.maxArrayLength);
    opts.maxInlineBytes = OptUint(o, "maxInlineBytes", opts.maxInlineBytes);
    opts.maxKeyBytes = OptUint(o, "maxKeyBytes", opts.maxKeyBytes);
    opts.maxPendingBytes = OptUint(o, "maxPendingBytes", opts.maxPendingBytes);
    opts.requestTimeoutMs = OptUint(o, "requestTimeoutMs", opts.requestTimeoutMs);
    opts.landBeforeAuth = OptBool(o, "landBeforeAuth", false);
    if (info.Length() < 3 || !info[2].IsFunction()) Throw(env, Code::InvalidArgument, "onEvents must be a function");
    onEvents_ = Napi::Persistent(info[2].As<Napi::Function>());
    calls_ = EventCalls::New(env, "tiersync-resp-events", 0, 1, this);
    door_ = Guard(env, [&] {
      return std::make_unique<resp::Door>(opts, arena.memory, [this] { calls_.NonBlockingCall(nullptr); });
    });
  }

  ~RespDoorWrap() override {
    if (door_) door_->Close();
  }

  void Deliver(Napi::Env env) {
    if (!door_) return;
    std::vector<resp::Event> events = door_->Drain();
    if (events.empty()) return;
    Napi::Array list = Napi::Array::New(env, events.size());
    for (size_t i = 0; i < events.size(); i++) {
      resp::Event& e = events[i];
      Napi::Object o = Napi::Object::New(env);
      o.Set("kind", KindName(e.kind));
      o.Set("conn", static_cast<double>(e.conn));
      switch (e.kind) {
        case resp::EventKind::Accept:
          o.Set("host", std::string(e.bytes.begin(), e.bytes.end()));
          o.Set("port", e.port);
          break;
        case resp::EventKind::Data:
          o.Set("bytes", Napi::Buffer<uint8_t>::Copy(env, e.bytes.data(), e.bytes.size()));
          break;
        case resp::EventKind::Set: {
          o.Set("name", Napi::Buffer<uint8_t>::Copy(env, e.bytes.data(), e.bytes.size()));
          o.Set("key", Napi::Buffer<uint8_t>::Copy(env, e.key.data(), e.key.size()));
          auto offsets = Napi::Float64Array::New(env, e.offsets.size());
          auto lengths = Napi::Uint32Array::New(env, e.lengths.size());
          auto crcs = Napi::Uint32Array::New(env, e.crcs.size());
          for (size_t j = 0; j < e.offsets.size(); j++) offsets[j] = e.offsets[j];
          for (size_t j = 0; j < e.lengths.size(); j++) lengths[j] = e.lengths[j];
          for (size_t j = 0; j < e.crcs.size(); j++) crcs[j] = e.crcs[j];
          o.Set("offsets", offsets);
          o.Set("lengths", lengths);
          o.Set("crcs", crcs);
          o.Set("length", static_cast<double>(e.valueLength));
          break;
        }
        default:
          break;
      }
      list.Set(static_cast<uint32_t>(i), o);
    }
    onEvents_.Call({list});
  }

 private:
  resp::Door& Live(Napi::Env env) {
    if (!door_) Throw(env, Code::Closed, "the RESP door is closed");
    return *door_;
  }

  Napi::Value Port(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), door_ ? door_->port() : 0); }

  // write(conn, parts: Uint8Array[]): bytes still queued for the client.
  Napi::Value Write(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t conn = UintArg(info, 0, "conn");
    if (info.Length() < 2 || !info[1].IsArray()) Throw(env, Code::InvalidArgument, "parts must be an array of Uint8Arrays");
    Napi::Array a = info[1].As<Napi::Array>();
    std::vector<std::pair<const uint8_t*, size_t>> parts;
    parts.reserve(a.Length());
    for (uint32_t i = 0; i < a.Length(); i++) {
      Napi::Value v = a.Get(i);
      if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) Throw(env, Code::InvalidArgument, "parts must be Uint8Arrays");
      auto u = v.As<Napi::Uint8Array>();
      if (u.ByteLength()) parts.emplace_back(u.Data(), u.ByteLength());
    }
    return Napi::Number::New(env, static_cast<double>(Live(env).Write(conn, parts)));
  }

  void End(const Napi::CallbackInfo& info) { Live(info.Env()).End(UintArg(info, 0, "conn")); }
  void Destroy(const Napi::CallbackInfo& info) { Live(info.Env()).Destroy(UintArg(info, 0, "conn")); }
  void Pause(const Napi::CallbackInfo& info) { Live(info.Env()).Pause(UintArg(info, 0, "conn"), info[1].ToBoolean()); }
  void Done(const Napi::CallbackInfo& info) { Live(info.Env()).Done(UintArg(info, 0, "conn")); }
  void SetFast(const Napi::CallbackInfo& info) { Live(info.Env()).SetFast(UintArg(info, 0, "conn"), info[1].ToBoolean()); }
  void Passthrough(const Napi::CallbackInfo& info) { Live(info.Env()).Passthrough(UintArg(info, 0, "conn")); }
  Napi::Value LastActive(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(Live(info.Env()).LastActiveMs(UintArg(info, 0, "conn"))));
  }

  // grant(offsets: Float64Array, slotBytes): slots of the host tier the door may land values in.
  void Grant(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
      Throw(env, Code::InvalidArgument, "offsets must be a Float64Array");
    auto f = info[0].As<Napi::Float64Array>();
    Live(env).pool().Grant(std::vector<double>(f.Data(), f.Data() + f.ElementLength()), UintArg(info, 1, "slotBytes"));
  }

  Napi::Value TakePool(const Napi::CallbackInfo& info) {
    std::vector<double> all = door_ ? door_->pool().TakeAll() : std::vector<double>{};
    auto out = Napi::Float64Array::New(info.Env(), all.size());
    for (size_t i = 0; i < all.size(); i++) out[i] = all[i];
    return out;
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("pooledSlots", static_cast<double>(door_ ? door_->pool().size() : 0));
    o.Set("landedSets", static_cast<double>(door_ ? door_->fastSets() : 0));
    return o;
  }

  void Close(const Napi::CallbackInfo& info) {
    if (!door_) return;
    door_->Close();
    if (!closedCalls_) {
      closedCalls_ = true;
      calls_.Release();
    }
  }

  std::unique_ptr<resp::Door> door_;
  Napi::FunctionReference onEvents_;
  EventCalls calls_;
  bool closedCalls_ = false;
};

void CallEvents(Napi::Env env, Napi::Function, RespDoorWrap* self, void*) {
  if (env == nullptr || self == nullptr) return;
  self->Deliver(env);
}

}  // namespace

void InitResp(Napi::Env env, Napi::Object exports) { exports.Set("RespDoorNative", RespDoorWrap::Define(env)); }

}  // namespace tiersync

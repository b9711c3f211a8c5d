// JS class RespDoorNative over the RESP door's native socket layer (resp_door.h).
#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "binding.h"
#include "resp_door.h"

namespace tiersync {
namespace {

class RespDoorWrap;
void CallEvents(Napi::Env env, Napi::Function, RespDoorWrap* self, void* data);
using EventCalls = Napi::TypedThreadSafeFunction<RespDoorWrap, void, CallEvents>;

// Strings an event object is made of (property names, then the kinds' names).
enum NameIndex : size_t { kKind, kConn, kHost, kPort, kBytes, kName, kKey, kOffsets, kLengths, kCrcs, kLength, kAccept, kData, kEnd, kClose, kSet, kDrain, kNames };
constexpr const char* kNameText[kNames] = {"kind", "conn", "host", "port", "bytes", "name", "key", "offsets", "lengths", "crcs", "length",
                                           "accept", "data", "end", "close", "set", "drain"};

size_t KindIndex(resp::EventKind k) {
  switch (k) {
    case resp::EventKind::Accept: return kAccept;
    case resp::EventKind::Data: return kData;
    case resp::EventKind::End: return kEnd;
    case resp::EventKind::Close: return kClose;
    case resp::EventKind::Set: return kSet;
    case resp::EventKind::Drain: return kDrain;
  }
  return kData;
}

// new RespDoorNative(arena, options, onEvents): listens on options.host:options.port; `onEvents(events)` runs on the
// JS thread with every event the door thread queued since the last call (in order).
class RespDoorWrap : public Napi::ObjectWrap<RespDoorWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "RespDoorNative",
                       {
                           InstanceAccessor<&RespDoorWrap::Port>("port"),
                           InstanceAccessor<&RespDoorWrap::PooledSlots>("pooledSlots"),
                           InstanceMethod<&RespDoorWrap::Write>("write"),
                           InstanceMethod<&RespDoorWrap::End>("end"),
                           InstanceMethod<&RespDoorWrap::Destroy>("destroy"),
                           InstanceMethod<&RespDoorWrap::Pause>("pause"),
                           InstanceMethod<&RespDoorWrap::Done>("done"),
                           InstanceMethod<&RespDoorWrap::Flush>("flush"),
                           InstanceMethod<&RespDoorWrap::SetFast>("setFast"),
                           InstanceMethod<&RespDoorWrap::Passthrough>("passthrough"),
                           InstanceMethod<&RespDoorWrap::Mirror>("mirror"),
                           InstanceMethod<&RespDoorWrap::TakeServed>("takeServed"),
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
    opts.maxClients = OptUint(o, "maxClients", opts.maxClients);
    opts.landBeforeAuth = OptBool(o, "landBeforeAuth", false);
    const uint64_t acceptTenant = OptUint(o, "acceptTenant", 0);
    if (acceptTenant > UINT32_MAX) Throw(env, Code::InvalidArgument, "acceptTenant must be a 32-bit id");
    opts.acceptTenant = static_cast<uint32_t>(acceptTenant);
    opts.maxOutputBytes = OptUint(o, "maxOutputBytes", opts.maxOutputBytes);
    Napi::Value versions = o.Get("slotVersions");
    if (!versions.IsUndefined()) {
      if (!versions.IsTypedArray() || versions.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array || versions.As<Napi::TypedArray>().ElementLength() == 0)
        Throw(env, Code::InvalidArgument, "slotVersions must be a non-empty Uint32Array");
      auto u = versions.As<Napi::Uint32Array>();
      // Held for the door's life: the door thread reads the words (a SharedArrayBuffer's never move).
      versions_ = Napi::Persistent(versions.As<Napi::Object>());
      opts.slotVersions = u.Data();
      opts.slotCount = u.ElementLength();
      slotCount_ = u.ElementLength();
    }
    arenaBytes_ = arena.memory->size();
    pageBytes_ = opts.pageBytes;
    if (info.Length() < 3 || !info[2].IsFunction()) Throw(env, Code::InvalidArgument, "onEvents must be a function");
    onEvents_ = Napi::Persistent(info[2].As<Napi::Function>());
    // Property names and kinds made once: Deliver sets ~8 properties per event, each a string lookup otherwise.
    // (Held in an array: a reference to a string itself needs Node-API 10.)
    Napi::Array names = Napi::Array::New(env, kNames);
    for (size_t i = 0; i < kNames; i++) names.Set(static_cast<uint32_t>(i), Napi::String::New(env, kNameText[i]));
    names_ = Napi::Persistent(names);
    calls_ = NewWrapCalls<EventCalls>(env, "tiersync-resp-events", this, hold_);
    door_ = Guard(env, [&] {
      try {
        return std::make_unique<resp::Door>(opts, arena.memory, [this] { calls_.NonBlockingCall(nullptr); });
      } catch (...) {
        AbandonWrapCalls(calls_, hold_);
        throw;
      }
    });
  }

  ~RespDoorWrap() override {
    if (door_) door_->Close();
  }

  void Deliver(Napi::Env env) {
    if (!door_) return;
    std::vector<resp::Event> events = door_->Drain();
    if (events.empty()) return;
    napi_value n[kNames];
    Napi::Array names = names_.Value();
    for (size_t i = 0; i < kNames; i++) n[i] = names.Get(static_cast<uint32_t>(i));
    // The Set events' small arrays share three ArrayBuffers per batch (views into them), not five allocations with
    // their own backing stores per landed SET: names and keys (bytes; JavaScript makes Buffer views of them),
    // slot offsets (f64), page lengths then CRC32Cs (u32).
    size_t byteTotal = 0, f64Total = 0, u32Total = 0;
    for (const resp::Event& e : events) {
      if (e.kind != resp::EventKind::Set) continue;
      byteTotal += e.bytes.size() + e.key.size();
      f64Total += e.offsets.size();
      u32Total += e.lengths.size() + e.crcs.size();
    }
    Napi::ArrayBuffer byteAb, f64Ab, u32Ab;
    if (f64Total || byteTotal) {
      byteAb = Napi::ArrayBuffer::New(env, std::max<size_t>(byteTotal, 1));
      f64Ab = Napi::ArrayBuffer::New(env, std::max<size_t>(f64Total, 1) * sizeof(double));
      u32Ab = Napi::ArrayBuffer::New(env, std::max<size_t>(u32Total, 1) * sizeof(uint32_t));
    }
    size_t byteAt = 0, f64At = 0, u32At = 0;
    auto bytesView = [&](const std::vector<uint8_t>& v) {
      if (!v.empty()) std::memcpy(static_cast<uint8_t*>(byteAb.Data()) + byteAt, v.data(), v.size());
      auto view = Napi::Uint8Array::New(env, v.size(), byteAb, byteAt);
      byteAt += v.size();
      return view;
    };
    auto u32View = [&](const std::vector<uint32_t>& v) {
      if (!v.empty()) std::memcpy(static_cast<uint32_t*>(u32Ab.Data()) + u32At, v.data(), v.size() * sizeof(uint32_t));
      auto view = Napi::Uint32Array::New(env, v.size(), u32Ab, u32At * sizeof(uint32_t));
      u32At += v.size();
      return view;
    };
    Napi::Array list = Napi::Array::New(env, events.size());
    for (size_t i = 0; i < events.size(); i++) {
      resp::Event& e = events[i];
      Napi::Object o = Napi::Object::New(env);
      o.Set(n[kKind], n[KindIndex(e.kind)]);
      o.Set(n[kConn], Napi::Number::New(env, static_cast<double>(e.conn)));
      switch (e.kind) {
        case resp::EventKind::Accept:
          o.Set(n[kHost], Napi::String::New(env, std::string(e.bytes.begin(), e.bytes.end())));
          o.Set(n[kPort], Napi::Number::New(env, e.port));
          break;
        case resp::EventKind::Data:
          o.Set(n[kBytes], Napi::Buffer<uint8_t>::Copy(env, e.bytes.data(), e.bytes.size()));
          break;
        case resp::EventKind::Set: {
          o.Set(n[kName], bytesView(e.bytes));
          o.Set(n[kKey], bytesView(e.key));
          if (!e.offsets.empty()) std::memcpy(static_cast<double*>(f64Ab.Data()) + f64At, e.offsets.data(), e.offsets.size() * sizeof(double));
          o.Set(n[kOffsets], Napi::Float64Array::New(env, e.offsets.size(), f64Ab, f64At * sizeof(double)));
          f64At += e.offsets.size();
          o.Set(n[kLengths], u32View(e.lengths));
          o.Set(n[kCrcs], u32View(e.crcs));
          o.Set(n[kLength], Napi::Number::New(env, static_cast<double>(e.valueLength)));
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
  // stats().pooledSlots alone: read after every batch of landed values, so without building the stats object.
  Napi::Value PooledSlots(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(door_ ? door_->pool().size() : 0));
  }

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
  // flush(conns: Float64Array, counts: Uint32Array, parts: Uint8Array[], dones: Uint32Array, mirrorOps?, mirrorKeys?):
  // Float64Array. First the mirror changes (as mirror()), then for each client i in order: write its counts[i] next
  // parts (as write()), then done() dones[i] times. One call per batch of events instead of two per command; returns
  // the bytes still queued per client.
  Napi::Value Flush(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto typed = [&](size_t i, napi_typedarray_type t, const char* what) {
      if (info.Length() <= i || !info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != t) Throw(env, Code::InvalidArgument, what);
      return info[i].As<Napi::TypedArray>();
    };
    auto conns = typed(0, napi_float64_array, "conns must be a Float64Array").As<Napi::Float64Array>();
    auto counts = typed(1, napi_uint32_array, "counts must be a Uint32Array").As<Napi::Uint32Array>();
    if (info.Length() < 3 || !info[2].IsArray()) Throw(env, Code::InvalidArgument, "parts must be an array of Uint8Arrays");
    auto dones = typed(3, napi_uint32_array, "dones must be a Uint32Array").As<Napi::Uint32Array>();
    Napi::Array a = info[2].As<Napi::Array>();
    const size_t n = conns.ElementLength();
    if (counts.ElementLength() != n || dones.ElementLength() != n) Throw(env, Code::InvalidArgument, "conns, counts and dones must have one entry per client");
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += counts[i];
    if (total != a.Length()) Throw(env, Code::InvalidArgument, "parts must hold the sum of counts");
    resp::Door& door = Live(env);
    // Mirror changes go in before any reply of the batch is written (the replies that acknowledge them).
    if (info.Length() > 4 && !info[4].IsUndefined()) ApplyMirror(info, 4);
    // The door thread is woken once, after the whole batch is queued (also when a bad part throws midway).
    struct HeldWakes {
      resp::Door& door;
      explicit HeldWakes(resp::Door& d) : door(d) { door.HoldWakes(); }
      ~HeldWakes() { door.ReleaseWakes(); }
    } held(door);
    auto out = Napi::Float64Array::New(env, n);
    std::vector<std::pair<const uint8_t*, size_t>> parts;
    uint32_t at = 0;
    for (size_t i = 0; i < n; i++) {
      const double id = conns[i];
      if (!(id >= 0) || id != std::floor(id)) Throw(env, Code::InvalidArgument, "conns must be client ids");
      parts.clear();
      for (uint32_t j = 0; j < counts[i]; j++, at++) {
        Napi::Value v = a.Get(at);
        if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) Throw(env, Code::InvalidArgument, "parts must be Uint8Arrays");
        auto u = v.As<Napi::Uint8Array>();
        if (u.ByteLength()) parts.emplace_back(u.Data(), u.ByteLength());
      }
      const auto conn = static_cast<uint64_t>(id);
      out[i] = parts.empty() ? 0 : static_cast<double>(door.Write(conn, parts));
      door.Done(conn, dones[i]);
    }
    return out;
  }

  // setFast(conn, fast, tenant = 0)
  void SetFast(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t tenant = info.Length() > 2 ? UintArg(info, 2, "tenant") : 0;
    if (tenant > UINT32_MAX) Throw(env, Code::InvalidArgument, "tenant must be a 32-bit id");
    Live(env).SetFast(UintArg(info, 0, "conn"), info[1].ToBoolean(), static_cast<uint32_t>(tenant));
  }

  // mirror(ops: Float64Array, keys: Uint8Array[]): changes of the door's mirror of the catalog, in order.
  void Mirror(const Napi::CallbackInfo& info) { ApplyMirror(info, 0); }

  // ops, a stream of numbers: [0, tenant, key] drops keys[key] of the tenant; [1, tenant, key, valueLength, id, pages,
  // then per page offset, length, crc32c, slot, version] installs it. All checked before any is applied.
  void ApplyMirror(const Napi::CallbackInfo& info, size_t at) {
    Napi::Env env = info.Env();
    if (info.Length() <= at + 1 || !info[at].IsTypedArray() || info[at].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array || !info[at + 1].IsArray())
      Throw(env, Code::InvalidArgument, "mirror ops must be a Float64Array and keys an array of Uint8Arrays");
    auto ops = info[at].As<Napi::Float64Array>();
    auto keys = info[at + 1].As<Napi::Array>();
    resp::Door& door = Live(env);
    struct Change {
      uint32_t tenant;
      Napi::Uint8Array key;
      std::shared_ptr<resp::MirrorValue> value;  // null: drop
    };
    std::vector<Change> changes;
    const size_t n = ops.ElementLength();
    auto num = [&](size_t i, double max, const char* what) -> uint64_t {
      if (i >= n) Throw(env, Code::InvalidArgument, "mirror ops end inside an op");
      const double v = ops[i];
      if (!(v >= 0) || v > max || v != std::floor(v)) Throw(env, Code::InvalidArgument, std::string("mirror op field out of range: ") + what);
      return static_cast<uint64_t>(v);
    };
    for (size_t i = 0; i < n;) {
      const uint64_t kind = num(i, 1, "kind");
      const auto tenant = static_cast<uint32_t>(num(i + 1, UINT32_MAX, "tenant"));
      const uint64_t k = num(i + 2, UINT32_MAX, "key");
      if (tenant == 0) Throw(env, Code::InvalidArgument, "mirror tenant ids start at 1");
      if (k >= keys.Length()) Throw(env, Code::InvalidArgument, "mirror op key index out of range");
      Napi::Value kv = keys.Get(static_cast<uint32_t>(k));
      if (!kv.IsTypedArray() || kv.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) Throw(env, Code::InvalidArgument, "mirror keys must be Uint8Arrays");
      Change c{tenant, kv.As<Napi::Uint8Array>(), nullptr};
      i += 3;
      if (kind == 1) {
        if (!slotCount_) Throw(env, Code::InvalidArgument, "this door was started without slotVersions");
        auto v = std::make_shared<resp::MirrorValue>();
        v->length = num(i, 9007199254740991.0, "valueLength");
        v->id = num(i + 1, 9007199254740991.0, "id");
        const uint64_t pages = num(i + 2, 1u << 24, "pages");
        i += 3;
        uint64_t total = 0;
        for (uint64_t p = 0; p < pages; p++, i += 5) {
          resp::MirrorPage pg;
          pg.offset = num(i, 9007199254740991.0, "offset");
          pg.length = static_cast<uint32_t>(num(i + 1, static_cast<double>(pageBytes_), "length"));
          pg.crc = static_cast<uint32_t>(num(i + 2, UINT32_MAX, "crc32c"));
          pg.slot = static_cast<uint32_t>(num(i + 3, static_cast<double>(slotCount_ - 1), "slot"));
          pg.version = static_cast<uint32_t>(num(i + 4, UINT32_MAX, "version"));
          if (pg.offset + pg.length > arenaBytes_) Throw(env, Code::InvalidArgument, "mirror page outside the arena");
          total += pg.length;
          v->pages.push_back(pg);
        }
        if (total != v->length || pages == 0) Throw(env, Code::InvalidArgument, "mirror pages must add up to the value's length");
        c.value = std::move(v);
      }
      changes.push_back(std::move(c));
    }
    for (Change& c : changes) {
      if (c.value) door.MirrorPut(c.tenant, c.key.Data(), c.key.ByteLength(), std::move(c.value));
      else door.MirrorDrop(c.tenant, c.key.Data(), c.key.ByteLength());
    }
  }
  // takeServed(): Float64Array of the ids of mirror entries GETs were answered from since the last call.
  Napi::Value TakeServed(const Napi::CallbackInfo& info) {
    std::vector<uint64_t> ids = door_ ? door_->TakeServed() : std::vector<uint64_t>{};
    auto out = Napi::Float64Array::New(info.Env(), ids.size());
    for (size_t i = 0; i < ids.size(); i++) out[i] = static_cast<double>(ids[i]);
    return out;
  }

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
    o.Set("nativeGets", static_cast<double>(door_ ? door_->nativeGets() : 0));
    o.Set("nativeExists", static_cast<double>(door_ ? door_->nativeExists() : 0));
    o.Set("nativeMgets", static_cast<double>(door_ ? door_->nativeMgets() : 0));
    o.Set("getMismatches", static_cast<double>(door_ ? door_->getMismatches() : 0));
    o.Set("hotGets", static_cast<double>(door_ ? door_->hotGets() : 0));
    o.Set("mirroredKeys", static_cast<double>(door_ ? door_->mirrorSize() : 0));
    o.Set("unrecordedGets", static_cast<double>(door_ ? door_->unrecordedGets() : 0));
    o.Set("refusedClients", static_cast<double>(door_ ? door_->refusedClients() : 0));
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
  Napi::Reference<Napi::Array> names_;
  Napi::ObjectReference versions_;
  size_t slotCount_ = 0;
  uint64_t arenaBytes_ = 0, pageBytes_ = 0;
  EventCalls calls_;
  WrapHold<RespDoorWrap>* hold_ = nullptr;
  bool closedCalls_ = false;
};

void CallEvents(Napi::Env env, Napi::Function, RespDoorWrap* self, void*) {
  if (env == nullptr || self == nullptr) return;
  self->Deliver(env);
}

using DigestCtx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

// respPageKeys(salt: Uint8Array, tag: string, tenants: string[], keys: Uint8Array[], generations: Float64Array,
// counts: Uint32Array): string[]. The RESP door's value page keys (core/server/resp/door.ts #pageKeys, which this
// must match byte for byte): for value i, counts[i] keys tag + hex(SHA-256(salt || u32be(len(tenant utf8)) ||
// u32be(len(key)) || u64be(generation) || tenant utf8 || key || u32be(page))), flattened in order. The prefix is
// absorbed once per value; each page costs a copied digest state and one compression.
Napi::Value RespPageKeys(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto isU8 = [](const Napi::Value& v) { return v.IsTypedArray() && v.As<Napi::TypedArray>().TypedArrayType() == napi_uint8_array; };
  if (info.Length() < 6 || !isU8(info[0])) Throw(env, Code::InvalidArgument, "salt must be a Uint8Array");
  if (!info[1].IsString()) Throw(env, Code::InvalidArgument, "tag must be a string");
  if (!info[2].IsArray() || !info[3].IsArray()) Throw(env, Code::InvalidArgument, "tenants and keys must be arrays");
  if (!info[4].IsTypedArray() || info[4].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) Throw(env, Code::InvalidArgument, "generations must be a Float64Array");
  if (!info[5].IsTypedArray() || info[5].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) Throw(env, Code::InvalidArgument, "counts must be a Uint32Array");
  auto salt = info[0].As<Napi::Uint8Array>();
  const std::string tag = info[1].As<Napi::String>().Utf8Value();
  auto tenants = info[2].As<Napi::Array>();
  auto keys = info[3].As<Napi::Array>();
  auto generations = info[4].As<Napi::Float64Array>();
  auto counts = info[5].As<Napi::Uint32Array>();
  const size_t n = tenants.Length();
  if (keys.Length() != n || generations.ElementLength() != n || counts.ElementLength() != n) Throw(env, Code::InvalidArgument, "tenants, keys, generations and counts must have one entry per value");
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) total += counts[i];
  if (total > UINT32_MAX) Throw(env, Code::InvalidArgument, "too many page keys");
  DigestCtx base(EVP_MD_CTX_new(), &EVP_MD_CTX_free), work(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!base || !work) Throw(env, Code::NoMemory, "EVP_MD_CTX_new failed");
  static const char kHex[] = "0123456789abcdef";
  Napi::Array out = Napi::Array::New(env, static_cast<size_t>(total));
  std::string text(tag.size() + 64, '\0');
  std::memcpy(text.data(), tag.data(), tag.size());
  uint32_t at = 0;
  for (uint32_t i = 0; i < n; i++) {
    Napi::Value tv = tenants.Get(i), kv = keys.Get(i);
    if (!tv.IsString()) Throw(env, Code::InvalidArgument, "tenants[" + std::to_string(i) + "] must be a string");
    if (!isU8(kv)) Throw(env, Code::InvalidArgument, "keys[" + std::to_string(i) + "] must be a Uint8Array");
    const double g = generations[i];
    if (!(g >= 0) || g > 9007199254740991.0 || g != std::floor(g)) Throw(env, Code::InvalidArgument, "generations must be safe non-negative integers");
    const std::string tenant = tv.As<Napi::String>().Utf8Value();
    auto key = kv.As<Napi::Uint8Array>();
    if (tenant.size() > UINT32_MAX || key.ByteLength() > UINT32_MAX) Throw(env, Code::InvalidArgument, "tenant or key too long");
    unsigned char head[16];
    const auto put32 = [](unsigned char* p, uint32_t v) {
      p[0] = v >> 24;
      p[1] = v >> 16;
      p[2] = v >> 8;
      p[3] = v;
    };
    put32(head, static_cast<uint32_t>(tenant.size()));
    put32(head + 4, static_cast<uint32_t>(key.ByteLength()));
    const auto gen = static_cast<uint64_t>(g);
    put32(head + 8, static_cast<uint32_t>(gen >> 32));
    put32(head + 12, static_cast<uint32_t>(gen));
    if (EVP_DigestInit_ex(base.get(), EVP_sha256(), nullptr) != 1 || EVP_DigestUpdate(base.get(), salt.Data(), salt.ByteLength()) != 1 ||
        EVP_DigestUpdate(base.get(), head, sizeof head) != 1 || EVP_DigestUpdate(base.get(), tenant.data(), tenant.size()) != 1 ||
        EVP_DigestUpdate(base.get(), key.Data(), key.ByteLength()) != 1)
      Throw(env, Code::Io, "SHA-256 failed");
    for (uint32_t j = 0; j < counts[i]; j++, at++) {
      unsigned char index[4], digest[32];
      put32(index, j);
      unsigned int len = 0;
      if (EVP_MD_CTX_copy_ex(work.get(), base.get()) != 1 || EVP_DigestUpdate(work.get(), index, sizeof index) != 1 ||
          EVP_DigestFinal_ex(work.get(), digest, &len) != 1)
        Throw(env, Code::Io, "SHA-256 failed");
      char* hex = text.data() + tag.size();
      for (size_t b = 0; b < 32; b++) {
        hex[2 * b] = kHex[digest[b] >> 4];
        hex[2 * b + 1] = kHex[digest[b] & 15];
      }
      out.Set(at, Napi::String::New(env, text.data(), text.size()));
    }
  }
  return out;
}

}  // namespace

void InitResp(Napi::Env env, Napi::Object exports) {
  exports.Set("RespDoorNative", RespDoorWrap::Define(env));
  exports.Set("respPageKeys", Napi::Function::New(env, RespPageKeys, "respPageKeys"));
}

}  // namespace tiersync

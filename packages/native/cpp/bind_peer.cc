// JS classes PeerServer and PeerClient over the native peer data plane (peer.h).
#include <unordered_map>

#include "binding.h"
#include "crc32c.h"
#include "peer.h"

namespace tiersync {
namespace {

using peer::ClientRequest;
using peer::ServerRequest;

const char* OpName(uint16_t op) {
  switch (op) {
    case peer::kPut: return "put";
    case peer::kGet: return "get";
    case peer::kHas: return "has";
    case peer::kDelete: return "delete";
  }
  return "?";
}

uint16_t OpCode(Napi::Env env, const std::string& op) {
  if (op == "put") return peer::kPut;
  if (op == "get") return peer::kGet;
  if (op == "has") return peer::kHas;
  if (op == "delete") return peer::kDelete;
  Throw(env, Code::InvalidArgument, "op must be put, get, has or delete, got '" + op + "'");
}

// ---- server -------------------------------------------------------------------------------------------------

class ServerWrap;
void CallPlan(Napi::Env env, Napi::Function, ServerWrap* self, std::shared_ptr<ServerRequest>* data);
using PlanCalls = Napi::TypedThreadSafeFunction<ServerWrap, std::shared_ptr<ServerRequest>, CallPlan>;

// new PeerServer(options, arena, plan, commit?): `plan(request)` runs on the JS thread for every request batch,
// twice (phase 'plan' then 'finish'); for 'plan' it returns { offsets: Float64Array, statuses: Uint8Array,
// lengths?: Uint32Array, crcs?: Uint32Array } or throws to refuse the batch. With `commit`, PUTs land in slots
// granted in advance (grant()) without a plan and are acknowledged on their connection thread (ok or existing by
// the keys held: holdKeys/dropKeys); `commit({ keys, offsets, lengths, crcs })` then runs on the JS thread,
// batched, before any later plan (or at drain()), and may return { grant: Float64Array } of slots to grant.
class ServerWrap : public Napi::ObjectWrap<ServerWrap> {
 public:
  explicit ServerWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ServerWrap>(info) {
    Napi::Env env = info.Env();
    Napi::Object o = OptionsArg(info, 0);
    peer::ServerOptions opts;
    opts.host = OptString(o, "host", "127.0.0.1");
    uint64_t port = OptUint(o, "port", 0);
    if (port > 65535) Throw(env, Code::InvalidArgument, "port must be in [0, 65535]");
    opts.port = static_cast<uint16_t>(port);
    opts.secret = OptString(o, "secret", "");
    opts.encrypt = OptBool(o, "encrypt", false);
    opts.timeoutMs = OptUint(o, "timeoutMs", 30000);
    opts.maxPayload = OptUint(o, "maxPayload", 1ull << 30);
    opts.maxConnections = OptUint(o, "maxConnections", 256);
    Endpoint arena = EndpointOf(env, info[1], 1);
    if (!arena.memory || arena.memory->kind() != MemoryKind::Host) Throw(env, Code::InvalidArgument, "a peer server serves a HostArena");
    if (info.Length() < 3 || !info[2].IsFunction()) Throw(env, Code::InvalidArgument, "plan must be a function");
    plan_ = Napi::Persistent(info[2].As<Napi::Function>());
    if (info.Length() > 3 && info[3].IsFunction()) commit_ = Napi::Persistent(info[3].As<Napi::Function>());
    calls_ = NewWrapCalls<PlanCalls>(env, "tiersync-peer-plan", this, hold_);
    peer::NotifyFn notify;
    // A null item on the same queue as the plans: committed pages reach JS in order with every later request.
    if (!commit_.IsEmpty()) notify = [this] { calls_.NonBlockingCall(nullptr); };
    server_ = Guard(env, [&] {
      try {
        return std::make_unique<peer::Server>(opts, arena.memory, [this](std::shared_ptr<ServerRequest> r) {
          auto* data = new std::shared_ptr<ServerRequest>(r);
          if (calls_.NonBlockingCall(data) != napi_ok) {
            delete data;
            r->Answer("peer server is closing");
          }
        }, notify);
      } catch (...) {
        AbandonWrapCalls(calls_, hold_);
        throw;
      }
    });
  }

  // Hands the pages of every PUT acknowledged since the last call to the control plane (one call), and grants
  // the slots it returns to the pool.
  void DrainLanded(Napi::Env env) {
    if (!server_ || commit_.IsEmpty()) return;
    std::vector<peer::Landed> batch = server_->DrainLanded();
    peer::Server::Served served = server_->TakeServed();
    if (batch.empty() && served.pages == 0 && served.misses == 0) return;
    size_t n = 0;
    for (const auto& l : batch) n += l.entries.size();
    Napi::Array keys = Napi::Array::New(env, n);
    auto offsets = Napi::Float64Array::New(env, n);
    auto lengths = Napi::Uint32Array::New(env, n);
    auto crcs = Napi::Uint32Array::New(env, n);
    size_t k = 0;
    for (const auto& l : batch) {
      for (size_t i = 0; i < l.entries.size(); i++, k++) {
        keys.Set(static_cast<uint32_t>(k), l.entries[i].key);
        offsets[k] = l.offsets[i];
        lengths[k] = l.entries[i].length;
        crcs[k] = l.entries[i].crc32c;
      }
    }
    Napi::Object o = Napi::Object::New(env);
    o.Set("keys", keys);
    o.Set("offsets", offsets);
    o.Set("lengths", lengths);
    o.Set("crcs", crcs);
    Napi::Array servedKeys = Napi::Array::New(env, served.keys.size());
    for (size_t i = 0; i < served.keys.size(); i++) servedKeys.Set(static_cast<uint32_t>(i), served.keys[i]);
    o.Set("served", servedKeys);
    o.Set("servedPages", Napi::Number::New(env, static_cast<double>(served.pages)));
    o.Set("servedBytes", Napi::Number::New(env, static_cast<double>(served.bytes)));
    o.Set("misses", Napi::Number::New(env, static_cast<double>(served.misses)));
    Napi::Value answer;
    try {
      answer = commit_.Call({o});
    } catch (const Napi::Error&) {
      return;  // the TS side catches its own failures; nothing to grant
    }
    if (!answer.IsObject()) return;
    Napi::Value grant = answer.As<Napi::Object>().Get("grant");
    if (grant.IsTypedArray() && grant.As<Napi::TypedArray>().TypedArrayType() == napi_float64_array) {
      auto f = grant.As<Napi::Float64Array>();
      server_->pool().Grant(std::vector<double>(f.Data(), f.Data() + f.ElementLength()), server_->pool().slotBytes());
    }
  }

  // Not Shutdown(): at environment teardown Node closes the thread-safe function before finalizing this object.
  ~ServerWrap() override {
    closed_ = true;
    if (server_) server_->Close();
  }

  void Plan(Napi::Env env, const std::shared_ptr<ServerRequest>& r) {
    if (closed_) return r->Answer("peer server is closing");
    DrainLanded(env);  // a request after a PUT's ack sees its pages
    const size_t n = r->entries.size();
    Napi::Object req = Napi::Object::New(env);
    req.Set("id", Napi::Number::New(env, static_cast<double>(r->id)));
    req.Set("op", OpName(r->op));
    req.Set("phase", r->finishing ? "finish" : "plan");
    req.Set("failed", r->failed);
    Napi::Array keys = Napi::Array::New(env, n);
    auto lengths = Napi::Uint32Array::New(env, n);
    auto crcs = Napi::Uint32Array::New(env, n);
    for (size_t i = 0; i < n; i++) {
      keys.Set(static_cast<uint32_t>(i), r->entries[i].key);
      lengths[i] = r->entries[i].length;
      crcs[i] = r->entries[i].crc32c;
    }
    req.Set("keys", keys);
    req.Set("lengths", lengths);
    req.Set("crcs", crcs);
    if (r->finishing) {
      auto outcome = Napi::Uint8Array::New(env, r->outcome.size());
      std::copy(r->outcome.begin(), r->outcome.end(), outcome.Data());
      req.Set("outcome", outcome);
      auto statuses = Napi::Uint8Array::New(env, r->statuses.size());
      std::copy(r->statuses.begin(), r->statuses.end(), statuses.Data());
      req.Set("planned", statuses);
    }
    Napi::Value answer;
    try {
      answer = plan_.Call({req});
    } catch (const Napi::Error& e) {
      return r->Answer(e.Message());
    }
    if (!r->finishing) {
      std::string why = ReadPlan(answer, *r);
      if (!why.empty()) return r->Answer(why);
    }
    r->Answer();
  }

 private:
  static std::vector<std::string> KeysArg(const Napi::CallbackInfo& info, const char* method) {
    if (info.Length() < 1 || !info[0].IsArray()) Throw(info.Env(), Code::InvalidArgument, std::string(method) + "(keys: string[])");
    Napi::Array a = info[0].As<Napi::Array>();
    std::vector<std::string> keys(a.Length());
    for (uint32_t i = 0; i < a.Length(); i++) {
      Napi::Value v = a.Get(i);
      if (!v.IsString()) Throw(info.Env(), Code::InvalidArgument, std::string(method) + ": keys[" + std::to_string(i) + "] must be a string");
      keys[i] = v.As<Napi::String>().Utf8Value();
    }
    return keys;
  }

  static std::string ReadPlan(Napi::Value v, ServerRequest& r) {
    const size_t n = r.entries.size();
    if (!v.IsObject()) return "plan() must return an object";
    Napi::Object o = v.As<Napi::Object>();
    Napi::Value offsets = o.Get("offsets"), statuses = o.Get("statuses");
    if (!offsets.IsTypedArray() || offsets.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
        offsets.As<Napi::TypedArray>().ElementLength() != n)
      return "plan().offsets must be a Float64Array with one offset per entry";
    if (!statuses.IsTypedArray() || statuses.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array ||
        statuses.As<Napi::TypedArray>().ElementLength() != n)
      return "plan().statuses must be a Uint8Array with one status per entry";
    auto off = offsets.As<Napi::Float64Array>();
    auto st = statuses.As<Napi::Uint8Array>();
    r.offsets.assign(off.Data(), off.Data() + n);
    r.statuses.assign(st.Data(), st.Data() + n);
    if (r.op == peer::kGet) {
      Napi::Value lengths = o.Get("lengths"), crcs = o.Get("crcs");
      if (!lengths.IsTypedArray() || lengths.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array ||
          lengths.As<Napi::TypedArray>().ElementLength() != n || !crcs.IsTypedArray() ||
          crcs.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array || crcs.As<Napi::TypedArray>().ElementLength() != n)
        return "plan().lengths and plan().crcs must be Uint32Arrays with one value per entry";
      auto l = lengths.As<Napi::Uint32Array>();
      auto c = crcs.As<Napi::Uint32Array>();
      r.lengths.assign(l.Data(), l.Data() + n);
      r.crcs.assign(c.Data(), c.Data() + n);
    }
    return "";
  }

  void Shutdown() {
    if (closed_) return;
    closed_ = true;
    if (server_) server_->Close();
    calls_.Release();
  }

 public:
  Napi::Value Port(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), server_ ? server_->port() : 0); }
  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("connections", Napi::Number::New(info.Env(), static_cast<double>(server_->connections())));
    o.Set("authFailures", Napi::Number::New(info.Env(), static_cast<double>(server_->authFailures())));
    o.Set("refused", Napi::Number::New(info.Env(), static_cast<double>(server_->refused())));
    o.Set("active", Napi::Number::New(info.Env(), static_cast<double>(server_->active())));
    o.Set("putRequests", Napi::Number::New(info.Env(), static_cast<double>(server_->requests(peer::kPut))));
    o.Set("getRequests", Napi::Number::New(info.Env(), static_cast<double>(server_->requests(peer::kGet))));
    o.Set("hasRequests", Napi::Number::New(info.Env(), static_cast<double>(server_->requests(peer::kHas))));
    o.Set("deleteRequests", Napi::Number::New(info.Env(), static_cast<double>(server_->requests(peer::kDelete))));
    o.Set("pooledPuts", Napi::Number::New(info.Env(), static_cast<double>(server_->pooledPuts())));
    o.Set("pooledSlots", Napi::Number::New(info.Env(), static_cast<double>(server_->pool().size())));
    o.Set("getsPlannedHere", Napi::Number::New(info.Env(), static_cast<double>(server_->getsPlannedHere())));
    o.Set("hasAnsweredHere", Napi::Number::New(info.Env(), static_cast<double>(server_->hasAnsweredHere())));
    o.Set("heldKeys", Napi::Number::New(info.Env(), static_cast<double>(server_->table().size())));
    o.Set("rangesByChunk", Napi::Number::New(info.Env(), static_cast<double>(server_->rangesByChunk())));
    o.Set("rangesWhole", Napi::Number::New(info.Env(), static_cast<double>(server_->rangesWhole())));
    o.Set("rangesAnnounced", Napi::Number::New(info.Env(), static_cast<double>(server_->rangesAnnounced())));
    return o;
  }
  Napi::Value Close(const Napi::CallbackInfo& info) {
    Shutdown();
    DrainLanded(info.Env());  // acknowledged pages are recorded even when the server closes right after
    return info.Env().Undefined();
  }

  // grant(offsets: Float64Array, slotBytes): free slots of the arena the data plane may fill without asking.
  Napi::Value Grant(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
      Throw(env, Code::InvalidArgument, "grant(offsets: Float64Array, slotBytes)");
    uint64_t slotBytes = UintArg(info, 1, "slotBytes");
    if (slotBytes == 0) Throw(env, Code::InvalidArgument, "slotBytes must be positive");
    auto f = info[0].As<Napi::Float64Array>();
    std::vector<double> offsets(f.Data(), f.Data() + f.ElementLength());
    for (size_t i = 0; i < offsets.size(); i++)
      if (!(offsets[i] >= 0 && offsets[i] == static_cast<double>(static_cast<uint64_t>(offsets[i]))))
        Throw(env, Code::InvalidArgument, "offsets[" + std::to_string(i) + "] must be a non-negative integer");
    if (closed_) Throw(env, Code::Closed, "peer server is closed");
    server_->pool().Grant(offsets, slotBytes);
    return env.Undefined();
  }

  // takePool() -> Float64Array: the granted slots still free (the caller frees them), emptying the pool.
  Napi::Value TakePool(const Napi::CallbackInfo& info) {
    std::vector<double> left = server_ ? server_->pool().TakeAll() : std::vector<double>{};
    auto out = Napi::Float64Array::New(info.Env(), left.size());
    std::copy(left.begin(), left.end(), out.Data());
    return out;
  }

  // holdKeys(keys: string[], where?: { offsets: Float64Array, lengths, crcs, slots, versions: Uint32Array }) /
  // dropKeys(keys: string[]): the served tier's table gained (at `where`) or lost these keys.
  Napi::Value HoldKeys(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    std::vector<std::string> keys = KeysArg(info, "holdKeys");
    std::vector<peer::PageLoc> locs;
    if (info.Length() > 1 && !info[1].IsUndefined()) {
      if (!info[1].IsObject()) Throw(env, Code::InvalidArgument, "holdKeys: where must be an object");
      Napi::Object w = info[1].As<Napi::Object>();
      auto array = [&](const char* name, napi_typedarray_type type) {
        Napi::Value v = w.Get(name);
        if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != type || v.As<Napi::TypedArray>().ElementLength() != keys.size())
          Throw(env, Code::InvalidArgument, std::string("holdKeys: where.") + name + " must be a typed array with one value per key");
        return v.As<Napi::TypedArray>();
      };
      const double* offsets = array("offsets", napi_float64_array).As<Napi::Float64Array>().Data();
      const uint32_t* lengths = array("lengths", napi_uint32_array).As<Napi::Uint32Array>().Data();
      const uint32_t* crcs = array("crcs", napi_uint32_array).As<Napi::Uint32Array>().Data();
      const uint32_t* slots = array("slots", napi_uint32_array).As<Napi::Uint32Array>().Data();
      const uint32_t* versions = array("versions", napi_uint32_array).As<Napi::Uint32Array>().Data();
      locs.resize(keys.size());
      for (size_t i = 0; i < keys.size(); i++) {
        if (!(offsets[i] >= 0)) Throw(env, Code::InvalidArgument, "holdKeys: where.offsets[" + std::to_string(i) + "] must be a non-negative offset");
        locs[i] = peer::PageLoc{offsets[i], lengths[i], crcs[i], slots[i], versions[i]};
      }
    }
    if (server_) server_->table().Hold(std::move(keys), locs);
    return env.Undefined();
  }
  Napi::Value DropKeys(const Napi::CallbackInfo& info) {
    if (server_) server_->table().Drop(KeysArg(info, "dropKeys"));
    return info.Env().Undefined();
  }

  // shareSlots(versions: Uint32Array, pins: Int32Array, dataOffset: number), both on one SharedArrayBuffer each, a
  // word per slot; dataOffset: the arena offset of slot 0. See peer::Server::ShareSlots. GETs are planned on the
  // connection threads from then on.
  Napi::Value ShareSlots(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array ||
        !info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
        info[0].As<Napi::TypedArray>().ElementLength() != info[1].As<Napi::TypedArray>().ElementLength() ||
        (info.Length() > 2 && !info[2].IsNumber()))
      Throw(env, Code::InvalidArgument, "shareSlots(versions: Uint32Array, pins: Int32Array, dataOffset?: number) with one word per slot each");
    const double dataOffset = info.Length() > 2 ? info[2].As<Napi::Number>().DoubleValue() : 0;
    if (!(dataOffset >= 0) || dataOffset > 9007199254740991.0 || dataOffset != static_cast<double>(static_cast<uint64_t>(dataOffset)))
      Throw(env, Code::InvalidArgument, "shareSlots: dataOffset must be an integer >= 0");
    if (closed_ || !server_) Throw(env, Code::Closed, "peer server is closed");
    if (!shareVersions_.IsEmpty()) Throw(env, Code::InvalidArgument, "shareSlots: slots are shared already");
    // Held for the server's life: connection threads read and write the words (a SharedArrayBuffer's never move).
    shareVersions_ = Napi::Persistent(info[0].As<Napi::Object>());
    sharePins_ = Napi::Persistent(info[1].As<Napi::Object>());
    auto v = info[0].As<Napi::Uint32Array>();
    auto p = info[1].As<Napi::Int32Array>();
    server_->ShareSlots(v.Data(), p.Data(), v.ElementLength(), dataOffset);
    return env.Undefined();
  }

  // keepSlotRecords(dataOffset, recordBytes): see peer::Server::KeepSlotRecords.
  Napi::Value KeepSlotRecords(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t dataOffset = UintArg(info, 0, "dataOffset"), recordBytes = UintArg(info, 1, "recordBytes");
    if (closed_) Throw(env, Code::Closed, "peer server is closed");
    Guard(env, [&] { server_->KeepSlotRecords(dataOffset, recordBytes); });
    return env.Undefined();
  }

  // drain(): hands the pages of every PUT acknowledged so far to the control plane now (see DrainLanded).
  Napi::Value Drain(const Napi::CallbackInfo& info) {
    DrainLanded(info.Env());
    return info.Env().Undefined();
  }

 private:
  std::unique_ptr<peer::Server> server_;
  Napi::FunctionReference plan_;
  Napi::FunctionReference commit_;
  Napi::ObjectReference shareVersions_, sharePins_;
  PlanCalls calls_;
  WrapHold<ServerWrap>* hold_ = nullptr;
  bool closed_ = false;
};

void CallPlan(Napi::Env env, Napi::Function, ServerWrap* self, std::shared_ptr<ServerRequest>* data) {
  if (data == nullptr) {  // landed pages wait
    if (env != nullptr && self != nullptr) self->DrainLanded(env);
    return;
  }
  std::unique_ptr<std::shared_ptr<ServerRequest>> owned(data);
  if (env == nullptr || self == nullptr) return (*owned)->Answer("peer server is closing");
  self->Plan(env, *owned);
}

// ---- client -------------------------------------------------------------------------------------------------

class ClientWrap;
void CallDone(Napi::Env env, Napi::Function, ClientWrap* self, std::shared_ptr<ClientRequest>* data);
using DoneCalls = Napi::TypedThreadSafeFunction<ClientWrap, std::shared_ptr<ClientRequest>, CallDone>;

class ClientWrap : public Napi::ObjectWrap<ClientWrap> {
 public:
  explicit ClientWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ClientWrap>(info) {
    done_ = DoneCalls::New(info.Env(), "tiersync-peer-client", 0, 1, this);
    done_.Unref(info.Env());
  }
  ~ClientWrap() override {
    teardown_ = true;
    if (client_) client_->Close();
  }

  void Adopt(std::unique_ptr<peer::Client> client) { client_ = std::move(client); }
  peer::Client::Sink Sink() {
    return [this](std::shared_ptr<ClientRequest> r) {
      auto* data = new std::shared_ptr<ClientRequest>(std::move(r));
      if (teardown_ || done_.NonBlockingCall(data) != napi_ok) delete data;
    };
  }

  void Done(Napi::Env env, const std::shared_ptr<ClientRequest>& r) {
    auto it = pending_.find(r.get());
    if (it == pending_.end()) return;
    Napi::Promise::Deferred d = it->second;
    pending_.erase(it);
    if (r->failed) {
      d.Reject(MakeError(env, r->errorCode, r->error).Value());
    } else {
      Napi::Object o = Napi::Object::New(env);
      auto statuses = Napi::Uint8Array::New(env, r->statuses.size());
      std::copy(r->statuses.begin(), r->statuses.end(), statuses.Data());
      auto lengths = Napi::Uint32Array::New(env, r->lengths.size());
      std::copy(r->lengths.begin(), r->lengths.end(), lengths.Data());
      auto crcs = Napi::Uint32Array::New(env, r->crcs.size());
      std::copy(r->crcs.begin(), r->crcs.end(), crcs.Data());
      o.Set("statuses", statuses);
      o.Set("lengths", lengths);
      o.Set("crcs", crcs);
      d.Resolve(o);
    }
    if (pending_.empty()) {
      done_.Unref(env);
      Unref();
    }
  }

  // request(op, arena | null, keys, offsets: Float64Array, lengths: Uint32Array, crcs: Uint32Array, computeCrc?,
  //         rangeOffsets?: Float64Array, rangeLengths?: Uint32Array) -> Promise
  // put: lengths/crcs describe the pages at offsets; get: lengths is the room at each offset, and entries with a
  // rangeLengths[i] > 0 read bytes [rangeOffsets[i], +rangeLengths[i]) of their page.
  Napi::Value Request(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!client_ || released_) Throw(env, Code::Closed, "peer client is closed");
    std::string opName = info.Length() > 0 && info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
    auto r = std::make_shared<ClientRequest>();
    r->op = OpCode(env, opName);
    if (info.Length() < 3 || !info[2].IsArray()) Throw(env, Code::InvalidArgument, "request(op, arena, keys, offsets, lengths, crcs)");
    Napi::Array keys = info[2].As<Napi::Array>();
    const size_t n = keys.Length();
    if (n == 0 || n > peer::kMaxCount) Throw(env, Code::InvalidArgument, "keys must hold 1.." + std::to_string(peer::kMaxCount) + " entries");
    auto typed = [&](size_t i, napi_typedarray_type t, const char* name) {
      if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != t || info[i].As<Napi::TypedArray>().ElementLength() != n)
        Throw(env, Code::InvalidArgument, std::string(name) + " must be a typed array with one value per key");
    };
    const bool data = r->op == peer::kPut || r->op == peer::kGet;
    if (data) {
      if (info.Length() < 6) Throw(env, Code::InvalidArgument, "put and get need (op, arena, keys, offsets, lengths, crcs)");
      Endpoint e = EndpointOf(env, info[1], 1);
      if (!e.memory || e.memory->kind() != MemoryKind::Host) Throw(env, Code::InvalidArgument, "peer transfers move pages from and into a HostArena");
      r->arena = e.memory;
      typed(3, napi_float64_array, "offsets");
      typed(4, napi_uint32_array, "lengths");
      typed(5, napi_uint32_array, "crcs");
    }
    r->entries.resize(n);
    for (size_t i = 0; i < n; i++) {
      Napi::Value k = keys.Get(static_cast<uint32_t>(i));
      if (!k.IsString()) Throw(env, Code::InvalidArgument, "keys[" + std::to_string(i) + "] must be a string");
      r->entries[i].key = k.As<Napi::String>().Utf8Value();
      if (r->entries[i].key.size() < 16 || r->entries[i].key.size() > peer::kMaxKey ||
          r->entries[i].key.find_first_not_of("0123456789abcdef") != std::string::npos)
        Throw(env, Code::InvalidArgument, "keys[" + std::to_string(i) + "] must be 16..128 lower-case hex characters");
    }
    if (data) {
      auto off = info[3].As<Napi::Float64Array>();
      auto len = info[4].As<Napi::Uint32Array>();
      auto crc = info[5].As<Napi::Uint32Array>();
      const uint64_t size = r->arena->size();
      for (size_t i = 0; i < n; i++) {
        double o = off[i];
        if (!(o >= 0 && o <= 9007199254740991.0 && o == static_cast<double>(static_cast<uint64_t>(o))))
          Throw(env, Code::InvalidArgument, "offsets[" + std::to_string(i) + "] must be a non-negative integer");
        uint64_t ou = static_cast<uint64_t>(o);
        if (len[i] == 0 || ou > size || len[i] > size - ou)
          Throw(env, Code::OutOfRange, "entry " + std::to_string(i) + ": [" + std::to_string(ou) + ", +" + std::to_string(len[i]) + ") is outside the arena");
        r->offsets.push_back(ou);
        if (r->op == peer::kPut) {
          r->entries[i].length = len[i];
          r->entries[i].crc32c = crc[i];
          r->computeCrc = info.Length() > 6 && info[6].IsBoolean() && info[6].As<Napi::Boolean>().Value();
        } else {
          r->capacity.push_back(len[i]);
        }
      }
      if (r->op == peer::kGet && info.Length() > 8 && !info[7].IsUndefined()) {
        typed(7, napi_float64_array, "rangeOffsets");
        typed(8, napi_uint32_array, "rangeLengths");
        auto ro = info[7].As<Napi::Float64Array>();
        auto rl = info[8].As<Napi::Uint32Array>();
        for (size_t i = 0; i < n; i++) {
          if (rl[i] == 0) continue;
          if (!(ro[i] >= 0 && ro[i] < 4294967296.0 && ro[i] == static_cast<double>(static_cast<uint64_t>(ro[i]))))
            Throw(env, Code::OutOfRange, "rangeOffsets[" + std::to_string(i) + "] must be an integer in [0, 2^32)");
          if (rl[i] > len[i]) Throw(env, Code::OutOfRange, "entry " + std::to_string(i) + ": the range is longer than its room");
          r->entries[i].flags |= peer::kEntryRange;
          r->entries[i].crc32c = static_cast<uint32_t>(ro[i]);
          r->entries[i].length = rl[i];
        }
      }
    }
    auto d = Napi::Promise::Deferred::New(env);
    if (pending_.empty()) {
      done_.Ref(env);
      Ref();
    }
    pending_.emplace(r.get(), d);
    try {
      client_->Submit(r);
    } catch (const NativeError& e) {
      pending_.erase(r.get());
      if (pending_.empty()) {
        done_.Unref(env);
        Unref();
      }
      Throw(env, e.code(), e.what());
    }
    return d.Promise();
  }

  Napi::Value Streams(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), client_ ? client_->streams() : 0); }

  // Fails queued requests with ERR_CLOSED and closes the sockets; requests on the wire finish first.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    if (client_) client_->Close();  // queued requests fail through the sink before this returns
    if (!released_) {
      released_ = true;
      done_.Release();
    }
    return info.Env().Undefined();
  }

 private:
  std::unique_ptr<peer::Client> client_;
  DoneCalls done_;
  std::unordered_map<ClientRequest*, Napi::Promise::Deferred> pending_;
  bool teardown_ = false;
  bool released_ = false;
};

void CallDone(Napi::Env env, Napi::Function, ClientWrap* self, std::shared_ptr<ClientRequest>* data) {
  std::unique_ptr<std::shared_ptr<ClientRequest>> owned(data);
  if (env == nullptr || self == nullptr) return;
  self->Done(env, *owned);
}

// connectPeer(options) -> Promise<PeerClient>: connecting and the handshake run off the JS thread.
class ConnectWorker : public Napi::AsyncWorker {
 public:
  ConnectWorker(Napi::Env env, peer::ClientOptions options, Napi::Object wrapper)
      : Napi::AsyncWorker(env), options_(std::move(options)), deferred_(Napi::Promise::Deferred::New(env)), wrapper_(Napi::Persistent(wrapper)) {
    sink_ = ClientWrap::Unwrap(wrapper)->Sink();
  }
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override {
    try {
      client_ = std::make_unique<peer::Client>(options_, sink_);
    } catch (const NativeError& e) {
      code_ = e.code();
      SetError(e.what());
    }
  }
  void OnOK() override {
    ClientWrap::Unwrap(wrapper_.Value())->Adopt(std::move(client_));
    deferred_.Resolve(wrapper_.Value());
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(MakeError(Env(), code_, e.Message()).Value()); }

 private:
  peer::ClientOptions options_;
  Napi::Promise::Deferred deferred_;
  Napi::ObjectReference wrapper_;
  peer::Client::Sink sink_;
  std::unique_ptr<peer::Client> client_;
  Code code_ = Code::Io;
};

Napi::Value ConnectPeer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = OptionsArg(info, 0);
  peer::ClientOptions opts;
  opts.host = OptString(o, "host", "");
  if (opts.host.empty()) Throw(env, Code::InvalidArgument, "host must be a non-empty string");
  uint64_t port = OptUint(o, "port", 0);
  if (port == 0 || port > 65535) Throw(env, Code::InvalidArgument, "port must be in [1, 65535]");
  opts.port = static_cast<uint16_t>(port);
  opts.secret = OptString(o, "secret", "");
  opts.encrypt = OptBool(o, "encrypt", false);
  opts.streams = static_cast<unsigned>(OptUint(o, "streams", 4));
  if (opts.streams < 1 || opts.streams > 64) Throw(env, Code::InvalidArgument, "streams must be in [1, 64]");
  opts.timeoutMs = OptUint(o, "timeoutMs", 30000);
  opts.maxPayload = OptUint(o, "maxPayload", 1ull << 30);
  Napi::Object wrapper = Data(env).peerClient.New({});
  auto* worker = new ConnectWorker(env, opts, wrapper);
  Napi::Promise p = worker->Promise();
  worker->Queue();
  return p;
}

// decodePeerFrame(bytes) -> { op, requestId, count, payloadBytes, entries } (for tests and fuzzing of the decoder).
Napi::Value DecodePeerFrame(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsTypedArray()) Throw(env, Code::InvalidArgument, "bytes must be a Uint8Array");
  auto t = info[0].As<Napi::TypedArray>();
  const uint8_t* p = static_cast<const uint8_t*>(t.ArrayBuffer().Data()) + t.ByteOffset();
  size_t n = t.ByteLength();
  return Guard(env, [&]() -> Napi::Value {
    if (n < peer::kHeaderBytes) throw NativeError(Code::Protocol, "peer frame rejected: shorter than its header");
    peer::Header h = peer::DecodeHeader(p, 1ull << 30);
    if (n - peer::kHeaderBytes < h.metaBytes) throw NativeError(Code::Protocol, "peer frame rejected: entry table truncated");
    auto entries = peer::DecodeEntries(h, p + peer::kHeaderBytes);
    Napi::Object o = Napi::Object::New(env);
    o.Set("op", h.op);
    o.Set("requestId", Napi::Number::New(env, static_cast<double>(h.requestId)));
    o.Set("count", h.count);
    o.Set("payloadBytes", Napi::Number::New(env, static_cast<double>(h.payloadBytes)));
    Napi::Array arr = Napi::Array::New(env, entries.size());
    for (size_t i = 0; i < entries.size(); i++) {
      Napi::Object e = Napi::Object::New(env);
      e.Set("key", entries[i].key);
      e.Set("status", entries[i].status);
      e.Set("length", entries[i].length);
      e.Set("crc32c", entries[i].crc32c);
      arr.Set(static_cast<uint32_t>(i), e);
    }
    o.Set("entries", arr);
    return o;
  });
}

// encodePeerFrame(op, requestId, entries[{key,status,length,crc32c}], payloadBytes) -> Uint8Array (header + table).
Napi::Value EncodePeerFrame(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t op = UintArg(info, 0, "op");
  uint64_t id = UintArg(info, 1, "requestId");
  if (info.Length() < 3 || !info[2].IsArray()) Throw(env, Code::InvalidArgument, "entries must be an array");
  uint64_t payload = UintArg(info, 3, "payloadBytes");
  Napi::Array arr = info[2].As<Napi::Array>();
  std::vector<peer::Entry> entries(arr.Length());
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Object e = arr.Get(i).As<Napi::Object>();
    entries[i].key = OptString(e, "key", "");
    entries[i].status = static_cast<uint8_t>(OptUint(e, "status", 0));
    entries[i].length = static_cast<uint32_t>(OptUint(e, "length", 0));
    entries[i].crc32c = static_cast<uint32_t>(OptUint(e, "crc32c", 0));
  }
  std::vector<uint8_t> meta = peer::EncodeEntries(entries);
  auto out = Napi::Uint8Array::New(env, peer::kHeaderBytes + meta.size());
  peer::EncodeFrameHeader(static_cast<uint16_t>(op), id, static_cast<uint32_t>(entries.size()), meta, payload, out.Data());
  std::copy(meta.begin(), meta.end(), out.Data() + peer::kHeaderBytes);
  return out;
}

}  // namespace

void InitPeer(Napi::Env env, Napi::Object exports) {
  Napi::Function server = ServerWrap::DefineClass(env, "PeerServer",
                                                  {
                                                      ServerWrap::InstanceMethod("port", &ServerWrap::Port),
                                                      ServerWrap::InstanceMethod("stats", &ServerWrap::Stats),
                                                      ServerWrap::InstanceMethod("close", &ServerWrap::Close),
                                                      ServerWrap::InstanceMethod("grant", &ServerWrap::Grant),
                                                      ServerWrap::InstanceMethod("takePool", &ServerWrap::TakePool),
                                                      ServerWrap::InstanceMethod("holdKeys", &ServerWrap::HoldKeys),
                                                      ServerWrap::InstanceMethod("dropKeys", &ServerWrap::DropKeys),
                                                      ServerWrap::InstanceMethod("drain", &ServerWrap::Drain),
                                                      ServerWrap::InstanceMethod("keepSlotRecords", &ServerWrap::KeepSlotRecords),
                                                      ServerWrap::InstanceMethod("shareSlots", &ServerWrap::ShareSlots),
                                                  });
  Napi::Function client = ClientWrap::DefineClass(env, "PeerClient",
                                                  {
                                                      ClientWrap::InstanceMethod("request", &ClientWrap::Request),
                                                      ClientWrap::InstanceMethod("streams", &ClientWrap::Streams),
                                                      ClientWrap::InstanceMethod("close", &ClientWrap::Close),
                                                  });
  Data(env).peerClient = Napi::Persistent(client);
  exports.Set("PeerServer", server);
  exports.Set("PeerClient", client);
  exports.Set("connectPeer", Napi::Function::New(env, ConnectPeer, "connectPeer"));
  exports.Set("decodePeerFrame", Napi::Function::New(env, DecodePeerFrame, "decodePeerFrame"));
  exports.Set("encodePeerFrame", Napi::Function::New(env, EncodePeerFrame, "encodePeerFrame"));
  exports.Set("peerFrameCrypto", Napi::Function::New(
                                     env,
                                     [](const Napi::CallbackInfo& info) {
                                       return Guard(info.Env(), [&]() -> Napi::Value {
                                         Napi::Object o = Napi::Object::New(info.Env());
                                         o.Set("source", peer::FrameCryptoSource());
                                         o.Set("version", peer::FrameCryptoVersion());
                                         return o;
                                       });
                                     },
                                     "peerFrameCrypto"));
}

}  // namespace tiersync

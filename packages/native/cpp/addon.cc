// Module entry and the shared helpers of the binding layer.
#include <cmath>

#include "binding.h"

namespace tiersync {

void InitResp(Napi::Env env, Napi::Object exports);  // bind_resp.cc

AddonData& Data(Napi::Env env) { return *env.GetInstanceData<AddonData>(); }

Napi::Error MakeError(Napi::Env env, Code code, const std::string& message) {
  AddonData& d = Data(env);
  Napi::Object err;
  if (!d.errorClass.IsEmpty()) {
    err = d.errorClass.New({Napi::String::New(env, message), Napi::String::New(env, CodeName(code))});
  } else {
    err = Napi::Error::New(env, message).Value();
    err.Set("code", CodeName(code));
  }
  return Napi::Error(env, err);
}

void Throw(Napi::Env env, Code code, const std::string& message) { throw MakeError(env, code, message); }

Napi::Object OptionsArg(const Napi::CallbackInfo& info, size_t index) {
  if (info.Length() <= index || info[index].IsUndefined()) return Napi::Object::New(info.Env());
  if (!info[index].IsObject()) Throw(info.Env(), Code::InvalidArgument, "options must be an object");
  return info[index].As<Napi::Object>();
}

namespace {
bool IsUint53(double v) { return std::isfinite(v) && v >= 0 && std::floor(v) == v && v <= 9007199254740991.0; }
}  // namespace

uint64_t OptUint(Napi::Object o, const char* name, uint64_t fallback) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined()) return fallback;
  if (!v.IsNumber() || !IsUint53(v.As<Napi::Number>().DoubleValue()))
    Throw(o.Env(), Code::InvalidArgument, std::string(name) + " must be a non-negative integer");
  return static_cast<uint64_t>(v.As<Napi::Number>().DoubleValue());
}

double OptNumber(Napi::Object o, const char* name, double fallback) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined()) return fallback;
  if (!v.IsNumber() || !std::isfinite(v.As<Napi::Number>().DoubleValue()) || v.As<Napi::Number>().DoubleValue() < 0)
    Throw(o.Env(), Code::InvalidArgument, std::string(name) + " must be a finite non-negative number");
  return v.As<Napi::Number>().DoubleValue();
}

bool OptBool(Napi::Object o, const char* name, bool fallback) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined()) return fallback;
  if (!v.IsBoolean()) Throw(o.Env(), Code::InvalidArgument, std::string(name) + " must be a boolean");
  return v.As<Napi::Boolean>().Value();
}

std::string OptString(Napi::Object o, const char* name, const std::string& fallback) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined()) return fallback;
  if (!v.IsString()) Throw(o.Env(), Code::InvalidArgument, std::string(name) + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}

uint64_t UintArg(const Napi::CallbackInfo& info, size_t index, const char* name) {
  if (info.Length() <= index || !info[index].IsNumber() || !IsUint53(info[index].As<Napi::Number>().DoubleValue()))
    Throw(info.Env(), Code::InvalidArgument, std::string(name) + " must be a non-negative integer");
  return static_cast<uint64_t>(info[index].As<Napi::Number>().DoubleValue());
}

Endpoint EndpointOf(Napi::Env env, Napi::Value v, size_t index) {
  AddonData& d = Data(env);
  Endpoint e;
  if (v.IsObject()) {
    Napi::Object o = v.As<Napi::Object>();
    if (o.InstanceOf(d.hostArena.Value()))
      e.memory = HostArenaWrap::Unwrap(o)->arena;
    else if (o.InstanceOf(d.deviceArena.Value()))
      e.memory = DeviceArenaWrap::Unwrap(o)->memory;
    else if (o.InstanceOf(d.file.Value()))
      e.file = FileWrap::Unwrap(o)->file;
  }
  if (!e.memory && !e.file && v.IsObject() &&
      (v.As<Napi::Object>().InstanceOf(d.hostArena.Value()) || v.As<Napi::Object>().InstanceOf(d.deviceArena.Value()) ||
       v.As<Napi::Object>().InstanceOf(d.file.Value())))
    Throw(env, Code::Closed, "endpoint " + std::to_string(index) + " is closed");
  if (!e.memory && !e.file)
    Throw(env, Code::InvalidArgument, "endpoint " + std::to_string(index) + " is not an arena or file handle");
  return e;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData(new AddonData);
  InitArenas(env, exports);
  InitFile(env, exports);
  InitEngine(env, exports);
  InitUtil(env, exports);
  InitPeer(env, exports);
  InitLock(env, exports);
  InitChecksum(env, exports);
  InitHmac(env, exports);
  InitResp(env, exports);
  return exports;
}

}  // namespace tiersync

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return tiersync::Init(env, exports); }
NODE_API_MODULE(tiersync_native, InitModule)

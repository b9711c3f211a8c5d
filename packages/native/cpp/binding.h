// Shared pieces of the N-API binding layer: the per-environment data (constructors, the JS error class) and
// argument readers that refuse bad input with a typed error instead of crashing.
#pragma once
#define NAPI_VERSION 8
#include <napi.h>

#include <memory>
#include <string>

#include "engine.h"
#include "memory.h"
#include "status.h"

namespace tiersync {

struct AddonData {
  Napi::FunctionReference errorClass;  // TierSyncError, handed over by the JS wrapper at load
  Napi::FunctionReference hostArena, deviceArena, file, engine, peerClient;
};

AddonData& Data(Napi::Env env);
// Builds the typed JS error (TierSyncError when registered) for a code and message.
Napi::Error MakeError(Napi::Env env, Code code, const std::string& message);
[[noreturn]] void Throw(Napi::Env env, Code code, const std::string& message);
// Runs fn and turns a NativeError into the typed JS exception.
template <typename Fn>
auto Guard(Napi::Env env, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const NativeError& e) {
    Throw(env, e.code(), e.what());
  }
}

// Thread-safe functions whose context is an ObjectWrap: the wrap holds a reference to itself from the function's
// creation until the function's finalizer, which runs only after Release() and after every call still queued has
// run. Without it, JavaScript dropping a closed object let the garbage collector free it while a call queued before
// the close was still on its way, and that call then ran on freed memory.
template <typename Wrap>
struct WrapHold {
  Wrap* wrap;  // null once the constructor gave up (AbandonWrapCalls): the finalizer leaves the wrap alone
};

template <typename Tsfn, typename Wrap>
Tsfn NewWrapCalls(Napi::Env env, const char* name, Wrap* wrap, WrapHold<Wrap>*& hold) {
  hold = new WrapHold<Wrap>{wrap};
  auto finalize = [](Napi::Env, WrapHold<Wrap>* h, Wrap*) {
    if (h->wrap) h->wrap->Unref();
    delete h;
  };
  Tsfn calls = Tsfn::New(env, name, 0, 1, wrap, finalize, hold);
  wrap->Ref();
  return calls;
}

// For a constructor that fails after NewWrapCalls (a port in use): drops the self-reference and lets the function
// go, so the failed object is collected and its function no longer keeps the process alive.
template <typename Tsfn, typename Wrap>
void AbandonWrapCalls(Tsfn& calls, WrapHold<Wrap>* hold) {
  hold->wrap->Unref();
  hold->wrap = nullptr;
  calls.Release();
}

Napi::Object OptionsArg(const Napi::CallbackInfo& info, size_t index);
// An integer in [0, 2^53) or the fallback when absent; throws naming `name` otherwise.
uint64_t OptUint(Napi::Object o, const char* name, uint64_t fallback);
double OptNumber(Napi::Object o, const char* name, double fallback);
bool OptBool(Napi::Object o, const char* name, bool fallback);
std::string OptString(Napi::Object o, const char* name, const std::string& fallback);
uint64_t UintArg(const Napi::CallbackInfo& info, size_t index, const char* name);

// Endpoint of any wrapped arena or file object; throws ERR_INVALID_ARGUMENT for anything else.
Endpoint EndpointOf(Napi::Env env, Napi::Value v, size_t index);

void InitArenas(Napi::Env env, Napi::Object exports);
void InitFile(Napi::Env env, Napi::Object exports);
void InitEngine(Napi::Env env, Napi::Object exports);
void InitUtil(Napi::Env env, Napi::Object exports);
void InitPeer(Napi::Env env, Napi::Object exports);
void InitLock(Napi::Env env, Napi::Object exports);
void InitChecksum(Napi::Env env, Napi::Object exports);
void InitHmac(Napi::Env env, Napi::Object exports);

class HostArenaWrap : public Napi::ObjectWrap<HostArenaWrap> {
 public:
  explicit HostArenaWrap(const Napi::CallbackInfo& info);
  std::shared_ptr<HostArena> arena;

  // JS methods

  Napi::Value View(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value Info(const Napi::CallbackInfo& info);
  std::vector<Napi::Reference<Napi::ArrayBuffer>> segments_;
};

class DeviceArenaWrap : public Napi::ObjectWrap<DeviceArenaWrap> {
 public:
  explicit DeviceArenaWrap(const Napi::CallbackInfo& info);
  std::shared_ptr<Memory> memory;

  // JS methods

  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value Info(const Napi::CallbackInfo& info);
};

class FileWrap : public Napi::ObjectWrap<FileWrap> {
 public:
  explicit FileWrap(const Napi::CallbackInfo& info);
  std::shared_ptr<File> file;

  // JS methods

  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value Size(const Napi::CallbackInfo& info);
  Napi::Value Info(const Napi::CallbackInfo& info);
};

}  // namespace tiersync

// JS class TransferEngine. Batches complete on worker threads; a thread-safe function carries each finished
// batch back to the JS thread, where its promise settles. While any batch is pending the engine object and the
// thread-safe function are referenced, so neither the engine nor the event loop goes away under running work;
// when idle both are unreferenced, so an idle engine never keeps the process alive.
#include <unordered_map>

#include "binding.h"

namespace tiersync {
namespace {

class EngineWrap;
void CallJs(Napi::Env env, Napi::Function, EngineWrap* self, std::shared_ptr<Batch>* data);
using Completions = Napi::TypedThreadSafeFunction<EngineWrap, std::shared_ptr<Batch>, CallJs>;

class EngineWrap : public Napi::ObjectWrap<EngineWrap> {
 public:
  explicit EngineWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EngineWrap>(info) {
    Napi::Env env = info.Env();
    Napi::Object o = OptionsArg(info, 0);
    EngineOptions opts;
    opts.threads = static_cast<unsigned>(OptUint(o, "threads", 0));
    opts.ioDepth = static_cast<unsigned>(OptUint(o, "ioDepth", 32));
    opts.batchScheduling = OptBool(o, "batchScheduling", true);
    opts.backgroundThreads = static_cast<unsigned>(OptUint(o, "backgroundThreads", 0));
    std::string io = OptString(o, "io", "auto");
    if (io != "auto" && io != "sync") Throw(env, Code::InvalidArgument, "io must be 'auto' or 'sync', got '" + io + "'");
    if (opts.threads > 1024) Throw(env, Code::InvalidArgument, "threads must be at most 1024");
    if (opts.ioDepth < 1 || opts.ioDepth > 4096) Throw(env, Code::InvalidArgument, "ioDepth must be in [1, 4096]");
    opts.preferUring = io == "auto";
    completions_ = Completions::New(env, "tiersync-transfer", 0, 1, this);
    completions_.Unref(env);
    engine_ = std::make_unique<Engine>(opts, [this](std::shared_ptr<Batch> b) {
      auto* data = new std::shared_ptr<Batch>(std::move(b));
      if (teardown_ || completions_.NonBlockingCall(data) != napi_ok) delete data;
    });
  }

  ~EngineWrap() override {
    // Reached at garbage collection (only when idle) or environment teardown (work may still be queued). The
    // thread-safe function is not touched here: at teardown Node closes it before finalizing this object.
    teardown_ = true;
    engine_->Shutdown();
  }

  void Complete(Napi::Env env, std::shared_ptr<Batch> b) {
    auto it = pending_.find(b->id);
    if (it == pending_.end()) return;
    Napi::Promise::Deferred deferred = it->second;
    pending_.erase(it);
    int reason = b->cancel.load();
    if (b->failed) {
      deferred.Reject(MakeError(env, b->errorCode, b->errorMessage).Value());
    } else if (reason == static_cast<int>(CancelReason::Aborted)) {
      deferred.Reject(MakeError(env, Code::Aborted, "transfer batch " + std::to_string(b->id) + " was aborted").Value());
    } else if (reason == static_cast<int>(CancelReason::Timeout)) {
      deferred.Reject(MakeError(env, Code::Timeout, "transfer batch " + std::to_string(b->id) + " passed its deadline").Value());
    } else if (reason != 0) {
      deferred.Reject(MakeError(env, Code::Closed, "transfer engine closed before batch " + std::to_string(b->id) + " ran").Value());
    } else {
      Napi::Object r = Napi::Object::New(env);
      r.Set("id", Napi::Number::New(env, static_cast<double>(b->id)));
      r.Set("bytes", Napi::Number::New(env, static_cast<double>(b->bytes)));
      r.Set("descriptors", Napi::Number::New(env, static_cast<double>(b->descriptors.size())));
      r.Set("seconds", Napi::Number::New(env, static_cast<double>(b->finishedNs - b->submittedNs) / 1e9));
      if (!b->crcs.empty()) {
        auto crcs = Napi::Uint32Array::New(env, b->crcs.size());
        std::copy(b->crcs.begin(), b->crcs.end(), crcs.Data());
        r.Set("checksums", crcs);
      }
      if (!b->expected.empty()) {
        auto m = Napi::Array::New(env, b->mismatches.size());
        for (size_t i = 0; i < b->mismatches.size(); i++) m.Set(static_cast<uint32_t>(i), b->mismatches[i]);
        r.Set("mismatches", m);
      }
      deferred.Resolve(r);
    }
    if (pending_.empty()) Idle(env);
  }

  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "TransferEngine",
                       {
                           InstanceMethod("submit", &EngineWrap::Submit),
                           InstanceMethod("cancel", &EngineWrap::Cancel),
                           InstanceMethod("stats", &EngineWrap::Stats),
                           InstanceMethod("close", &EngineWrap::Close),
                       });
  }

 private:
  // submit(endpoints, descriptors: Float64Array(5n), options) -> { id, promise }
  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (closing_) Throw(env, Code::Closed, "transfer engine is closed");
    if (info.Length() < 2 || !info[0].IsArray()) Throw(env, Code::InvalidArgument, "endpoints must be an array");
    if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
      Throw(env, Code::InvalidArgument, "descriptors must be a Float64Array");
    Napi::Array eps = info[0].As<Napi::Array>();
    Napi::Float64Array desc = info[1].As<Napi::Float64Array>();
    if (desc.ElementLength() % 5 != 0)
      Throw(env, Code::InvalidArgument, "descriptors length must be a multiple of 5 (src, srcOffset, dst, dstOffset, length)");
    Napi::Object o = OptionsArg(info, 2);
    auto b = std::make_shared<Batch>();
    b->id = ++nextId_;
    b->priority = static_cast<int>(OptUint(o, "priority", 0));
    b->durable = OptBool(o, "durable", false);
    b->checksums = OptBool(o, "checksums", false);
    uint64_t timeoutMs = OptUint(o, "timeoutMs", 0);
    if (timeoutMs) b->deadlineNs = NowNs() + timeoutMs * 1000000ull;
    Napi::Value expected = o.Get("expected");
    if (!expected.IsUndefined()) {
      if (!expected.IsTypedArray() || expected.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array)
        Throw(env, Code::InvalidArgument, "expected must be a Uint32Array");
      auto e = expected.As<Napi::Uint32Array>();
      b->expected.assign(e.Data(), e.Data() + e.ElementLength());
      b->checksums = true;
    }
    for (uint32_t i = 0; i < eps.Length(); i++) b->endpoints.push_back(EndpointOf(env, eps.Get(i), i));
    const size_t n = desc.ElementLength() / 5;
    b->descriptors.resize(n);
    const double* v = desc.Data();
    for (size_t i = 0; i < n; i++) {
      const double* f = v + i * 5;
      for (int k = 0; k < 5; k++)
        if (!(f[k] >= 0 && f[k] <= 9007199254740991.0 && f[k] == static_cast<double>(static_cast<uint64_t>(f[k]))))
          Throw(env, Code::InvalidArgument, "descriptor " + std::to_string(i) + ": field " + std::to_string(k) +
                                                " is not a non-negative integer");
      if (f[0] >= eps.Length() || f[2] >= eps.Length())
        Throw(env, Code::InvalidArgument, "descriptor " + std::to_string(i) + ": endpoint index out of range");
      b->descriptors[i] = {static_cast<uint32_t>(f[0]), static_cast<uint32_t>(f[2]), static_cast<uint64_t>(f[1]),
                           static_cast<uint64_t>(f[3]), static_cast<uint64_t>(f[4])};
    }
    auto deferred = Napi::Promise::Deferred::New(env);
    if (pending_.empty()) Busy(env);
    pending_.emplace(b->id, deferred);
    uint64_t id = b->id;
    try {
      engine_->Submit(b);
    } catch (const NativeError& e) {
      pending_.erase(id);
      if (pending_.empty()) Idle(env);
      Throw(env, e.code(), e.what());
    }
    Napi::Object r = Napi::Object::New(env);
    r.Set("id", Napi::Number::New(env, static_cast<double>(id)));
    r.Set("promise", deferred.Promise());
    return r;
  }

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    uint64_t id = UintArg(info, 0, "id");
    std::string reason = info.Length() > 1 && info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "abort";
    bool found = engine_->Cancel(id, reason == "timeout" ? CancelReason::Timeout : CancelReason::Aborted);
    return Napi::Boolean::New(info.Env(), found);
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    EngineStats s = engine_->Stats();
    auto num = [&](uint64_t v) { return Napi::Number::New(env, static_cast<double>(v)); };
    Napi::Object paths = Napi::Object::New(env);
    for (int p = 0; p < static_cast<int>(Path::Count); p++) {
      Napi::Object e = Napi::Object::New(env);
      e.Set("bytes", num(s.bytes[p]));
      e.Set("ops", num(s.ops[p]));
      paths.Set(PathName(static_cast<Path>(p)), e);
    }
    Napi::Object queued = Napi::Object::New(env);
    queued.Set("demand", num(s.queued[kDemand]));
    queued.Set("prefetch", num(s.queued[kPrefetch]));
    queued.Set("writeBack", num(s.queued[kWriteBack]));
    Napi::Object r = Napi::Object::New(env);
    r.Set("paths", paths);
    r.Set("queued", queued);
    r.Set("running", num(s.running));
    r.Set("runningBackground", num(s.runningBackground));
    r.Set("inflightBatches", num(s.inflightBatches));
    r.Set("completedBatches", num(s.completedBatches));
    r.Set("failedBatches", num(s.failedBatches));
    r.Set("cancelledBatches", num(s.cancelledBatches));
    r.Set("timedOutBatches", num(s.timedOutBatches));
    r.Set("checksumMismatches", num(s.checksumMismatches));
    r.Set("busyMs", Napi::Number::New(env, static_cast<double>(s.busyNs) / 1e6));
    r.Set("directOps", num(s.directOps));
    r.Set("bufferedOps", num(s.bufferedOps));
    r.Set("threads", num(s.threads));
    r.Set("backgroundThreads", num(s.backgroundThreads));
    r.Set("io", s.uring ? "io_uring" : "sync");
    return r;
  }

  // close() -> Promise<void>: refuses new batches at once, resolves when the pending ones have settled.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto deferred = Napi::Promise::Deferred::New(env);
    closing_ = true;
    closeWaiters_.push_back(deferred);
    if (pending_.empty()) Finish(env);
    return deferred.Promise();
  }

  // Joins the workers and lets the thread-safe function go; runs once, when closed and idle.
  void Finish(Napi::Env env) {
    engine_->Shutdown();
    if (!released_) {
      released_ = true;
      completions_.Release();
    }
    for (auto& d : closeWaiters_) d.Resolve(env.Undefined());
    closeWaiters_.clear();
  }

  void Busy(Napi::Env env) {
    completions_.Ref(env);
    Ref();
  }

  void Idle(Napi::Env env) {
    completions_.Unref(env);
    if (closing_) Finish(env);
    Unref();
  }

  std::unique_ptr<Engine> engine_;
  Completions completions_;
  std::unordered_map<uint64_t, Napi::Promise::Deferred> pending_;
  std::vector<Napi::Promise::Deferred> closeWaiters_;
  uint64_t nextId_ = 0;
  bool closing_ = false;
  bool teardown_ = false;
  bool released_ = false;
};

void CallJs(Napi::Env env, Napi::Function, EngineWrap* self, std::shared_ptr<Batch>* data) {
  std::unique_ptr<std::shared_ptr<Batch>> owned(data);
  if (env == nullptr || self == nullptr) return;  // environment going away
  self->Complete(env, *owned);
}

}  // namespace

void InitEngine(Napi::Env env, Napi::Object exports) {
  Napi::Function cls = EngineWrap::Define(env);
  Data(env).engine = Napi::Persistent(cls);
  exports.Set("TransferEngine", cls);
}

}  // namespace tiersync

// crc32cRanges(arena, offsets, lengths, threads?): the CRC32C of many ranges of one host arena, computed off the JS
// thread. A daemon checks the pages a same-host client copied into its shared arena with it before they become
// visible, without stalling its event loop for the tens of milliseconds a few hundred MiB take.
//
// Shape (as sharp and classic-level): a plain baton of inputs and outputs; Execute() touches only the baton (the
// arena is held by shared_ptr, so closing it from JS meanwhile cannot unmap the bytes under the workers); OnOK()
// turns the baton into a Uint32Array and settles the promise. Ranges are spread over `threads` native threads (the
// libuv worker plus threads-1 of its own), each taking the next range from an atomic counter.
#include <atomic>
#include <thread>
#include <vector>

#include "binding.h"
#include "crc32c.h"

namespace tiersync {
namespace {

struct ChecksumBaton {
  std::shared_ptr<Memory> arena;
  std::vector<uint64_t> offsets;
  std::vector<uint32_t> lengths;
  std::vector<uint32_t> crcs;
  unsigned threads = 1;
};

class ChecksumWorker : public Napi::AsyncWorker {
 public:
  ChecksumWorker(Napi::Env env, ChecksumBaton baton)
      : Napi::AsyncWorker(env), baton_(std::move(baton)), deferred_(Napi::Promise::Deferred::New(env)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    ChecksumBaton& b = baton_;
    std::atomic<size_t> next{0};
    const uint8_t* base = b.arena->host();
    auto run = [&] {
      for (size_t i = next.fetch_add(1, std::memory_order_relaxed); i < b.offsets.size(); i = next.fetch_add(1, std::memory_order_relaxed))
        b.crcs[i] = Crc32c(0, base + b.offsets[i], b.lengths[i]);
    };
    std::vector<std::thread> helpers;
    const size_t extra = std::min<size_t>(b.threads - 1, b.offsets.size() > 0 ? b.offsets.size() - 1 : 0);
    helpers.reserve(extra);
    try {
      for (size_t t = 0; t < extra; t++) helpers.emplace_back(run);
    } catch (const std::system_error&) {
      // No thread to spare: the ones started (and this one) finish the work.
    }
    run();
    for (auto& h : helpers) h.join();
  }

  void OnOK() override {
    Napi::Env env = Env();
    auto out = Napi::Uint32Array::New(env, baton_.crcs.size());
    std::copy(baton_.crcs.begin(), baton_.crcs.end(), out.Data());
    deferred_.Resolve(out);
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  ChecksumBaton baton_;
  Napi::Promise::Deferred deferred_;
};

Napi::Value Crc32cRanges(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  AddonData& d = Data(env);
  if (info.Length() < 3 || !info[0].IsObject() || !info[0].As<Napi::Object>().InstanceOf(d.hostArena.Value()))
    Throw(env, Code::InvalidArgument, "arena must be a HostArena");
  std::shared_ptr<HostArena> arena = HostArenaWrap::Unwrap(info[0].As<Napi::Object>())->arena;
  if (!arena || arena->closed()) Throw(env, Code::Closed, "arena is closed");
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
    Throw(env, Code::InvalidArgument, "offsets must be a Float64Array");
  if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array)
    Throw(env, Code::InvalidArgument, "lengths must be a Uint32Array");
  auto offsets = info[1].As<Napi::Float64Array>();
  auto lengths = info[2].As<Napi::Uint32Array>();
  if (offsets.ElementLength() != lengths.ElementLength())
    Throw(env, Code::InvalidArgument, "offsets and lengths must have one entry per range");
  uint64_t threads = 1;
  if (info.Length() > 3 && !info[3].IsUndefined()) threads = UintArg(info, 3, "threads");
  if (threads < 1 || threads > 64) Throw(env, Code::InvalidArgument, "threads must be an integer in [1, 64]");
  ChecksumBaton b;
  b.threads = static_cast<unsigned>(threads);
  const size_t n = offsets.ElementLength();
  b.offsets.resize(n);
  b.lengths.resize(n);
  b.crcs.assign(n, 0);
  // Checked here, before anything is queued: a range outside the arena is refused, never read.
  for (size_t i = 0; i < n; i++) {
    double o = offsets[i];
    if (!(o >= 0) || o != static_cast<double>(static_cast<uint64_t>(o)) || o > 9007199254740991.0)
      Throw(env, Code::InvalidArgument, "offsets[" + std::to_string(i) + "] must be a non-negative integer");
    b.offsets[i] = static_cast<uint64_t>(o);
    b.lengths[i] = lengths[i];
    if (b.offsets[i] + b.lengths[i] > arena->size())
      Throw(env, Code::OutOfRange, "range " + std::to_string(i) + " [" + std::to_string(b.offsets[i]) + ", +" + std::to_string(b.lengths[i]) +
                                       ") exceeds arena capacity " + std::to_string(arena->size()));
  }
  b.arena = std::move(arena);
  auto* worker = new ChecksumWorker(env, std::move(b));
  Napi::Promise p = worker->Promise();
  worker->Queue();
  return p;
}

}  // namespace

void InitChecksum(Napi::Env env, Napi::Object exports) { exports.Set("crc32cRanges", Napi::Function::New(env, Crc32cRanges)); }

}  // namespace tiersync

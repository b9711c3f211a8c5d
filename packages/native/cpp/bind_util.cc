// Free functions: error-class registration, CRC32C over JS bytes, capability probes, benchmark baselines.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "binding.h"
#include "crc32c.h"
#include "cuda.h"
#include "io_queue.h"
#include "peer_protocol.h"

namespace tiersync {
namespace {

Napi::Value SetErrorClass(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsFunction()) Throw(info.Env(), Code::InvalidArgument, "error class must be a function");
  Data(info.Env()).errorClass = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

Napi::Value Crc32cJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsTypedArray())
    Throw(env, Code::InvalidArgument, "data must be a Uint8Array (or another TypedArray)");
  Napi::TypedArray t = info[0].As<Napi::TypedArray>();
  uint32_t seed = 0;
  if (info.Length() > 1 && !info[1].IsUndefined()) {
    uint64_t s = UintArg(info, 1, "seed");
    if (s > 0xffffffffu) Throw(env, Code::InvalidArgument, "seed must be a 32-bit unsigned integer");
    seed = static_cast<uint32_t>(s);
  }
  const uint8_t* p = static_cast<const uint8_t*>(t.ArrayBuffer().Data()) + t.ByteOffset();
  // Third argument (tests, benchmarks): true = the table path, or an implementation's name (crc32cImpls).
  if (info.Length() > 2 && info[2].IsString()) {
    std::string name = info[2].As<Napi::String>().Utf8Value();
    for (Crc32cImpl impl : kCrc32cImpls) {
      if (name != Crc32cImplName(impl)) continue;
      if (!Crc32cAvailable(impl)) Throw(env, Code::Unsupported, "CRC32C implementation '" + name + "' is not available on this CPU/build");
      // Fourth argument: a TypedArray of at least as many bytes to copy the data into (the copy-and-checksum path).
      uint8_t* to = nullptr;
      if (info.Length() > 3 && !info[3].IsUndefined()) {
        if (!info[3].IsTypedArray()) Throw(env, Code::InvalidArgument, "copy destination must be a TypedArray");
        Napi::TypedArray d = info[3].As<Napi::TypedArray>();
        if (d.ByteLength() < t.ByteLength()) Throw(env, Code::OutOfRange, "copy destination is smaller than the data");
        to = static_cast<uint8_t*>(d.ArrayBuffer().Data()) + d.ByteOffset();
      }
      return Napi::Number::New(env, Crc32cWith(impl, seed, to, p, t.ByteLength()));
    }
    Throw(env, Code::InvalidArgument, "unknown CRC32C implementation '" + name + "'");
  }
  bool table = info.Length() > 2 && info[2].IsBoolean() && info[2].As<Napi::Boolean>().Value();
  return Napi::Number::New(env, table ? Crc32cTable(seed, p, t.ByteLength()) : Crc32c(seed, p, t.ByteLength()));
}

// {selected, available}: the CRC32C implementations this CPU and build can run, by name.
Napi::Value Crc32cImpls(Napi::Env env) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("selected", Crc32cImplName(Crc32cSelected()));
  o.Set("folding", Crc32cFolding());
  Napi::Array list = Napi::Array::New(env);
  uint32_t n = 0;
  for (Crc32cImpl impl : kCrc32cImpls)
    if (Crc32cAvailable(impl)) list.Set(n++, Crc32cImplName(impl));
  o.Set("available", list);
  return o;
}

Napi::Value CudaStatusJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const cuda::Status& s = cuda::GetStatus();
  Napi::Object o = Napi::Object::New(env);
  o.Set("available", s.available);
  o.Set("devices", s.devices);
  o.Set("runtimeVersion", s.runtimeVersion);
  o.Set("library", s.library);
  if (!s.available) o.Set("reason", s.reason);
  return o;
}

Napi::Value IoUringStatusJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string why;
  bool ok = IoQueue::UringAvailable(&why);
  Napi::Object o = Napi::Object::New(env);
  o.Set("available", ok);
  if (!ok) o.Set("reason", why);
  return o;
}

// probeDirect(dir): can this filesystem do O_DIRECT I/O? Writes and reads one aligned block in a temp file.
Napi::Value ProbeDirectJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) Throw(env, Code::InvalidArgument, "directory must be a string");
  std::string path = info[0].As<Napi::String>().Utf8Value() + "/.tiersync-direct-probe-XXXXXX";
  Napi::Object o = Napi::Object::New(env);
  std::vector<char> name(path.begin(), path.end());
  name.push_back('\0');
  int fd = mkstemp(name.data());
  if (fd < 0) {
    o.Set("supported", false);
    o.Set("reason", "cannot create a file there: " + ErrnoText(errno));
    return o;
  }
  close(fd);
  std::string reason;
  fd = open(name.data(), O_RDWR | O_DIRECT);
  if (fd < 0) {
    reason = "open(O_DIRECT): " + ErrnoText(errno);
  } else {
    void* buf = nullptr;
    if (posix_memalign(&buf, 4096, 4096) != 0) buf = nullptr;
    if (buf) {
      std::memset(buf, 0x5a, 4096);
      if (pwrite(fd, buf, 4096, 0) != 4096) reason = "aligned pwrite(O_DIRECT): " + ErrnoText(errno);
      else if (pread(fd, buf, 4096, 0) != 4096) reason = "aligned pread(O_DIRECT): " + ErrnoText(errno);
      free(buf);
    }
    close(fd);
  }
  unlink(name.data());
  o.Set("supported", reason.empty());
  if (!reason.empty()) o.Set("reason", reason);
  return o;
}

// Benchmark baseline: plain memcpy of `bytes` from one host/sim memory to another on `threads` threads, in calls
// of `chunk` bytes (the page size being compared). Runs on the calling thread; benchmarks only.
Napi::Value BenchMemcpy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Endpoint dst = EndpointOf(env, info[0], 0);
  Endpoint src = EndpointOf(env, info[1], 1);
  uint64_t bytes = UintArg(info, 2, "bytes");
  uint64_t threads = UintArg(info, 3, "threads");
  uint64_t chunk = UintArg(info, 4, "chunk");
  if (!dst.memory || !src.memory || !dst.memory->host() || !src.memory->host() || bytes > dst.memory->size() ||
      bytes > src.memory->size() || threads == 0 || chunk == 0)
    Throw(env, Code::InvalidArgument, "benchMemcpy needs two host-visible arenas of at least `bytes`");
  uint8_t* to = dst.memory->host();
  const uint8_t* from = src.memory->host();
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  uint64_t per = (bytes / threads + chunk - 1) / chunk * chunk;
  for (uint64_t t = 0; t < threads; t++) {
    uint64_t begin = std::min(bytes, t * per), end = std::min(bytes, begin + per);
    pool.emplace_back([=] {
      for (uint64_t off = begin; off < end; off += chunk) std::memcpy(to + off, from + off, std::min(chunk, end - off));
    });
  }
  for (auto& t : pool) t.join();
  return Napi::Number::New(env, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// Benchmark baseline: a plain sequential pwrite (then fdatasync) or pread loop with O_DIRECT, `block` bytes per
// call, cycling through the arena. Returns seconds.
Napi::Value BenchFileLoop(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsString())
    Throw(env, Code::InvalidArgument, "benchFileLoop(path, 'write'|'read', arena, bytes, block)");
  std::string path = info[0].As<Napi::String>().Utf8Value();
  bool write = info[1].As<Napi::String>().Utf8Value() == "write";
  Endpoint arena = EndpointOf(env, info[2], 2);
  uint64_t bytes = UintArg(info, 3, "bytes");
  uint64_t block = UintArg(info, 4, "block");
  if (!arena.memory || !arena.memory->host() || block == 0 || block % 4096 || block > arena.memory->size())
    Throw(env, Code::InvalidArgument, "benchFileLoop needs a host arena and a 4 KiB-aligned block");
  int fd = open(path.c_str(), (write ? O_WRONLY | O_CREAT : O_RDONLY) | O_DIRECT, 0644);
  if (fd < 0) Throw(env, Code::Io, "open " + path + ": " + ErrnoText(errno));
  uint8_t* mem = arena.memory->host();
  uint64_t span = arena.memory->size() / block * block;
  auto start = std::chrono::steady_clock::now();
  for (uint64_t off = 0; off < bytes; off += block) {
    ssize_t n = write ? pwrite(fd, mem + off % span, block, static_cast<off_t>(off))
                      : pread(fd, mem + off % span, block, static_cast<off_t>(off));
    if (n != static_cast<ssize_t>(block)) {
      int e = errno;
      close(fd);
      Throw(env, Code::Io, std::string(write ? "pwrite" : "pread") + " at " + std::to_string(off) + ": " + ErrnoText(e));
    }
  }
  if (write) fdatasync(fd);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  close(fd);
  return Napi::Number::New(env, seconds);
}

// Benchmark baseline: `bytes` from one arena to another over one loopback TCP connection, a sender thread and a
// receiver thread, in `chunk`-byte send/recv calls. The link's limit for the peer tier. Returns seconds.
// benchTcp(src, dst, bytes, chunk[, netns, address]): with a network namespace (its name under /run/netns; root
// only), the receiving thread joins it and listens on `address` there, so the bytes cross the links that lead
// there (a shaped veth pair in `bench tiers`) instead of loopback.
Napi::Value BenchTcp(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Endpoint src = EndpointOf(env, info[0], 0);
  Endpoint dst = EndpointOf(env, info[1], 1);
  uint64_t bytes = UintArg(info, 2, "bytes");
  uint64_t chunk = UintArg(info, 3, "chunk");
  if (!src.memory || !dst.memory || !src.memory->host() || !dst.memory->host() || chunk == 0 || chunk > src.memory->size() ||
      chunk > dst.memory->size())
    Throw(env, Code::InvalidArgument, "benchTcp needs two host arenas of at least `chunk` bytes");
  std::string netns, address = "127.0.0.1";
  if (info.Length() > 4 && !info[4].IsUndefined()) {
    if (!info[4].IsString() || info.Length() < 6 || !info[5].IsString()) Throw(env, Code::InvalidArgument, "benchTcp: a network namespace needs the address to listen on there");
    netns = info[4].As<Napi::String>().Utf8Value();
    address = info[5].As<Napi::String>().Utf8Value();
    if (netns.empty() || netns.find('/') != std::string::npos) Throw(env, Code::InvalidArgument, "benchTcp: '" + netns + "' is not a network namespace name");
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) Throw(env, Code::InvalidArgument, "benchTcp: '" + address + "' is not an IPv4 address");
  uint64_t span = src.memory->size() / chunk * chunk;
  uint8_t* from = src.memory->host();
  uint8_t* to = dst.memory->host();
  uint64_t dspan = dst.memory->size() / chunk * chunk;
  std::string failure;  // the receiver's; read after join
  std::promise<uint16_t> listening;  // the port, or 0 when the receiver could not listen (failure says why)
  std::thread receiver([&] {
    int lfd = -1;
    try {
      if (!netns.empty()) {
        int ns = open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
        if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) throw NativeError(Code::Io, "cannot join network namespace '" + netns + "': " + ErrnoText(errno));
        close(ns);
      }
      lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in bound = addr;
      socklen_t len = sizeof bound;
      if (lfd < 0 || bind(lfd, reinterpret_cast<sockaddr*>(&bound), len) != 0 || listen(lfd, 1) != 0 ||
          getsockname(lfd, reinterpret_cast<sockaddr*>(&bound), &len) != 0)
        throw NativeError(Code::Io, "listen on " + address + " failed: " + ErrnoText(errno));
      listening.set_value(ntohs(bound.sin_port));
    } catch (const std::exception& e) {
      failure = e.what();
      if (lfd >= 0) close(lfd);
      listening.set_value(0);
      return;
    }
    pollfd p{lfd, POLLIN, 0};
    int fd = poll(&p, 1, 30000) == 1 ? accept(lfd, nullptr, nullptr) : -1;
    close(lfd);
    if (fd < 0) {
      failure = "no connection within 30 s";
      return;
    }
    peer::SetSocketOptions(fd, 30000);
    try {
      for (uint64_t off = 0; off < bytes; off += chunk) peer::RecvAll(fd, to + off % dspan, std::min(chunk, bytes - off));
    } catch (const std::exception& e) {
      failure = e.what();
    }
    close(fd);
  });
  uint16_t port = listening.get_future().get();
  std::string sendFailure;
  auto start = std::chrono::steady_clock::now();
  if (port) {
    addr.sin_port = htons(port);
    int cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(cfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      peer::SetSocketOptions(cfd, 30000);
      try {
        for (uint64_t off = 0; off < bytes; off += chunk) peer::SendAll(cfd, from + off % span, std::min(chunk, bytes - off));
      } catch (const std::exception& e) {
        sendFailure = e.what();
      }
    } else {
      sendFailure = "connect to " + address + " failed: " + ErrnoText(errno);
    }
    close(cfd);
  }
  receiver.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The sender's failure first: when it could not connect, the receiver only saw nobody come.
  if (!failure.empty() || !sendFailure.empty()) Throw(env, Code::Io, "benchTcp: " + (sendFailure.empty() ? failure : sendFailure));
  return Napi::Number::New(env, seconds);
}

}  // namespace

void InitUtil(Napi::Env env, Napi::Object exports) {
  exports.Set("setErrorClass", Napi::Function::New(env, SetErrorClass, "setErrorClass"));
  exports.Set("crc32c", Napi::Function::New(env, Crc32cJs, "crc32c"));
  exports.Set("crc32cImpls", Crc32cImpls(env));
  exports.Set("cudaStatus", Napi::Function::New(env, CudaStatusJs, "cudaStatus"));
  exports.Set("ioUringStatus", Napi::Function::New(env, IoUringStatusJs, "ioUringStatus"));
  exports.Set("probeDirect", Napi::Function::New(env, ProbeDirectJs, "probeDirect"));
  exports.Set("benchMemcpy", Napi::Function::New(env, BenchMemcpy, "benchMemcpy"));
  exports.Set("benchFileLoop", Napi::Function::New(env, BenchFileLoop, "benchFileLoop"));
  exports.Set("benchTcp", Napi::Function::New(env, BenchTcp, "benchTcp"));
}

}  // namespace tiersync

#include "engine.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <numeric>

#include "crc32c.h"
#include "cuda.h"
#include "io_queue.h"

namespace tiersync {
namespace {

// Memory copies without checksums are cut into pieces this large so one big descriptor spreads over workers.
constexpr uint64_t kSplitBytes = 8ull << 20;
// Copies check for cancellation and deadlines between chunks of this size.
constexpr uint64_t kCopyChunk = 64ull << 20;
// With checksums, copy and checksum in chunks that stay in L2 between the two passes.
constexpr uint64_t kCrcChunk = 256ull << 10;
// CUDA copies: adjacent pieces between the same arenas form one group up to this size (and kCudaGroupPieces
// pieces), enqueued back to back on one worker's stream with one wait at the end (many small pages then cost one
// synchronization, not one each); larger transfers still spread over workers, i.e. streams and copy engines.
constexpr uint64_t kCudaGroupBytes = 32ull << 20;
constexpr uint32_t kCudaGroupPieces = 1024;
// File work: adjacent descriptors coalesce into groups up to this size, run as ops of kIoOpBytes each.
constexpr uint64_t kFileGroupBytes = 32ull << 20;
constexpr uint64_t kIoOpBytes = 4ull << 20;  // a common max_sectors_kb: larger requests get split anyway
// A file group of one op (at most kIoOpBytes) waits on the disk's latency as much as on its bytes, the smaller the
// more (a 64 KiB chunk of every page of a layer-wise read): a worker takes up to ioDepth of them from the front of
// the queue (same batch, up to kSmallTakeBytes together) and submits their ops to io_uring at once, so `threads`
// workers keep threads x ioDepth operations in the disk instead of `threads`; each then checksums its groups.
constexpr uint64_t kSmallFileGroupBytes = kIoOpBytes;
constexpr uint64_t kSmallTakeBytes = 16ull << 20;
constexpr size_t kMaxIov = IOV_MAX;

uint64_t GroupBytes(const Batch& b, uint32_t g) {
  uint64_t n = 0;
  for (uint32_t k = b.groups[g].begin; k < b.groups[g].end; k++) n += b.pieces[k].length;
  return n;
}

bool IsDevice(const Endpoint& e) { return e.memory && e.memory->kind() != MemoryKind::Host; }
bool IsCuda(const Endpoint& e) { return e.memory && e.memory->kind() == MemoryKind::Cuda; }

Path Classify(const Endpoint& s, const Endpoint& d) {
  if (s.file) return IsDevice(d) ? Path::FileToDevice : Path::FileToHost;
  if (d.file) return IsDevice(s) ? Path::DeviceToFile : Path::HostToFile;
  if (IsDevice(s)) return IsDevice(d) ? Path::DeviceToDevice : Path::DeviceToHost;
  return IsDevice(d) ? Path::HostToDevice : Path::HostToHost;
}

bool Aligned(uint64_t v) { return v % File::kDirectAlignment == 0; }

std::string Where(size_t i) { return "descriptor " + std::to_string(i) + ": "; }

// Each worker keeps its own CUDA streams and events (created on first use).
thread_local cuda::CopyQueue* tlsCopies = nullptr;

}  // namespace

const char* PathName(Path p) {
  switch (p) {
    case Path::HostToHost: return "host->host";
    case Path::HostToDevice: return "host->device";
    case Path::DeviceToHost: return "device->host";
    case Path::DeviceToDevice: return "device->device";
    case Path::HostToFile: return "host->file";
    case Path::FileToHost: return "file->host";
    case Path::DeviceToFile: return "device->file";
    case Path::FileToDevice: return "file->device";
    case Path::Count: break;
  }
  return "?";
}

void Batch::Fail(Code code, const std::string& message) {
  std::lock_guard<std::mutex> lock(errorMutex);
  if (failed) return;
  failed = true;
  errorCode = code;
  errorMessage = message;
  int none = 0;
  cancel.compare_exchange_strong(none, static_cast<int>(CancelReason::Failed));
}

bool Batch::Stopped(uint64_t nowNs) {
  if (cancel.load(std::memory_order_relaxed) != 0) return true;
  if (deadlineNs != 0 && nowNs > deadlineNs) {
    int none = 0;
    cancel.compare_exchange_strong(none, static_cast<int>(CancelReason::Timeout));
    return true;
  }
  return false;
}

Engine::Engine(const EngineOptions& options, Sink sink) : options_(options), sink_(std::move(sink)) {
  unsigned n = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  if (options_.ioDepth == 0) options_.ioDepth = 1;
  uring_ = options.preferUring && IoQueue::UringAvailable(nullptr);
  backgroundLimit_ = options.backgroundThreads ? std::min(options.backgroundThreads, n) : std::max(1u, n - 1);
  workers_.reserve(n);
  for (unsigned i = 0; i < n; i++) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

Engine::~Engine() { Shutdown(); }

void Engine::Validate(Batch& b) {
  if (b.priority < 0 || b.priority >= kPriorities) throw NativeError(Code::InvalidArgument, "priority must be 0, 1 or 2");
  for (size_t i = 0; i < b.endpoints.size(); i++) {
    const Endpoint& e = b.endpoints[i];
    if (!e.memory == !e.file) throw NativeError(Code::InvalidArgument, "endpoint " + std::to_string(i) + " is not an arena or file");
    if ((e.memory && e.memory->closed()) || (e.file && e.file->closed()))
      throw NativeError(Code::Closed, "endpoint " + std::to_string(i) + " is closed");
  }
  if (!b.expected.empty() && b.expected.size() != b.descriptors.size())
    throw NativeError(Code::InvalidArgument, "expected checksums: " + std::to_string(b.expected.size()) +
                                                 " given for " + std::to_string(b.descriptors.size()) + " descriptors");
  std::vector<uint64_t> fileSizes(b.endpoints.size(), UINT64_MAX);
  b.paths.resize(b.descriptors.size());
  for (size_t i = 0; i < b.descriptors.size(); i++) {
    const Descriptor& d = b.descriptors[i];
    if (d.src >= b.endpoints.size() || d.dst >= b.endpoints.size())
      throw NativeError(Code::InvalidArgument, Where(i) + "endpoint index out of range");
    if (d.length == 0) throw NativeError(Code::InvalidArgument, Where(i) + "length must be > 0");
    const Endpoint& s = b.endpoints[d.src];
    const Endpoint& t = b.endpoints[d.dst];
    if (s.file && t.file) throw NativeError(Code::Unsupported, Where(i) + "file->file copies are not supported");
    if ((s.file && IsCuda(t)) || (t.file && IsCuda(s)))
      throw NativeError(Code::Unsupported, Where(i) + "cuda<->file needs GPUDirect Storage; stage through a host arena");
    if (IsCuda(s) && IsCuda(t) && (b.checksums || !b.expected.empty()))
      throw NativeError(Code::Unsupported, Where(i) + "checksums need a host-visible side; cuda->cuda has none");
    auto checkMemory = [&](const Endpoint& e, uint64_t off, const char* role) {
      uint64_t size = e.memory->size();
      if (off > size || d.length > size - off)
        throw NativeError(Code::OutOfRange, Where(i) + role + " range [" + std::to_string(off) + ", " +
                                                std::to_string(off) + "+" + std::to_string(d.length) +
                                                ") exceeds arena size " + std::to_string(size));
    };
    if (s.memory) checkMemory(s, d.srcOffset, "source");
    if (t.memory) checkMemory(t, d.dstOffset, "destination");
    if (t.file && !t.file->writable())
      throw NativeError(Code::ReadOnly, Where(i) + "destination file " + t.file->path() + " is opened read-only");
    if (s.file) {
      uint64_t& size = fileSizes[d.src];
      if (size == UINT64_MAX) size = s.file->Size();
      if (d.srcOffset > size || d.length > size - d.srcOffset)
        throw NativeError(Code::OutOfRange, Where(i) + "reads [" + std::to_string(d.srcOffset) + ", +" +
                                                std::to_string(d.length) + ") past the end of " + s.file->path() +
                                                " (" + std::to_string(size) + " bytes)");
    }
    if (d.src == d.dst && d.srcOffset < d.dstOffset + d.length && d.dstOffset < d.srcOffset + d.length)
      throw NativeError(Code::Overlap, Where(i) + "source and destination ranges overlap");
    if (s.memory && t.memory && s.memory == t.memory && d.srcOffset < d.dstOffset + d.length &&
        d.dstOffset < d.srcOffset + d.length)
      throw NativeError(Code::Overlap, Where(i) + "source and destination ranges overlap");
    const Endpoint* f = s.file ? &s : (t.file ? &t : nullptr);
    if (f && f->file->direct() == DirectMode::Always) {
      const Endpoint& m = s.file ? t : s;
      uint64_t fileOff = s.file ? d.srcOffset : d.dstOffset;
      uint64_t memAddr = reinterpret_cast<uint64_t>(m.memory->host()) + (s.file ? d.dstOffset : d.srcOffset);
      if (!Aligned(fileOff) || !Aligned(d.length) || !Aligned(memAddr))
        throw NativeError(Code::Misaligned, Where(i) + "O_DIRECT needs file offset, length and memory address aligned to " +
                                                std::to_string(File::kDirectAlignment) + " bytes (file offset " +
                                                std::to_string(fileOff) + ", length " + std::to_string(d.length) + ")");
    }
    b.paths[i] = Classify(s, t);
    b.bytes += d.length;
  }
}

void Engine::Plan(Batch& b) {
  const size_t n = b.descriptors.size();
  if (b.checksums || !b.expected.empty()) b.crcs.assign(n, 0);
  // Sort by (source, destination, file offset) so that adjacent file ranges meet and coalesce.
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto fileOffset = [&](uint32_t i) {
    const Descriptor& d = b.descriptors[i];
    return b.endpoints[d.src].file ? d.srcOffset : d.dstOffset;
  };
  std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    const Descriptor& a = b.descriptors[x];
    const Descriptor& c = b.descriptors[y];
    if (a.src != c.src) return a.src < c.src;
    if (a.dst != c.dst) return a.dst < c.dst;
    return fileOffset(x) < fileOffset(y);
  });
  const bool splittable = !b.checksums && b.expected.empty();
  uint64_t groupBytes = 0, groupEnd = 0;
  uint64_t cudaBytes = 0;  // bytes of the open CUDA group (0: none open)
  for (uint32_t i : order) {
    const Descriptor& d = b.descriptors[i];
    const bool file = b.endpoints[d.src].file || b.endpoints[d.dst].file;
    if (!file && (IsCuda(b.endpoints[d.src]) || IsCuda(b.endpoints[d.dst]))) {
      uint64_t step = splittable ? kSplitBytes : d.length;
      for (uint64_t off = 0; off < d.length; off += step) {
        const uint64_t n = std::min(step, d.length - off);
        bool extend = false;
        if (cudaBytes > 0) {
          const Group& g = b.groups.back();
          const Descriptor& prev = b.descriptors[b.pieces[g.end - 1].descriptor];
          extend = prev.src == d.src && prev.dst == d.dst && cudaBytes + n <= kCudaGroupBytes && g.end - g.begin < kCudaGroupPieces;
        }
        b.pieces.push_back({i, off, n});
        if (extend) {
          b.groups.back().end++;
          cudaBytes += n;
        } else {
          b.groups.push_back({static_cast<uint32_t>(b.pieces.size() - 1), static_cast<uint32_t>(b.pieces.size())});
          cudaBytes = n;
        }
      }
      groupBytes = 0;
      continue;
    }
    cudaBytes = 0;
    if (!file) {
      uint64_t step = splittable ? kSplitBytes : d.length;
      for (uint64_t off = 0; off < d.length; off += step) {
        b.pieces.push_back({i, off, std::min(step, d.length - off)});
        b.groups.push_back({static_cast<uint32_t>(b.pieces.size() - 1), static_cast<uint32_t>(b.pieces.size())});
      }
      groupBytes = 0;
      continue;
    }
    bool extend = false;
    if (!b.groups.empty() && groupBytes > 0) {
      const Group& g = b.groups.back();
      const Descriptor& prev = b.descriptors[b.pieces[g.end - 1].descriptor];
      extend = prev.src == d.src && prev.dst == d.dst && groupEnd == fileOffset(i) &&
               groupBytes + d.length <= kFileGroupBytes && (g.end - g.begin) < kMaxIov;
    }
    b.pieces.push_back({i, 0, d.length});
    if (extend) {
      b.groups.back().end++;
      groupBytes += d.length;
    } else {
      b.groups.push_back({static_cast<uint32_t>(b.pieces.size() - 1), static_cast<uint32_t>(b.pieces.size())});
      groupBytes = d.length;
    }
    groupEnd = fileOffset(i) + d.length;
  }
}

void Engine::Submit(std::shared_ptr<Batch> batch) {
  Validate(*batch);
  Plan(*batch);
  batch->submittedNs = NowNs();
  batch->remaining = batch->groups.size();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw NativeError(Code::Closed, "transfer engine is closed");
    if (!batch->groups.empty()) {
      live_[batch->id] = batch;
      for (uint32_t g = 0; g < batch->groups.size(); g++) queues_[batch->priority].push_back({batch, g});
    }
  }
  if (batch->groups.empty()) {
    batch->finishedNs = NowNs();
    completed_++;
    sink_(batch);
    return;
  }
  cv_.notify_all();
}

bool Engine::Cancel(uint64_t id, CancelReason reason) {
  std::shared_ptr<Batch> batch;
  size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(id);
    if (it == live_.end()) return false;
    batch = it->second.lock();
    if (!batch) return false;
    int none = 0;
    batch->cancel.compare_exchange_strong(none, static_cast<int>(reason));
    auto& q = queues_[batch->priority];
    auto keep = std::remove_if(q.begin(), q.end(), [&](const Task& t) { return t.batch.get() == batch.get(); });
    dropped = static_cast<size_t>(q.end() - keep);
    q.erase(keep, q.end());
  }
  for (size_t i = 0; i < dropped; i++) FinishGroup(batch);
  return true;
}

void Engine::Shutdown() {
  std::vector<Task> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    for (auto& [id, weak] : live_)
      if (auto b = weak.lock()) {
        int none = 0;
        b->cancel.compare_exchange_strong(none, static_cast<int>(CancelReason::Shutdown));
      }
    for (auto& q : queues_) {
      for (auto& t : q) dropped.push_back(std::move(t));
      q.clear();
    }
  }
  cv_.notify_all();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
  workers_.clear();
  for (auto& t : dropped) FinishGroup(t.batch);
}

void Engine::WorkerLoop(unsigned) {
  // Workers are throughput threads: SCHED_BATCH tells the scheduler so, and lets the JS thread preempt them
  // when it wakes (a completion, a timer), which keeps the caller's event loop responsive under a storm.
  if (options_.batchScheduling) {
    sched_param param{};
    sched_setscheduler(0, SCHED_BATCH, &param);
  }
  IoQueue io(options_.preferUring, options_.ioDepth);
  cuda::CopyQueue copies;
  tlsCopies = &copies;
  std::vector<uint32_t> taken;  // the groups of task.batch this turn runs (task.group first)
  for (;;) {
    Task task;
    bool background = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Demand first; prefetch and write-back only while fewer than backgroundLimit_ workers run them.
      auto pick = [&]() -> int {
        if (!queues_[kDemand].empty()) return kDemand;
        if (backgroundRunning_ >= backgroundLimit_) return -1;
        for (int p = kPrefetch; p < kPriorities; p++)
          if (!queues_[p].empty()) return p;
        return -1;
      };
      int p = -1;
      cv_.wait(lock, [&] { return (p = pick()) >= 0 || stopping_; });
      if (p < 0) break;  // stopping with nothing this worker may take
      background = p != kDemand;
      if (background) backgroundRunning_++;
      task = std::move(queues_[p].front());
      queues_[p].pop_front();
      taken.assign(1, task.group);
      // Only with io_uring: the blocking fallback would run the taken groups one after another on this worker.
      if (io.uring() && options_.ioDepth > 1 && SmallFileGroup(*task.batch, task.group)) {
        uint64_t takenBytes = GroupBytes(*task.batch, task.group);
        auto& q = queues_[p];
        while (taken.size() < options_.ioDepth && !q.empty() && q.front().batch == task.batch &&
               SmallFileGroup(*task.batch, q.front().group)) {
          const uint64_t n = GroupBytes(*task.batch, q.front().group);
          if (takenBytes + n > kSmallTakeBytes) break;
          takenBytes += n;
          taken.push_back(q.front().group);
          q.pop_front();
        }
      }
      running_ += taken.size();
    }
    uint64_t start = NowNs();
    Batch& b = *task.batch;
    if (!b.Stopped(start)) {
      try {
        if (taken.size() > 1)
          ExecuteFiles(b, taken, io);
        else
          Execute(b, task.group, io);
      } catch (const NativeError& e) {
        b.Fail(e.code(), e.what());
      } catch (const std::exception& e) {
        b.Fail(Code::Io, e.what());
      }
    }
    busyNs_ += NowNs() - start;
    running_ -= taken.size();
    if (background) {
      // This worker loops back and takes the next background group itself, so the others (kept for demand work)
      // are not woken to contend for it; unless it will take demand work first, leaving the freed slot to another.
      bool wake;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        backgroundRunning_--;
        wake = !queues_[kDemand].empty() && (!queues_[kPrefetch].empty() || !queues_[kWriteBack].empty());
      }
      if (wake) cv_.notify_one();
    }
    for (size_t k = 0; k < taken.size(); k++) FinishGroup(task.batch);
  }
  tlsCopies = nullptr;
}

bool Engine::SmallFileGroup(const Batch& b, uint32_t g) {
  const Group& group = b.groups[g];
  const Descriptor& d = b.descriptors[b.pieces[group.begin].descriptor];
  if (!b.endpoints[d.src].file && !b.endpoints[d.dst].file) return false;
  // A small group has few pieces: stop counting once past the limit.
  uint64_t n = 0;
  for (uint32_t k = group.begin; k < group.end && n <= kSmallFileGroupBytes; k++) n += b.pieces[k].length;
  return n <= kSmallFileGroupBytes;
}

void Engine::Execute(Batch& b, uint32_t group, IoQueue& io) {
  const Group& g = b.groups[group];
  const Descriptor& d = b.descriptors[b.pieces[g.begin].descriptor];
  if (b.endpoints[d.src].file || b.endpoints[d.dst].file)
    ExecuteFiles(b, {group}, io);
  else if (IsCuda(b.endpoints[d.src]) || IsCuda(b.endpoints[d.dst]))
    ExecuteCuda(b, g);
  else
    ExecuteMemory(b, g);
}

void Engine::ExecuteMemory(Batch& b, const Group& g) {
  for (uint32_t k = g.begin; k < g.end; k++) {
    const Piece& piece = b.pieces[k];
    const Descriptor& d = b.descriptors[piece.descriptor];
    Memory& src = *b.endpoints[d.src].memory;
    Memory& dst = *b.endpoints[d.dst].memory;
    const uint64_t len = piece.length;
    const uint64_t start = NowNs();
    const bool crc = !b.crcs.empty();
    uint32_t sum = 0;
    const uint8_t* from = src.host() + d.srcOffset + piece.offset;
    uint8_t* to = dst.host() + d.dstOffset + piece.offset;
    const uint64_t chunk = crc ? kCrcChunk : kCopyChunk;
    for (uint64_t off = 0; off < len; off += chunk) {
      if (off && b.Stopped(NowNs())) return;
      uint64_t n = std::min(chunk, len - off);
      if (crc)
        sum = CopyCrc32c(sum, to + off, from + off, n);  // one pass: each word is checksummed as it is copied
      else
        std::memcpy(to + off, from + off, n);
    }
    // Emulated link: finish no earlier than the modeled wire time.
    auto model = [&](Memory& m, bool toDevice) -> uint64_t {
      return m.kind() == MemoryKind::Sim ? static_cast<SimDevice&>(m).ReserveLink(len, toDevice, start) : 0;
    };
    uint64_t until = std::max(model(dst, true), model(src, false));
    for (uint64_t now = NowNs(); now < until; now = NowNs()) {
      if (b.Stopped(now)) return;
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<uint64_t>(until - now, 1000000)));
    }
    PieceDone(b, piece, crc, sum);
  }
}

void Engine::PieceDone(Batch& b, const Piece& piece, bool crc, uint32_t sum) {
  if (crc) {
    b.crcs[piece.descriptor] = sum;
    if (!b.expected.empty() && b.expected[piece.descriptor] != sum) {
      std::lock_guard<std::mutex> lock(b.errorMutex);
      b.mismatches.push_back(piece.descriptor);
      mismatches_++;
    }
  }
  int p = static_cast<int>(b.paths[piece.descriptor]);
  bytes_[p] += piece.length;
  ops_[p]++;
}

void Engine::ExecuteCuda(Batch& b, const Group& g) {
  cuda::CopyQueue& q = *tlsCopies;
  const bool crc = !b.crcs.empty();
  // However this ends, no copy may still be running when it returns: the batch's memory may be released then.
  struct DrainOnExit {
    cuda::CopyQueue& q;
    ~DrainOnExit() {
      try {
        q.Drain();
      } catch (const NativeError&) {  // already failing or stopped: the first error is the one reported
      }
    }
  } drainOnExit{q};
  struct Enqueued {
    uint32_t piece;
    uint64_t ticket;
    const uint8_t* landed;  // device->host with checksums: the host bytes to checksum once the copy lands
    uint32_t sum;           // host->device with checksums: computed from the source before the copy
  };
  std::vector<Enqueued> enqueued;
  enqueued.reserve(g.end - g.begin);
  // Enqueue every piece without waiting: the copy engine runs them back to back. A host-side source is
  // checksummed while the previous pieces are on the wire.
  for (uint32_t k = g.begin; k < g.end; k++) {
    if (k > g.begin && b.Stopped(NowNs())) return;
    const Piece& piece = b.pieces[k];
    const Descriptor& d = b.descriptors[piece.descriptor];
    Memory& src = *b.endpoints[d.src].memory;
    Memory& dst = *b.endpoints[d.dst].memory;
    const bool fromDevice = src.kind() == MemoryKind::Cuda;
    const int device = fromDevice ? src.device() : dst.device();
    if (src.kind() == MemoryKind::Host) static_cast<HostArena&>(src).EnsureCudaRegistered();
    if (dst.kind() == MemoryKind::Host) static_cast<HostArena&>(dst).EnsureCudaRegistered();
    const uint8_t* from = (fromDevice ? src.device_ptr() : src.host()) + d.srcOffset + piece.offset;
    uint8_t* to = (dst.kind() == MemoryKind::Cuda ? dst.device_ptr() : dst.host()) + d.dstOffset + piece.offset;
    // Sim memory is plain host memory to CUDA (pageable), so it copies like host memory.
    auto kind = fromDevice ? (dst.kind() == MemoryKind::Cuda ? cuda::DeviceToDevice : cuda::DeviceToHost) : cuda::HostToDevice;
    uint32_t sum = crc && !fromDevice ? Crc32c(0, from, piece.length) : 0;
    uint64_t ticket = q.Copy(device, to, from, piece.length, kind);
    enqueued.push_back({k, ticket, crc && fromDevice ? to : nullptr, sum});
  }
  // Device->host with checksums: checksum each piece as soon as its event fires, while later pieces still copy.
  for (Enqueued& e : enqueued) {
    if (!e.landed) continue;
    q.Wait(e.ticket);
    e.sum = Crc32c(0, e.landed, b.pieces[e.piece].length);
  }
  q.Drain();  // one wait for the group: the stream ran its copies in order
  for (const Enqueued& e : enqueued) PieceDone(b, b.pieces[e.piece], crc, e.sum);
}

void Engine::ExecuteFiles(Batch& b, const std::vector<uint32_t>& groups, IoQueue& io) {
  std::vector<IoOp> ops;
  for (uint32_t g : groups) FileOps(b, b.groups[g], ops);
  io.Run(ops);
  for (uint32_t g : groups) FileDone(b, b.groups[g]);
}

void Engine::FileOps(Batch& b, const Group& g, std::vector<IoOp>& ops) {
  const Descriptor& first = b.descriptors[b.pieces[g.begin].descriptor];
  const bool write = b.endpoints[first.dst].file != nullptr;
  File& file = write ? *b.endpoints[first.dst].file : *b.endpoints[first.src].file;
  Memory& mem = write ? *b.endpoints[first.src].memory : *b.endpoints[first.dst].memory;
  const bool crc = !b.crcs.empty();

  auto flush = [&](IoOp& op) {
    if (op.bytes == 0) return;
    bool aligned = Aligned(op.offset) && Aligned(op.bytes);
    for (const iovec& v : op.iov)
      aligned = aligned && Aligned(reinterpret_cast<uint64_t>(v.iov_base)) && Aligned(v.iov_len);
    bool direct = aligned && file.directFd() >= 0;
    op.fd = direct ? file.directFd() : file.fd();
    (direct ? directOps_ : bufferedOps_)++;
    ops.push_back(std::move(op));
    op = IoOp{};
  };
  IoOp op;
  op.write = write;
  for (uint32_t k = g.begin; k < g.end; k++) {
    const Piece& piece = b.pieces[k];
    const Descriptor& d = b.descriptors[piece.descriptor];
    uint8_t* memory = mem.host() + (write ? d.srcOffset : d.dstOffset);
    const uint64_t fileOff = write ? d.dstOffset : d.srcOffset;
    if (write && crc) b.crcs[piece.descriptor] = Crc32c(0, memory, d.length);
    for (uint64_t off = 0; off < d.length;) {
      if (op.bytes == 0) {
        op.offset = fileOff + off;
        op.write = write;
      }
      uint64_t n = std::min(d.length - off, kIoOpBytes - op.bytes);
      op.iov.push_back({memory + off, n});
      op.bytes += n;
      off += n;
      if (op.bytes >= kIoOpBytes || op.iov.size() >= kMaxIov) flush(op);
    }
  }
  flush(op);
}

void Engine::FileDone(Batch& b, const Group& g) {
  const Descriptor& first = b.descriptors[b.pieces[g.begin].descriptor];
  const bool write = b.endpoints[first.dst].file != nullptr;
  Memory& mem = write ? *b.endpoints[first.src].memory : *b.endpoints[first.dst].memory;
  const bool crc = !b.crcs.empty();
  uint64_t total = 0;
  for (uint32_t k = g.begin; k < g.end; k++) {
    const Piece& piece = b.pieces[k];
    const Descriptor& d = b.descriptors[piece.descriptor];
    if (!write && crc) b.crcs[piece.descriptor] = Crc32c(0, mem.host() + d.dstOffset, d.length);
    if (crc && !b.expected.empty() && b.expected[piece.descriptor] != b.crcs[piece.descriptor]) {
      std::lock_guard<std::mutex> lock(b.errorMutex);
      b.mismatches.push_back(piece.descriptor);
      mismatches_++;
    }
    total += d.length;
    ops_[static_cast<int>(b.paths[piece.descriptor])]++;
  }
  bytes_[static_cast<int>(b.paths[b.pieces[g.begin].descriptor])] += total;
}

void Engine::FinishGroup(const std::shared_ptr<Batch>& batch) {
  if (batch->remaining.fetch_sub(1) != 1) return;
  Batch& b = *batch;
  if (b.durable && b.cancel.load() == 0) {
    std::vector<File*> synced;
    for (const Descriptor& d : b.descriptors) {
      File* f = b.endpoints[d.dst].file.get();
      if (!f || std::find(synced.begin(), synced.end(), f) != synced.end()) continue;
      synced.push_back(f);
      if (fdatasync(f->fd()) != 0) b.Fail(Code::Io, "fdatasync of " + f->path() + " failed: " + ErrnoText(errno));
    }
  }
  std::sort(b.mismatches.begin(), b.mismatches.end());
  b.finishedNs = NowNs();
  int reason = b.cancel.load();
  if (b.failed)
    failed_++;
  else if (reason == static_cast<int>(CancelReason::Timeout))
    timedOut_++;
  else if (reason != 0)
    cancelled_++;
  else
    completed_++;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.erase(b.id);
  }
  sink_(batch);
}

EngineStats Engine::Stats() {
  EngineStats s;
  for (int p = 0; p < static_cast<int>(Path::Count); p++) {
    s.bytes[p] = bytes_[p];
    s.ops[p] = ops_[p];
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int p = 0; p < kPriorities; p++) s.queued[p] = queues_[p].size();
    s.inflightBatches = live_.size();
    s.runningBackground = backgroundRunning_;
  }
  s.running = running_;
  s.completedBatches = completed_;
  s.failedBatches = failed_;
  s.cancelledBatches = cancelled_;
  s.timedOutBatches = timedOut_;
  s.checksumMismatches = mismatches_;
  s.busyNs = busyNs_;
  s.directOps = directOps_;
  s.bufferedOps = bufferedOps_;
  s.threads = static_cast<unsigned>(workers_.size());
  s.backgroundThreads = backgroundLimit_;
  s.uring = uring_;
  return s;
}

}  // namespace tiersync

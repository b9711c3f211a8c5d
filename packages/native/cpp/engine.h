// The transfer engine: a pool of worker threads that execute batches of copy descriptors between arenas and
// files. Nothing here touches JavaScript; the binding layer submits batches and receives completed ones through
// the completion sink (called on a worker thread, or on the caller's thread for a batch cancelled while queued).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "memory.h"
#include "status.h"

namespace tiersync {

struct Endpoint {
  std::shared_ptr<Memory> memory;  // exactly one of memory and file is set
  std::shared_ptr<File> file;
};

struct Descriptor {
  uint32_t src = 0, dst = 0;  // indices into Batch::endpoints
  uint64_t srcOffset = 0, dstOffset = 0, length = 0;
};

enum class Path : int { HostToHost, HostToDevice, DeviceToHost, DeviceToDevice, HostToFile, FileToHost, DeviceToFile, FileToDevice, Count };
const char* PathName(Path p);

enum Priority : int { kDemand = 0, kPrefetch = 1, kWriteBack = 2, kPriorities = 3 };
enum class CancelReason : int { None = 0, Aborted = 1, Timeout = 2, Failed = 3, Shutdown = 4 };

// One unit of work a worker runs: a run of pieces (slices of descriptors) that share a path.
struct Piece {
  uint32_t descriptor;
  uint64_t offset;  // within the descriptor
  uint64_t length;
};
struct Group {
  uint32_t begin, end;  // into Batch::pieces
};
struct IoOp;

struct Batch {
  uint64_t id = 0;
  int priority = kDemand;
  bool durable = false;          // fdatasync destination files before completing
  bool checksums = false;        // compute CRC32C of every descriptor's bytes
  std::vector<uint32_t> expected;  // when non-empty: verify against these, report mismatches
  uint64_t deadlineNs = 0;       // steady clock; 0 = none

  std::vector<Endpoint> endpoints;
  std::vector<Descriptor> descriptors;
  std::vector<Path> paths;  // per descriptor
  std::vector<Piece> pieces;
  std::vector<Group> groups;

  // Results
  std::vector<uint32_t> crcs;
  std::vector<uint32_t> mismatches;
  uint64_t bytes = 0;
  uint64_t submittedNs = 0, finishedNs = 0;
  std::atomic<int> cancel{0};  // CancelReason
  std::atomic<size_t> remaining{0};
  std::mutex errorMutex;
  bool failed = false;
  Code errorCode = Code::Io;
  std::string errorMessage;

  void Fail(Code code, const std::string& message);
  bool Stopped(uint64_t nowNs);
  void* context = nullptr;  // owned by the binding layer
};

struct EngineOptions {
  unsigned threads = 0;  // 0: one per core
  bool preferUring = true;
  unsigned ioDepth = 32;  // also the most small file groups one worker turn takes (engine.cc)
  bool batchScheduling = true;  // run workers under SCHED_BATCH
  // Most workers running prefetch/write-back groups at once (0: threads - 1, at least 1), so that demand work
  // always finds a free worker and background storms leave CPU to the caller's thread.
  unsigned backgroundThreads = 0;
};

struct EngineStats {
  uint64_t bytes[static_cast<int>(Path::Count)] = {};
  uint64_t ops[static_cast<int>(Path::Count)] = {};
  uint64_t queued[kPriorities] = {};  // groups waiting
  uint64_t running = 0;               // groups being executed
  uint64_t runningBackground = 0;     // of which prefetch or write-back
  uint64_t inflightBatches = 0;
  uint64_t completedBatches = 0;
  uint64_t failedBatches = 0;
  uint64_t cancelledBatches = 0;
  uint64_t timedOutBatches = 0;
  uint64_t checksumMismatches = 0;
  uint64_t busyNs = 0;
  uint64_t directOps = 0, bufferedOps = 0;
  unsigned threads = 0;
  unsigned backgroundThreads = 0;
  bool uring = false;
};

class Engine {
 public:
  using Sink = std::function<void(std::shared_ptr<Batch>)>;
  Engine(const EngineOptions& options, Sink sink);
  ~Engine();
  // Validates (again: the JS layer already did) and queues; throws NativeError on bad input.
  void Submit(std::shared_ptr<Batch> batch);
  // Stops a batch; its queued groups are dropped at once, running ones stop at the next chunk.
  bool Cancel(uint64_t id, CancelReason reason);
  // Cancels everything and joins the workers. Idempotent.
  void Shutdown();
  EngineStats Stats();
  unsigned threads() const { return static_cast<unsigned>(workers_.size()); }
  // Whether group g of b is file I/O of at most kSmallFileGroupBytes (one worker may take several at once).
  static bool SmallFileGroup(const Batch& b, uint32_t g);

 private:
  void Validate(Batch& batch);
  void Plan(Batch& batch);
  void WorkerLoop(unsigned index);
  void Execute(Batch& batch, uint32_t group, class IoQueue& io);
  void ExecuteMemory(Batch& batch, const Group& group);
  void ExecuteCuda(Batch& batch, const Group& group);
  // A memory or CUDA piece landed: records its checksum (a mismatch against the expected one) and its bytes.
  void PieceDone(Batch& batch, const Piece& piece, bool crc, uint32_t sum);
  // Runs the file groups `groups` of one batch with their ops on one io_uring together (small groups: see
  // WorkerLoop), then checksums and counts each group.
  void ExecuteFiles(Batch& batch, const std::vector<uint32_t>& groups, IoQueue& io);
  void FileOps(Batch& batch, const Group& group, std::vector<IoOp>& ops);
  void FileDone(Batch& batch, const Group& group);
  void FinishGroup(const std::shared_ptr<Batch>& batch);

  struct Task {
    std::shared_ptr<Batch> batch;
    uint32_t group;
  };
  EngineOptions options_;
  Sink sink_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queues_[kPriorities];
  std::unordered_map<uint64_t, std::weak_ptr<Batch>> live_;
  bool stopping_ = false;
  unsigned backgroundLimit_ = 1;
  unsigned backgroundRunning_ = 0;  // guarded by mutex_
  std::vector<std::thread> workers_;
  std::atomic<bool> uring_{false};

  std::atomic<uint64_t> bytes_[static_cast<int>(Path::Count)] = {};
  std::atomic<uint64_t> ops_[static_cast<int>(Path::Count)] = {};
  std::atomic<uint64_t> running_{0}, completed_{0}, failed_{0}, cancelled_{0}, timedOut_{0}, mismatches_{0};
  std::atomic<uint64_t> busyNs_{0}, directOps_{0}, bufferedOps_{0};
};

}  // namespace tiersync

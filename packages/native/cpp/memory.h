// Native memory regions (arenas) and open files: the endpoints a transfer descriptor can name.
// Lifetime: every endpoint is held by std::shared_ptr. A queued batch holds its endpoints, so closing an arena
// from JavaScript only refuses new work; the mapping is released when the last batch or lent view lets go.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "status.h"

namespace tiersync {

enum class MemoryKind { Host, Sim, Cuda };

class Memory {
 public:
  virtual ~Memory() = default;
  MemoryKind kind() const { return kind_; }
  uint64_t size() const { return size_; }
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  void Close() { closed_.store(true, std::memory_order_release); }
  // Address of byte 0 for host and sim memory (the engine may touch it); nullptr for cuda.
  uint8_t* host() const { return host_; }
  // Address of byte 0 in the device's address space (cuda only).
  uint8_t* device_ptr() const { return device_ptr_; }
  int device() const { return device_; }

 protected:
  Memory(MemoryKind kind, uint64_t size) : kind_(kind), size_(size) {}
  MemoryKind kind_;
  uint64_t size_;
  uint8_t* host_ = nullptr;
  uint8_t* device_ptr_ = nullptr;
  int device_ = -1;
  std::atomic<bool> closed_{false};
};

struct HostArenaOptions {
  uint64_t capacity = 0;
  uint64_t pageSize = 4096;
  std::string shmPath;      // empty: anonymous memory
  std::string fingerprint;  // caller's layout fingerprint, checked on reattach
  bool create = true;       // with shmPath: create when absent
  bool attach = true;       // with shmPath: reattach when present
  bool lock = false;        // mlock
  bool hugePages = false;   // madvise(MADV_HUGEPAGE)
  bool prefault = false;    // MAP_POPULATE
};

// Page-aligned host memory. With a shm path the file starts with one 4 KiB header page recording the geometry;
// the arena's bytes follow it, so a restarted process maps the same bytes at offset 0 of its arena.
class HostArena : public Memory {
 public:
  explicit HostArena(const HostArenaOptions& options);
  ~HostArena() override;
  bool attached() const { return attached_; }
  const std::string& attachNote() const { return attachNote_; }
  uint64_t pageSize() const { return pageSize_; }
  bool locked() const { return locked_; }
  // Registers the arena with CUDA (page-locks it) once, on first use by a cuda transfer.
  void EnsureCudaRegistered();

  static constexpr uint64_t kHeaderBytes = 4096;

 private:
  uint8_t* map_ = nullptr;
  uint64_t mapBytes_ = 0;
  uint64_t pageSize_ = 4096;
  bool attached_ = false;
  bool locked_ = false;
  std::string attachNote_;
  std::once_flag cudaOnce_;
  bool cudaRegistered_ = false;
};

struct SimDeviceOptions {
  uint64_t capacity = 0;
  double bandwidthBytesPerSec = 0;  // 0: as fast as memcpy
  uint64_t latencyNs = 0;           // added to each copy
};

// Emulated accelerator memory. The bytes live in host memory the engine can copy, but JavaScript is never given
// a view of them. An optional link model (bandwidth shared by all copies in one direction, plus fixed latency)
// lets simulations stand in for PCIe or ICI.
class SimDevice : public Memory {
 public:
  explicit SimDevice(const SimDeviceOptions& options);
  ~SimDevice() override;
  // Returns the steady-clock time (ns) at which a copy of `bytes` over the link would have finished, reserving
  // the link meanwhile; 0 when no model is set. `toDevice` picks the direction.
  uint64_t ReserveLink(uint64_t bytes, bool toDevice, uint64_t startNs);
  const SimDeviceOptions& options() const { return options_; }

 private:
  SimDeviceOptions options_;
  std::mutex linkMutex_;
  uint64_t linkFreeNs_[2] = {0, 0};
};

class CudaDevice : public Memory {
 public:
  CudaDevice(int device, uint64_t capacity);
  ~CudaDevice() override;
};

enum class DirectMode { Never, Auto, Always };

struct FileOptions {
  std::string path;
  bool writable = false;
  bool create = false;
  bool truncate = false;
  DirectMode direct = DirectMode::Auto;
  uint64_t preallocate = 0;  // fallocate this many bytes at open
};

// An open file the engine reads and writes with pread/pwrite(v) or io_uring. In Auto and Always mode a second
// descriptor is opened with O_DIRECT; requests whose offset, length and memory address are all aligned to
// kDirectAlignment use it.
class File {
 public:
  explicit File(const FileOptions& options);
  ~File();
  int fd() const { return fd_; }
  int directFd() const { return directFd_; }
  bool writable() const { return options_.writable; }
  DirectMode direct() const { return options_.direct; }
  const std::string& path() const { return options_.path; }
  uint64_t Size() const;
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  void Close() { closed_.store(true, std::memory_order_release); }

  static constexpr uint64_t kDirectAlignment = 4096;

 private:
  FileOptions options_;
  int fd_ = -1;
  int directFd_ = -1;
  std::atomic<bool> closed_{false};
};

uint64_t NowNs();

}  // namespace tiersync

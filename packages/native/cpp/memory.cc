#include "memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "cuda.h"

namespace tiersync {

std::string ErrnoText(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

constexpr char kMagic[8] = {'T', 'S', 'A', 'R', 'E', 'N', 'A', '1'};
constexpr uint32_t kHeaderVersion = 1;
constexpr size_t kFingerprintMax = 1024;

// On-disk (in /dev/shm) header of a shared host arena. Fixed little-endian layout, 4 KiB reserved.
struct ShmHeader {
  char magic[8];
  uint32_t version;
  uint32_t fingerprintLength;
  uint64_t capacity;
  uint64_t pageSize;
  uint64_t createdUnixMs;
  char fingerprint[kFingerprintMax];
};
static_assert(sizeof(ShmHeader) <= HostArena::kHeaderBytes, "header must fit its page");

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// Private anonymous arenas are not inherited by child processes (MADV_DONTFORK). Node spawns children with fork():
// without this, every spawn write-protected each page of the arena in this process, and the next write to each page
// took a fault again (measured here: 131k faults, 2.5 s, per 512 MiB after one fork; the RESP door paid it on every
// page it received into after redis-benchmark started). A child never needs the arena: it execs at once.
void KeepFromChildren(void* p, size_t bytes) { madvise(p, bytes, MADV_DONTFORK); }

}  // namespace

HostArena::HostArena(const HostArenaOptions& o) : Memory(MemoryKind::Host, o.capacity), pageSize_(o.pageSize) {
  if (o.capacity == 0) throw NativeError(Code::InvalidArgument, "capacity must be > 0");
  if (o.fingerprint.size() > kFingerprintMax)
    throw NativeError(Code::InvalidArgument, "fingerprint longer than 1024 bytes");
  const uint64_t sysPage = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  int flags = o.prefault ? MAP_POPULATE : 0;
  if (o.shmPath.empty()) {
    mapBytes_ = RoundUp(o.capacity, sysPage);
    void* p = mmap(nullptr, mapBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | flags,
                   -1, 0);
    if (p == MAP_FAILED) throw NativeError(Code::NoMemory, "mmap of host arena failed: " + ErrnoText(errno));
    map_ = static_cast<uint8_t*>(p);
    host_ = map_;
    KeepFromChildren(map_, mapBytes_);
    attachNote_ = "anonymous memory: starts empty";
  } else {
    mapBytes_ = kHeaderBytes + RoundUp(o.capacity, sysPage);
    int fd = open(o.shmPath.c_str(), O_RDWR | O_CLOEXEC);
    bool fresh = false;
    if (fd < 0 && errno == ENOENT) {
      if (!o.create) throw NativeError(Code::InvalidArgument, "shared arena " + o.shmPath + " does not exist");
      fd = open(o.shmPath.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      fresh = true;
      attachNote_ = "created " + o.shmPath + ": starts empty";
    }
    if (fd < 0) throw NativeError(Code::Io, "cannot open shared arena " + o.shmPath + ": " + ErrnoText(errno));
    struct stat st {};
    fstat(fd, &st);
    if (!fresh) {
      ShmHeader h{};
      ssize_t got = pread(fd, &h, sizeof h, 0);
      std::string why;
      if (got != static_cast<ssize_t>(sizeof h) || std::memcmp(h.magic, kMagic, 8) != 0 || h.version != kHeaderVersion)
        why = "not a tiersync arena file (bad header)";
      // The page size first: a host tier's arena capacity follows from it (its slot table), so another page size
      // also shows as another capacity, which would name the wrong cause.
      else if (h.pageSize != o.pageSize)
        why = "page size is " + std::to_string(h.pageSize) + " bytes, expected " + std::to_string(o.pageSize);
      else if (h.capacity != o.capacity)
        why = "capacity is " + std::to_string(h.capacity) + " bytes, expected " + std::to_string(o.capacity);
      else if (h.fingerprintLength != o.fingerprint.size() ||
               std::memcmp(h.fingerprint, o.fingerprint.data(), o.fingerprint.size()) != 0)
        why = "layout fingerprint is '" + std::string(h.fingerprint, std::min<size_t>(h.fingerprintLength, kFingerprintMax)) +
              "', expected '" + o.fingerprint + "'";
      else if (static_cast<uint64_t>(st.st_size) < mapBytes_)
        why = "file is " + std::to_string(st.st_size) + " bytes, shorter than its geometry";
      if (!why.empty()) {
        close(fd);
        throw NativeError(Code::GeometryMismatch, "cannot reattach " + o.shmPath + ": " + why);
      }
      if (!o.attach) {
        close(fd);
        throw NativeError(Code::InvalidArgument, "shared arena " + o.shmPath + " already exists");
      }
      attached_ = true;
      attachNote_ = "reattached " + o.shmPath;
    } else {
      if (ftruncate(fd, static_cast<off_t>(mapBytes_)) != 0) {
        int e = errno;
        close(fd);
        unlink(o.shmPath.c_str());
        throw NativeError(Code::NoMemory, "cannot size shared arena " + o.shmPath + ": " + ErrnoText(e));
      }
    }
    void* p = mmap(nullptr, mapBytes_, PROT_READ | PROT_WRITE, MAP_SHARED | flags, fd, 0);
    int e = errno;
    if (p == MAP_FAILED) {
      close(fd);
      throw NativeError(Code::NoMemory, "mmap of shared arena " + o.shmPath + " failed: " + ErrnoText(e));
    }
    map_ = static_cast<uint8_t*>(p);
    host_ = map_ + kHeaderBytes;
    if (fresh) {
      // The header goes in last so that a crash while creating leaves a file that never reattaches.
      ShmHeader h{};
      std::memcpy(h.magic, kMagic, 8);
      h.version = kHeaderVersion;
      h.capacity = o.capacity;
      h.pageSize = o.pageSize;
      h.fingerprintLength = static_cast<uint32_t>(o.fingerprint.size());
      std::memcpy(h.fingerprint, o.fingerprint.data(), o.fingerprint.size());
      h.createdUnixMs = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count());
      std::memcpy(map_, &h, sizeof h);
    }
    close(fd);  // the mapping keeps the file's pages
  }
  if (o.hugePages) madvise(host_, mapBytes_ - (host_ - map_), MADV_HUGEPAGE);
  if (o.lock) {
    if (mlock(map_, mapBytes_) != 0) {
      int e = errno;
      munmap(map_, mapBytes_);
      throw NativeError(Code::NoMemory, "mlock of host arena failed: " + ErrnoText(e) +
                                            " (raise RLIMIT_MEMLOCK or run without lock)");
    }
    locked_ = true;
  }
}

HostArena::~HostArena() {
  if (cudaRegistered_) cuda::Require().HostUnregister(host_);
  if (map_) munmap(map_, mapBytes_);
}

void HostArena::EnsureCudaRegistered() {
  std::call_once(cudaOnce_, [this] {
    const cuda::Api& api = cuda::Require();
    cuda::Check(api.HostRegister(host_, size_, 0), "cudaHostRegister");
    cudaRegistered_ = true;
  });
}

SimDevice::SimDevice(const SimDeviceOptions& o) : Memory(MemoryKind::Sim, o.capacity), options_(o) {
  if (o.capacity == 0) throw NativeError(Code::InvalidArgument, "capacity must be > 0");
  // Populated up front: accelerator memory has no page faults, and the emulation should not have them either.
  void* p = mmap(nullptr, o.capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) throw NativeError(Code::NoMemory, "mmap of sim device memory failed: " + ErrnoText(errno));
  host_ = static_cast<uint8_t*>(p);
  KeepFromChildren(host_, o.capacity);
}

SimDevice::~SimDevice() { munmap(host_, size_); }

uint64_t SimDevice::ReserveLink(uint64_t bytes, bool toDevice, uint64_t startNs) {
  if (options_.bandwidthBytesPerSec <= 0 && options_.latencyNs == 0) return 0;
  uint64_t wire = options_.bandwidthBytesPerSec > 0
                      ? static_cast<uint64_t>(static_cast<double>(bytes) * 1e9 / options_.bandwidthBytesPerSec)
                      : 0;
  std::lock_guard<std::mutex> lock(linkMutex_);
  uint64_t& freeAt = linkFreeNs_[toDevice ? 0 : 1];
  uint64_t begin = std::max(freeAt, startNs);
  freeAt = begin + wire;
  return freeAt + options_.latencyNs;
}

CudaDevice::CudaDevice(int device, uint64_t capacity) : Memory(MemoryKind::Cuda, capacity) {
  if (capacity == 0) throw NativeError(Code::InvalidArgument, "capacity must be > 0");
  const cuda::Api& api = cuda::Require();
  if (device < 0 || device >= cuda::GetStatus().devices)
    throw NativeError(Code::InvalidArgument, "cuda device " + std::to_string(device) + " does not exist (" +
                                                 std::to_string(cuda::GetStatus().devices) + " present)");
  device_ = device;
  cuda::Check(api.SetDevice(device), "cudaSetDevice");
  void* p = nullptr;
  cuda::Error err = api.Malloc(&p, capacity);
  if (err != 0)
    throw NativeError(Code::NoMemory, std::string("cudaMalloc of ") + std::to_string(capacity) +
                                          " bytes failed: " + api.GetErrorString(err));
  device_ptr_ = static_cast<uint8_t*>(p);
}

CudaDevice::~CudaDevice() {
  const cuda::Api& api = cuda::Require();
  api.SetDevice(device_);
  api.Free(device_ptr_);
}

File::File(const FileOptions& o) : options_(o) {
  int flags = O_CLOEXEC | (o.writable ? O_RDWR : O_RDONLY);
  if (o.create) flags |= O_CREAT;
  if (o.truncate) flags |= O_TRUNC;
  fd_ = open(o.path.c_str(), flags, 0644);
  if (fd_ < 0) throw NativeError(Code::Io, "cannot open " + o.path + ": " + ErrnoText(errno));
  if (o.direct != DirectMode::Never) {
    directFd_ = open(o.path.c_str(), (o.writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_DIRECT);
    if (directFd_ < 0) {
      int e = errno;
      if (o.direct == DirectMode::Always) {
        close(fd_);
        throw NativeError(Code::Unsupported, "O_DIRECT is not supported for " + o.path + ": " + ErrnoText(e));
      }
    }
  }
  if (o.preallocate > 0 && o.writable) {
    int r = posix_fallocate(fd_, 0, static_cast<off_t>(o.preallocate));
    if (r != 0) {
      close(fd_);
      if (directFd_ >= 0) close(directFd_);
      throw NativeError(Code::Io,
                        "cannot preallocate " + std::to_string(o.preallocate) + " bytes for " + o.path + ": " + ErrnoText(r));
    }
  }
}

File::~File() {
  if (fd_ >= 0) close(fd_);
  if (directFd_ >= 0) close(directFd_);
}

uint64_t File::Size() const {
  struct stat st {};
  if (fstat(fd_, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace tiersync

// File I/O for one worker thread: a list of vectored reads or writes, run with io_uring at a queue depth when
// liburing was present at build time (and the kernel allows it), with blocking preadv/pwritev otherwise.
#pragma once
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tiersync {

struct IoOp {
  int fd = -1;
  bool write = false;
  uint64_t offset = 0;
  std::vector<iovec> iov;
  uint64_t bytes = 0;
};

class IoQueue {
 public:
  IoQueue(bool preferUring, unsigned depth);
  ~IoQueue();
  IoQueue(const IoQueue&) = delete;
  IoQueue& operator=(const IoQueue&) = delete;
  bool uring() const { return ring_ != nullptr; }
  // Runs every op to completion or throws NativeError(Io) naming the first failure.
  void Run(std::vector<IoOp>& ops);

  // Whether io_uring can be used here: built with liburing and a ring could be created.
  static bool UringAvailable(std::string* why);

 private:
  void RunSync(IoOp& op, uint64_t done);
  void RunUring(std::vector<IoOp>& ops);
  struct Ring;
  Ring* ring_ = nullptr;
  unsigned depth_;
};

}  // namespace tiersync

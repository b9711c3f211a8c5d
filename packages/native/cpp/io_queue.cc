#include "io_queue.h"

#include <unistd.h>

#include <cerrno>

#include "status.h"

#ifdef TIERSYNC_HAVE_LIBURING
#include <liburing.h>
#endif

namespace tiersync {

#ifdef TIERSYNC_HAVE_LIBURING
struct IoQueue::Ring {
  io_uring ring;
};
#else
struct IoQueue::Ring {};
#endif

IoQueue::IoQueue(bool preferUring, unsigned depth) : depth_(depth) {
#ifdef TIERSYNC_HAVE_LIBURING
  if (preferUring) {
    auto* r = new Ring;
    if (io_uring_queue_init(depth, &r->ring, 0) == 0)
      ring_ = r;
    else
      delete r;
  }
#else
  (void)preferUring;
#endif
}

IoQueue::~IoQueue() {
#ifdef TIERSYNC_HAVE_LIBURING
  if (ring_) {
    io_uring_queue_exit(&ring_->ring);
    delete ring_;
  }
#endif
}

bool IoQueue::UringAvailable(std::string* why) {
#ifdef TIERSYNC_HAVE_LIBURING
  io_uring ring;
  int r = io_uring_queue_init(4, &ring, 0);
  if (r != 0) {
    if (why) *why = "io_uring_queue_init failed: " + ErrnoText(-r);
    return false;
  }
  io_uring_queue_exit(&ring);
  return true;
#else
  if (why) *why = "built without liburing (install liburing-dev and rebuild)";
  return false;
#endif
}

namespace {

// Drops the first `done` bytes from an iovec list (after a short transfer).
std::vector<iovec> Advance(const std::vector<iovec>& iov, uint64_t done) {
  std::vector<iovec> rest;
  for (const iovec& v : iov) {
    if (done >= v.iov_len) {
      done -= v.iov_len;
      continue;
    }
    rest.push_back({static_cast<char*>(v.iov_base) + done, v.iov_len - done});
    done = 0;
  }
  return rest;
}

[[noreturn]] void Fail(const IoOp& op, int err) {
  throw NativeError(Code::Io, std::string(op.write ? "write" : "read") + " of " + std::to_string(op.bytes) +
                                  " bytes at offset " + std::to_string(op.offset) + " failed: " + ErrnoText(err));
}

}  // namespace

void IoQueue::RunSync(IoOp& op, uint64_t done) {
  std::vector<iovec> iov = done ? Advance(op.iov, done) : op.iov;
  while (done < op.bytes) {
    int count = static_cast<int>(std::min<size_t>(iov.size(), IOV_MAX));
    ssize_t n = op.write ? pwritev(op.fd, iov.data(), count, static_cast<off_t>(op.offset + done))
                         : preadv(op.fd, iov.data(), count, static_cast<off_t>(op.offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      Fail(op, errno);
    }
    if (n == 0)
      throw NativeError(Code::Io, "short read: file ends before offset " + std::to_string(op.offset + op.bytes) +
                                      " (got " + std::to_string(done) + " of " + std::to_string(op.bytes) + " bytes at " +
                                      std::to_string(op.offset) + ")");
    done += static_cast<uint64_t>(n);
    iov = Advance(iov, static_cast<uint64_t>(n));
  }
}

void IoQueue::Run(std::vector<IoOp>& ops) {
  if (ring_) return RunUring(ops);
  for (IoOp& op : ops) RunSync(op, 0);
}

void IoQueue::RunUring(std::vector<IoOp>& ops) {
#ifdef TIERSYNC_HAVE_LIBURING
  io_uring* ring = &ring_->ring;
  size_t next = 0, inflight = 0;
  int firstError = 0;
  size_t failedOp = 0;
  std::vector<size_t> partial;  // ops that completed short; finished synchronously after the ring drains
  std::vector<uint64_t> partialDone;
  while (next < ops.size() || inflight > 0) {
    while (next < ops.size() && inflight < depth_ && firstError == 0) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      if (!sqe) break;
      IoOp& op = ops[next];
      unsigned n = static_cast<unsigned>(op.iov.size());
      if (op.write)
        io_uring_prep_writev(sqe, op.fd, op.iov.data(), n, op.offset);
      else
        io_uring_prep_readv(sqe, op.fd, op.iov.data(), n, op.offset);
      io_uring_sqe_set_data64(sqe, next);
      next++;
      inflight++;
    }
    if (inflight == 0) break;  // stopped submitting after an error
    int r = io_uring_submit_and_wait(ring, 1);
    if (r < 0 && r != -EINTR) {
      // The ring itself failed: finish what is left synchronously.
      firstError = firstError ? firstError : -r;
      break;
    }
    io_uring_cqe* cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(ring, head, cqe) {
      size_t i = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
      int res = cqe->res;
      if (res < 0) {
        if (!firstError) {
          firstError = -res;
          failedOp = i;
        }
      } else if (static_cast<uint64_t>(res) < ops[i].bytes) {
        partial.push_back(i);
        partialDone.push_back(static_cast<uint64_t>(res));
      }
      seen++;
      inflight--;
    }
    io_uring_cq_advance(ring, seen);
  }
  if (firstError) Fail(ops[failedOp], firstError);
  for (size_t k = 0; k < partial.size(); k++) RunSync(ops[partial[k]], partialDone[k]);
#else
  (void)ops;
#endif
}

}  // namespace tiersync

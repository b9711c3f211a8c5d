// Kernel file locks for tier folders: flock(2) on a descriptor the caller keeps open. The kernel releases the lock
// when the last descriptor of that open file goes away, which includes its holder dying by SIGKILL, so a restarted
// process never waits for a killed one to "vanish" (unlike a pid file, whose pid may still be a zombie).
//
// flock locks belong to the open file description, not the process: a second open() of the same file in the same
// process conflicts with the first (the JS side refuses that case earlier, with a clearer message), and closing an
// unrelated descriptor of the file (reading it for diagnostics) does not drop the lock, as it would with fcntl's
// per-process POSIX locks. On NFS, Linux maps flock onto NLM/NFSv4 byte-range locks, still released on exit.
#include <sys/file.h>

#include <cerrno>
#include <cstring>

#include "binding.h"

namespace tiersync {
namespace {

// tryLockFile(fd, shared?) -> true when the exclusive (or shared) lock was taken, false when another open file
// holds a conflicting one. Never blocks. Throws ERR_INVALID_ARGUMENT for a bad descriptor, ERR_IO otherwise.
Napi::Value TryLockFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t fd = UintArg(info, 0, "fd");
  if (fd > 0x7fffffff) Throw(env, Code::InvalidArgument, "fd must be a file descriptor (a small non-negative integer)");
  bool shared = info.Length() > 1 && info[1].IsBoolean() && info[1].As<Napi::Boolean>().Value();
  for (;;) {
    if (flock(static_cast<int>(fd), (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) == 0) return Napi::Boolean::New(env, true);
    int err = errno;
    if (err == EINTR) continue;
    if (err == EWOULDBLOCK) return Napi::Boolean::New(env, false);
    if (err == EBADF) Throw(env, Code::InvalidArgument, "fd " + std::to_string(fd) + " is not an open file descriptor");
    Throw(env, Code::Io, std::string("flock failed: ") + std::strerror(err));
  }
}

}  // namespace

void InitLock(Napi::Env env, Napi::Object exports) {
  exports.Set("tryLockFile", Napi::Function::New(env, TryLockFile, "tryLockFile"));
}

}  // namespace tiersync

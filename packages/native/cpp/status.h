// Error codes shared by every native component. The JS side turns a NativeError into a TierSyncError with the
// same code (the error class is handed to the addon at load time), so callers catch one error type everywhere.
#pragma once
#include <stdexcept>
#include <string>

namespace tiersync {

enum class Code {
  InvalidArgument,   // a value of the wrong type or shape
  OutOfRange,        // offset/length outside an arena or file
  Overlap,           // source and destination ranges overlap
  Closed,            // arena, file or engine already closed
  ReadOnly,          // write to a file opened read-only
  Misaligned,        // O_DIRECT request not aligned to the block size
  Aborted,           // cancelled by the caller
  Timeout,           // batch deadline passed
  Io,                // the operating system reported an I/O failure
  Unavailable,       // backend not present on this machine (e.g. no CUDA driver)
  Unsupported,       // a path the engine does not implement (e.g. file->file)
  GeometryMismatch,  // shared-memory arena written with other geometry
  NoMemory,          // mmap/cudaMalloc failed
  Checksum,          // CRC32C mismatch
  Protocol,          // malformed or unexpected peer frame
  Auth,              // peer handshake failed
};

inline const char* CodeName(Code c) {
  switch (c) {
    case Code::InvalidArgument: return "ERR_INVALID_ARGUMENT";
    case Code::OutOfRange: return "ERR_OUT_OF_RANGE";
    case Code::Overlap: return "ERR_OVERLAP";
    case Code::Closed: return "ERR_CLOSED";
    case Code::ReadOnly: return "ERR_READ_ONLY";
    case Code::Misaligned: return "ERR_MISALIGNED";
    case Code::Aborted: return "ERR_ABORTED";
    case Code::Timeout: return "ERR_TIMEOUT";
    case Code::Io: return "ERR_IO";
    case Code::Unavailable: return "ERR_UNAVAILABLE";
    case Code::Unsupported: return "ERR_UNSUPPORTED";
    case Code::GeometryMismatch: return "ERR_GEOMETRY_MISMATCH";
    case Code::NoMemory: return "ERR_NO_MEMORY";
    case Code::Checksum: return "ERR_CHECKSUM";
    case Code::Protocol: return "ERR_PROTOCOL";
    case Code::Auth: return "ERR_AUTH";
  }
  return "ERR_INTERNAL";
}

class NativeError : public std::runtime_error {
 public:
  NativeError(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

std::string ErrnoText(int err);

}  // namespace tiersync

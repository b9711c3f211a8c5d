// libtiersync_crc32c: the addon's CRC32C (crc32c.cc, compiled again into this library, not copied) behind a plain C
// ABI, for processes that cannot load a Node addon: the Python client (ctypes) checksums each page in the same pass
// as its copy into or out of the daemon's shared memory. Built beside the addon (binding.gyp target
// tiersync_crc32c, build/Release/libtiersync_crc32c.so); the daemon names its path in hello (crc32cLibrary).
#include <cstddef>
#include <cstdint>

#include "crc32c.h"

#define TIERSYNC_EXPORT extern "C" __attribute__((visibility("default")))

// Bumped when a function below changes its signature or meaning; callers check it before binding the others.
TIERSYNC_EXPORT uint32_t tiersync_crc32c_abi(void) { return 1; }

// CRC32C of n bytes at data, continuing `seed` (0 to start; the previous result to extend it).
TIERSYNC_EXPORT uint32_t tiersync_crc32c(const void* data, size_t n, uint32_t seed) {
  return tiersync::Crc32c(seed, data, n);
}

// Copies n bytes from src to dst (not overlapping) and returns their CRC32C continuing `seed`, reading src once.
TIERSYNC_EXPORT uint32_t tiersync_copy_crc32c(void* dst, const void* src, size_t n, uint32_t seed) {
  return tiersync::CopyCrc32c(seed, dst, src, n);
}

// Copies n bytes from src to dst (not overlapping) in one pass and writes the CRC32C of each `page`-byte piece (the
// last may be shorter) to crcs[0 .. ceil(n / page)): a run of whole pages from adjacent memory to adjacent slots.
// Returns how many CRCs it wrote (0 when page is 0).
TIERSYNC_EXPORT size_t tiersync_copy_crc32c_pages(void* dst, const void* src, size_t n, size_t page, uint32_t* crcs) {
  if (page == 0) return 0;
  auto* to = static_cast<uint8_t*>(dst);
  const auto* from = static_cast<const uint8_t*>(src);
  size_t count = 0;
  for (size_t at = 0; at < n; at += page) {
    const size_t take = n - at < page ? n - at : page;
    crcs[count++] = tiersync::CopyCrc32c(0, to + at, from + at, take);
  }
  return count;
}

// One job of tiersync_copy_crc32c_jobs: n bytes from src to dst, in pieces of `page` bytes (the last may be shorter),
// the CRC32C of piece k written to crcs[at + k].
struct TiersyncCopyJob {
  uint64_t dst, src, n, at;
};

// Flags of tiersync_copy_crc32c_jobs.
enum : uint32_t {
  // Non-temporal stores: the destination is not read soon (a store into the arena, or a copy larger than the caches).
  TIERSYNC_COPY_STREAM = 1,
};

// A batch of copies in one call (one ctypes call, the GIL released once, for a whole store or load): each job copied
// in one pass with each page's CRC32C. When `expected` is not null, crcs[i] is compared with expected[i] for every
// page copied and the number of pages that differ is returned (0: every page matched); otherwise returns 0. Returns
// SIZE_MAX when page is 0.
TIERSYNC_EXPORT size_t tiersync_copy_crc32c_jobs(const TiersyncCopyJob* jobs, size_t count, size_t page, uint32_t* crcs,
                                                 const uint32_t* expected, uint32_t flags) {
  if (page == 0) return SIZE_MAX;
  const bool stream = (flags & TIERSYNC_COPY_STREAM) != 0;
  size_t bad = 0;
  for (size_t j = 0; j < count; j++) {
    auto* to = reinterpret_cast<uint8_t*>(jobs[j].dst);
    const auto* from = reinterpret_cast<const uint8_t*>(jobs[j].src);
    const size_t n = jobs[j].n;
    size_t i = jobs[j].at;
    for (size_t at = 0; at < n; at += page, i++) {
      const size_t take = n - at < page ? n - at : page;
      crcs[i] = stream ? tiersync::CopyCrc32cStreaming(0, to + at, from + at, take)
                       : tiersync::CopyCrc32c(0, to + at, from + at, take);
      if (expected != nullptr && crcs[i] != expected[i]) bad++;
    }
  }
  return bad;
}

// The implementation selected on this CPU: "table", "hw1", "hw3" or "hw3-clmul".
TIERSYNC_EXPORT const char* tiersync_crc32c_impl(void) { return tiersync::Crc32cImplName(tiersync::Crc32cSelected()); }

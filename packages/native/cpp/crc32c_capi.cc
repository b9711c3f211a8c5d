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

// The implementation selected on this CPU: "table", "hw1", "hw3" or "hw3-clmul".
TIERSYNC_EXPORT const char* tiersync_crc32c_impl(void) { return tiersync::Crc32cImplName(tiersync::Crc32cSelected()); }

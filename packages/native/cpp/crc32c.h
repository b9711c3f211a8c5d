// CRC32C (Castagnoli, reflected polynomial 0x82F63B78, as used by iSCSI RFC 3720 and ext4). Check value of
// "123456789" is 0xE3069283. Picks at run time the fastest implementation the CPU offers (see Crc32cImpl).
#pragma once
#include <cstddef>
#include <cstdint>

namespace tiersync {

// The implementations, fastest last. Each computes the same function; tests compare them with each other.
enum class Crc32cImpl {
  Table,      // slicing-by-8 tables: any CPU
  Hw1,        // one stream of the CPU's CRC32C instruction (x86-64 SSE4.2, or ARMv8 CRC32)
  Hw3,        // three interleaved instruction streams joined by a portable GF(2) multiply (ARMv8 CRC32 without PMULL)
  Hw3Clmul,   // three interleaved streams joined by carry-less multiplication (x86-64 PCLMULQDQ, ARMv8 PMULL); on
              // x86-64 with AVX2 + VPCLMULQDQ, copies fold and checksums mix folding with the three streams
};
// Every implementation, in the order above (fastest last).
constexpr Crc32cImpl kCrc32cImpls[] = {Crc32cImpl::Table, Crc32cImpl::Hw1, Crc32cImpl::Hw3, Crc32cImpl::Hw3Clmul};

// Continues a CRC: pass 0 to start, then the previous result to extend it over more bytes.
uint32_t Crc32c(uint32_t crc, const void* data, size_t length);
// Copies `length` bytes from src to dst (not overlapping) and continues `crc` over them, in one pass over memory.
uint32_t CopyCrc32c(uint32_t crc, void* dst, const void* src, size_t length);
// CopyCrc32c with non-temporal stores where the CPU has them (x86-64 AVX2 + VPCLMULQDQ): for copies whose
// destination is not read again soon (stores into the host tier's arena), which then bypass the caches. Same result.
uint32_t CopyCrc32cStreaming(uint32_t crc, void* dst, const void* src, size_t length);
// The table path, whatever the CPU: lets tests check both implementations against each other.
uint32_t Crc32cTable(uint32_t crc, const void* data, size_t length);

// The CRC32C of A || B from crc(A), crc(B) and B's length (both from seed 0), without reading the bytes again.
uint32_t Crc32cCombine(uint32_t crcA, uint32_t crcB, size_t lengthB);
// The implementation Crc32c and CopyCrc32c use on this CPU.
Crc32cImpl Crc32cSelected();
// Whether that implementation folds with VPCLMULQDQ (x86-64 AVX2): copies, and checksums of 20 KiB and more.
bool Crc32cFolding();
// Whether this build and CPU can run `impl`.
bool Crc32cAvailable(Crc32cImpl impl);
// "table", "hw1", "hw3", "hw3-clmul".
const char* Crc32cImplName(Crc32cImpl impl);
// Crc32c (copy == nullptr) or CopyCrc32c through `impl` (which must be available): for tests and benchmarks.
uint32_t Crc32cWith(Crc32cImpl impl, uint32_t crc, void* copy, const void* data, size_t length);

}  // namespace tiersync

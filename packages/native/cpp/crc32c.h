// CRC32C (Castagnoli, reflected polynomial 0x82F63B78, as used by iSCSI RFC 3720 and ext4). Check value of
// "123456789" is 0xE3069283. Uses the SSE4.2 crc32 instruction when the CPU has it, slicing-by-8 tables otherwise.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tiersync {

// Continues a CRC: pass 0 to start, then the previous result to extend it over more bytes.
uint32_t Crc32c(uint32_t crc, const void* data, size_t length);
bool Crc32cHardware();
// Copies `length` bytes from src to dst (not overlapping) and continues `crc` over them, in one pass over memory.
uint32_t CopyCrc32c(uint32_t crc, void* dst, const void* src, size_t length);
// The table path, whatever the CPU: lets tests check both implementations against each other.
uint32_t Crc32cTable(uint32_t crc, const void* data, size_t length);

}  // namespace tiersync

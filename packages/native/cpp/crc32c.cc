#include "crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tiersync {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
      for (int s = 1; s < 8; s++) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
};
const Tables kTables;

uint32_t Software(uint32_t crc, const uint8_t* p, size_t n) {
  const auto& t = kTables.t;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= crc;
    crc = t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^ t[4][(v >> 24) & 0xff] ^
          t[3][(v >> 32) & 0xff] ^ t[2][(v >> 40) & 0xff] ^ t[1][(v >> 48) & 0xff] ^ t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return crc;
}

#if defined(__x86_64__)
// Three independent crc32 streams over three adjacent blocks keep the instruction's pipeline full (latency 3,
// throughput 1 per cycle): about 3x one stream. The streams are joined by shifting a register over a block of zero
// bytes with 4 table lookups (Mark Adler's construction in crc32c.c, zlib license), since CRC is linear.
constexpr size_t kLong = 8192;
constexpr size_t kShort = 256;

uint32_t Gf2Times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (int i = 0; vec; i++, vec >>= 1)
    if (vec & 1) sum ^= mat[i];
  return sum;
}

void Gf2Square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; n++) square[n] = Gf2Times(mat, mat[n]);
}

// Tables that advance a raw CRC register over `len` zero bytes (len a power of two, at least 1).
struct Shift {
  uint32_t t[4][256];
  explicit Shift(size_t len) {
    uint32_t even[32], odd[32];
    odd[0] = kPoly;  // one zero bit
    for (int n = 1; n < 32; n++) odd[n] = 1u << (n - 1);
    Gf2Square(even, odd);  // two zero bits
    Gf2Square(odd, even);  // four zero bits
    const uint32_t* op = nullptr;
    for (;;) {
      Gf2Square(even, odd);  // 8, 32, 128... zero bits
      len >>= 1;
      if (!len) {
        op = even;
        break;
      }
      Gf2Square(odd, even);
      len >>= 1;
      if (!len) {
        op = odd;
        break;
      }
    }
    for (uint32_t n = 0; n < 256; n++) {
      t[0][n] = Gf2Times(op, n);
      t[1][n] = Gf2Times(op, n << 8);
      t[2][n] = Gf2Times(op, n << 16);
      t[3][n] = Gf2Times(op, n << 24);
    }
  }
  uint32_t operator()(uint32_t crc) const { return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24]; }
};
const Shift kShiftLong(kLong);
const Shift kShiftShort(kShort);

__attribute__((target("sse4.2"))) inline uint64_t Load(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Three streams of `block` bytes each while 3 blocks remain; returns the joined register. With `to`, the bytes are
// also stored there as they are read (a copy and its checksum in one pass over memory).
template <bool kCopy>
__attribute__((target("sse4.2"))) uint64_t Triple(uint64_t c0, const uint8_t*& p, uint8_t*& to, size_t& n, size_t block, const Shift& shift) {
  while (n >= 3 * block) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t* end = p + block;
    do {
      uint64_t v0 = Load(p), v1 = Load(p + block), v2 = Load(p + 2 * block);
      c0 = _mm_crc32_u64(c0, v0);
      c1 = _mm_crc32_u64(c1, v1);
      c2 = _mm_crc32_u64(c2, v2);
      if constexpr (kCopy) {
        std::memcpy(to, &v0, 8);
        std::memcpy(to + block, &v1, 8);
        std::memcpy(to + 2 * block, &v2, 8);
        to += 8;
      }
      p += 8;
    } while (p < end);
    c0 = shift(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
    c0 = shift(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c2);
    p += 2 * block;
    if constexpr (kCopy) to += 2 * block;
    n -= 3 * block;
  }
  return c0;
}

template <bool kCopy>
__attribute__((target("sse4.2"))) uint32_t HardwareT(uint32_t crc, const uint8_t* p, uint8_t* to, size_t n) {
  uint64_t c = crc;
  while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
    if constexpr (kCopy) *to++ = *p;
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    n--;
  }
  c = Triple<kCopy>(c, p, to, n, kLong, kShiftLong);
  c = Triple<kCopy>(c, p, to, n, kShort, kShiftShort);
  while (n >= 8) {
    uint64_t v = Load(p);
    if constexpr (kCopy) {
      std::memcpy(to, &v, 8);
      to += 8;
    }
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  while (n--) {
    if constexpr (kCopy) *to++ = *p;
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  }
  return static_cast<uint32_t>(c);
}

uint32_t Hardware(uint32_t crc, const uint8_t* p, size_t n) { return HardwareT<false>(crc, p, nullptr, n); }
uint32_t HardwareCopy(uint32_t crc, uint8_t* to, const uint8_t* p, size_t n) { return HardwareT<true>(crc, p, to, n); }
const bool kHardware = __builtin_cpu_supports("sse4.2");
#else
const bool kHardware = false;
#endif

}  // namespace

bool Crc32cHardware() { return kHardware; }

uint32_t Crc32cTable(uint32_t crc, const void* data, size_t length) {
  return ~Software(~crc, static_cast<const uint8_t*>(data), length);
}

uint32_t Crc32c(uint32_t crc, const void* data, size_t length) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (kHardware) return ~Hardware(crc, p, length);
#endif
  return ~Software(crc, p, length);
}

uint32_t CopyCrc32c(uint32_t crc, void* dst, const void* src, size_t length) {
#if defined(__x86_64__)
  if (kHardware) return ~HardwareCopy(~crc, static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), length);
#endif
  std::memcpy(dst, src, length);
  return Crc32c(crc, dst, length);
}

}  // namespace tiersync

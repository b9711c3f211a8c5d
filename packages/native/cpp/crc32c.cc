// CRC32C at memory speed.
//
// The CPU's CRC32C instruction (x86-64 SSE4.2 `crc32`, ARMv8 `crc32cx`) has a latency of about 3 cycles and a
// throughput of one per cycle, so a single dependent stream uses a third of it. Following the method of V. Gopal,
// J. Guilford, E. Ozturk, G. Wolrich, W. Feghali, J. Dixon, D. Karakoyunlu, "Fast CRC Computation for iSCSI
// Polynomial Using CRC32 Instruction" (Intel white paper 323405, 2011), a buffer is cut into rounds of three
// adjacent blocks checksummed by three independent streams, and the three registers are joined at the end of the
// round. CRC is linear: crc(A || B || C) = crc(A) * x^(16 b) + crc(B) * x^(8 b) + crc(C) (mod P) for blocks of b
// bytes, with B and C started from a zero register. On x86-64 the two multiplications are one PCLMULQDQ each and
// the 64-bit product is reduced modulo P by one more crc32 instruction (see JoinClmul); elsewhere a portable
// shift-and-add multiply modulo P does it (JoinPortable: about 100 cycles, small beside a round of kilobytes).
// On aarch64 the same join uses PMULL (vmull_p64) and the 64-bit product is reduced by one crc32cx.
// Everything is selected at run time from what the CPU reports (CPUID on x86-64, getauxval(AT_HWCAP) on aarch64),
// so the addon builds for the generic baseline (x86-64, armv8-a: Debian's default flags define no
// __ARM_FEATURE_CRC32); the instructions are enabled per function with target attributes. Own code; only the
// method is the paper's.
#include "crc32c.h"

#include <cstring>
#include <initializer_list>

#if defined(__x86_64__)
#include <immintrin.h>
#include <nmmintrin.h>
#include <wmmintrin.h>
#define TIERSYNC_CRC_X86 1
#define TARGET_HW __attribute__((target("sse4.2")))
#define TARGET_CLMUL __attribute__((target("sse4.2,pclmul")))
#elif defined(__aarch64__)
#include <arm_acle.h>
#include <arm_neon.h>
#include <sys/auxv.h>
#define TIERSYNC_CRC_ARM 1
// The CRC32 extension is optional in ARMv8.0 (mandatory from v8.1) and PMULL comes with the crypto extension:
// both are compiled per function and used only when AT_HWCAP reports them.
#define TARGET_HW __attribute__((target("+crc")))
#define TARGET_CLMUL __attribute__((target("+crc+crypto")))
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1UL << 7)
#endif
#ifndef HWCAP_PMULL
#define HWCAP_PMULL (1UL << 4)
#endif
#endif

namespace tiersync {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

// ---- Table path (any CPU): slicing-by-8. ----

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

uint32_t SoftwareAny(uint32_t crc, const uint8_t* p, uint8_t* to, size_t n) {
  if (to) std::memcpy(to, p, n);
  return Software(crc, p, n);
}

// ---- Arithmetic modulo P in the reflected representation (bit 31 holds x^0, bit 0 holds x^31). ----

constexpr uint32_t TimesXConst(uint32_t v, unsigned times) {
  while (times--) v = (v & 1) ? (v >> 1) ^ kPoly : v >> 1;
  return v;
}

uint32_t TimesX(uint32_t v, unsigned times) {
  while (times--) v = (v & 1) ? (v >> 1) ^ kPoly : v >> 1;
  return v;
}

// a * b mod P, for a != 0 (zlib's multmodp construction).
inline uint32_t MulModP(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) return p;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
}

// x^(2^k) mod P for k = 0..31: powers of x that shift a register over any length by repeated squaring.
struct SquareTable {
  uint32_t p[32];
  SquareTable() {
    p[0] = 1u << 30;  // x^1
    for (int k = 1; k < 32; k++) p[k] = MulModP(p[k - 1], p[k - 1]);
  }
};
const SquareTable kSquares;

// Longest block of a round (three blocks); a round's join costs the same whatever its length.
constexpr size_t kMaxBlock = 8192;

// Per block length b (a multiple of 8, index b / 8): the powers of x that shift a register over b and 2b bytes.
struct Powers {
  uint32_t x8b, x16b;            // x^(8b), x^(16b): the portable join multiplies by these
  uint32_t clmul8b, clmul16b;    // x^(8b-33), x^(16b-33): the carry-less join (its crc32 reduction adds x^33)
};
struct PowerTable {
  Powers p[kMaxBlock / 8 + 1];
  PowerTable() {
    uint32_t x8 = TimesX(1u << 31, 64), x16 = TimesX(1u << 31, 128);  // b = 8
    uint32_t c8 = TimesX(1u << 31, 31), c16 = TimesX(1u << 31, 95);
    p[0] = {1u << 31, 1u << 31, 0, 0};  // unused
    for (size_t i = 1; i <= kMaxBlock / 8; i++) {
      p[i] = {x8, x16, c8, c16};
      x8 = TimesX(x8, 64);
      x16 = TimesX(x16, 128);
      c8 = TimesX(c8, 64);
      c16 = TimesX(c16, 128);
    }
  }
};
const PowerTable kPowers;

inline uint64_t Load(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

#if defined(TIERSYNC_CRC_X86) || defined(TIERSYNC_CRC_ARM)

// The instruction set: one 8-byte and one 1-byte step of the CRC32C instruction, and how a round's streams join.
#if defined(TIERSYNC_CRC_X86)
struct Step {
  static TARGET_HW inline uint32_t U64(uint32_t c, uint64_t v) { return static_cast<uint32_t>(_mm_crc32_u64(c, v)); }
  static TARGET_HW inline uint32_t U8(uint32_t c, uint8_t b) { return _mm_crc32_u8(c, b); }
};
#else
struct Step {
  static TARGET_HW inline uint32_t U64(uint32_t c, uint64_t v) { return __crc32cd(c, v); }
  static TARGET_HW inline uint32_t U8(uint32_t c, uint8_t b) { return __crc32cb(c, b); }
};
#endif

struct JoinPortable {
  // Below this block length one stream is as fast as three plus the ~100-cycle portable join.
  static constexpr size_t kMinBlock = 256;
  static TARGET_HW inline uint32_t Join(uint32_t c0, uint32_t c1, uint32_t c2, size_t block) {
    const Powers& k = kPowers.p[block / 8];
    return MulModP(k.x16b, c0) ^ MulModP(k.x8b, c1) ^ c2;
  }
};

#if defined(TIERSYNC_CRC_X86)
// In the reflected representation, the 64-bit carry-less product of c and x^(n-33) reads as D = c * x^(n-33) * x,
// and crc32 of D from a zero register gives D * x^32 mod P = c * x^n mod P: the register shifted over n zero bits.
// The two products are added before that reduction, so a join costs two PCLMULQDQ and one crc32.
TARGET_CLMUL uint32_t JoinClmulImpl(uint32_t c0, uint32_t c1, uint32_t c2, size_t block) {
  const Powers& k = kPowers.p[block / 8];
  __m128i a = _mm_clmulepi64_si128(_mm_cvtsi32_si128(static_cast<int>(c0)), _mm_cvtsi32_si128(static_cast<int>(k.clmul16b)), 0);
  __m128i b = _mm_clmulepi64_si128(_mm_cvtsi32_si128(static_cast<int>(c1)), _mm_cvtsi32_si128(static_cast<int>(k.clmul8b)), 0);
  uint64_t d = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_xor_si128(a, b)));
  return static_cast<uint32_t>(_mm_crc32_u64(0, d)) ^ c2;
}
struct JoinClmul {
  static constexpr size_t kMinBlock = 32;
  static TARGET_HW inline uint32_t Join(uint32_t c0, uint32_t c1, uint32_t c2, size_t block) { return JoinClmulImpl(c0, c1, c2, block); }
};
#elif defined(TIERSYNC_CRC_ARM)
// The same join as JoinClmulImpl with PMULL: the 64-bit carry-less products of the registers and x^(n-33), added,
// then reduced by crc32cx from a zero register (bit for bit the x86-64 computation).
TARGET_CLMUL uint32_t JoinClmulImpl(uint32_t c0, uint32_t c1, uint32_t c2, size_t block) {
  const Powers& k = kPowers.p[block / 8];
  uint64x2_t a = vreinterpretq_u64_p128(vmull_p64(c0, k.clmul16b));
  uint64x2_t b = vreinterpretq_u64_p128(vmull_p64(c1, k.clmul8b));
  return __crc32cd(0, vgetq_lane_u64(veorq_u64(a, b), 0)) ^ c2;
}
struct JoinClmul {
  static constexpr size_t kMinBlock = 32;
  static TARGET_HW inline uint32_t Join(uint32_t c0, uint32_t c1, uint32_t c2, size_t block) { return JoinClmulImpl(c0, c1, c2, block); }
};
#endif

// One round: three streams over three adjacent blocks of `block` bytes (a multiple of 8), joined.
template <class J, bool kCopy>
TARGET_HW inline uint32_t Round(uint32_t c0, const uint8_t* p, uint8_t* to, size_t block) {
  uint32_t c1 = 0, c2 = 0;
  const uint8_t* q = p + block;
  const uint8_t* r = p + 2 * block;
  for (size_t i = 0; i < block; i += 8) {
    uint64_t v0 = Load(p + i), v1 = Load(q + i), v2 = Load(r + i);
    c0 = Step::U64(c0, v0);
    c1 = Step::U64(c1, v1);
    c2 = Step::U64(c2, v2);
    if constexpr (kCopy) {
      std::memcpy(to + i, &v0, 8);
      std::memcpy(to + block + i, &v1, 8);
      std::memcpy(to + 2 * block + i, &v2, 8);
    }
  }
  return J::Join(c0, c1, c2, block);
}

// The raw register `c` continued over n bytes at p (copied to `to` as they are read when kCopy). kThree: rounds of
// three streams while at least three minimum blocks remain, then one stream for the rest (under 24 bytes).
template <class J, bool kThree, bool kCopy>
TARGET_HW uint32_t Hardware(uint32_t c, const uint8_t* p, uint8_t* to, size_t n) {
  while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
    if constexpr (kCopy) *to++ = *p;
    c = Step::U8(c, *p++);
    n--;
  }
  if constexpr (kThree) {
    while (n >= 3 * kMaxBlock) {
      c = Round<J, kCopy>(c, p, to, kMaxBlock);
      p += 3 * kMaxBlock;
      if constexpr (kCopy) to += 3 * kMaxBlock;
      n -= 3 * kMaxBlock;
    }
    if (n >= 3 * J::kMinBlock) {
      const size_t block = n / 24 * 8;  // three blocks cover all but n % 24 bytes
      c = Round<J, kCopy>(c, p, to, block);
      p += 3 * block;
      if constexpr (kCopy) to += 3 * block;
      n -= 3 * block;
    }
  }
  while (n >= 8) {
    uint64_t v = Load(p);
    if constexpr (kCopy) {
      std::memcpy(to, &v, 8);
      to += 8;
    }
    c = Step::U64(c, v);
    p += 8;
    n -= 8;
  }
  while (n--) {
    if constexpr (kCopy) *to++ = *p;
    c = Step::U8(c, *p++);
  }
  return c;
}

template <class J, bool kThree>
uint32_t HardwareAny(uint32_t c, const uint8_t* p, uint8_t* to, size_t n) {
  return to ? Hardware<J, kThree, true>(c, p, to, n) : Hardware<J, kThree, false>(c, p, nullptr, n);
}
#endif

#if defined(TIERSYNC_CRC_X86)
// ---- x86-64 copies: 32-byte loads, CRC32C by carry-less folding (AVX2 + VPCLMULQDQ). ----
//
// The crc32 instruction checksums ~13 GB/s on one core here (three streams, 8 bytes a cycle at best), slower than
// memory, so a copy that feeds it 8 bytes at a time runs at the sum of a copy and a checksum pass. Folding keeps
// eight 128-bit remainders (four 256-bit registers, 128 bytes a step): each step multiplies every remainder by
// x^1024 mod P (two carry-less products per 128 bits) and adds the next 128 bytes, the method of V. Gopal et al.,
// "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Intel 2009). The copy stores the same
// 32-byte registers it loaded, non-temporally when asked (bytes the caller will not read soon: stores into the
// arena), so the pass costs about what memcpy does. Own code; only the method is the paper's.
#define TARGET_FOLD __attribute__((target("sse4.2,pclmul,avx,avx2,vpclmulqdq")))

// In the reflected representation a 64-bit lane holds x^m at bit 63 - m; the carry-less product of two lanes reads
// as their product times x in a 128-bit register (bit k = x^(127 - k)). A 128-bit remainder H * x^64 + L moved
// forward over d bits is H * x^(64 + d) + L * x^d, so its lanes are multiplied by x^(63 + d) and x^(d - 1) mod P.
constexpr uint64_t FoldPower(unsigned m) { return static_cast<uint64_t>(TimesXConst(1u << 31, m)) << 32; }
constexpr uint64_t kFold1024Hi = FoldPower(1024 + 63), kFold1024Lo = FoldPower(1024 - 1);
constexpr uint64_t kFold128Hi = FoldPower(128 + 63), kFold128Lo = FoldPower(128 - 1);
// Folding pays from a few steps on (its start and end cost ~30 cycles).
constexpr size_t kFoldMinBytes = 512;

bool FoldAvailable() {
  return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("vpclmulqdq");
}
const bool kFold = FoldAvailable();

template <bool kStream>
TARGET_FOLD inline void Store32(uint8_t* to, __m256i v) {
  if constexpr (kStream) _mm256_stream_si256(reinterpret_cast<__m256i*>(to), v);
  else _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), v);
}
TARGET_FOLD inline __m256i Fold256(__m256i a, __m256i k) {
  return _mm256_xor_si256(_mm256_clmulepi64_epi128(a, k, 0x00), _mm256_clmulepi64_epi128(a, k, 0x11));
}
TARGET_FOLD inline __m128i Fold128(__m128i a, __m128i k) {
  return _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11));
}

// The first fold register with the raw register c entering as its first 32 bits.
TARGET_FOLD inline __m256i FoldEnter(__m256i x0, uint32_t c) {
  return _mm256_xor_si256(x0, _mm256_zextsi128_si256(_mm_cvtsi32_si128(static_cast<int>(c))));
}

TARGET_FOLD inline __m256i Fold1024Keys() {
  return _mm256_set_epi64x(static_cast<long long>(kFold1024Lo), static_cast<long long>(kFold1024Hi),
                           static_cast<long long>(kFold1024Lo), static_cast<long long>(kFold1024Hi));
}

// The eight remainders, in message order, folded into one; then its 16 bytes through crc32 (H * x^96 + L * x^32):
// the raw register after the folded bytes.
TARGET_FOLD inline uint32_t FoldFinish(__m256i x0, __m256i x1, __m256i x2, __m256i x3) {
  const __m128i lanes[8] = {_mm256_castsi256_si128(x0), _mm256_extracti128_si256(x0, 1), _mm256_castsi256_si128(x1),
                            _mm256_extracti128_si256(x1, 1), _mm256_castsi256_si128(x2), _mm256_extracti128_si256(x2, 1),
                            _mm256_castsi256_si128(x3), _mm256_extracti128_si256(x3, 1)};
  const __m128i k1 = _mm_set_epi64x(static_cast<long long>(kFold128Lo), static_cast<long long>(kFold128Hi));
  __m128i a = lanes[0];
  for (int i = 1; i < 8; i++) a = _mm_xor_si128(Fold128(a, k1), lanes[i]);
  const uint32_t h = static_cast<uint32_t>(_mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(a))));
  return static_cast<uint32_t>(_mm_crc32_u64(h, static_cast<uint64_t>(_mm_extract_epi64(a, 1))));
}

// The raw register c continued over n bytes at p (n a multiple of 128, at least 128), copied to `to` (32-byte aligned
// when kStream).
template <bool kStream>
TARGET_FOLD uint32_t FoldCopy(uint32_t c, const uint8_t* p, uint8_t* to, size_t n) {
  const auto* first = reinterpret_cast<const __m256i*>(p);
  __m256i x0 = _mm256_loadu_si256(first), x1 = _mm256_loadu_si256(first + 1), x2 = _mm256_loadu_si256(first + 2),
          x3 = _mm256_loadu_si256(first + 3);
  Store32<kStream>(to, x0);
  Store32<kStream>(to + 32, x1);
  Store32<kStream>(to + 64, x2);
  Store32<kStream>(to + 96, x3);
  x0 = FoldEnter(x0, c);
  const __m256i k = Fold1024Keys();
  for (size_t at = 128; at < n; at += 128) {
    const auto* in = reinterpret_cast<const __m256i*>(p + at);
    const __m256i d0 = _mm256_loadu_si256(in), d1 = _mm256_loadu_si256(in + 1), d2 = _mm256_loadu_si256(in + 2),
                  d3 = _mm256_loadu_si256(in + 3);
    Store32<kStream>(to + at, d0);
    Store32<kStream>(to + at + 32, d1);
    Store32<kStream>(to + at + 64, d2);
    Store32<kStream>(to + at + 96, d3);
    x0 = _mm256_xor_si256(Fold256(x0, k), d0);
    x1 = _mm256_xor_si256(Fold256(x1, k), d1);
    x2 = _mm256_xor_si256(Fold256(x2, k), d2);
    x3 = _mm256_xor_si256(Fold256(x3, k), d3);
  }
  return FoldFinish(x0, x1, x2, x3);
}

// Copy + CRC32C for x86-64 with folding: the head up to a 32-byte aligned destination (streamed stores need it) and
// the tail under 128 bytes go through the three-stream path. The fence makes streamed stores visible in order with
// what the caller writes next (a commit naming these slots).
template <bool kStream>
uint32_t CopyFold(uint32_t c, const uint8_t* p, uint8_t* to, size_t n) {
  if (!kFold || n < kFoldMinBytes) return Hardware<JoinClmul, true, true>(c, p, to, n);
  const size_t head = (32 - (reinterpret_cast<uintptr_t>(to) & 31)) & 31;
  c = Hardware<JoinClmul, false, true>(c, p, to, head);
  const size_t body = (n - head) & ~static_cast<size_t>(127);
  c = FoldCopy<kStream>(c, p + head, to + head, body);
  if constexpr (kStream) _mm_sfence();
  const size_t done = head + body;
  return Hardware<JoinClmul, true, true>(c, p + done, to + done, n - done);
}

// ---- x86-64 checksums without a copy: folding and the crc32 instruction side by side. ----
//
// Folding (carry-less multiplies) and the crc32 instruction run on different execution units, and each alone
// checksums about 27 GiB/s in cache here. A round runs both in one loop over different bytes: 8 KiB folded, then
// three 4 KiB blocks through three crc32 streams, each loop step taking 128 bytes of the first and 64 of each block
// (the split measured fastest here, 2026-12-07: 33-34 GiB/s against 27 for either alone). The four registers are
// joined in message order with the blocks' shift constants (JoinClmulImpl). Running the two side by side on one core
// is the idea of P. Cawley's fast-crc32 (github.com/corsix/fast-crc32); the layout and the code are ours.
constexpr size_t kRoundBlock = 4096, kRoundFold = 2 * kRoundBlock, kRoundBytes = kRoundFold + 3 * kRoundBlock;
static_assert(kRoundBlock <= kMaxBlock && kRoundBlock % 64 == 0 && kRoundFold / 128 == kRoundBlock / 64);

// The raw register c continued over the kRoundBytes bytes at p.
TARGET_FOLD uint32_t MixedRound(uint32_t c, const uint8_t* p) {
  const uint8_t* b0 = p + kRoundFold;
  const uint8_t* b1 = b0 + kRoundBlock;
  const uint8_t* b2 = b1 + kRoundBlock;
  const auto* first = reinterpret_cast<const __m256i*>(p);
  __m256i x0 = FoldEnter(_mm256_loadu_si256(first), c), x1 = _mm256_loadu_si256(first + 1), x2 = _mm256_loadu_si256(first + 2),
          x3 = _mm256_loadu_si256(first + 3);
  const __m256i k = Fold1024Keys();
  uint32_t c0 = 0, c1 = 0, c2 = 0;
  for (size_t step = 0; step < kRoundBlock / 64; step++) {
    if (step) {
      const auto* in = reinterpret_cast<const __m256i*>(p + step * 128);
      x0 = _mm256_xor_si256(Fold256(x0, k), _mm256_loadu_si256(in));
      x1 = _mm256_xor_si256(Fold256(x1, k), _mm256_loadu_si256(in + 1));
      x2 = _mm256_xor_si256(Fold256(x2, k), _mm256_loadu_si256(in + 2));
      x3 = _mm256_xor_si256(Fold256(x3, k), _mm256_loadu_si256(in + 3));
    }
    for (size_t i = step * 64; i < step * 64 + 64; i += 8) {
      c0 = Step::U64(c0, Load(b0 + i));
      c1 = Step::U64(c1, Load(b1 + i));
      c2 = Step::U64(c2, Load(b2 + i));
    }
  }
  // After the folded bytes, then block 0 (shift by one block, add c0), then blocks 1 and 2.
  const uint32_t folded = FoldFinish(x0, x1, x2, x3);
  return JoinClmulImpl(JoinClmulImpl(0, folded, c0, kRoundBlock), c1, c2, kRoundBlock);
}

uint32_t Mixed(uint32_t c, const uint8_t* p, size_t n) {
  if (kFold) {
    for (; n >= kRoundBytes; p += kRoundBytes, n -= kRoundBytes) c = MixedRound(c, p);
  }
  return Hardware<JoinClmul, true, false>(c, p, nullptr, n);
}

uint32_t Hw3ClmulAny(uint32_t c, const uint8_t* p, uint8_t* to, size_t n) {
  return to ? CopyFold<false>(c, p, to, n) : Mixed(c, p, n);
}
#endif

using Fn = uint32_t (*)(uint32_t raw, const uint8_t* p, uint8_t* to, size_t n);

Fn FnOf(Crc32cImpl impl) {
  switch (impl) {
#if defined(TIERSYNC_CRC_X86) || defined(TIERSYNC_CRC_ARM)
    case Crc32cImpl::Hw1: return HardwareAny<JoinPortable, false>;
    case Crc32cImpl::Hw3: return HardwareAny<JoinPortable, true>;
#if defined(TIERSYNC_CRC_X86)
    case Crc32cImpl::Hw3Clmul: return Hw3ClmulAny;
#else
    case Crc32cImpl::Hw3Clmul: return HardwareAny<JoinClmul, true>;
#endif
#endif
    default: return SoftwareAny;
  }
}

bool Available(Crc32cImpl impl) {
  switch (impl) {
    case Crc32cImpl::Table: return true;
#if defined(TIERSYNC_CRC_X86)
    case Crc32cImpl::Hw1:
    case Crc32cImpl::Hw3: return __builtin_cpu_supports("sse4.2");
    case Crc32cImpl::Hw3Clmul: return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul");
#elif defined(TIERSYNC_CRC_ARM)
    case Crc32cImpl::Hw1:
    case Crc32cImpl::Hw3: return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
    case Crc32cImpl::Hw3Clmul: {
      const unsigned long caps = getauxval(AT_HWCAP);
      return (caps & HWCAP_CRC32) && (caps & HWCAP_PMULL);
    }
#endif
    default: return false;
  }
}

Crc32cImpl Select() {
  for (Crc32cImpl i : {Crc32cImpl::Hw3Clmul, Crc32cImpl::Hw3})
    if (Available(i)) return i;
  return Crc32cImpl::Table;
}

const Crc32cImpl kSelected = Select();
const Fn kFn = FnOf(kSelected);

}  // namespace

Crc32cImpl Crc32cSelected() { return kSelected; }
bool Crc32cFolding() {
#if defined(TIERSYNC_CRC_X86)
  return kSelected == Crc32cImpl::Hw3Clmul && kFold;
#else
  return false;
#endif
}
bool Crc32cAvailable(Crc32cImpl impl) { return Available(impl); }

const char* Crc32cImplName(Crc32cImpl impl) {
  switch (impl) {
    case Crc32cImpl::Table: return "table";
    case Crc32cImpl::Hw1: return "hw1";
    case Crc32cImpl::Hw3: return "hw3";
    case Crc32cImpl::Hw3Clmul: return "hw3-clmul";
  }
  return "?";
}

uint32_t Crc32cTable(uint32_t crc, const void* data, size_t length) {
  return ~Software(~crc, static_cast<const uint8_t*>(data), length);
}

uint32_t Crc32c(uint32_t crc, const void* data, size_t length) {
  return ~kFn(~crc, static_cast<const uint8_t*>(data), nullptr, length);
}

uint32_t CopyCrc32c(uint32_t crc, void* dst, const void* src, size_t length) {
  if (length == 0) return crc;
  return ~kFn(~crc, static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), length);
}

uint32_t CopyCrc32cStreaming(uint32_t crc, void* dst, const void* src, size_t length) {
  if (length == 0) return crc;
#if defined(TIERSYNC_CRC_X86)
  if (kSelected == Crc32cImpl::Hw3Clmul)
    return ~CopyFold<true>(~crc, static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), length);
#endif
  return ~kFn(~crc, static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), length);
}

uint32_t Crc32cCombine(uint32_t crcA, uint32_t crcB, size_t lengthB) {
  if (lengthB == 0) return crcA;
  // crcA shifted over lengthB zero bytes (x^(8 lengthB) mod P, zlib's x2nmodp with k = 3), then crcB added.
  uint32_t shift = 1u << 31;
  for (unsigned k = 3; lengthB; lengthB >>= 1, k++)
    if (lengthB & 1) shift = MulModP(kSquares.p[k & 31], shift);
  return MulModP(shift, crcA) ^ crcB;
}

uint32_t Crc32cWith(Crc32cImpl impl, uint32_t crc, void* copy, const void* data, size_t length) {
  if (!Available(impl)) impl = Crc32cImpl::Table;
  if (copy && length == 0) return crc;
  return ~FnOf(impl)(~crc, static_cast<const uint8_t*>(data), static_cast<uint8_t*>(copy), length);
}

}  // namespace tiersync

// Stand-alone check of cpp/crc32c.cc, for builds the addon's own tests cannot run (a cross-compiled aarch64 binary
// under qemu-user: packages/native/src/crc32c-aarch64.test.ts builds and runs it). Every implementation this CPU
// runs is checked against the published vectors and against the table path at random lengths, alignments and
// seeds (checksum and copy + checksum); then Crc32c, CopyCrc32c and Crc32cCombine. Prints one JSON line:
// {"selected","available":[...],"checks":N,"failures":[...]} and exits 1 when anything failed.
//
// CRC32C_TEST_HWCAP_MASK (hex, aarch64 only): ANDed into what getauxval(AT_HWCAP) returns, so one binary also shows
// the selection on a CPU without PMULL (0x80: CRC32 only) or without the CRC32 instructions (0). This binary's
// getauxval is resolved before libc's (an executable's symbols come first), including from crc32c.cc's selection
// at start-up; glibc's own calls use its internal alias and are unaffected.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../crc32c.h"

#if defined(__aarch64__)
#include <dlfcn.h>
#include <sys/auxv.h>
extern "C" unsigned long getauxval(unsigned long type) {
  using Real = unsigned long (*)(unsigned long);
  static Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "getauxval"));
  unsigned long v = real ? real(type) : 0;
  if (type == AT_HWCAP) {
    if (const char* mask = std::getenv("CRC32C_TEST_HWCAP_MASK")) v &= std::strtoul(mask, nullptr, 16);
  }
  return v;
}
#endif

using namespace tiersync;

namespace {

int checks = 0;
std::vector<std::string> failures;

void Expect(bool ok, const std::string& what) {
  checks++;
  if (!ok && failures.size() < 20) failures.push_back(what);
}

std::string Hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

uint32_t state = 0x9e3779b9u;
uint32_t Next() {
  state ^= state << 13;
  state ^= state >> 17;
  state ^= state << 5;
  return state;
}

void Vectors(Crc32cImpl impl) {
  struct V {
    std::vector<uint8_t> bytes;
    uint32_t want;
    const char* name;
  };
  std::vector<V> vs;
  vs.push_back({std::vector<uint8_t>{'1', '2', '3', '4', '5', '6', '7', '8', '9'}, 0xE3069283u, "123456789"});
  vs.push_back({std::vector<uint8_t>(32, 0x00), 0x8A9136AAu, "32 zeros"});
  vs.push_back({std::vector<uint8_t>(32, 0xff), 0x62A8AB43u, "32 ones"});
  std::vector<uint8_t> inc(32), dec(32);
  for (int i = 0; i < 32; i++) inc[i] = static_cast<uint8_t>(i), dec[i] = static_cast<uint8_t>(31 - i);
  vs.push_back({inc, 0x46DD794Eu, "32 incrementing"});
  vs.push_back({dec, 0x113FDB5Cu, "32 decrementing"});
  // RFC 3720 B.4: an iSCSI Read (10) command PDU.
  vs.push_back({std::vector<uint8_t>{0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                     0x14, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x18,
                                     0x28, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0},
                0xD9963A56u, "iSCSI Read PDU"});
  for (const V& v : vs) {
    uint32_t got = Crc32cWith(impl, 0, nullptr, v.bytes.data(), v.bytes.size());
    Expect(got == v.want, std::string(Crc32cImplName(impl)) + " " + v.name + ": " + Hex(got) + " want " + Hex(v.want));
    std::vector<uint8_t> copy(v.bytes.size());
    got = Crc32cWith(impl, 0, copy.data(), v.bytes.data(), v.bytes.size());
    Expect(got == v.want && copy == v.bytes, std::string(Crc32cImplName(impl)) + " copying " + v.name);
  }
}

// Against the table path: lengths around every block and round boundary of the three-stream loop, then random
// ones; random source and destination alignments and seeds. Guard bytes around the copy must stay untouched.
void AgainstTable(Crc32cImpl impl, const std::vector<uint8_t>& random) {
  std::vector<size_t> sizes = {0, 1, 7, 8, 9, 23, 24, 25, 95, 96, 97, 191, 192, 193, 767, 768, 769, 4096,
                               24575, 24576, 24577, 49152 + 24 * 5 + 3, 3 * 8192 * 4 + 17};
  for (int k = 0; k < 60; k++) sizes.push_back(Next() % 200000);
  const char* name = Crc32cImplName(impl);
  for (size_t n : sizes) {
    const size_t offset = Next() % 64;
    const uint8_t* src = random.data() + offset;
    const uint32_t seed = Next();
    const uint32_t want = Crc32cTable(seed, src, n);
    uint32_t got = Crc32cWith(impl, seed, nullptr, src, n);
    Expect(got == want, std::string(name) + " " + std::to_string(n) + " bytes at +" + std::to_string(offset) +
                            ": " + Hex(got) + " want " + Hex(want));
    std::vector<uint8_t> dst(n + 32, 0xA5);
    const size_t at = 8 + Next() % 8;
    got = Crc32cWith(impl, seed, dst.data() + at, src, n);
    bool guards = true;
    for (size_t i = 0; i < at; i++) guards &= dst[i] == 0xA5;
    for (size_t i = at + n; i < dst.size(); i++) guards &= dst[i] == 0xA5;
    Expect(got == want && std::memcmp(dst.data() + at, src, n) == 0 && guards,
           std::string(name) + " copying " + std::to_string(n) + " bytes to +" + std::to_string(at));
  }
}

void SelectedAndCombine(const std::vector<uint8_t>& random) {
  for (int k = 0; k < 20; k++) {
    const size_t n = Next() % 100000, offset = Next() % 16;
    const uint8_t* src = random.data() + offset;
    const uint32_t want = Crc32cTable(0, src, n);
    Expect(Crc32c(0, src, n) == want, "Crc32c " + std::to_string(n) + " bytes");
    std::vector<uint8_t> dst(n + 1);
    Expect(CopyCrc32c(0, dst.data() + 1, src, n) == want && std::memcmp(dst.data() + 1, src, n) == 0,
           "CopyCrc32c " + std::to_string(n) + " bytes");
    // Crc32cCombine at a random split, and continuing from a seed.
    const size_t split = n ? Next() % (n + 1) : 0;
    const uint32_t a = Crc32c(0, src, split), b = Crc32c(0, src + split, n - split);
    Expect(Crc32cCombine(a, b, n - split) == want, "Crc32cCombine " + std::to_string(n) + " split " + std::to_string(split));
    Expect(Crc32c(a, src + split, n - split) == want, "Crc32c continued at " + std::to_string(split));
  }
  Expect(Crc32cCombine(0x12345678u, 0, 0) == 0x12345678u, "Crc32cCombine of an empty B");
}

}  // namespace

int main() {
  std::vector<uint8_t> random(200000 + 64);
  for (auto& b : random) b = static_cast<uint8_t>(Next());
  std::string available;
  for (Crc32cImpl impl : kCrc32cImpls) {
    if (!Crc32cAvailable(impl)) continue;
    available += std::string(available.empty() ? "" : ",") + "\"" + Crc32cImplName(impl) + "\"";
    Vectors(impl);
    AgainstTable(impl, random);
  }
  SelectedAndCombine(random);
  std::printf("{\"selected\":\"%s\",\"available\":[%s],\"checks\":%d,\"failures\":[", Crc32cImplName(Crc32cSelected()),
              available.c_str(), checks);
  for (size_t i = 0; i < failures.size(); i++) std::printf("%s\"%s\"", i ? "," : "", failures[i].c_str());
  std::printf("]}\n");
  return failures.empty() ? 0 : 1;
}

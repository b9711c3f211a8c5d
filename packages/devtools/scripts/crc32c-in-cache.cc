// CRC32C of buffers that stay in cache (16 KiB to 2 MiB, checksummed again and again), per implementation the CPU
// runs, and through Crc32c() (the selected one): GiB/s, medians of 5. docs/BENCHMARKS.md, "CRC32C in cache".
//   g++ -O2 -std=c++20 -Ipackages/native/cpp packages/devtools/scripts/crc32c-in-cache.cc packages/native/cpp/crc32c.cc -o /tmp/crc32c-in-cache && /tmp/crc32c-in-cache
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "crc32c.h"

using namespace tiersync;

namespace {

// GiB/s of `run` over n bytes, repeated until 1 GiB was checksummed; the median of 5 such passes.
template <class Run>
double Rate(size_t n, Run run) {
  std::vector<double> rates;
  for (int pass = 0; pass < 5; pass++) {
    const size_t times = (size_t{1} << 30) / n;
    uint32_t sink = 0;
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < times; i++) sink = run(sink);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(1.0 / seconds + (sink == 0xFFFFFFFFu ? 1e-12 : 0));  // uses sink: the loop is not elided
  }
  std::sort(rates.begin(), rates.end());
  return rates[2];
}

}  // namespace

int main() {
  std::vector<uint8_t> data(2 << 20);
  for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  std::printf("%-10s", "bytes");
  for (Crc32cImpl impl : kCrc32cImpls)
    if (Crc32cAvailable(impl)) std::printf("%12s", Crc32cImplName(impl));
  std::printf("  Crc32c (selected: %s)\n", Crc32cImplName(Crc32cSelected()));
  for (size_t n : {size_t{16} << 10, size_t{64} << 10, size_t{256} << 10, size_t{2} << 20}) {
    const uint8_t* p = data.data();
    if (Crc32c(7, p, n) != Crc32cTable(7, p, n)) {
      std::printf("Crc32c disagrees with the table path at %zu bytes\n", n);
      return 1;
    }
    std::printf("%-10zu", n);
    for (Crc32cImpl impl : kCrc32cImpls)
      if (Crc32cAvailable(impl)) std::printf("%12.1f", Rate(n, [&](uint32_t c) { return Crc32cWith(impl, c, nullptr, p, n); }));
    std::printf("  %.1f\n", Rate(n, [&](uint32_t c) { return Crc32c(c, p, n); }));
  }
}

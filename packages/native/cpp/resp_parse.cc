#include "resp_parse.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace tiersync::resp {

std::string ShowByte(uint8_t b) {
  if (b >= 0x20 && b < 0x7f) return std::string("'") + static_cast<char>(b) + "'";
  char buf[8];
  snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

int ParseLine(const uint8_t* p, size_t avail, uint8_t type, uint64_t maxLine, int64_t* value, size_t* length) {
  if (avail == 0) return 0;
  if (p[0] != type) return -1;
  const size_t limit = std::min<size_t>(avail, maxLine + 2);
  const void* nl = memchr(p, '\n', limit);
  if (!nl) return avail > maxLine + 2 ? -1 : 0;
  const size_t end = static_cast<const uint8_t*>(nl) - p;
  if (end < 3 || p[end - 1] != '\r') return -1;
  size_t i = 1;
  bool negative = false;
  if (p[i] == '-') {
    negative = true;
    i++;
  }
  if (i >= end - 1) return -1;
  // As Redis reads lengths (string2ll): no leading zero, no "-0".
  if (p[i] == '0' && (i + 1 < end - 1 || negative)) return -1;
  int64_t v = 0;
  for (; i < end - 1; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    if (v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (p[i] - '0');
  }
  *value = negative ? -v : v;
  *length = end + 1;
  return 1;
}

SetParse ParseSetHeader(const uint8_t* p, size_t avail, size_t head, const SetLimits& o, SetHeader* out) {
  size_t at = head, ll;
  int64_t l;
  int r = ParseLine(p + at, avail - at, '$', o.maxInlineBytes, &l, &ll);
  if (r == 0) return SetParse::More;
  if (r < 0 || l != 3) return SetParse::No;
  at += ll;
  out->nameAt = at;
  if (avail - at < 5) return SetParse::More;
  if ((p[at] | 0x20) != 's' || (p[at + 1] | 0x20) != 'e' || (p[at + 2] | 0x20) != 't' || p[at + 3] != '\r' || p[at + 4] != '\n') return SetParse::No;
  at += 5;
  r = ParseLine(p + at, avail - at, '$', o.maxInlineBytes, &out->keyLength, &ll);
  if (r == 0) return SetParse::More;
  if (r < 0 || out->keyLength < 0 || static_cast<uint64_t>(out->keyLength) > o.maxKeyBytes) return SetParse::No;
  at += ll;
  out->keyAt = at;
  if (avail - at < static_cast<size_t>(out->keyLength) + 2) return SetParse::More;
  if (p[at + out->keyLength] != '\r' || p[at + out->keyLength + 1] != '\n') return SetParse::No;
  at += out->keyLength + 2;
  r = ParseLine(p + at, avail - at, '$', o.maxInlineBytes, &out->valueLength, &ll);
  if (r == 0) return SetParse::More;
  if (r < 0 || out->valueLength < 1 || static_cast<uint64_t>(out->valueLength) > o.maxBulkBytes) return SetParse::No;
  out->valueAt = at + ll;
  return SetParse::Land;
}

bool ParseGet(const uint8_t* p, size_t avail, uint64_t maxKey, size_t* keyAt, size_t* keyLength, size_t* used) {
  if (avail < 9 || std::memcmp(p, "$3\r\n", 4) != 0) return false;
  if ((p[4] | 0x20) != 'g' || (p[5] | 0x20) != 'e' || (p[6] | 0x20) != 't' || p[7] != '\r' || p[8] != '\n') return false;
  int64_t l;
  size_t ll;
  if (ParseLine(p + 9, avail - 9, '$', 32, &l, &ll) != 1 || l < 0 || static_cast<uint64_t>(l) > maxKey) return false;
  const size_t at = 9 + ll;
  if (avail - at < static_cast<size_t>(l) + 2 || p[at + l] != '\r' || p[at + l + 1] != '\n') return false;
  *keyAt = at;
  *keyLength = static_cast<size_t>(l);
  *used = at + static_cast<size_t>(l) + 2;
  return true;
}

bool ParseName(const uint8_t* p, size_t avail, const char* name, size_t* used) {
  const size_t n = std::strlen(name);
  const size_t total = 4 + n + 2;
  if (avail < total || p[0] != '$' || p[1] != static_cast<uint8_t>('0' + n) || p[2] != '\r' || p[3] != '\n') return false;
  if (p[4 + n] != '\r' || p[5 + n] != '\n') return false;
  for (size_t i = 0; i < n; i++)
    if ((p[4 + i] | 0x20) != name[i]) return false;
  *used = total;
  return true;
}

bool ParseKeys(const uint8_t* p, size_t avail, int64_t count, uint64_t maxKey, std::vector<std::pair<size_t, size_t>>* keys, size_t* used) {
  size_t at = 0;
  keys->clear();
  for (int64_t i = 0; i < count; i++) {
    int64_t l;
    size_t ll;
    if (ParseLine(p + at, avail - at, '$', 32, &l, &ll) != 1 || l < 0 || static_cast<uint64_t>(l) > maxKey) return false;
    at += ll;
    if (avail - at < static_cast<size_t>(l) + 2 || p[at + l] != '\r' || p[at + l + 1] != '\n') return false;
    keys->emplace_back(at, static_cast<size_t>(l));
    at += static_cast<size_t>(l) + 2;
  }
  *used = at;
  return true;
}

}  // namespace tiersync::resp

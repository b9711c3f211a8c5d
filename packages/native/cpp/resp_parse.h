// RESP framing the door thread reads itself (https://redis.io/docs/latest/develop/reference/protocol-spec/): the
// few shapes it answers or lands, recognised without copying; anything else goes to JavaScript's parser.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tiersync::resp {

// A byte as an error message shows it: 'x' when printable, else 0x..
std::string ShowByte(uint8_t b);
// A protocol line `<type><integer>\r\n` at p: 1 (value and length set), 0 (incomplete), -1 (not such a line).
int ParseLine(const uint8_t* p, size_t avail, uint8_t type, uint64_t maxLine, int64_t* value, size_t* length);

// `*3 $3 SET $k key $v` from p (its array header, `head` bytes, already read): whether the SET's value can land
// (its header whole, key and value within bounds: *out filled, offsets from p), more bytes are needed, or it is not
// such a SET.
enum class SetParse { No, More, Land };
struct SetHeader {
  size_t nameAt = 0, keyAt = 0, valueAt = 0;  // valueAt: the value's first byte
  int64_t keyLength = 0, valueLength = 0;
};
struct SetLimits {
  uint64_t maxInlineBytes, maxKeyBytes, maxBulkBytes;
};
SetParse ParseSetHeader(const uint8_t* p, size_t avail, size_t head, const SetLimits& limits, SetHeader* out);

// `$3\r\nGET\r\n$<n>\r\n<key>\r\n` at p, whole: true, with the key's place and the bytes it takes.
bool ParseGet(const uint8_t* p, size_t avail, uint64_t maxKey, size_t* keyAt, size_t* keyLength, size_t* used);
// `$<n>\r\n<name>\r\n` at p, the name in any case (`name`: lower case, under 10 bytes): true, with the bytes it
// takes.
bool ParseName(const uint8_t* p, size_t avail, const char* name, size_t* used);
// The `count` bulk-string keys at p, each whole in hand and at most maxKey bytes: true, with where each one is
// (offset, length from p) and the bytes they take. False: not all in hand, or malformed (JavaScript says what).
bool ParseKeys(const uint8_t* p, size_t avail, int64_t count, uint64_t maxKey, std::vector<std::pair<size_t, size_t>>* keys, size_t* used);

}  // namespace tiersync::resp

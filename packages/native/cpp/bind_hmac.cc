// HMAC-SHA256 (RFC 2104) of many short messages under one key, in one call: the daemon derives the key each client
// page is stored under from its tenant's secret (packages/core/src/server/tenants.ts), 1,024 derivations per store
// of 256 MiB, and node:crypto spends ~5-8 us of the event loop on each. The key's inner and outer pads are absorbed
// once; each message then costs two SHA-256 compressions through copied digest states.
#include <openssl/evp.h>

#include <cstring>
#include <memory>
#include <string>

#include "binding.h"

namespace tiersync {
namespace {

using DigestCtx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

DigestCtx NewCtx(Napi::Env env) {
  DigestCtx c(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!c) Throw(env, Code::NoMemory, "EVP_MD_CTX_new failed");
  return c;
}

// hmacSha256Hex(key: Uint8Array, messages: string[]) -> string[]: lower-case hex digests, one per message (UTF-8).
Napi::Value HmacSha256Hex(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
    Throw(env, Code::InvalidArgument, "key must be a Uint8Array");
  if (!info[1].IsArray()) Throw(env, Code::InvalidArgument, "messages must be an array of strings");
  auto key = info[0].As<Napi::Uint8Array>();
  auto messages = info[1].As<Napi::Array>();
  const EVP_MD* md = EVP_sha256();
  constexpr size_t kBlock = 64, kDigest = 32;
  // Keys longer than a block are hashed first (RFC 2104 section 2).
  unsigned char k[kBlock] = {};
  if (key.ElementLength() > kBlock) {
    unsigned int n = 0;
    if (EVP_Digest(key.Data(), key.ElementLength(), k, &n, md, nullptr) != 1) Throw(env, Code::Io, "SHA-256 failed");
  } else if (key.ElementLength() > 0) {
    std::memcpy(k, key.Data(), key.ElementLength());
  }
  unsigned char ipad[kBlock], opad[kBlock];
  for (size_t i = 0; i < kBlock; i++) {
    ipad[i] = k[i] ^ 0x36;
    opad[i] = k[i] ^ 0x5c;
  }
  DigestCtx inner = NewCtx(env), outer = NewCtx(env), work = NewCtx(env);
  if (EVP_DigestInit_ex(inner.get(), md, nullptr) != 1 || EVP_DigestUpdate(inner.get(), ipad, kBlock) != 1 ||
      EVP_DigestInit_ex(outer.get(), md, nullptr) != 1 || EVP_DigestUpdate(outer.get(), opad, kBlock) != 1)
    Throw(env, Code::Io, "SHA-256 failed");
  static const char kHex[] = "0123456789abcdef";
  const uint32_t count = messages.Length();
  Napi::Array out = Napi::Array::New(env, count);
  std::string message;
  for (uint32_t i = 0; i < count; i++) {
    Napi::Value m = messages.Get(i);
    if (!m.IsString()) Throw(env, Code::InvalidArgument, "messages[" + std::to_string(i) + "] must be a string");
    message = m.As<Napi::String>().Utf8Value();
    unsigned char digest[kDigest];
    unsigned int n = 0;
    if (EVP_MD_CTX_copy_ex(work.get(), inner.get()) != 1 || EVP_DigestUpdate(work.get(), message.data(), message.size()) != 1 ||
        EVP_DigestFinal_ex(work.get(), digest, &n) != 1 || EVP_MD_CTX_copy_ex(work.get(), outer.get()) != 1 ||
        EVP_DigestUpdate(work.get(), digest, kDigest) != 1 || EVP_DigestFinal_ex(work.get(), digest, &n) != 1)
      Throw(env, Code::Io, "HMAC-SHA256 failed");
    char hex[2 * kDigest];
    for (size_t j = 0; j < kDigest; j++) {
      hex[2 * j] = kHex[digest[j] >> 4];
      hex[2 * j + 1] = kHex[digest[j] & 15];
    }
    out.Set(i, Napi::String::New(env, hex, sizeof hex));
  }
  return out;
}

}  // namespace

void InitHmac(Napi::Env env, Napi::Object exports) {
  exports.Set("hmacSha256Hex", Napi::Function::New(env, HmacSha256Hex, "hmacSha256Hex"));
}

}  // namespace tiersync

// AES-256-GCM of peer frames (FrameAead, declared in peer_protocol.h), from whichever library seals fastest here:
// - Intel's IPsec Multi-Buffer library (Debian: libipsec-mb1 / -dev) when the CPU runs its VAES + VPCLMULQDQ
//   (AVX-512) GCM: GMAC at ~20 GB/s per core, encryption at ~10, on a CPU where OpenSSL 3.0 reaches 7.5-8.6 and 4.4
//   (docs/BENCHMARKS.md, "Peer frames sealed by IPsec-MB"). Loaded at run time, so the addon loads without it.
// - otherwise OpenSSL: Node's own copy (exported to addons) or the system's libcrypto.so.3, whichever is newer.
// Both compute the same GCM (NIST SP 800-38D): a frame sealed by one is opened by the other, and by node:crypto
// (packages/tiers/src/peer/wire-spec.test.ts). The choice is made once per process; TIERSYNC_PEER_FRAME_CRYPTO
// (node, system or ipsec-mb) names the one to use where it loads.
#include <dlfcn.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "peer_protocol.h"

#if defined(__x86_64__) && __has_include(<intel-ipsec-mb.h>)
#include <intel-ipsec-mb.h>
#define TIERSYNC_IPSEC_MB 1
#endif

namespace tiersync::peer {
namespace {

// The EVP calls frames use from the chosen OpenSSL: Node's (these defaults) or the system's libcrypto.so.3, bound
// to itself (RTLD_DEEPBIND) so that it never mixes with Node's copy. Newer releases carry faster GCM: OpenSSL 3.5
// (Node 22's and 24's) authenticates at ~19 GB/s per core on an AVX-512 CPU where 3.0 (Debian 12's, Node 20's)
// reaches 7-8.6. At equal versions the system's copy is kept (some Node builds' copy lacked the AES-NI GCM path:
// 0.1 GiB/s encrypting, 1.5 GiB/s GMAC where the system's did 3 GiB/s). A context only ever meets the functions of
// the table that made it.
struct Evp {
  EVP_CIPHER_CTX* (*ctxNew)() = EVP_CIPHER_CTX_new;
  void (*ctxFree)(EVP_CIPHER_CTX*) = EVP_CIPHER_CTX_free;
  const EVP_CIPHER* (*aes256gcm)() = EVP_aes_256_gcm;
  int (*encryptInit)(EVP_CIPHER_CTX*, const EVP_CIPHER*, ENGINE*, const unsigned char*, const unsigned char*) = EVP_EncryptInit_ex;
  int (*decryptInit)(EVP_CIPHER_CTX*, const EVP_CIPHER*, ENGINE*, const unsigned char*, const unsigned char*) = EVP_DecryptInit_ex;
  int (*encryptUpdate)(EVP_CIPHER_CTX*, unsigned char*, int*, const unsigned char*, int) = EVP_EncryptUpdate;
  int (*decryptUpdate)(EVP_CIPHER_CTX*, unsigned char*, int*, const unsigned char*, int) = EVP_DecryptUpdate;
  int (*encryptFinal)(EVP_CIPHER_CTX*, unsigned char*, int*) = EVP_EncryptFinal_ex;
  int (*decryptFinal)(EVP_CIPHER_CTX*, unsigned char*, int*) = EVP_DecryptFinal_ex;
  int (*ctrl)(EVP_CIPHER_CTX*, int, int, void*) = EVP_CIPHER_CTX_ctrl;
  const char* (*version)(int) = OpenSSL_version;
  const char* source = "node";
};

template <typename F>
bool Bind(void* lib, const char* name, F* out) {
  void* p = dlsym(lib, name);
  if (!p) return false;
  *out = reinterpret_cast<F>(p);
  return true;
}

// The provider asked for by TIERSYNC_PEER_FRAME_CRYPTO, or "" for the default rule. Any other value is refused: a
// misspelt name would otherwise leave frames to a slower library without a word.
std::string Wanted() {
  const char* v = getenv("TIERSYNC_PEER_FRAME_CRYPTO");
  std::string wanted = v ? v : "";
  if (!wanted.empty() && wanted != "ipsec-mb" && wanted != "system" && wanted != "node")
    throw NativeError(Code::InvalidArgument, "TIERSYNC_PEER_FRAME_CRYPTO must be ipsec-mb, system or node, got '" + wanted + "'");
  return wanted;
}

const Evp& OpenSsl() {
  static Evp evp;
  static std::once_flag once;
  std::call_once(once, [] {
#if !defined(__SANITIZE_ADDRESS__) && defined(RTLD_DEEPBIND)
    const std::string wanted = Wanted();
    if (wanted == "node") return;
    void* lib = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!lib) return;
    unsigned long (*systemVersion)() = nullptr;
    // Left loaded either way: unloading a libcrypto is not safe (its exit handlers).
    if (!Bind(lib, "OpenSSL_version_num", &systemVersion)) return;
    if (wanted != "system" && systemVersion() < OpenSSL_version_num()) return;
    Evp sys;
    if (Bind(lib, "EVP_CIPHER_CTX_new", &sys.ctxNew) && Bind(lib, "EVP_CIPHER_CTX_free", &sys.ctxFree) &&
        Bind(lib, "EVP_aes_256_gcm", &sys.aes256gcm) && Bind(lib, "EVP_EncryptInit_ex", &sys.encryptInit) &&
        Bind(lib, "EVP_DecryptInit_ex", &sys.decryptInit) && Bind(lib, "EVP_EncryptUpdate", &sys.encryptUpdate) &&
        Bind(lib, "EVP_DecryptUpdate", &sys.decryptUpdate) && Bind(lib, "EVP_EncryptFinal_ex", &sys.encryptFinal) &&
        Bind(lib, "EVP_DecryptFinal_ex", &sys.decryptFinal) && Bind(lib, "EVP_CIPHER_CTX_ctrl", &sys.ctrl) &&
        Bind(lib, "OpenSSL_version", &sys.version)) {
      sys.source = "system";
      evp = sys;
    }
#endif
  });
  return evp;
}

#ifdef TIERSYNC_IPSEC_MB
// IPsec-MB's manager, used only through its direct GCM API: function pointers chosen for this CPU at init, no
// state of their own, so one manager serves every thread (each frame direction has its own key and context).
struct IpsecMb {
  IMB_MGR* mgr = nullptr;
  std::string version;
};

// The library when it loads, was built for this header's structures (same major.minor), and runs its VAES +
// VPCLMULQDQ GCM here; nullptr otherwise (its SSE/AVX2 code paths were not measured here: OpenSSL keeps those CPUs).
const IpsecMb* LoadIpsecMb() {
  static IpsecMb lib;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string wanted = Wanted();
    if (!wanted.empty() && wanted != "ipsec-mb") return;
    void* handle = dlopen("libIPSec_MB.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) return;
    unsigned (*version)() = nullptr;
    IMB_MGR* (*alloc)(uint64_t) = nullptr;
    void (*init)(IMB_MGR*, IMB_ARCH*) = nullptr;
    void (*release)(IMB_MGR*) = nullptr;
    if (!Bind(handle, "imb_get_version", &version) || !Bind(handle, "alloc_mb_mgr", &alloc) ||
        !Bind(handle, "init_mb_mgr_auto", &init) || !Bind(handle, "free_mb_mgr", &release))
      return;
    const unsigned v = version();
    if ((v >> 8) != (IMB_VERSION_NUM >> 8)) return;
    IMB_MGR* mgr = alloc(0);
    if (!mgr) return;
    IMB_ARCH arch = IMB_ARCH_NONE;
    init(mgr, &arch);
    const uint64_t vector = IMB_FEATURE_VAES | IMB_FEATURE_VPCLMULQDQ;
    if (arch != IMB_ARCH_AVX512 || (mgr->features & vector) != vector || mgr->gcm256_pre == nullptr) {
      release(mgr);
      return;
    }
    lib.mgr = mgr;
    lib.version = "Intel IPsec-MB " + std::to_string(v >> 16) + "." + std::to_string((v >> 8) & 0xff) + "." +
                  std::to_string(v & 0xff) + " (VAES AVX-512)";
  });
  return lib.mgr ? &lib : nullptr;
}
#endif

}  // namespace

// One direction's key schedule and its running frame: an EVP context, or IPsec-MB's expanded key and context.
struct FrameAead::State {
  EVP_CIPHER_CTX* evp = nullptr;
#ifdef TIERSYNC_IPSEC_MB
  const IpsecMb* mb = nullptr;
  // 64-byte aligned as the library's own build declares them (the header aligns them only where LINUX is defined).
  alignas(64) gcm_key_data key;
  alignas(64) gcm_context_data ctx;
#endif
};

const char* FrameCryptoSource() {
  Wanted();  // refuses a bad name before the choice below is made (once per process)
#ifdef TIERSYNC_IPSEC_MB
  if (LoadIpsecMb()) return "ipsec-mb";
#endif
  return OpenSsl().source;
}

const char* FrameCryptoVersion() {
  Wanted();
#ifdef TIERSYNC_IPSEC_MB
  if (const IpsecMb* mb = LoadIpsecMb()) return mb->version.c_str();
#endif
  return OpenSsl().version(OPENSSL_VERSION);
}

FrameAead::~FrameAead() { Reset(); }

void FrameAead::Reset() {
  if (!state_) return;
  if (state_->evp) OpenSsl().ctxFree(state_->evp);
  OPENSSL_cleanse(state_, sizeof *state_);
  delete state_;
  state_ = nullptr;
}

namespace {

// Expands `key` for IPsec-MB into `s` when that library seals frames here; false otherwise.
bool InitIpsecMb(FrameAead::State& s, const uint8_t key[kKey]) {
#ifdef TIERSYNC_IPSEC_MB
  if (const IpsecMb* mb = LoadIpsecMb()) {
    s.mb = mb;
    IMB_AES256_GCM_PRE(mb->mgr, key, &s.key);
    return true;
  }
#endif
  return false;
}

// Gives `s` an OpenSSL context keyed with `key`.
void InitEvp(FrameAead::State& s, const uint8_t key[kKey], bool sending) {
  const Evp& e = OpenSsl();
  s.evp = e.ctxNew();
  if (!s.evp) throw NativeError(Code::NoMemory, "EVP_CIPHER_CTX_new failed");
  int ok = sending ? e.encryptInit(s.evp, e.aes256gcm(), nullptr, key, nullptr)
                   : e.decryptInit(s.evp, e.aes256gcm(), nullptr, key, nullptr);
  if (ok != 1) throw NativeError(Code::Auth, "AES-256-GCM is not available in this OpenSSL");
}

}  // namespace

void FrameAead::Init(const uint8_t key[kKey], bool encrypt, bool sending) {
  Wanted();
  FrameAead fresh;  // owns the new state until it replaces this one (freed and cleansed if a step throws)
  fresh.state_ = new State();
  if (!InitIpsecMb(*fresh.state_, key)) InitEvp(*fresh.state_, key, sending);
  Reset();
  std::swap(state_, fresh.state_);
  encrypt_ = encrypt;
  sending_ = sending;
  counter_ = 0;
}

void FrameAead::Begin(const uint8_t header[kHeaderBytes]) {
  if (!state_) return;
  uint8_t iv[12] = {};
  const uint64_t counter = counter_++;
  std::memcpy(iv + 4, &counter, 8);
#ifdef TIERSYNC_IPSEC_MB
  if (const IpsecMb* mb = state_->mb) {
    // Encrypting: the header is the associated data. Authenticating only: header and body together are (GMAC).
    if (encrypt_) {
      IMB_AES256_GCM_INIT(mb->mgr, &state_->key, &state_->ctx, iv, header, kHeaderBytes);
    } else {
      IMB_AES256_GMAC_INIT(mb->mgr, &state_->key, &state_->ctx, iv, sizeof iv);
      IMB_AES256_GMAC_UPDATE(mb->mgr, &state_->key, &state_->ctx, header, kHeaderBytes);
    }
    return;
  }
#endif
  const Evp& e = OpenSsl();
  auto* ctx = state_->evp;
  int len = 0;
  int ok = sending_ ? e.encryptInit(ctx, nullptr, nullptr, nullptr, iv) : e.decryptInit(ctx, nullptr, nullptr, nullptr, iv);
  if (ok != 1) throw NativeError(Code::Auth, "AES-256-GCM: setting the frame nonce failed");
  ok = sending_ ? e.encryptUpdate(ctx, nullptr, &len, header, kHeaderBytes) : e.decryptUpdate(ctx, nullptr, &len, header, kHeaderBytes);
  if (ok != 1) throw NativeError(Code::Auth, "AES-256-GCM: authenticating the header failed");
}

void FrameAead::Body(const uint8_t* in, uint8_t* out, size_t n) {
  if (!state_ || n == 0) return;
#ifdef TIERSYNC_IPSEC_MB
  if (const IpsecMb* mb = state_->mb) {
    if (!encrypt_)
      IMB_AES256_GMAC_UPDATE(mb->mgr, &state_->key, &state_->ctx, in, n);
    else if (sending_)
      IMB_AES256_GCM_ENC_UPDATE(mb->mgr, &state_->key, &state_->ctx, out, in, n);
    else
      IMB_AES256_GCM_DEC_UPDATE(mb->mgr, &state_->key, &state_->ctx, out, in, n);
    return;
  }
#endif
  const Evp& e = OpenSsl();
  auto* ctx = state_->evp;
  // EVP takes int lengths: feed at most 1 GiB at a time.
  while (n > 0) {
    int k = static_cast<int>(std::min<size_t>(n, 1u << 30));
    int len = 0;
    int ok;
    if (encrypt_) {
      ok = sending_ ? e.encryptUpdate(ctx, out, &len, in, k) : e.decryptUpdate(ctx, out, &len, in, k);
      out += k;
    } else {
      ok = sending_ ? e.encryptUpdate(ctx, nullptr, &len, in, k) : e.decryptUpdate(ctx, nullptr, &len, in, k);
    }
    if (ok != 1) throw NativeError(Code::Auth, "AES-256-GCM update failed");
    in += k;
    n -= static_cast<size_t>(k);
  }
}

#ifdef TIERSYNC_IPSEC_MB
namespace {
// The tag of the frame begun on `s` (IPsec-MB), whichever way it runs.
void FinishIpsecMb(FrameAead::State& s, bool encrypt, bool sending, uint8_t tag[kTag]) {
  IMB_MGR* mgr = s.mb->mgr;
  if (!encrypt)
    IMB_AES256_GMAC_FINALIZE(mgr, &s.key, &s.ctx, tag, kTag);
  else if (sending)
    IMB_AES256_GCM_ENC_FINALIZE(mgr, &s.key, &s.ctx, tag, kTag);
  else
    IMB_AES256_GCM_DEC_FINALIZE(mgr, &s.key, &s.ctx, tag, kTag);
}
}  // namespace
#endif

void FrameAead::SealTag(uint8_t tag[kTag]) {
#ifdef TIERSYNC_IPSEC_MB
  if (state_->mb) return FinishIpsecMb(*state_, encrypt_, true, tag);
#endif
  const Evp& e = OpenSsl();
  int len = 0;
  uint8_t none[16];
  if (e.encryptFinal(state_->evp, none, &len) != 1 || e.ctrl(state_->evp, EVP_CTRL_GCM_GET_TAG, kTag, tag) != 1)
    throw NativeError(Code::Auth, "AES-256-GCM: computing the frame tag failed");
}

bool FrameAead::CheckTag(const uint8_t tag[kTag]) {
#ifdef TIERSYNC_IPSEC_MB
  if (state_->mb) {
    uint8_t want[kTag];
    FinishIpsecMb(*state_, encrypt_, false, want);
    const bool ok = ConstantTimeEqual(want, tag, kTag);
    OPENSSL_cleanse(want, sizeof want);
    return ok;
  }
#endif
  const Evp& e = OpenSsl();
  int len = 0;
  uint8_t none[16];
  uint8_t copy[kTag];
  std::memcpy(copy, tag, kTag);
  if (e.ctrl(state_->evp, EVP_CTRL_GCM_SET_TAG, kTag, copy) != 1) return false;
  return e.decryptFinal(state_->evp, none, &len) == 1;
}

}  // namespace tiersync::peer

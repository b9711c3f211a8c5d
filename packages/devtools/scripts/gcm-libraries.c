// AES-256-GCM of a peer frame's shape (32-byte header, 2 MiB body in 256 KiB pieces) through IPsec-MB and the
// system's OpenSSL, authenticating only (GMAC: header and body as associated data) and encrypting; prints GB/s and
// whether the two libraries' tags agree. docs/BENCHMARKS.md, "Peer frames sealed by IPsec-MB".
//   gcc -O2 packages/devtools/scripts/gcm-libraries.c -o /tmp/gcm-libraries -lIPSec_MB -lcrypto && /tmp/gcm-libraries
#include <intel-ipsec-mb.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kBytes = 2 << 20, kPiece = 256 << 10, kRounds = 400 };

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void Report(const char* what, double start, const unsigned char* tag, const unsigned char* other) {
  double gbps = (double)kRounds * kBytes / (Now() - start) / 1e9;
  printf("%-28s %5.1f GB/s%s\n", what, gbps, other ? (memcmp(tag, other, 16) ? "  tags DIFFER" : "  tags equal") : "");
}

int main(void) {
  unsigned char* body = aligned_alloc(64, kBytes);
  unsigned char* out = aligned_alloc(64, kBytes);
  for (size_t i = 0; i < kBytes; i++) body[i] = (unsigned char)rand();
  unsigned char key[32], iv[12] = {0}, header[32] = {1, 2, 3};
  for (int i = 0; i < 32; i++) key[i] = (unsigned char)i;

  IMB_MGR* mgr = alloc_mb_mgr(0);
  IMB_ARCH arch;
  init_mb_mgr_auto(mgr, &arch);
  printf("IPsec-MB %s (arch %d), %s\n", imb_get_version_str(), arch, OpenSSL_version(OPENSSL_VERSION));
  struct gcm_key_data expanded __attribute__((aligned(64)));
  struct gcm_context_data ctx __attribute__((aligned(64)));
  IMB_AES256_GCM_PRE(mgr, key, &expanded);
  unsigned char mbGmac[16], mbGcm[16], sslTag[16];

  double t = Now();
  for (int r = 0; r < kRounds; r++) {
    IMB_AES256_GMAC_INIT(mgr, &expanded, &ctx, iv, sizeof iv);
    IMB_AES256_GMAC_UPDATE(mgr, &expanded, &ctx, header, sizeof header);
    for (size_t o = 0; o < kBytes; o += kPiece) IMB_AES256_GMAC_UPDATE(mgr, &expanded, &ctx, body + o, kPiece);
    IMB_AES256_GMAC_FINALIZE(mgr, &expanded, &ctx, mbGmac, 16);
  }
  Report("IPsec-MB GMAC", t, mbGmac, NULL);
  t = Now();
  for (int r = 0; r < kRounds; r++) {
    IMB_AES256_GCM_INIT(mgr, &expanded, &ctx, iv, header, sizeof header);
    for (size_t o = 0; o < kBytes; o += kPiece) IMB_AES256_GCM_ENC_UPDATE(mgr, &expanded, &ctx, out + o, body + o, kPiece);
    IMB_AES256_GCM_ENC_FINALIZE(mgr, &expanded, &ctx, mbGcm, 16);
  }
  Report("IPsec-MB GCM encryption", t, mbGcm, NULL);

  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, NULL);
  int len;
  for (int encrypt = 0; encrypt < 2; encrypt++) {
    t = Now();
    for (int r = 0; r < kRounds; r++) {
      EVP_EncryptInit_ex(c, NULL, NULL, NULL, iv);
      EVP_EncryptUpdate(c, NULL, &len, header, sizeof header);
      for (size_t o = 0; o < kBytes; o += kPiece) EVP_EncryptUpdate(c, encrypt ? out + o : NULL, &len, body + o, kPiece);
      EVP_EncryptFinal_ex(c, out, &len);
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, sslTag);
    }
    Report(encrypt ? "OpenSSL GCM encryption" : "OpenSSL GMAC", t, sslTag, encrypt ? mbGcm : mbGmac);
  }
  EVP_CIPHER_CTX_free(c);
  free_mb_mgr(mgr);
  return 0;
}

#include "base/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <climits>

#include "base/error.h"

namespace gyre {
namespace {

[[noreturn]] void failCrypto(const char* what) {
  fail(ErrorCode::kSystemError, "libcrypto: {} failed", what);
}

int asInt(size_t n) {
  if (n > static_cast<size_t>(INT_MAX)) fail(ErrorCode::kInvalidArgument, "crypto input too long");
  return static_cast<int>(n);
}

}  // namespace

void randomBytes(void* out, size_t n) {
  if (RAND_bytes(static_cast<unsigned char*>(out), asInt(n)) != 1) failCrypto("RAND_bytes");
}

Nonce randomNonce() {
  Nonce n;
  randomBytes(n.data(), n.size());
  return n;
}

Mac hmacSha256(Bytes key, std::initializer_list<Bytes> parts) {
  // Fetched once: EVP_MAC_fetch looks the algorithm up by name in the provider tables.
  static EVP_MAC* const kHmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (!kHmac) failCrypto("EVP_MAC_fetch(HMAC)");
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(kHmac),
                                                                EVP_MAC_CTX_free);
  if (!ctx) failCrypto("EVP_MAC_CTX_new");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  // An empty key is legal HMAC; OpenSSL wants a non-null pointer for it.
  static const uint8_t kEmpty = 0;
  if (EVP_MAC_init(ctx.get(), key.size ? key.data : &kEmpty, key.size, params) != 1) {
    failCrypto("EVP_MAC_init");
  }
  for (const Bytes& p : parts) {
    if (p.size && EVP_MAC_update(ctx.get(), p.data, p.size) != 1) failCrypto("EVP_MAC_update");
  }
  Mac out;
  size_t len = 0;
  if (EVP_MAC_final(ctx.get(), out.data(), &len, out.size()) != 1 || len != out.size()) {
    failCrypto("EVP_MAC_final");
  }
  return out;
}

Key hkdfSha256(Bytes key, Bytes salt, Bytes info) {
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(
      EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr), EVP_PKEY_CTX_free);
  if (!ctx) failCrypto("EVP_PKEY_CTX_new_id(HKDF)");
  static const uint8_t kEmpty = 0;
  Key out;
  size_t len = out.size();
  if (EVP_PKEY_derive_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), salt.size ? salt.data : &kEmpty, asInt(salt.size)) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), key.size ? key.data : &kEmpty, asInt(key.size)) != 1 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), info.size ? info.data : &kEmpty, asInt(info.size)) != 1 ||
      EVP_PKEY_derive(ctx.get(), out.data(), &len) != 1 || len != out.size()) {
    failCrypto("HKDF");
  }
  return out;
}

bool equalMacs(const uint8_t* a, const uint8_t* b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

struct AeadKey::Ctx {
  EVP_CIPHER_CTX* enc = nullptr;
  EVP_CIPHER_CTX* dec = nullptr;
  ~Ctx() {
    EVP_CIPHER_CTX_free(enc);
    EVP_CIPHER_CTX_free(dec);
  }
};

AeadKey::AeadKey(const Key& key) : ctx_(std::make_unique<Ctx>()) {
  ctx_->enc = EVP_CIPHER_CTX_new();
  ctx_->dec = EVP_CIPHER_CTX_new();
  if (!ctx_->enc || !ctx_->dec) failCrypto("EVP_CIPHER_CTX_new");
  // The key is scheduled once; each record sets only its nonce.
  if (EVP_EncryptInit_ex(ctx_->enc, EVP_aes_256_gcm(), nullptr, key.data(), nullptr) != 1 ||
      EVP_DecryptInit_ex(ctx_->dec, EVP_aes_256_gcm(), nullptr, key.data(), nullptr) != 1) {
    failCrypto("EVP_aes_256_gcm init");
  }
}

AeadKey::~AeadKey() = default;

void AeadKey::seal(const std::array<uint8_t, kAeadNonceBytes>& nonce, Bytes aad,
                   const uint8_t* in, size_t n, uint8_t* out, uint8_t tag[kAeadTagBytes]) {
  EVP_CIPHER_CTX* c = ctx_->enc;
  int len = 0;
  if (EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, nonce.data()) != 1 ||
      (aad.size && EVP_EncryptUpdate(c, nullptr, &len, aad.data, asInt(aad.size)) != 1) ||
      (n && EVP_EncryptUpdate(c, out, &len, in, asInt(n)) != 1) ||
      EVP_EncryptFinal_ex(c, out + n, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kAeadTagBytes, tag) != 1) {
    failCrypto("AES-256-GCM seal");
  }
}

bool AeadKey::open(const std::array<uint8_t, kAeadNonceBytes>& nonce, Bytes aad,
                   const uint8_t* in, size_t n, uint8_t* out, const uint8_t tag[kAeadTagBytes]) {
  EVP_CIPHER_CTX* c = ctx_->dec;
  int len = 0;
  if (EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, nonce.data()) != 1 ||
      (aad.size && EVP_DecryptUpdate(c, nullptr, &len, aad.data, asInt(aad.size)) != 1) ||
      (n && EVP_DecryptUpdate(c, out, &len, in, asInt(n)) != 1) ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, kAeadTagBytes, const_cast<uint8_t*>(tag)) != 1) {
    failCrypto("AES-256-GCM open");
  }
  return EVP_DecryptFinal_ex(c, out + n, &len) == 1;
}

}  // namespace gyre

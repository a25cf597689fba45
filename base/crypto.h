// Crypto: the few primitives gyre's authentication and encryption need, every one of them
// OpenSSL's libcrypto (nothing here is hand-written cryptography; this file only adapts
// the calls to gyre's types and errors).
//
// - randomBytes / randomNonce: RAND_bytes (the kernel's CSPRNG behind OpenSSL's DRBG).
// - hmacSha256(key, parts...): HMAC-SHA-256 over the concatenation of `parts`.
// - hkdfSha256(key, salt, info): HKDF (RFC 5869) with SHA-256, 32 bytes out.
// - equalMacs: CRYPTO_memcmp, constant time, for every comparison of a MAC.
// - AeadKey: AES-256-GCM seal/open of one record with a 12-byte nonce (transport/tcp's
//   encrypted records, docs/security.md).
// Failures of libcrypto itself (out of memory) throw gyre::Error(kSystemError); a record
// that fails authentication is not an exception: open() returns false.
// Thread safety: the free functions are; one AeadKey may be used by one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace gyre {

inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kKeyBytes = 32;
inline constexpr size_t kAeadTagBytes = 16;
inline constexpr size_t kAeadNonceBytes = 12;

using Mac = std::array<uint8_t, kMacBytes>;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Key = std::array<uint8_t, kKeyBytes>;

void randomBytes(void* out, size_t n);
Nonce randomNonce();

// One input of a MAC or KDF: bytes, or text (its bytes, no terminator).
struct Bytes {
  Bytes(std::span<const uint8_t> s) : data(s.data()), size(s.size()) {}
  Bytes(const std::string& s) : Bytes(std::string_view(s)) {}
  Bytes(std::string_view s) : data(reinterpret_cast<const uint8_t*>(s.data())), size(s.size()) {}
  Bytes(const void* p, size_t n) : data(static_cast<const uint8_t*>(p)), size(n) {}
  template <size_t N>
  Bytes(const std::array<uint8_t, N>& a) : data(a.data()), size(N) {}
  const uint8_t* data;
  size_t size;
};

Mac hmacSha256(Bytes key, std::initializer_list<Bytes> parts);
Key hkdfSha256(Bytes key, Bytes salt, Bytes info);
bool equalMacs(const uint8_t* a, const uint8_t* b, size_t n);
inline bool equalMacs(const Mac& a, const Mac& b) { return equalMacs(a.data(), b.data(), a.size()); }

// AES-256-GCM with one key; the caller supplies a nonce per record, never twice.
class AeadKey {
 public:
  explicit AeadKey(const Key& key);
  ~AeadKey();
  AeadKey(const AeadKey&) = delete;
  AeadKey& operator=(const AeadKey&) = delete;

  // Encrypts `n` bytes of `in` into `out` (may be the same buffer) and writes the tag.
  void seal(const std::array<uint8_t, kAeadNonceBytes>& nonce, Bytes aad, const uint8_t* in,
            size_t n, uint8_t* out, uint8_t tag[kAeadTagBytes]);
  // Decrypts and checks; false (and `out` must be discarded) when the record, its
  // additional data or its nonce is not what was sealed.
  bool open(const std::array<uint8_t, kAeadNonceBytes>& nonce, Bytes aad, const uint8_t* in,
            size_t n, uint8_t* out, const uint8_t tag[kAeadTagBytes]);

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

}  // namespace gyre

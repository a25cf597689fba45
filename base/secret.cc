#include "base/secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/error.h"
#include "base/log.h"

namespace gyre {
namespace {

std::string hexPrefix(const Mac& mac, size_t bytes) {
  std::string out;
  for (size_t i = 0; i < bytes; ++i) out += fmt::format("{:02x}", mac[i]);
  return out;
}

}  // namespace

std::string readSecretFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    fail(ErrorCode::kInvalidArgument, "GYRE_TOKEN_FILE={}: cannot open it: {}", path,
         std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    fail(ErrorCode::kInvalidArgument, "GYRE_TOKEN_FILE={}: fstat failed: {}", path,
         std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    fail(ErrorCode::kInvalidArgument, "GYRE_TOKEN_FILE={} is not a regular file", path);
  }
  if (st.st_uid != ::geteuid()) {
    fail(ErrorCode::kInvalidArgument,
         "GYRE_TOKEN_FILE={} belongs to uid {}, not to this user (uid {}): refusing a secret "
         "another user controls",
         path, st.st_uid, ::geteuid());
  }
  if ((st.st_mode & 077) != 0) {
    fail(ErrorCode::kInvalidArgument,
         "GYRE_TOKEN_FILE={} has mode {:04o}: group or others may access it, so the secret is "
         "not secret (chmod 600 {})",
         path, st.st_mode & 07777, path);
  }
  if (st.st_size > static_cast<off_t>(kMaxSecretBytes)) {
    fail(ErrorCode::kInvalidArgument, "GYRE_TOKEN_FILE={} holds {} bytes, more than the {} a "
         "secret may have", path, st.st_size, kMaxSecretBytes);
  }
  std::string secret(kMaxSecretBytes + 1, '\0');
  size_t got = 0;
  while (got < secret.size()) {
    ssize_t r = ::read(fd, secret.data() + got, secret.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      fail(ErrorCode::kInvalidArgument, "GYRE_TOKEN_FILE={}: read failed: {}", path,
           std::strerror(errno));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  if (got > kMaxSecretBytes) {
    fail(ErrorCode::kInvalidArgument, "GYRE_TOKEN_FILE={} grew past {} bytes while read", path,
         kMaxSecretBytes);
  }
  secret.resize(got);
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r' ||
                             secret.back() == ' ' || secret.back() == '\t')) {
    secret.pop_back();
  }
  if (secret.empty()) fail(ErrorCode::kInvalidArgument, "GYRE_TOKEN_FILE={} is empty", path);
  return secret;
}

Key authKey(const std::string& secret) { return hmacSha256(secret, {std::string_view("gyre-auth-v1")}); }

std::string claimFingerprint(const std::string& secret) {
  return hexPrefix(hmacSha256(authKey(secret), {std::string_view("gyre-claim-v1")}), 8);
}

void noteOpenJob(const std::string& where) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  log(LogLevel::kInfo, -1,
      "no secret (GYRE_TOKEN / GYRE_TOKEN_FILE) is set, so anyone who can reach {} can read "
      "and rewrite the store and join the job's connections (gyrerun sets one by itself; "
      "docs/security.md)",
      where);
}

std::string nameTag(const std::string& secret) {
  // fmt, not "s" + std::string&&: GCC 12 warns (-Wrestrict, a false positive) on that.
  const Mac tag = hmacSha256(authKey(secret), {std::string_view("gyre-name-v1")});
  return fmt::format("s{}", hexPrefix(tag, 8));
}

}  // namespace gyre

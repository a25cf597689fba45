// The job's shared secret: where it comes from and the values derived from it.
//
// A job is given one secret (GYRE_TOKEN, or GYRE_TOKEN_FILE naming a file only its owner
// may read; gyrerun makes one per job by itself). The secret itself never crosses the wire
// and is never printed: every use goes through a key derived from it (authKey), and what
// other ranks or logs may see are keyed hashes (claimFingerprint, nameTag), from which the
// secret cannot be recovered. docs/security.md has the protocol and the threat model.
//
// Contract: pure functions of the secret (no state); readSecretFile throws
// gyre::Error(kInvalidArgument) naming the file (never its contents) when the file cannot
// be read, is not a regular file of this user, is readable or writable by group or
// others, is empty, or is over 4 KiB. Thread-safe.
#pragma once

#include <string>

#include "base/crypto.h"

namespace gyre {

inline constexpr size_t kMaxSecretBytes = 4096;

// The secret in GYRE_TOKEN_FILE's file: its bytes without trailing whitespace.
std::string readSecretFile(const std::string& path);

// HMAC(secret, "gyre-auth-v1"): the key every handshake MACs with (an empty secret gives
// a key too, but no handshake is then authenticated: authentication is on iff a secret is).
Key authKey(const std::string& secret);

// 16 hex digits that equal ranks share and that say nothing of the secret: the join
// compares them to find a rank given another secret, and names (shm segments,
// communicator ids) carry nameTag so that two jobs never collide.
std::string claimFingerprint(const std::string& secret);
std::string nameTag(const std::string& secret);

// Logs once per process, at INFO, that a job without a secret is open to anyone who
// reaches `where` (its store) and its ranks' listeners.
void noteOpenJob(const std::string& where);

}  // namespace gyre

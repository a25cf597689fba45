// Join: how the ranks of a new communicator check in with each other through the store
// before any pipe is connected, so that a mistake ends creation on every rank within
// seconds, saying what differs and what to do, instead of a silent wait.
//
// Protocol (keys "<prefix>/join/..." unless they start with "gyre/"):
//   1. Ownership (top-level communicators): "gyre/owner/<r>" names the process holding
//      rank r on this store (taken atomically through add("gyre/owner-claims/<r>")). A
//      second process claiming r (a rank given twice, another job on the same port)
//      fails at once and tells the owner's join, which fails too if still in progress.
//   2. Prefix: add("gyre/created/<r>") counts the communicators the owner of rank r has
//      begun on this store; the k-th is "gyre/comm<k>". Agreed through the store, never
//      through process memory, so a new store always starts at comm0.
//   3. Check-in: seq = add("arrived"), then "claim/<seq>" holds what the rank believes
//      (Claim), its address included. With a secret the claim is signed: a line
//      "mac <HMAC(K, prefix, seq, claim)>" follows it, and a claim that is unsigned or
//      wrongly signed (written by anyone without the secret, e.g. in torch's open store)
//      fails creation on every rank that reads it, naming it; no rank connects to it. The store is asked to add 1 to "alarm" and to "dropped/<r>" when the
//      rank's connection closes (it died while joining).
//   4. Rank 0 polls the arrivals and reads each claim as it comes, checking it against its
//      own (world size, a rank claimed twice, settings that must agree, the secret's
//      fingerprint); once all have joined it sets "claims", every signed claim text with
//      its arrival number, in one value. Every other rank polls that one key (O(1) store
//      calls a poll, O(n) in all for the join: docs/scaling.md), then runs the same checks
//      on each claim, its signature included. Only to report progress or a timeout does a
//      rank other than 0 read the claims one by one, to name the missing ranks. Every rank
//      watches "alarm" (a failure published by any rank with publishFailure(), or a drop
//      of a rank that has not arrived at "done"); reports progress on stderr
//      (Options::joinProgress*); and gives up at Options::joinTimeout naming the missing
//      ranks.
// arrive()/waitAll() are the same watchful wait for the later barriers of creation: one
// counter per step, read once a poll; the per-rank marks are read only for messages (and
// at leave(), once each, to count a rank that died as gone).
//
// Ownership and threads: a Join belongs to one rank's creation, on one thread; it keeps a
// reference to the store, which must outlive it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "ring/options.h"
#include "transport/socket.h"  // Clock

namespace gyre {

class Store;

// What one rank believes and offers, as it checks in.
struct Claim {
  int rank = -1;
  int size = 0;
  long pid = 0;
  bool shm = false;      // it can hold shared-memory receive segments
  std::string hostId;    // hostIdentity(): equal ids share memory
  std::string hostName;  // for messages
  std::string address;   // "host:port" it listens on for pipes
  std::string process;   // unique id of its process (processIdentity())
  std::string token;     // claimFingerprint() of its secret (base/secret.h), "-" when none
  std::string settings;  // "GYRE_ALGO=ring GYRE_SLOT_BYTES=131072 ...": must agree
  std::string rdma;      // its usable RDMA device ("rxe0 port 1 GID 1 (RoCE)"), or empty
  std::string rdmaWhyNot;  // when empty: why not (for messages)

  std::string encode() const;
  static bool decode(const std::string& text, Claim* out);
  std::string where() const;  // "host h (10.0.0.2)"
};

// A check-in's text as the join stores it with `secret` (ring/join.cc: the claim, then
// "mac <HMAC(K, prefix, seq, claim)>"); the claim unchanged without a secret. For tests
// that play the network between ranks (they hold the secret).
std::string signedClaimText(const std::string& secret, const std::string& prefix, int64_t seq,
                            const std::string& claim);

// "0-3,5,7-9".
std::string rankRanges(const std::vector<int>& ranks);

// This process's unique id (hostname:pid:random), made once.
std::string processIdentity();

// The store's address for messages ("10.0.0.1:29500"), or "the bootstrap store".
std::string describeStore(Store& store);
// Whether this process serves `store` (and so takes it away when it exits).
bool servesStore(Store& store);

class Join {
 public:
  Join(Store& store, int rank, int size, const Options& options);

  // Steps 1-2: takes this rank on the store and returns its next communicator's prefix.
  std::string claimPrefix();
  // For a communicator whose prefix is known (a split).
  void usePrefix(std::string prefix) { prefix_ = std::move(prefix); }
  const std::string& prefix() const { return prefix_; }

  // Steps 3-4: returns every rank's claim, by rank.
  std::vector<Claim> checkIn(const Claim& mine);

  // A barrier of creation: arrive() marks this rank at `step` (`what` it is part of, for
  // messages: "connecting the pipes"); waitAll() returns when every rank has arrived,
  // watching failures and drops as checkIn() does.
  void arrive(const std::string& step, const char* what);
  void waitAll(const std::string& step, const char* what);

  // Creation's last barrier, after every rank arrived at "done": it only keeps the store's
  // process (rank 0) until every other rank has made its last store call. So rank 0 does
  // not wait for a rank that died meanwhile (it makes no more calls; its death is the next
  // collective's error, naming it), and another rank that finds the store gone (rank 0's
  // process ended) goes on with a warning: the communicator exists on every rank.
  void leave();

  // Tells the other ranks why this rank cannot go on (the first published is what they
  // print). Never throws. A rank that serves the store lingers up to 2 s until every
  // rank has failed or read it ("error-seen"), as its exit takes the store away.
  void publishFailure(const Error& error) noexcept;

  double seconds() const;

  // Any store call of creation (the join's waits and arrivals, the bootstrap's reads and
  // writes) fails with the store's bare message (ErrorCause::kStoreLost) when the store's
  // process is gone. Its words for the user, once, where creation catches it: this rank,
  // the store, what creation was doing (the last wait or arrival), rank 0 as the likely
  // cause, and the store's message.
  Error explainStoreLoss(const Error& e) const;

  // For a rank whose setup failed before it could check in (a bad GYRE_* value, an
  // interface that does not exist): takes its place in the join as claimPrefix() does
  // and publishes `error` there, so that the other ranks print it. Never throws.
  static void failBeforeCheckIn(Store& store, int rank, int size, const Options& options,
                                const Error& error) noexcept;

  // A rank whose process is known to be gone once `key` exists in the store (a shrink's
  // survivors: their parent's drop keys): the waits fail naming it instead of waiting.
  void watchForGone(int rank, std::string key) { goneKeys_[rank] = std::move(key); }

  // Throws the first published failure, or names a rank whose store connection dropped
  // before it finished creation; returns when neither happened. For waits outside the
  // join's own (a peer's segment, say), so that they report the cause, not its echo.
  void checkAlarms();

  // While ranks are missing: when the store refused a client claiming to be one of them
  // (no secret, or another: store/tcp_store_server.h) and that rank has not arrived
  // kRefusedGrace later, fails naming it. The grace is there because an outsider may
  // claim any rank: a real rank that arrives in time is never failed by one.
  void checkRefusals();
  // Fails naming a rank watchForGone() knows to be gone, that has not finished creation.
  void checkGone();
  static constexpr std::chrono::seconds kRefusedGrace{3};

 private:
  // goneCounts: a rank whose store connection dropped counts as arrived (leave()).
  void waitAll(const std::string& step, const char* what, bool goneCounts);
  std::vector<int> notMarked(const std::string& step);  // ranks without "<step>/<r>"
  // Throws the first published failure; true without throwing when one is being published
  // (counted, its text not set yet); false when there is none.
  bool throwPublishedFailure();
  template <typename Ready, typename Progress>
  void watch(Ready&& ready, Progress&& progress, const char* what);
  // Reads and checks the claims that arrived, one store key each (rank 0; any rank when
  // it must name the missing ones).
  void absorb(const Claim& mine);
  // Checks the claims of arrivals seen_+1.. from `next` (nullopt: not there yet).
  template <typename Next>
  void absorbFrom(const Claim& mine, Next&& next);
  // The "claims" value rank 0 publishes: every signed claim text with its arrival number.
  std::string aggregate() const;
  // Checks every claim of rank 0's "claims" value that this rank has not read yet.
  void absorbAggregate(const Claim& mine, const std::string& text);
  // With a secret, a claim is signed (ring/join.cc); checkClaim sets *text to the claim
  // without its signature and says whether the signature is right.
  std::string claimMac(const std::string& text, int64_t seq) const;
  std::string signClaim(const std::string& text, int64_t seq) const;
  bool checkClaim(const std::string& signedText, int64_t seq, std::string* text) const;
  std::string key(const std::string& name) const { return prefix_ + "/join/" + name; }
  // The words of a progress report or timeout on `what` ("joining", a barrier's step).
  // Naming the missing ranks costs O(n) store calls: every rank of a job up to
  // kNamedByEveryRank ranks computes them (compute); in a larger one rank 0 computes and
  // publishes them, and the others print rank 0's latest, or count() until there is one.
  std::string sharedProgress(const std::string& what,
                             const std::function<std::string()>& compute,
                             const std::function<std::string()>& count);
  static constexpr int kNamedByEveryRank = 64;
  std::string joinedSummary() const;
  std::vector<int> missing() const;

  Store& store_;
  const int rank_;
  const int size_;
  const Options options_;
  const std::string storeName_;  // "the bootstrap store at host:port", for messages
  const char* phase_ = "joining";  // what creation was doing (the last wait or arrival)
  const Clock::time_point start_;
  std::string prefix_;
  std::vector<Claim> byRank_;  // claims read so far, by rank (rank -1: none yet)
  std::vector<std::string> signed_;  // their texts as stored, by arrival (rank 0)
  int settledBelow_ = 0;  // leave(): ranks below it are known marked at "left" or dropped
  bool progressed_ = false;  // a poll made progress: watch() polls again soon
  int64_t seen_ = 0;           // claims read (arrival numbers 1..seen_)
  int joined_ = 0;
  int64_t alarmsSeen_ = 0;
  int64_t refusalsSeen_ = 0;
  std::map<int, Clock::time_point> refusedSince_;  // missing ranks the store refused
  bool seenCounted_ = false;  // this rank is counted in "error-seen"
  std::map<int, std::string> goneKeys_;  // watchForGone()
};

}  // namespace gyre

#include "ring/join.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "base/crypto.h"
#include "base/log.h"
#include "base/secret.h"
#include "store/store.h"
#include "store/tcp_store.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;

constexpr auto kFirstPoll = 2ms;
constexpr auto kLongestPoll = 100ms;
// Every waiting rank polls the one store thread, and rank 0's reads of the claims wait
// behind those polls: the longest pause grows with the ranks (0.25 ms each, up to 2 s),
// bounding the polls to about 8,000 calls a second whatever the size (docs/scaling.md).
constexpr auto kLongestPollPerRank = 250us;
constexpr auto kLongestPollCap = 2000ms;
constexpr auto kLinger = 2s;  // how long a serving rank keeps a failure readable

std::string hostName() {
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// "GYRE_ALGO=ring GYRE_SLOTS=4" -> {GYRE_ALGO: ring, GYRE_SLOTS: 4}
std::map<std::string, std::string> settingsMap(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    size_t eq = word.find('=');
    out[word.substr(0, eq)] = eq == std::string::npos ? "" : word.substr(eq + 1);
  }
  return out;
}

// The settings that differ, each value with its setting and rank, as
// "GYRE_ALGO=ring on rank 0, GYRE_ALGO=tree on rank 2": whichever rank reports the
// difference, both values are named in full.
std::string settingsDiff(int myRank, const std::string& mine, int theirRank,
                         const std::string& theirs) {
  auto a = settingsMap(mine);
  auto b = settingsMap(theirs);
  auto value = [](const std::map<std::string, std::string>& m, const std::string& name) {
    auto it = m.find(name);
    return it == m.end() ? name + " unset" : name + "=" + it->second;
  };
  std::set<std::string> names;
  for (const auto& kv : a) names.insert(kv.first);
  for (const auto& kv : b) names.insert(kv.first);
  std::string out;
  for (const std::string& name : names) {
    if (a.count(name) && b.count(name) && a[name] == b[name]) continue;
    out += fmt::format("{}{} on rank {}, {} on rank {}", out.empty() ? "" : "; ", value(a, name),
                       myRank, value(b, name), theirRank);
  }
  return out;
}

}  // namespace

std::string Claim::encode() const {
  auto oneLine = [](std::string text) {
    std::replace(text.begin(), text.end(), '\n', ' ');
    return text;
  };
  return fmt::format("{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n", rank, size, pid,
                     shm ? 1 : 0, hostId, hostName, address, process, token, settings,
                     oneLine(rdma), oneLine(rdmaWhyNot));
}

bool Claim::decode(const std::string& text, Claim* out) {
  std::istringstream in(text);
  std::string f[12];
  for (std::string& field : f) {
    if (!std::getline(in, field)) return false;
  }
  try {
    out->rank = std::stoi(f[0]);
    out->size = std::stoi(f[1]);
    out->pid = std::stol(f[2]);
  } catch (const std::exception&) {
    return false;
  }
  out->shm = f[3] == "1";
  out->hostId = f[4];
  out->hostName = f[5];
  out->address = f[6];
  out->process = f[7];
  out->token = f[8];
  out->settings = f[9];
  out->rdma = f[10];
  out->rdmaWhyNot = f[11];
  return true;
}

std::string Claim::where() const {
  std::string ip = address.substr(0, address.rfind(':'));
  return fmt::format("host {} ({}), pid {}", hostName, ip, pid);
}

std::string rankRanges(const std::vector<int>& ranks) {
  std::vector<int> r = ranks;
  std::sort(r.begin(), r.end());
  std::string out;
  for (size_t i = 0; i < r.size();) {
    size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    out += fmt::format("{}{}", out.empty() ? "" : ",",
                       j == i ? fmt::format("{}", r[i]) : fmt::format("{}-{}", r[i], r[j]));
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

std::string processIdentity() {
  // A forked child inherits the nonce; its pid tells it apart.
  static const uint64_t nonce = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^
                                (static_cast<uint64_t>(::getpid()) << 40);
  return fmt::format("{}:{}:{:x}", hostName(), ::getpid(), nonce);
}

std::string describeStore(Store& store) {
  Store* s = &store;
  while (auto* p = dynamic_cast<PrefixStore*>(s)) s = p->inner().get();
  if (auto* t = dynamic_cast<TcpStore*>(s)) return "the bootstrap store at " + t->address();
  return "the caller's bootstrap store";
}

bool servesStore(Store& store) {
  Store* s = &store;
  while (auto* p = dynamic_cast<PrefixStore*>(s)) s = p->inner().get();
  auto* t = dynamic_cast<TcpStore*>(s);
  return t != nullptr && t->serving();
}

Join::Join(Store& store, int rank, int size, const Options& options)
    : store_(store),
      rank_(rank),
      size_(size),
      options_(options),
      storeName_(describeStore(store)),
      start_(Clock::now()),
      byRank_(static_cast<size_t>(size)) {}

double Join::seconds() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

std::string Join::claimPrefix() {
  const std::string owner = fmt::format("gyre/owner/{}", rank_);
  const std::string me = processIdentity();
  phase_ = "taking this rank";
  if (!store_.check({owner}) && store_.add(fmt::format("gyre/owner-claims/{}", rank_), 1) == 1) {
    store_.setString(owner, me);
  }
  // The winner of a race sets the owner right after its add.
  watch([&] { return store_.check({owner}); }, [&] { return "the owner of this rank"; },
        "taking this rank");
  std::string holder = store_.getString(owner);
  if (holder != me) {
    Error taken(ErrorCode::kInvalidArgument,
                fmt::format("rank {0}: rank {0} on {1} is already held by "
                            "another process ({2}): two processes were given RANK={0} (are "
                            "--nnodes, --nproc_per_node and --node_rank right on every node?), or "
                            "another job uses the same MASTER_ADDR:MASTER_PORT",
                            rank_, storeName_, holder));
    // The holder's join, if it is still going on, fails too instead of waiting. The
    // holder counts its communicator right after taking the rank: give it a moment.
    const std::string created = fmt::format("gyre/created/{}", rank_);
    int64_t k = store_.add(created, 0);
    for (int i = 0; i < 100 && k == 0; ++i) {
      std::this_thread::sleep_for(20ms);
      k = store_.add(created, 0);
    }
    if (k > 0) {
      prefix_ = fmt::format("gyre/comm{}", k - 1);
      if (!store_.check({key("complete")})) publishFailure(taken);
    }
    throw taken;
  }
  int64_t k = store_.add(fmt::format("gyre/created/{}", rank_), 1);
  prefix_ = fmt::format("gyre/comm{}", k - 1);
  return prefix_;
}

std::vector<Claim> Join::checkIn(const Claim& mine) {
  // Registered before the claim: a rank seen at all is a rank whose death is seen.
  store_.addOnClose(key("alarm"), 1);
  store_.addOnClose(key(fmt::format("dropped/{}", rank_)), 1);
  const int64_t seq = store_.add(key("arrived"), 1);
  store_.setString(key(fmt::format("claim/{}", seq)), signClaim(mine.encode(), seq));
  // Rank 0 reads the n claims and publishes them as one value; the others read that value
  // once: O(n) store calls for the whole join instead of n per rank (docs/scaling.md).
  const std::string all = key("claims");
  watch(
      [&] {
        if (rank_ == 0) {
          absorb(mine);
          if (joined_ < size_) return false;
          store_.setString(all, aggregate());
          return true;
        }
        if (!store_.check({all})) return false;
        absorbAggregate(mine, store_.getString(all));
        return true;
      },
      [&] {
        return sharedProgress(
            "joining",
            [&] {
              // Slow: read the claims one by one to say who is missing (rank 0 has them).
              if (rank_ != 0) absorb(mine);
              return fmt::format(
                  "{} of {} ranks have joined; missing {} (not seen yet); joined {}", joined_,
                  size_, rankRanges(missing()), joinedSummary());
            },
            [&] {
              return fmt::format("{} of {} ranks have checked in; rank 0 names the missing",
                                 std::min<int64_t>(store_.add(key("arrived"), 0), size_), size_);
            });
      },
      "joining");
  store_.setString(key("complete"), "1");
  const double took = seconds();
  if (rank_ == 0) {
    LogLevel level =
        took * 1000 >= static_cast<double>(options_.joinProgressFirst.count()) ? LogLevel::kWarn
                                                                               : LogLevel::kInfo;
    log(level, rank_, "all {} ranks joined in {:.1f} s ({})", size_, took, storeName_);
  }
  return byRank_;
}

void Join::absorb(const Claim& mine) {
  const int64_t arrived = store_.add(key("arrived"), 0);
  absorbFrom(mine, [&](int64_t seq) -> std::optional<std::string> {
    if (seq > arrived) return std::nullopt;
    const std::string k = key(fmt::format("claim/{}", seq));
    if (!store_.check({k})) return std::nullopt;  // its rank is between its add and its set
    return store_.getString(k);
  });
}

// "<seq> <bytes>\n<signed claim text>" for arrivals 1..n, in order.
std::string Join::aggregate() const {
  std::string out;
  for (size_t i = 0; i < signed_.size(); ++i) {
    out += fmt::format("{} {}\n", i + 1, signed_[i].size());
    out += signed_[i];
  }
  return out;
}

void Join::absorbAggregate(const Claim& mine, const std::string& text) {
  std::map<int64_t, std::string> bySeq;
  bool wellFormed = true;
  for (size_t at = 0; at < text.size();) {
    const size_t nl = text.find('\n', at);
    long long seq = 0;
    unsigned long long bytes = 0;
    if (nl == std::string::npos ||
        std::sscanf(text.substr(at, nl - at).c_str(), "%lld %llu", &seq, &bytes) != 2 ||
        bytes > text.size() - nl - 1 || seq < 1 || seq > size_ || bySeq.count(seq) != 0) {
      wellFormed = false;
      break;
    }
    bySeq[seq] = text.substr(nl + 1, bytes);
    at = nl + 1 + bytes;
  }
  if (wellFormed) {
    absorbFrom(mine, [&](int64_t seq) -> std::optional<std::string> {
      auto it = bySeq.find(seq);
      if (it == bySeq.end()) return std::nullopt;
      return it->second;
    });
  }
  if (!wellFormed || joined_ != size_) {
    fail(ErrorCode::kInvalidArgument,
         "rank {}: the check-ins rank 0 gathered in {} are malformed or incomplete ({} of {} "
         "ranks; a different gyre version, or another program using the port?)",
         rank_, storeName_, joined_, size_);
  }
}

template <typename Next>
void Join::absorbFrom(const Claim& mine, Next&& next) {
  for (;;) {
    std::optional<std::string> got = next(seen_ + 1);
    if (!got) return;
    ++seen_;
    progressed_ = true;
    Claim c;
    const std::string& signedText = *got;
    signed_.push_back(signedText);
    std::string text = signedText;
    const bool authentic = checkClaim(signedText, seen_, &text);
    if (!Claim::decode(text, &c)) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: a malformed check-in reached {} (a different gyre version, or "
           "another program using the port?)",
           rank_, storeName_);
    }
    // Unsigned or wrongly signed: written by a rank without this secret, or by someone
    // else who lacks it (the store may be torch's, open to anyone). Checked first: none
    // of what it says can be believed.
    if (!authentic) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: check-in {} in {} (it claims to be rank {} at {}) is not "
           "signed with the job's secret: a rank without this secret (GYRE_TOKEN / "
           "GYRE_TOKEN_FILE) or someone else wrote or rewrote it. Refusing to connect to it",
           rank_, seen_, storeName_, c.rank, c.address);
    }
    if (c.size != size_) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: the ranks disagree on the world size: rank {} ({}) was started with "
           "WORLD_SIZE={}, rank {} ({}) with WORLD_SIZE={}. Start every node with the same "
           "--nnodes and --nproc_per_node (the world is nnodes x nproc_per_node)",
           rank_, c.rank, c.where(), c.size, mine.rank, mine.where(), mine.size);
    }
    if (c.rank < 0 || c.rank >= size_) {
      fail(ErrorCode::kInvalidArgument, "rank {}: rank {} ({}) is outside [0, {})", rank_, c.rank,
           c.where(), size_);
    }
    Claim& slot = byRank_[static_cast<size_t>(c.rank)];
    if (slot.rank >= 0) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: rank {} was claimed twice, by {} and by {}: give every process its own "
           "RANK (check --nnodes, --nproc_per_node and --node_rank on every node)",
           rank_, c.rank, slot.where(), c.where());
    }
    if (c.settings != mine.settings) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: the ranks disagree on settings that must match: rank {} ({}) vs rank {} "
           "({}): {}. Give every rank the same environment",
           rank_, mine.rank, mine.where(), c.rank, c.where(), settingsDiff(mine.rank, mine.settings, c.rank, c.settings));
    }
    if (c.token != mine.token) {
      // Fingerprints (keyed hashes), never the secrets, are compared and named here.
      const char* how = c.token == "-"      ? "has no secret and this rank has one"
                        : mine.token == "-" ? "has a secret and this rank has none"
                                            : "has another secret than this rank";
      fail(ErrorCode::kInvalidArgument,
           "rank {}: rank {} ({}) {} (GYRE_TOKEN / GYRE_TOKEN_FILE): it belongs to another "
           "job, or the job's ranks were given different secrets",
           rank_, c.rank, c.where(), how);
    }
    slot = c;
    ++joined_;
  }
}

// The signature line: "mac <64 hex digits>\n" after the claim, over the communicator's
// prefix, the arrival number and the claim's text, so that a signed claim cannot be moved
// to another arrival or communicator either.
namespace {
std::string claimMacOf(const std::string& secret, const std::string& prefix, int64_t seq,
                       const std::string& text) {
  const Mac mac = hmacSha256(authKey(secret), {std::string_view("gyre-claim-v1\n"), prefix,
                                               std::string_view("\n"), std::to_string(seq),
                                               std::string_view("\n"), text});
  std::string hex;
  for (uint8_t b : mac) hex += fmt::format("{:02x}", b);
  return hex;
}
}  // namespace

std::string signedClaimText(const std::string& secret, const std::string& prefix, int64_t seq,
                            const std::string& claim) {
  if (secret.empty()) return claim;
  return claim + "mac " + claimMacOf(secret, prefix, seq, claim) + "\n";
}

std::string Join::claimMac(const std::string& text, int64_t seq) const {
  return claimMacOf(options_.token, prefix_, seq, text);
}

std::string Join::signClaim(const std::string& text, int64_t seq) const {
  return signedClaimText(options_.token, prefix_, seq, text);
}

bool Join::checkClaim(const std::string& signedText, int64_t seq, std::string* text) const {
  *text = signedText;
  if (options_.token.empty()) return true;  // nothing to check against
  const size_t at = signedText.rfind("mac ");
  if (at == std::string::npos || (at > 0 && signedText[at - 1] != '\n')) return false;
  *text = signedText.substr(0, at);
  const std::string want = "mac " + claimMac(*text, seq) + "\n";
  const std::string got = signedText.substr(at);
  return got.size() == want.size() &&
         equalMacs(reinterpret_cast<const uint8_t*>(got.data()),
                   reinterpret_cast<const uint8_t*>(want.data()), want.size());
}

std::vector<int> Join::missing() const {
  std::vector<int> out;
  for (int r = 0; r < size_; ++r) {
    if (byRank_[static_cast<size_t>(r)].rank < 0) out.push_back(r);
  }
  return out;
}

// "0-3 on host a (10.0.0.1), 4-5 on host b (10.0.0.2)"
std::string Join::joinedSummary() const {
  std::map<std::string, std::vector<int>> byHost;
  for (const Claim& c : byRank_) {
    if (c.rank >= 0) byHost[c.hostName + " (" + c.address.substr(0, c.address.rfind(':')) + ")"].push_back(c.rank);
  }
  std::string out;
  for (const auto& [host, ranks] : byHost) {
    out += fmt::format("{}{} on {}", out.empty() ? "" : ", ", rankRanges(ranks), host);
  }
  return out.empty() ? "none" : out;
}

void Join::leave() {
  try {
    arrive("left", "finishing creation");
  } catch (const Error& e) {
    if (rank_ == 0 || e.cause() != ErrorCause::kStoreLost) throw;
    log(LogLevel::kWarn, rank_, "{} went away right after every rank "
        "had created the communicator (did rank 0's process end?); going on: {}",
        storeName_, e.what());
    return;
  }
  if (rank_ == 0) waitAll("left", "finishing creation", /*goneCounts=*/true);
}

Error Join::explainStoreLoss(const Error& e) const {
  return Error(ErrorCode::kRemoteError,
               fmt::format("rank {}: {} went away after {:.1f} s, while "
                           "{}: the process serving it (rank 0) exited or failed, and its own "
                           "output says why ({})",
                           rank_, storeName_, seconds(), phase_, e.what()),
               ErrorCause::kStoreLost);
}

void Join::arrive(const std::string& step, const char* what) {
  phase_ = what;
  // Counted first: a rank killed between the two calls is then either not counted (and
  // named as late or dropped) or counted (and the others go on without it), never marked
  // but not counted, which left the others waiting on "rank(s) none".
  store_.add(key(step), 1);
  store_.setString(key(fmt::format("{}/{}", step, rank_)), "1");
  // Its drop from now on is no alarm (checkAlarms): counted apart, so that the others
  // need not look at every rank's marks to learn it. After the mark: a rank that dies
  // between the two is found by checkAlarms' scan.
  if (step == "done") store_.addOnClose(key("dropped-done"), 1);
}

void Join::waitAll(const std::string& step, const char* what) { waitAll(step, what, false); }

std::vector<int> Join::notMarked(const std::string& step) {
  std::vector<int> out;
  for (int r = 0; r < size_; ++r) {
    if (!store_.check({key(fmt::format("{}/{}", step, r))})) out.push_back(r);
  }
  return out;
}

void Join::waitAll(const std::string& step, const char* what, bool goneCounts) {
  auto arrivedOrGone = [&] {
    // Drops are counted in "alarm": without one there is nobody to count as gone.
    if (store_.add(key("alarm"), 0) == 0) return false;
    // Marks and drops stay: a rank found settled is never asked again, so this costs
    // O(n) store calls in all, not per poll (only leave() counts the gone).
    while (settledBelow_ < size_) {
      if (!store_.check({key(fmt::format("{}/{}", step, settledBelow_))}) &&
          !store_.check({key(fmt::format("dropped/{}", settledBelow_))})) {
        return false;
      }
      ++settledBelow_;
    }
    return true;
  };
  watch([&] { return store_.add(key(step), 0) >= size_ || (goneCounts && arrivedOrGone()); },
        [&] {
          return sharedProgress(
              step,
              [&] {
          const std::vector<int> late = notMarked(step);
          std::string hosts;
          for (int r : late) {
            const Claim& c = byRank_[static_cast<size_t>(r)];
            if (c.rank >= 0 && hosts.size() < 400) hosts += fmt::format("; rank {}: {}", r, c.where());
          }
          return fmt::format("waiting for rank(s) {}{}", rankRanges(late), hosts);
              },
              [&] {
                return fmt::format("{} of {} ranks have arrived; rank 0 names the others",
                                   store_.add(key(step), 0), size_);
              });
        },
        what);
}

std::string Join::sharedProgress(const std::string& what,
                                 const std::function<std::string()>& compute,
                                 const std::function<std::string()>& count) {
  if (size_ <= kNamedByEveryRank) return compute();
  const std::string shared = key("progress");
  if (rank_ == 0) {
    std::string text = compute();
    store_.setString(shared, what + "\n" + text);
    return text;
  }
  if (store_.check({shared})) {
    const std::string text = store_.getString(shared);
    if (text.starts_with(what + "\n")) {
      return text.substr(what.size() + 1) + " (as rank 0 last reported)";
    }
  }
  return count();
}

template <typename Ready, typename Progress>
void Join::watch(Ready&& ready, Progress&& progress, const char* what) {
  const Clock::time_point deadline = start_ + options_.joinTimeout;
  Clock::time_point nextReport = start_ + options_.joinProgressFirst;
  Clock::duration pause = kFirstPoll;
  phase_ = what;
  for (;;) {
    // The store's own errors leave as they are: creation puts them in words once, for
    // every store call it makes (explainStoreLoss).
    if (ready()) return;
    if (progressed_) pause = kFirstPoll;  // more may be coming at once
    progressed_ = false;
    checkAlarms();
    checkGone();
    checkRefusals();
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      fail(ErrorCode::kTimeout,
           "rank {}: {} did not complete after {:.1f} s (GYRE_JOIN_TIMEOUT={} s): {}; {}. "
           "Are all nodes started, with the same --nnodes/--nproc_per_node, and MASTER_ADDR/"
           "MASTER_PORT naming rank 0's node?",
           rank_, what, seconds(), options_.joinTimeout.count() / 1000.0, progress(), storeName_);
    }
    if (now >= nextReport) {
      log(LogLevel::kWarn, rank_, "{} for {:.0f} s: {}; {} (gives up at {} s, GYRE_JOIN_TIMEOUT)",
          what, seconds(), progress(), storeName_, options_.joinTimeout.count() / 1000.0);
      while (nextReport <= now) nextReport += options_.joinProgressEvery;
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    const Clock::duration longest = std::clamp<Clock::duration>(
        kLongestPollPerRank * size_, kLongestPoll, kLongestPollCap);
    pause = std::min<Clock::duration>(pause * 2, longest);
  }
}

void Join::checkRefusals() {
  if (joined_ >= size_) return;
  const std::string total = "gyre/store/refused";
  if (!store_.check({total})) return;
  // Written by the store only (store/tcp_store_server.h): decimal digits.
  const std::string text = store_.getString(total);
  const int64_t refusals = std::strtoll(text.c_str(), nullptr, 10);
  const Clock::time_point now = Clock::now();
  if (refusals != refusalsSeen_) {
    refusalsSeen_ = refusals;
    for (int r : missing()) {
      if (refusedSince_.count(r) == 0 &&
          store_.check({fmt::format("gyre/store/refused/{}", r)})) {
        refusedSince_[r] = now;
      }
    }
  }
  for (const auto& [r, since] : refusedSince_) {
    if (byRank_[static_cast<size_t>(r)].rank >= 0 || now - since < kRefusedGrace) continue;
    fail(ErrorCode::kInvalidArgument,
         "rank {}: rank {} could not join: a client claiming to be rank {} did not match the "
         "secret of {} (its GYRE_TOKEN / GYRE_TOKEN_FILE differs from "
         "rank 0's, or one of them has none), and rank {} has not arrived {:.0f} s later",
         rank_, r, r, storeName_, r,
         std::chrono::duration<double>(kRefusedGrace).count());
  }
}

void Join::checkAlarms() {
  const int64_t alarms = store_.add(key("alarm"), 0);
  if (alarms == alarmsSeen_) return;
  if (throwPublishedFailure()) return;  // its publisher is between add and set
  // Every alarm so far is the drop of a rank that had arrived at "done" (arrive()):
  // nothing wrong, and no need to look at each rank.
  if (store_.add(key("dropped-done"), 0) == alarms) {
    alarmsSeen_ = alarms;
    return;
  }
  for (int r = 0; r < size_; ++r) {
    if (!store_.check({key(fmt::format("dropped/{}", r))}) ||
        store_.check({key(fmt::format("done/{}", r))})) {
      continue;
    }
    // A rank that failed published why before its connection dropped: when it did, that
    // is the cause (it names the rank that really died), not its own exit.
    if (throwPublishedFailure()) return;
    const Claim& c = byRank_[static_cast<size_t>(r)];
    failWith(ErrorCode::kRemoteError, ErrorCause::kRankLeft,
         "rank {}: rank {}{} exited (or lost its connection to the store at {}) after {:.1f} s, "
         "while the communicator was being created: the others cannot go on without it; its own "
         "output says why it ended",
         rank_, r, c.rank >= 0 ? " (" + c.where() + ")" : "", storeName_, seconds());
  }
  alarmsSeen_ = alarms;  // only drops of ranks that had finished: nothing wrong
}

bool Join::throwPublishedFailure() {
  if (store_.add(key("failures"), 0) == 0) return false;
  if (!store_.check({key("error/1")})) return true;  // its publisher is between add and set
  std::string text = store_.getString(key("error/1"));
  size_t nl = text.find('\n');
  int code = std::atoi(text.substr(0, nl).c_str());
  if (!seenCounted_) store_.add(key("error-seen"), 1);
  seenCounted_ = true;
  throw Error(errorCodeFromInt(code, ErrorCode::kRemoteError),
              fmt::format("rank {}: creating the communicator failed on another rank: {}", rank_,
                          nl == std::string::npos ? text : text.substr(nl + 1)),
              ErrorCause::kFailedElsewhere);
}

void Join::checkGone() {
  for (const auto& [r, goneKey] : goneKeys_) {
    if (store_.check({key(fmt::format("done/{}", r))}) || !store_.check({goneKey})) continue;
    failWith(ErrorCode::kRemoteError, ErrorCause::kRankLeft,
             "rank {}: rank {} of the new communicator is gone (its process's connection to the "
             "store at {} closed: {}) after {:.1f} s, before the communicator was created: "
             "exclude it too",
             rank_, r, storeName_, goneKey, seconds());
  }
}

void Join::failBeforeCheckIn(Store& store, int rank, int size, const Options& options,
                             const Error& error) noexcept {
  try {
    Join join(store, rank, size, options);
    join.claimPrefix();
    join.publishFailure(error);
  } catch (const std::exception& e) {
    log(LogLevel::kWarn, rank, "could not tell the other ranks why setup failed: {}", e.what());
  }
}

void Join::publishFailure(const Error& error) noexcept {
  if (prefix_.empty()) return;
  try {
    if (store_.add(key("failures"), 1) == 1) {
      store_.setString(key("error/1"),
                       fmt::format("{}\n{}", static_cast<int>(error.code()), error.what()));
    }
    store_.add(key("alarm"), 1);
    if (!seenCounted_) store_.add(key("error-seen"), 1);  // every rank counts itself once
    seenCounted_ = true;
    if (!servesStore(store_)) return;
    const Clock::time_point until = Clock::now() + kLinger;
    while (Clock::now() < until && store_.add(key("error-seen"), 0) < size_) {
      std::this_thread::sleep_for(10ms);
    }
  } catch (const std::exception& e) {
    log(LogLevel::kWarn, rank_, "could not tell the other ranks why creation failed: {}", e.what());
  }
}

}  // namespace gyre

/* c_api_cases: the C API (capi/gyre.h) from plain C99, over real processes: the checks of
 * c_api_test.cc, which forks NRANKS ranks for each case (fork_ranks.h)
 * and runs it in both init modes:
 *   id   rank 0 calls gyreGetUniqueId and hands the id to the other ranks (as MPI programs
 *        broadcast NCCL's); each calls gyreCommInitRank; the store server lives in rank 0's
 *        process. Transport auto (shared memory on one host).
 *   env  RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (a free port) and gyreCommInitFromEnv.
 *        Transport tcp.
 * The cases check every collective (blocking and async, in and out of place, every
 * datatype and op) against exact integer-valued results with guard elements past each
 * buffer, gyreTest/gyreWait, split (even/odd, key order, NOCOLOR), abort, shrink and
 * grow, create/destroy cycles, and the result codes and messages of bad arguments. Each
 * case creates the world, runs its checks (the collectives with schedules of their own on
 * a duplicate of it), and destroys it. A wrong value is reported and the ranks go on in
 * step; a failed call ends its section. A rank prints every failure on stderr and
 * returns nonzero.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "c_api_cases.h"
#include "capi/gyre.h"

#define NRANKS C_API_RANKS
#define DEADLINE_S 100 /* a hung rank ends on its own too */
#define GUARD 8        /* elements past every buffer that must stay untouched */
#define BIG 20011      /* elements: more than a pipe holds with 16 KiB slots */


static const char* g_mode = "parent";
static int g_rank = -1; /* rank in the world communicator */
static int g_failures = 0;
static const char* g_section = "setup";
static char g_rank_text[16] = "rank ?"; /* "rank 2": what every message must name */

static void failf(const char* fmt, ...) {
  char what[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(what, sizeof(what), fmt, args);
  va_end(args);
  /* One write per line, so that the ranks' lines do not interleave. */
  if (g_failures < 30) {
    fprintf(stderr, "[c_api_test %s rank %d] FAIL %s: %s\n", g_mode, g_rank, g_section, what);
  } else if (g_failures == 30) {
    fprintf(stderr, "[c_api_test %s rank %d] (further failures not shown)\n", g_mode, g_rank);
  }
  ++g_failures;
}

/* True when `result` is `expected`; otherwise records a failure naming the call. */
static int expect(gyreResult_t result, gyreResult_t expected, const char* call, gyreComm_t comm) {
  if (result == expected) return 1;
  failf("%s returned %d (%s), expected %d (%s); last error: %s", call, (int)result,
        gyreGetErrorString(result), (int)expected, gyreGetErrorString(expected),
        gyreGetLastError(comm));
  return 0;
}
#define OK(call, comm) expect((call), gyreSuccess, #call, (comm))
#define BAD(call, comm) expect((call), gyreInvalidArgument, #call, (comm))

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (ms % 1000) * 1000000L;
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* ---- Typed buffers: every value used is a small integer, exact in every type ---------- */

static const gyreDataType_t kTypes[] = {gyreInt8,    gyreUint8,  gyreInt32,   gyreUint32,
                                        gyreInt64,   gyreUint64, gyreFloat16, gyreBfloat16,
                                        gyreFloat32, gyreFloat64};
#define NTYPES ((int)(sizeof(kTypes) / sizeof(kTypes[0])))
static const gyreRedOp_t kOps[] = {gyreSum, gyreProd, gyreMin, gyreMax, gyreAvg};
#define NOPS ((int)(sizeof(kOps) / sizeof(kOps[0])))

static size_t elem_size(gyreDataType_t t) {
  switch (t) {
    case gyreInt8:
    case gyreUint8:
      return 1;
    case gyreFloat16:
    case gyreBfloat16:
      return 2;
    case gyreInt32:
    case gyreUint32:
    case gyreFloat32:
      return 4;
    default:
      return 8;
  }
}

static int is_float(gyreDataType_t t) {
  return t == gyreFloat16 || t == gyreBfloat16 || t == gyreFloat32 || t == gyreFloat64;
}

/* IEEE half of a non-negative integer below 2048 (exact). */
static uint16_t half_of(unsigned v) {
  unsigned e = 0;
  if (v == 0) return 0;
  while ((v >> (e + 1)) != 0) ++e;
  return (uint16_t)(((e + 15) << 10) | ((v << (10 - e)) & 0x3ff));
}

static double half_value(uint16_t h) {
  int e = (h >> 10) & 0x1f;
  double m = (double)(h & 0x3ff) / 1024.0;
  double v = e == 0 ? m / 16384.0 : 1.0 + m;
  for (; e > 15; --e) v *= 2.0;
  for (; e > 0 && e < 15; ++e) v /= 2.0;
  return (h & 0x8000) ? -v : v;
}

static void put(gyreDataType_t t, void* buf, size_t i, double v) {
  unsigned char* p = (unsigned char*)buf + i * elem_size(t);
  switch (t) {
    case gyreInt8: {
      int8_t x = (int8_t)v;
      memcpy(p, &x, 1);
      break;
    }
    case gyreUint8: {
      uint8_t x = (uint8_t)v;
      memcpy(p, &x, 1);
      break;
    }
    case gyreInt32: {
      int32_t x = (int32_t)v;
      memcpy(p, &x, 4);
      break;
    }
    case gyreUint32: {
      uint32_t x = (uint32_t)v;
      memcpy(p, &x, 4);
      break;
    }
    case gyreInt64: {
      int64_t x = (int64_t)v;
      memcpy(p, &x, 8);
      break;
    }
    case gyreUint64: {
      uint64_t x = (uint64_t)v;
      memcpy(p, &x, 8);
      break;
    }
    case gyreFloat16: {
      uint16_t x = half_of((unsigned)v);
      memcpy(p, &x, 2);
      break;
    }
    case gyreBfloat16: {
      float f = (float)v;
      uint32_t bits;
      uint16_t x;
      memcpy(&bits, &f, 4);
      x = (uint16_t)(bits >> 16); /* exact: small integers need < 8 mantissa bits */
      memcpy(p, &x, 2);
      break;
    }
    case gyreFloat32: {
      float x = (float)v;
      memcpy(p, &x, 4);
      break;
    }
    default: {
      double x = v;
      memcpy(p, &x, 8);
      break;
    }
  }
}

static double get(gyreDataType_t t, const void* buf, size_t i) {
  const unsigned char* p = (const unsigned char*)buf + i * elem_size(t);
  switch (t) {
    case gyreInt8: {
      int8_t x;
      memcpy(&x, p, 1);
      return x;
    }
    case gyreUint8: {
      uint8_t x;
      memcpy(&x, p, 1);
      return x;
    }
    case gyreInt32: {
      int32_t x;
      memcpy(&x, p, 4);
      return x;
    }
    case gyreUint32: {
      uint32_t x;
      memcpy(&x, p, 4);
      return x;
    }
    case gyreInt64: {
      int64_t x;
      memcpy(&x, p, 8);
      return (double)x;
    }
    case gyreUint64: {
      uint64_t x;
      memcpy(&x, p, 8);
      return (double)x;
    }
    case gyreFloat16: {
      uint16_t x;
      memcpy(&x, p, 2);
      return half_value(x);
    }
    case gyreBfloat16: {
      uint16_t x;
      uint32_t bits;
      float f;
      memcpy(&x, p, 2);
      bits = (uint32_t)x << 16;
      memcpy(&f, &bits, 4);
      return f;
    }
    case gyreFloat32: {
      float x;
      memcpy(&x, p, 4);
      return x;
    }
    default: {
      double x;
      memcpy(&x, p, 8);
      return x;
    }
  }
}

/* Rank r's input element i: 1..13 (1..3 for prod, so 4 ranks stay below 2^7). */
static double input(int r, size_t i, gyreRedOp_t op) {
  if (op == gyreProd) return (double)((r + i) % 3 + 1);
  return (double)((r * 7 + i * 3) % 13 + 1);
}

/* The reduction over the ranks in members[0..n) of input(member, i). */
static double expected(gyreDataType_t t, gyreRedOp_t op, const int* members, int n, size_t i) {
  double acc = input(members[0], i, op);
  int k;
  for (k = 1; k < n; ++k) {
    double v = input(members[k], i, op);
    switch (op) {
      case gyreProd:
        acc *= v;
        break;
      case gyreMin:
        acc = v < acc ? v : acc;
        break;
      case gyreMax:
        acc = v > acc ? v : acc;
        break;
      default:
        acc += v;
        break;
    }
  }
  if (op == gyreAvg) {
    if (is_float(t)) return acc / n; /* n is 1, 2 or 4 here: exact */
    return (double)((long long)acc / n);
  }
  return acc;
}

/* A buffer of count elements plus GUARD guard bytes-worth of elements set to 0xA5. */
static unsigned char* alloc_buf(gyreDataType_t t, size_t count) {
  size_t bytes = (count + GUARD) * elem_size(t);
  unsigned char* p = (unsigned char*)malloc(bytes);
  if (!p) {
    fprintf(stderr, "c_api_test: out of memory\n");
    exit(2);
  }
  memset(p, 0x5a, count * elem_size(t));
  memset(p + count * elem_size(t), 0xa5, GUARD * elem_size(t));
  return p;
}

static int guard_ok(const char* what, gyreDataType_t t, const unsigned char* p, size_t count) {
  size_t k;
  for (k = 0; k < GUARD * elem_size(t); ++k) {
    if (p[count * elem_size(t) + k] != 0xa5) {
      failf("%s: the guard byte %lu past %lu elements was overwritten", what, (unsigned long)k,
            (unsigned long)count);
      return 0;
    }
  }
  return 1;
}

/* Compares count elements with want(i); reports the first difference. */
typedef double (*Want)(size_t i, const void* ctx);
static int check_values(const char* what, gyreDataType_t t, const void* buf, size_t count,
                        Want want, const void* ctx) {
  size_t i;
  for (i = 0; i < count; ++i) {
    double got = get(t, buf, i);
    double w = want(i, ctx);
    if (got != w) {
      failf("%s (dtype %d, count %lu): element %lu is %g, expected %g", what, (int)t,
            (unsigned long)count, (unsigned long)i, got, w);
      return 0;
    }
  }
  return 1;
}

struct ReduceCtx {
  gyreDataType_t t;
  gyreRedOp_t op;
  const int* members;
  int n;
  size_t offset; /* element offset into the inputs (reduce-scatter blocks) */
};
static double want_reduce(size_t i, const void* ctx) {
  const struct ReduceCtx* c = (const struct ReduceCtx*)ctx;
  return expected(c->t, c->op, c->members, c->n, c->offset + i);
}

struct InputCtx {
  int rank;
  gyreRedOp_t op;
  size_t offset;
};
static double want_input(size_t i, const void* ctx) {
  const struct InputCtx* c = (const struct InputCtx*)ctx;
  return input(c->rank, c->offset + i, c->op);
}

static void fill_inputs(gyreDataType_t t, void* buf, size_t count, int rank, gyreRedOp_t op,
                        size_t offset) {
  size_t i;
  for (i = 0; i < count; ++i) put(t, buf, i, input(rank, offset + i, op));
}

static int comm_rank(gyreComm_t comm) {
  int r = -1;
  OK(gyreCommUserRank(comm, &r), comm);
  return r;
}

static int comm_size(gyreComm_t comm) {
  int n = -1;
  OK(gyreCommCount(comm, &n), comm);
  return n;
}

/* ---- All-reduce ------------------------------------------------------------------------ */

/* members[k]: the world rank of comm's rank k (the inputs depend on world ranks). */
static int allreduce_case(gyreComm_t comm, const int* members, int n, gyreDataType_t t,
                          gyreRedOp_t op, size_t count, int inplace, int async) {
  struct ReduceCtx ctx;
  unsigned char* send = alloc_buf(t, count);
  unsigned char* recv = inplace ? send : alloc_buf(t, count);
  int ok;
  fill_inputs(t, send, count, g_rank, op, 0);
  if (async) {
    gyreRequest_t req = NULL;
    ok = OK(gyreAllReduceAsync(send, recv, count, t, op, comm, &req), comm) &&
         OK(gyreWait(req), comm);
    OK(gyreRequestFree(req), comm);
  } else {
    ok = OK(gyreAllReduce(send, recv, count, t, op, comm), comm);
  }
  ctx.t = t;
  ctx.op = op;
  ctx.members = members;
  ctx.n = n;
  ctx.offset = 0;
  if (ok && check_values("allreduce", t, recv, count, want_reduce, &ctx) &&
      guard_ok("allreduce recvbuff", t, recv, count) && !inplace) {
    struct InputCtx in;
    in.rank = g_rank;
    in.op = op;
    in.offset = 0;
    check_values("allreduce sendbuff (must stay)", t, send, count, want_input, &in);
  }
  if (recv != send) free(recv);
  free(send);
  return ok;
}

static void test_allreduce(gyreComm_t comm, const int* members, int n) {
  static const size_t counts[] = {0, 1, 1001};
  int ti, oi;
  size_t ci;
  for (ti = 0; ti < NTYPES; ++ti) {
    for (oi = 0; oi < NOPS; ++oi) {
      for (ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ++ci) {
        if (!allreduce_case(comm, members, n, kTypes[ti], kOps[oi], counts[ci],
                            (int)((ci + oi) % 2), 0)) {
          return;
        }
      }
    }
  }
  /* Many slots, both buffer layouts, blocking and async. */
  if (!allreduce_case(comm, members, n, gyreInt32, gyreSum, BIG, 0, 0)) return;
  if (!allreduce_case(comm, members, n, gyreFloat32, gyreMax, BIG, 1, 0)) return;
  if (!allreduce_case(comm, members, n, gyreFloat64, gyreSum, BIG, 0, 1)) return;
  allreduce_case(comm, members, n, gyreBfloat16, gyreProd, BIG, 1, 1);
}

/* Several operations in flight at once, and gyreTest while a peer has not joined yet. */
static void test_async(gyreComm_t comm, const int* members, int n) {
  enum { K = 3 };
  gyreRequest_t reqs[K];
  int32_t* bufs[K];
  int k, done = -1;
  double deadline;
  gyreResult_t r;
  struct ReduceCtx ctx;
  ctx.t = gyreInt32;
  ctx.op = gyreSum;
  ctx.members = members;
  ctx.n = n;
  ctx.offset = 0;
  for (k = 0; k < K; ++k) {
    bufs[k] = (int32_t*)alloc_buf(gyreInt32, BIG);
    fill_inputs(gyreInt32, bufs[k], BIG, g_rank, gyreSum, 0);
  }
  /* Rank 0's first tests must see the operation unfinished: rank 1 joins after them. */
  if (g_rank == 1 && !fork_ranks_wait_for(0, "async tested")) failf("rank 0 never said it tested");
  for (k = 0; k < K; ++k) {
    if (!OK(gyreAllReduceAsync(bufs[k], bufs[k], BIG, gyreInt32, gyreSum, comm, &reqs[k]), comm)) {
      return;
    }
  }
  if (g_rank == 0) {
    double waited;
    r = gyreTest(reqs[0], &done);
    if (r != gyreInProgress || done != 0) {
      failf("gyreTest on an all-reduce that rank 1 has not joined: %d (%s), done %d", (int)r,
            gyreGetErrorString(r), done);
    }
    /* A bounded wait that ends before rank 1 comes: still running, after about 50 ms. */
    waited = now_s();
    done = -1;
    r = gyreWaitTimeout(reqs[0], 50, &done);
    waited = now_s() - waited;
    if (r != gyreInProgress || done != 0 || waited < 0.045 || waited > 1.0) {
      failf("gyreWaitTimeout(50 ms) before rank 1 joined: %d (%s), done %d, after %.3f s",
            (int)r, gyreGetErrorString(r), done, waited);
    }
    BAD(gyreWaitTimeout(reqs[0], -1, &done), comm);
    fork_ranks_say("async tested");
  }
  /* Then one long enough: it returns as soon as the operation is done. */
  r = gyreWaitTimeout(reqs[0], 60000, &done);
  if (!expect(r, gyreSuccess, "gyreWaitTimeout(reqs[0])", comm) || done != 1) return;
  deadline = now_s() + 60;
  do {
    r = gyreTest(reqs[0], &done);
    if (r == gyreInProgress) sleep_ms(1);
  } while (r == gyreInProgress && now_s() < deadline);
  if (!expect(r, gyreSuccess, "gyreTest(reqs[0])", comm) || done != 1) return;
  for (k = 1; k < K; ++k) OK(gyreWait(reqs[k]), comm);
  OK(gyreWait(reqs[1]), comm); /* again: still success */
  r = gyreTest(reqs[2], &done);
  if (r != gyreSuccess || done != 1) failf("gyreTest after gyreWait: %d, done %d", (int)r, done);
  for (k = 0; k < K; ++k) {
    check_values("async allreduce", gyreInt32, bufs[k], BIG, want_reduce, &ctx);
    guard_ok("async allreduce", gyreInt32, (unsigned char*)bufs[k], BIG);
    OK(gyreRequestFree(reqs[k]), comm);
    free(bufs[k]);
  }
}

/* ---- Broadcast and barrier ------------------------------------------------------------- */

static void test_broadcast(gyreComm_t comm) {
  const int n = comm_size(comm), me = comm_rank(comm);
  const size_t count = BIG;
  int root, inplace;
  struct InputCtx in;
  in.op = gyreSum;
  in.offset = 0;
  for (root = 0; root < n; ++root) {
    for (inplace = 0; inplace < 2; ++inplace) {
      unsigned char* recv = alloc_buf(gyreInt32, count);
      unsigned char* send = NULL;
      gyreRequest_t req = NULL;
      int ok;
      if (me == root) {
        send = inplace ? recv : alloc_buf(gyreInt32, count);
        fill_inputs(gyreInt32, send, count, root, gyreSum, 0);
      }
      if ((root + inplace) % 2) {
        ok = OK(gyreBroadcastAsync(send, recv, count, gyreInt32, root, comm, &req), comm) &&
             OK(gyreWait(req), comm);
        gyreRequestFree(req);
      } else {
        ok = OK(gyreBroadcast(send, recv, count, gyreInt32, root, comm), comm);
      }
      in.rank = root;
      if (ok) {
        check_values("broadcast", gyreInt32, recv, count, want_input, &in);
        guard_ok("broadcast recvbuff", gyreInt32, recv, count);
      }
      if (send && send != recv) {
        check_values("broadcast root sendbuff (must stay)", gyreInt32, send, count, want_input,
                     &in);
        free(send);
      }
      free(recv);
      if (!ok) return;
    }
  }
  {
    /* Out of place on the root after an async all-reduce into its sendbuff: the root's
     * copy must wait for the all-reduce. */
    const int all[NRANKS] = {0, 1, 2, 3};
    struct ReduceCtx ctx;
    unsigned char* x = alloc_buf(gyreInt32, count);
    unsigned char* y = alloc_buf(gyreInt32, count);
    gyreRequest_t r1 = NULL, r2 = NULL;
    fill_inputs(gyreInt32, x, count, g_rank, gyreSum, 0);
    if (OK(gyreAllReduceAsync(x, x, count, gyreInt32, gyreSum, comm, &r1), comm) &&
        OK(gyreBroadcastAsync(x, y, count, gyreInt32, n - 1, comm, &r2), comm) &&
        OK(gyreWait(r2), comm) && OK(gyreWait(r1), comm)) {
      ctx.t = gyreInt32;
      ctx.op = gyreSum;
      ctx.members = all;
      ctx.n = n;
      ctx.offset = 0;
      check_values("broadcast of an all-reduce's result", gyreInt32, y, count, want_reduce, &ctx);
    }
    gyreRequestFree(r1);
    gyreRequestFree(r2);
    free(x);
    free(y);
  }
}

static void test_barrier(gyreComm_t comm) {
  double start;
  gyreRequest_t req = NULL;
  if (g_rank == 0) sleep_ms(300); /* time passes: the others must wait for it, measured */
  start = now_s();
  if (!OK(gyreBarrier(comm), comm)) return;
  if (g_rank != 0 && now_s() - start < 0.25) {
    failf("gyreBarrier returned after %.3f s although rank 0 entered it 0.3 s late",
          now_s() - start);
  }
  if (OK(gyreBarrierAsync(comm, &req), comm)) OK(gyreWait(req), comm);
  gyreRequestFree(req);
}

/* ---- Bad arguments: every rank fails locally, and the communicator stays usable --------- */

static void expect_message(gyreComm_t comm, const char* needle) {
  const char* msg = gyreGetLastError(comm);
  if (!msg || !strstr(msg, needle)) {
    failf("gyreGetLastError(%s) is '%s', which does not mention '%s'", comm ? "comm" : "NULL",
          msg ? msg : "(null)", needle);
  }
}

static void test_bad_arguments(gyreComm_t comm) {
  const int n = comm_size(comm);
  int32_t buf[8] = {0};
  int32_t big[8 * NRANKS] = {0};
  int x = 0;
  gyreRequest_t req = (gyreRequest_t)buf; /* must be set to NULL on failure */
  gyreComm_t sub = (gyreComm_t)buf;
  const int all[NRANKS] = {0, 1, 2, 3};

  BAD(gyreAllReduce(NULL, buf, 4, gyreInt32, gyreSum, comm), comm);
  expect_message(comm, "gyreAllReduce");
  expect_message(comm, "null");
  BAD(gyreAllReduce(buf, NULL, 4, gyreInt32, gyreSum, comm), comm);
  BAD(gyreAllReduce(buf, buf, 4, (gyreDataType_t)42, gyreSum, comm), comm);
  expect_message(comm, "datatype");
  expect_message(comm, g_rank_text);
  BAD(gyreAllReduce(buf, buf, 4, (gyreDataType_t)-1, gyreSum, comm), comm);
  BAD(gyreAllReduce(buf, buf, 4, (gyreDataType_t)256, gyreSum, comm), comm);
  BAD(gyreAllReduce(buf, buf, 4, gyreInt32, (gyreRedOp_t)99, comm), comm);
  expect_message(comm, "op");
  expect_message(comm, g_rank_text);
  BAD(gyreBroadcast(buf, buf, 4, gyreInt32, n, comm), comm);
  expect_message(comm, "root");
  BAD(gyreBroadcast(buf, buf, 4, gyreInt32, -1, comm), comm);
  BAD(gyreBroadcast(buf, NULL, 4, gyreInt32, 0, comm), comm);
  BAD(gyreBroadcast(buf, buf, 4, (gyreDataType_t)10, 0, comm), comm);
  BAD(gyreReduce(buf, buf, 4, gyreInt32, gyreSum, n, comm), comm);
  BAD(gyreReduce(NULL, buf, 4, gyreInt32, gyreSum, 0, comm), comm);
  BAD(gyreAllGather(buf, NULL, 2, gyreInt32, comm), comm);
  BAD(gyreAllGather(buf, big, 2, (gyreDataType_t)12, comm), comm);
  BAD(gyreReduceScatter(NULL, buf, 2, gyreInt32, gyreSum, comm), comm);
  BAD(gyreReduceScatter(big, buf, 2, gyreInt32, (gyreRedOp_t)-3, comm), comm);
  BAD(gyreAllToAll(big, NULL, 2, gyreInt32, comm), comm);
  {
    size_t counts[NRANKS] = {0}, other[NRANKS] = {0};
    counts[g_rank] = 1; /* sends itself 1 element, receives 0 from itself */
    BAD(gyreAllToAllv(big, counts, NULL, buf, other, NULL, gyreInt32, comm), comm);
    expect_message(comm, "from itself");
    BAD(gyreAllToAllv(big, NULL, NULL, buf, other, NULL, gyreInt32, comm), comm);
    expect_message(comm, "sendCounts");
    other[g_rank] = 1;
    BAD(gyreAllToAllv(big, counts, NULL, NULL, other, NULL, gyreInt32, comm), comm);
    BAD(gyreAllToAllvAsync(big, counts, NULL, buf, other, NULL, gyreInt32, comm, NULL), comm);
  }
  BAD(gyreSend(buf, 4, gyreInt32, g_rank, comm), comm);
  expect_message(comm, "peer");
  BAD(gyreSend(buf, 4, gyreInt32, n, comm), comm);
  BAD(gyreSend(NULL, 4, gyreInt32, (g_rank + 1) % n, comm), comm);
  BAD(gyreRecv(NULL, 4, gyreInt32, (g_rank + 1) % n, comm), comm);
  BAD(gyreRecv(buf, 4, gyreInt32, -1, comm), comm);
  BAD(gyreSendRecv(buf, 4, g_rank, buf, 4, (g_rank + 1) % n, gyreInt32, comm), comm);
  BAD(gyreSendRecv(buf, 4, (g_rank + 1) % n, NULL, 4, (g_rank + 1) % n, gyreInt32, comm), comm);
  BAD(gyreAllReduceAsync(buf, buf, 4, gyreInt32, gyreSum, comm, NULL), comm);
  expect_message(comm, "request is NULL");
  expect_message(comm, g_rank_text);
  BAD(gyreAllReduceAsync(NULL, buf, 4, gyreInt32, gyreSum, comm, &req), comm);
  if (req != NULL) failf("a failed gyreAllReduceAsync left *request non-NULL");
  BAD(gyreBroadcastAsync(buf, buf, 4, gyreInt32, n, comm, &req), comm);
  BAD(gyreSendAsync(buf, 4, gyreInt32, g_rank, comm, &req), comm);
  BAD(gyreRecvAsync(buf, 4, gyreInt32, g_rank, comm, NULL), comm);
  BAD(gyreBarrierAsync(comm, NULL), comm);
  BAD(gyreCommCount(comm, NULL), comm);
  BAD(gyreCommUserRank(comm, NULL), comm);
  BAD(gyreCommSplit(comm, 0, 0, NULL), comm);
  BAD(gyreCommNameNextCall(comm, NULL), comm);
  expect_message(comm, "name is NULL");

  /* No communicator: the thread's last error tells. */
  BAD(gyreAllReduce(buf, buf, 4, gyreInt32, gyreSum, NULL), NULL);
  expect_message(NULL, "comm is NULL");
  BAD(gyreBarrier(NULL), NULL);
  BAD(gyreCommCount(NULL, &x), NULL);
  BAD(gyreCommUserRank(NULL, &x), NULL);
  BAD(gyreCommAbort(NULL), NULL);
  BAD(gyreCommNameNextCall(NULL, "x"), NULL);
  BAD(gyreCommSplit(NULL, 0, 0, &sub), NULL);
  if (sub != NULL) failf("a failed gyreCommSplit left *newcomm non-NULL");
  BAD(gyreTest(NULL, &x), NULL);
  BAD(gyreWait(NULL), NULL);
  OK(gyreCommDestroy(NULL), NULL);
  OK(gyreRequestFree(NULL), NULL);

  /* Count 0 needs no buffers (and is still a collective), and nothing above was sent. */
  OK(gyreAllReduce(NULL, NULL, 0, gyreInt32, gyreSum, comm), comm);
  allreduce_case(comm, all, n, gyreInt64, gyreMax, 777, 0, 0);
}

/* ---- Split and abort ------------------------------------------------------------------- */

static void test_split(gyreComm_t world) {
  gyreComm_t half = NULL, three = NULL;
  int members[NRANKS], n = 0, r;
  /* Even and odd ranks, ordered by descending world rank (key = -rank). */
  if (!OK(gyreCommSplit(world, g_rank % 2, -g_rank, &half), world)) return;
  for (r = NRANKS - 1; r >= 0; --r) {
    if (r % 2 == g_rank % 2) members[n++] = r;
  }
  if (comm_size(half) != n) failf("split: size %d, expected %d", comm_size(half), n);
  for (r = 0; r < n; ++r) {
    if (members[r] == g_rank && comm_rank(half) != r) {
      failf("split: rank %d, expected %d (keys order ranks)", comm_rank(half), r);
    }
  }
  test_allreduce(half, members, n);
  OK(gyreBarrier(half), half);
  /* The parent keeps working beside its child. */
  {
    const int all[NRANKS] = {0, 1, 2, 3};
    allreduce_case(world, all, NRANKS, gyreInt32, gyreSum, 1001, 0, 0);
  }
  OK(gyreCommDestroy(half), NULL);

  /* The last rank joins none. */
  if (!OK(gyreCommSplit(world, g_rank == NRANKS - 1 ? GYRE_SPLIT_NOCOLOR : 7, g_rank, &three),
          world)) {
    return;
  }
  if (g_rank == NRANKS - 1) {
    if (three != NULL) failf("split with GYRE_SPLIT_NOCOLOR returned a communicator");
  } else if (three == NULL) {
    failf("split with color 7 returned NULL");
  } else {
    const int first[NRANKS - 1] = {0, 1, 2};
    if (comm_size(three) != NRANKS - 1 || comm_rank(three) != g_rank) {
      failf("split: %d of %d, expected %d of %d", comm_rank(three), comm_size(three), g_rank,
            NRANKS - 1);
    }
    allreduce_case(three, first, NRANKS - 1, gyreInt32, gyreSum, BIG, 1, 0);
    allreduce_case(three, first, NRANKS - 1, gyreUint8, gyreMax, 33, 0, 1);
    OK(gyreCommDestroy(three), NULL);
  }
}

/* Rank 1 aborts a duplicate of the world; everyone else's operation on it fails, and the
 * world is unaffected. */
static void test_abort(gyreComm_t world) {
  gyreComm_t dup = NULL;
  int32_t buf[64];
  gyreRequest_t req = NULL;
  gyreResult_t r;
  int done = 0;
  memset(buf, 0, sizeof(buf));
  if (!OK(gyreCommSplit(world, 0, g_rank, &dup), world)) return;
  if (g_rank == 1) {
    OK(gyreCommAbort(dup), dup);
    OK(gyreCommAbort(dup), dup); /* idempotent */
    expect(gyreAllReduce(buf, buf, 64, gyreInt32, gyreSum, dup), gyreAborted,
           "gyreAllReduce after gyreCommAbort", dup);
    expect_message(dup, "abort");
  } else if (OK(gyreAllReduceAsync(buf, buf, 64, gyreInt32, gyreSum, dup, &req), dup)) {
    r = gyreWait(req);
    if (r == gyreSuccess) failf("an all-reduce completed although rank 1 aborted");
    if (strlen(gyreGetLastError(dup)) == 0) failf("no message for the failed all-reduce");
    if (gyreTest(req, &done) != r || done != 1) failf("gyreTest after a failed wait differs");
    if (gyreWait(req) != r) failf("a second gyreWait on a failed request differs");
    gyreRequestFree(req);
    expect(gyreBarrier(dup), gyreAborted, "gyreBarrier on the aborted communicator", dup);
  }
  OK(gyreCommDestroy(dup), NULL);
  OK(gyreBarrier(world), world);
}

static void* abort_later(void* comm) {
  sleep_ms(200); /* time for rank 0 to block in its call: nothing signals from inside it */
  if (gyreCommAbort((gyreComm_t)comm) != gyreSuccess) failf("gyreCommAbort from a thread failed");
  fork_ranks_say("aborted");
  return NULL;
}

/* Rank 0 blocks in an all-reduce that nobody else joins; another thread of rank 0 aborts
 * the communicator, which ends the call, and the other ranks learn it. */
static void test_abort_from_thread(gyreComm_t world) {
  gyreComm_t dup = NULL;
  int32_t buf[64];
  memset(buf, 0, sizeof(buf));
  if (!OK(gyreCommSplit(world, 0, g_rank, &dup), world)) return;
  if (g_rank == 0) {
    pthread_t watchdog;
    double start = now_s();
    if (pthread_create(&watchdog, NULL, abort_later, dup) != 0) {
      failf("pthread_create failed");
    } else {
      expect(gyreAllReduce(buf, buf, 64, gyreInt32, gyreSum, dup), gyreAborted,
             "gyreAllReduce aborted by another thread", dup);
      pthread_join(watchdog, NULL);
      if (now_s() - start > 10) failf("the aborted all-reduce took %.1f s", now_s() - start);
    }
  } else {
    if (!fork_ranks_wait_for(0, "aborted")) failf("rank 0 never said it aborted");
    if (gyreBarrier(dup) == gyreSuccess) failf("a barrier succeeded on an aborted communicator");
  }
  OK(gyreCommDestroy(dup), NULL);
  OK(gyreBarrier(world), world);
}

/* Rank 3 leaves a duplicate of the world (it revokes its own and calls nothing more on
 * it); ranks 0-2 shrink the duplicate without it and run checked all-reduces on the
 * result. With an id (id mode), rank 3 then comes back as a newcomer: gyreCommGrow
 * makes 4 ranks again. Also the flags and lists gyreCommRevoke and gyreCommShrink refuse. */
static void test_shrink(gyreComm_t world, const gyreUniqueId* id) {
  gyreComm_t dup = NULL, small = NULL;
  int32_t buf[64];
  int failed = 7, bad = 9;
  memset(buf, 0, sizeof(buf));
  if (!OK(gyreCommSplit(world, 0, g_rank, &dup), world)) return;
  if (!OK(gyreCommGetFailedRank(dup, &failed), dup) || failed != -1) {
    failf("gyreCommGetFailedRank: %d before any failure, expected -1", failed);
  }
  expect(gyreCommRevoke(dup, 1), gyreInvalidArgument, "gyreCommRevoke with flags 1", dup);
  expect(gyreCommShrink(dup, &bad, 1, &small, 7), gyreInvalidArgument,
         "gyreCommShrink with flags 7", dup);
  expect(gyreCommShrink(dup, NULL, 1, &small, GYRE_SHRINK_DEFAULT), gyreInvalidArgument,
         "gyreCommShrink with a NULL list", dup);
  if (small != NULL) failf("a refused gyreCommShrink left *newcomm set");
  if (g_rank == NRANKS - 1) {
    OK(gyreCommRevoke(dup, 0), dup);
    expect(gyreAllReduce(buf, buf, 64, gyreInt32, gyreSum, dup), gyreAborted,
           "gyreAllReduce after gyreCommRevoke", dup);
    expect_message(dup, "revoked");
    if (id != NULL) {
      gyreComm_t full = NULL;
      const int all[NRANKS] = {0, 1, 2, 3};
      if (OK(gyreCommGrow(NULL, NRANKS, id, &full), NULL)) {
        if (comm_size(full) != NRANKS || comm_rank(full) != NRANKS - 1) {
          failf("grow: newcomer is %d of %d", comm_rank(full), comm_size(full));
        }
        allreduce_case(full, all, NRANKS, gyreInt64, gyreSum, BIG, 0, 0);
        OK(gyreCommDestroy(full), NULL);
      }
    }
  } else {
    int excluded = NRANKS - 1, self = g_rank;
    const int first[NRANKS - 1] = {0, 1, 2};
    expect(gyreCommShrink(dup, &self, 1, &small, GYRE_SHRINK_DEFAULT), gyreInvalidArgument,
           "gyreCommShrink excluding this rank", dup);
    if (OK(gyreCommShrink(dup, &excluded, 1, &small, GYRE_SHRINK_ABORT), dup)) {
      if (comm_size(small) != NRANKS - 1 || comm_rank(small) != g_rank) {
        failf("shrink: %d of %d, expected %d of %d", comm_rank(small), comm_size(small), g_rank,
              NRANKS - 1);
      }
      allreduce_case(small, first, NRANKS - 1, gyreInt32, gyreSum, BIG, 1, 0);
      allreduce_case(small, first, NRANKS - 1, gyreFloat64, gyreMax, 33, 0, 1);
      if (id != NULL) {
        gyreComm_t full = NULL;
        const int all[NRANKS] = {0, 1, 2, 3};
        expect(gyreCommGrow(small, NRANKS - 1, NULL, &full), gyreInvalidArgument,
               "gyreCommGrow to the same size", small);
        if (OK(gyreCommGrow(small, NRANKS, NULL, &full), small)) {
          if (comm_size(full) != NRANKS || comm_rank(full) != g_rank) {
            failf("grow: %d of %d, expected %d of %d", comm_rank(full), comm_size(full), g_rank,
                  NRANKS);
          }
          allreduce_case(full, all, NRANKS, gyreInt64, gyreSum, BIG, 0, 0);
          OK(gyreCommDestroy(full), NULL);
        }
      }
      OK(gyreCommDestroy(small), NULL);
    }
    /* GYRE_SHRINK_ABORT revoked the parent. */
    expect(gyreAllReduce(buf, buf, 64, gyreInt32, gyreSum, dup), gyreAborted,
           "gyreAllReduce on the parent after gyreCommShrink(GYRE_SHRINK_ABORT)", dup);
  }
  OK(gyreCommDestroy(dup), NULL);
  OK(gyreBarrier(world), world);
}

/* ---- The collectives with schedules of their own, each on a duplicate ------------------- */

static void test_reduce(gyreComm_t comm) {
  const int n = comm_size(comm), me = comm_rank(comm), all[NRANKS] = {0, 1, 2, 3};
  int oi, async;
  for (oi = 0; oi < NOPS; ++oi) {
    for (async = 0; async < 2; ++async) {
      const gyreDataType_t t = oi % 2 ? gyreFloat32 : gyreInt64;
      const int root = (oi + async) % n, inplace = async;
      const size_t count = oi == 0 ? BIG : 1001;
      unsigned char* send = alloc_buf(t, count);
      unsigned char* recv = me != root ? NULL : inplace ? send : alloc_buf(t, count);
      struct ReduceCtx ctx;
      gyreRequest_t req = NULL;
      int ok;
      fill_inputs(t, send, count, g_rank, kOps[oi], 0);
      if (async) {
        ok = OK(gyreReduceAsync(send, recv, count, t, kOps[oi], root, comm, &req), comm) &&
             OK(gyreWait(req), comm);
        gyreRequestFree(req);
      } else {
        ok = OK(gyreReduce(send, recv, count, t, kOps[oi], root, comm), comm);
      }
      ctx.t = t;
      ctx.op = kOps[oi];
      ctx.members = all;
      ctx.n = n;
      ctx.offset = 0;
      if (ok && recv && check_values("reduce", t, recv, count, want_reduce, &ctx)) {
        guard_ok("reduce recvbuff", t, recv, count);
      }
      if (recv && recv != send) free(recv);
      free(send);
      if (!ok) return;
    }
  }
}

struct GatherCtx {
  size_t count;
};
static double want_gather(size_t i, const void* ctx) {
  const struct GatherCtx* c = (const struct GatherCtx*)ctx;
  return input((int)(i / c->count), i % c->count, gyreSum);
}

static void test_allgather(gyreComm_t comm) {
  static const size_t counts[] = {0, 1, 1001, BIG};
  const int n = comm_size(comm), me = comm_rank(comm);
  size_t ci;
  for (ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ++ci) {
    const size_t count = counts[ci];
    const gyreDataType_t t = ci % 2 ? gyreFloat16 : gyreUint32;
    const int inplace = (int)(ci % 2), async = ci >= 2;
    unsigned char* recv = alloc_buf(t, count * n);
    unsigned char* send = inplace ? recv + me * count * elem_size(t) : alloc_buf(t, count);
    struct GatherCtx ctx;
    gyreRequest_t req = NULL;
    int ok;
    fill_inputs(t, send, count, me, gyreSum, 0);
    if (async) {
      ok =
          OK(gyreAllGatherAsync(send, recv, count, t, comm, &req), comm) && OK(gyreWait(req), comm);
      gyreRequestFree(req);
    } else {
      ok = OK(gyreAllGather(send, recv, count, t, comm), comm);
    }
    ctx.count = count ? count : 1;
    if (ok && check_values("allgather", t, recv, count * n, want_gather, &ctx)) {
      guard_ok("allgather recvbuff", t, recv, count * n);
    }
    if (!inplace) free(send);
    free(recv);
    if (!ok) return;
  }
}

static void test_reducescatter(gyreComm_t comm) {
  static const size_t counts[] = {0, 1, 1001, BIG};
  const int n = comm_size(comm), me = comm_rank(comm), all[NRANKS] = {0, 1, 2, 3};
  size_t ci;
  for (ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ++ci) {
    const size_t count = counts[ci];
    const gyreDataType_t t = ci % 2 ? gyreBfloat16 : gyreInt32;
    const gyreRedOp_t op = kOps[ci % NOPS];
    const int inplace = (int)(ci % 2), async = ci >= 2;
    unsigned char* send = alloc_buf(t, count * n);
    unsigned char* recv = inplace ? send + me * count * elem_size(t) : alloc_buf(t, count);
    struct ReduceCtx ctx;
    gyreRequest_t req = NULL;
    int ok;
    fill_inputs(t, send, count * n, g_rank, op, 0);
    if (async) {
      ok = OK(gyreReduceScatterAsync(send, recv, count, t, op, comm, &req), comm) &&
           OK(gyreWait(req), comm);
      gyreRequestFree(req);
    } else {
      ok = OK(gyreReduceScatter(send, recv, count, t, op, comm), comm);
    }
    ctx.t = t;
    ctx.op = op;
    ctx.members = all;
    ctx.n = n;
    ctx.offset = me * count;
    if (ok && check_values("reducescatter", t, recv, count, want_reduce, &ctx) && !inplace) {
      guard_ok("reducescatter recvbuff", t, recv, count);
    }
    if (!inplace) free(recv);
    free(send);
    if (!ok) return;
  }
}

/* Element i of the block that rank `from` sends to rank `to`. */
static double a2a_value(int from, int to, size_t i) {
  return (double)((from * 5 + to * 3 + i) % 101);
}
struct A2aCtx {
  int me;
  size_t count;
};
static double want_a2a(size_t i, const void* ctx) {
  const struct A2aCtx* c = (const struct A2aCtx*)ctx;
  return a2a_value((int)(i / c->count), c->me, i % c->count);
}

static void test_alltoall(gyreComm_t comm) {
  static const size_t counts[] = {0, 1, 1001, BIG / 4};
  const int n = comm_size(comm), me = comm_rank(comm);
  size_t ci, i;
  int p;
  for (ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ++ci) {
    const size_t count = counts[ci];
    const gyreDataType_t t = ci % 2 ? gyreInt8 : gyreFloat64;
    unsigned char* send = alloc_buf(t, count * n);
    unsigned char* recv = alloc_buf(t, count * n);
    struct A2aCtx ctx;
    gyreRequest_t req = NULL;
    int ok;
    for (p = 0; p < n; ++p) {
      for (i = 0; i < count; ++i) put(t, send, p * count + i, a2a_value(me, p, i));
    }
    if (ci % 2) {
      ok = OK(gyreAllToAllAsync(send, recv, count, t, comm, &req), comm) && OK(gyreWait(req), comm);
      gyreRequestFree(req);
    } else {
      ok = OK(gyreAllToAll(send, recv, count, t, comm), comm);
    }
    ctx.me = me;
    ctx.count = count ? count : 1;
    if (ok && check_values("alltoall", t, recv, count * n, want_a2a, &ctx)) {
      guard_ok("alltoall recvbuff", t, recv, count * n);
    }
    free(send);
    free(recv);
    if (!ok) return;
  }
}

/* alltoallv: rank `from` sends a2av_count(from, to, k) elements to rank `to` (0 for some
 * pairs; over a pipe's worth in round 1). The sends are packed (NULL displacements); the
 * receive blocks are placed in reverse rank order, so a block put at its sender's offset
 * shows. Round 0 blocking float64, round 1 async int32. */
static size_t a2av_count(int from, int to, int k) {
  return (size_t)((from + 2 * to + k) % 5) * (k ? 2011 : 1);
}

static void test_alltoallv(gyreComm_t comm) {
  const int n = comm_size(comm), me = comm_rank(comm);
  int k, p;
  size_t i;
  for (k = 0; k < 2; ++k) {
    const gyreDataType_t t = k ? gyreInt32 : gyreFloat64;
    size_t scount[NRANKS], rcount[NRANKS], rdispl[NRANKS], stotal = 0, rtotal = 0, at = 0;
    unsigned char *send, *recv;
    gyreRequest_t req = NULL;
    int ok, bad = 0;
    for (p = 0; p < n; ++p) {
      scount[p] = a2av_count(me, p, k);
      rcount[p] = a2av_count(p, me, k);
      stotal += scount[p];
    }
    for (p = n - 1; p >= 0; --p) {
      rdispl[p] = rtotal;
      rtotal += rcount[p];
    }
    send = alloc_buf(t, stotal);
    recv = alloc_buf(t, rtotal);
    for (p = 0; p < n; ++p) {
      for (i = 0; i < scount[p]; ++i) put(t, send, at + i, a2a_value(me, p, i));
      at += scount[p];
    }
    if (k) {
      ok = OK(gyreAllToAllvAsync(send, scount, NULL, recv, rcount, rdispl, t, comm, &req), comm) &&
           OK(gyreWait(req), comm);
      gyreRequestFree(req);
    } else {
      ok = OK(gyreAllToAllv(send, scount, NULL, recv, rcount, rdispl, t, comm), comm);
    }
    for (p = 0; ok && !bad && p < n; ++p) {
      for (i = 0; i < rcount[p]; ++i) {
        if (get(t, recv, rdispl[p] + i) != a2a_value(p, me, i)) {
          failf("alltoallv round %d: element %lu of the block from rank %d is %g, not %g", k,
                (unsigned long)i, p, get(t, recv, rdispl[p] + i), a2a_value(p, me, i));
          bad = 1;
          break;
        }
      }
    }
    if (ok && !bad) guard_ok("alltoallv recvbuff", t, recv, rtotal);
    free(send);
    free(recv);
    if (!ok) return;
  }
}

static void test_sendrecv(gyreComm_t comm) {
  const int n = comm_size(comm), me = comm_rank(comm);
  const int right = (me + 1) % n, left = (me + n - 1) % n, partner = me ^ 1;
  struct InputCtx in;
  unsigned char* out = alloc_buf(gyreInt32, BIG);
  unsigned char* got = alloc_buf(gyreInt32, BIG);
  gyreRequest_t req = NULL;
  int round;
  in.op = gyreSum;
  in.offset = 0;
  fill_inputs(gyreInt32, out, BIG, me, gyreSum, 0);
  /* A ring shift larger than a pipe. */
  if (!OK(gyreSendRecv(out, BIG, right, got, BIG, left, gyreInt32, comm), comm)) goto done;
  in.rank = left;
  if (check_values("sendrecv from the left", gyreInt32, got, BIG, want_input, &in)) {
    guard_ok("sendrecv recvbuff", gyreInt32, got, BIG);
  }
  /* Pairs (even, odd): one way, then the other, blocking and async, larger than a pipe. */
  for (round = 0; round < 2; ++round) {
    if (me % 2 == round) {
      if (round == 0) {
        if (!OK(gyreSend(out, BIG, gyreInt32, partner, comm), comm)) goto done;
      } else if (!OK(gyreSendAsync(out, BIG, gyreInt32, partner, comm, &req), comm) ||
                 !OK(gyreWait(req), comm)) {
        goto done;
      }
    } else {
      memset(got, 0, BIG * sizeof(int32_t));
      if (round == 0) {
        if (!OK(gyreRecvAsync(got, BIG, gyreInt32, partner, comm, &req), comm) ||
            !OK(gyreWait(req), comm)) {
          goto done;
        }
      } else if (!OK(gyreRecv(got, BIG, gyreInt32, partner, comm), comm)) {
        goto done;
      }
      in.rank = partner;
      if (check_values("recv from the partner", gyreInt32, got, BIG, want_input, &in)) {
        guard_ok("recv buffer", gyreInt32, got, BIG);
      }
    }
    gyreRequestFree(req);
    req = NULL;
  }
  /* An exchange with the partner, and an empty message. */
  if (!OK(gyreSendRecv(out, 1001, partner, got, 1001, partner, gyreInt32, comm), comm)) {
    goto done;
  }
  in.rank = partner;
  check_values("sendrecv with the partner", gyreInt32, got, 1001, want_input, &in);
  if (me % 2 == 0) {
    OK(gyreSend(NULL, 0, gyreInt32, partner, comm), comm);
  } else {
    OK(gyreRecv(NULL, 0, gyreInt32, partner, comm), comm);
  }
done:
  gyreRequestFree(req);
  free(out);
  free(got);
}

/* Runs body on a duplicate of world (same ranks), so that a failure there, which aborts
 * the duplicate, leaves world and the later sections alone. */
static void isolated(gyreComm_t world, const char* name, void (*body)(gyreComm_t)) {
  gyreComm_t dup = NULL;
  int before = g_failures;
  g_section = name;
  if (OK(gyreCommSplit(world, 0, g_rank, &dup), world)) {
    body(dup);
    OK(gyreCommDestroy(dup), NULL);
  }
  if (g_rank == 0) {
    printf("[c_api_test %s] %s: %s\n", g_mode, name, g_failures == before ? "ok" : "FAILED");
    fflush(stdout);
  }
}

/* ---- One case on one rank --------------------------------------------------------------- */

static void section(const char* name) {
  static int before = 0;
  if (g_rank == 0 && strcmp(g_section, "setup") != 0) {
    printf("[c_api_test %s] %s: %s\n", g_mode, g_section, g_failures == before ? "ok" : "FAILED");
    fflush(stdout);
  }
  before = g_failures;
  g_section = name;
}

static void init_errors(void) {
  gyreUniqueId zero;
  gyreComm_t c = (gyreComm_t)&zero;
  memset(&zero, 0, sizeof(zero));
  BAD(gyreCommInitRank(NULL, NRANKS, zero, 0), NULL);
  BAD(gyreCommInitRank(&c, 0, zero, 0), NULL);
  if (c != NULL) failf("a failed gyreCommInitRank left *comm non-NULL");
  BAD(gyreCommInitRank(&c, NRANKS, zero, NRANKS), NULL);
  expect_message(NULL, "rank");
  BAD(gyreCommInitRank(&c, NRANKS, zero, -1), NULL);
  BAD(gyreCommInitRank(&c, NRANKS, zero, 0), NULL); /* an id nobody filled */
  expect_message(NULL, "gyreUniqueId");
  BAD(gyreCommInitFromEnv(NULL), NULL);
}

/* id mode: rank 0 makes an id and publishes it under the next name (one per id); the others
 * read it. An empty value says rank 0 could not make one. */
static int share_id(gyreUniqueId* id) {
  static int shared = 0;
  char name[32];
  snprintf(name, sizeof(name), "id%d", shared++);
  if (g_rank == 0) {
    int ok = OK(gyreGetUniqueId(id), NULL);
    fork_ranks_publish(name, id, ok ? sizeof(*id) : 0);
    return ok;
  }
  if (fork_ranks_read(name, id, sizeof(*id)) != sizeof(*id)) {
    failf("no id from rank 0 (%s)", name);
    return 0;
  }
  return 1;
}

/* Creating again after destroying (what the header advises after a failure), in the same
 * mode: each cycle must agree on its store keys through the store, not through a count
 * kept in the process (which a new store at a freed address inherited). */
static void test_cycles(int mode_env) {
  const int all[NRANKS] = {0, 1, 2, 3};
  int cycle;
  for (cycle = 0; cycle < 3; ++cycle) {
    gyreComm_t c = NULL;
    gyreUniqueId id;
    if (mode_env) {
      if (!OK(gyreCommInitFromEnv(&c), NULL)) return;
    } else {
      if (!share_id(&id)) return;
      if (!OK(gyreCommInitRank(&c, NRANKS, id, g_rank), NULL)) return;
    }
    allreduce_case(c, all, NRANKS, gyreInt64, gyreSum, 5 + cycle, 0, 0);
    OK(gyreBarrier(c), c);
    OK(gyreCommDestroy(c), NULL);
  }
}

static void case_allreduce(gyreComm_t world, const gyreUniqueId* id) {
  const int all[NRANKS] = {0, 1, 2, 3};
  (void)id;
  test_allreduce(world, all, NRANKS);
}
static void case_async(gyreComm_t world, const gyreUniqueId* id) {
  const int all[NRANKS] = {0, 1, 2, 3};
  (void)id;
  test_async(world, all, NRANKS);
}
static void case_shrink(gyreComm_t world, const gyreUniqueId* id) { test_shrink(world, id); }
#define WORLD_ONLY(f)                                            \
  static void case_##f(gyreComm_t world, const gyreUniqueId* id) { \
    (void)id;                                                    \
    test_##f(world);                                             \
  }
WORLD_ONLY(broadcast)
WORLD_ONLY(barrier)
WORLD_ONLY(bad_arguments)
WORLD_ONLY(split)
WORLD_ONLY(abort)
WORLD_ONLY(abort_from_thread)

struct CApiCase {
  const char* name;    /* the test's */
  const char* section; /* what the output and the failures say */
  void (*run)(gyreComm_t world, const gyreUniqueId* id);
  void (*isolated)(gyreComm_t dup); /* on a duplicate of the world */
  int cycles;                       /* create/destroy cycles once the world is gone */
};

static const struct CApiCase kCases[] = {
    {"init", NULL, NULL, NULL, 0},
    {"allreduce", "allreduce", case_allreduce, NULL, 0},
    {"async", "async allreduce, gyreTest, gyreWait", case_async, NULL, 0},
    {"broadcast", "broadcast", case_broadcast, NULL, 0},
    {"barrier", "barrier", case_barrier, NULL, 0},
    {"bad_arguments", "bad arguments", case_bad_arguments, NULL, 0},
    {"split", "split", case_split, NULL, 0},
    {"abort", "abort", case_abort, NULL, 0},
    {"shrink", "shrink", case_shrink, NULL, 0},
    {"abort_from_thread", "abort from a thread", case_abort_from_thread, NULL, 0},
    {"reduce", "reduce", NULL, test_reduce, 0},
    {"allgather", "allgather", NULL, test_allgather, 0},
    {"reducescatter", "reducescatter", NULL, test_reducescatter, 0},
    {"alltoall", "alltoall", NULL, test_alltoall, 0},
    {"alltoallv", "alltoallv", NULL, test_alltoallv, 0},
    {"sendrecv", "send/recv", NULL, test_sendrecv, 0},
    {"cycles", "create/destroy cycles", NULL, NULL, 1},
};

int c_api_case_count(void) { return (int)(sizeof(kCases) / sizeof(kCases[0])); }
const char* c_api_case_name(int which) { return kCases[which].name; }

int c_api_rank(int mode_env, int which, int rank) {
  const struct CApiCase* c = &kCases[which];
  gyreComm_t world = NULL;
  gyreUniqueId id;
  g_mode = mode_env ? "env" : "id";
  g_rank = rank;
  snprintf(g_rank_text, sizeof(g_rank_text), "rank %d", rank);
  alarm(DEADLINE_S);
  if (c->run == NULL && c->isolated == NULL && !c->cycles) {
    section("init errors");
    init_errors();
  }
  section(mode_env ? "init from the environment" : "init from a unique id");
  if (mode_env) {
    if (!OK(gyreCommInitFromEnv(&world), NULL)) return 1;
  } else if (!share_id(&id) || !OK(gyreCommInitRank(&world, NRANKS, id, g_rank), NULL)) {
    return 1;
  }
  if (comm_size(world) != NRANKS || comm_rank(world) != g_rank) {
    failf("the communicator is rank %d of %d", comm_rank(world), comm_size(world));
    return 1;
  }
  if (c->run) {
    section(c->section);
    c->run(world, mode_env ? NULL : &id);
    section("destroy");
  } else if (c->isolated) {
    section("(isolated)");
    isolated(world, c->section, c->isolated); /* says how it went */
    g_section = "destroy";
  } else {
    section("destroy");
  }
  OK(gyreBarrier(world), world);
  OK(gyreCommDestroy(world), NULL);
  if (c->cycles) {
    section(c->section);
    test_cycles(mode_env);
  }
  section("done");
  return g_failures ? 1 : 0;
}

int c_api_parent_checks(void) {
  int a, b;
  gyreComm_t c = (gyreComm_t)&a;
  g_section = "result codes";
  for (a = 0; a < gyreNumResults; ++a) {
    const char* s = gyreGetErrorString((gyreResult_t)a);
    if (!s || !*s) failf("gyreGetErrorString(%d) is empty", a);
    for (b = 0; b < a; ++b) {
      if (s && strcmp(s, gyreGetErrorString((gyreResult_t)b)) == 0) {
        failf("result codes %d and %d share the string '%s'", a, b, s);
      }
    }
  }
  if (strstr(gyreGetErrorString((gyreResult_t)99), "unknown") == NULL) {
    failf("gyreGetErrorString(99) does not say unknown");
  }
  if (gyreSuccess != 0 || gyreInvalidArgument != 1 || gyreInternalError != 7 ||
      gyreInProgress != 8 || gyreFloat32 != 8 || gyreBfloat16 != 7 || gyreAvg != 4) {
    failf("the enum values differ from gyre's");
  }
  g_section = "init errors";
  BAD(gyreGetUniqueId(NULL), NULL);
  expect_message(NULL, "gyreGetUniqueId");
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
  BAD(gyreCommInitFromEnv(&c), NULL);
  if (c != NULL) failf("a failed gyreCommInitFromEnv left *comm non-NULL");
  expect_message(NULL, "RANK");
  return g_failures;
}


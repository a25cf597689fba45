/* capi/gyre_cuda.h from C99 on the fake CUDA runtime (cuda/fake/): every gyreCuda*
 * collective checked exactly on device buffers, the argument errors (each naming the
 * call, the rank and what is wrong), a failed gyreCudaCommCreate leaving the host
 * communicator usable, and use after abort. One rank's checks; c_api_cuda_ranks.cc forks
 * them, on both paths (GYRE_CUDA_IPC).
 *
 * Every input is uploaded with cudaMemcpyAsync on a non-blocking stream behind a host
 * function that sleeps: a collective that does not run in that stream's order (one that
 * ignored its stream argument) reads the buffers before the inputs land and fails the
 * value checks. */
#define _POSIX_C_SOURCE 200809L

#include "c_api_cuda_cases.h"

/* The toolkit's headers (where the fake runtime is built against them) use unnamed
 * unions, which -Wpedantic flags in C99. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capi/gyre.h"
#include "capi/gyre_cuda.h"

static int g_rank = -1;
static int g_n = 0;
static int g_failures = 0;
static const char* g_section = "setup";
static gyreCudaComm_t g_comm = NULL;
static cudaStream_t g_stream = NULL;

/* Large enough for two rounds of the default 4 MiB IPC slot in float32. */
#define BIG ((size_t)1048576 + 77)
#define MID ((size_t)1001)

static void failf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d [%s]: ", g_rank, g_section);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  ++g_failures;
}

static void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) failf("%s: %s", what, cudaGetErrorString(err));
}

static int ok(gyreResult_t r, const char* call) {
  if (r == gyreSuccess) return 1;
  failf("%s returned %d: %s", call, (int)r, gyreGetLastError(NULL));
  return 0;
}

/* ---- Values of every data type, through double ---------------------------------- */

static const gyreDataType_t kTypes[] = {gyreInt8,    gyreUint8,    gyreInt32,   gyreUint32,
                                        gyreInt64,   gyreUint64,   gyreFloat16, gyreBfloat16,
                                        gyreFloat32, gyreFloat64};
static const gyreRedOp_t kOps[] = {gyreSum, gyreProd, gyreMin, gyreMax, gyreAvg};

static size_t esize(gyreDataType_t t) {
  switch (t) {
    case gyreInt8: case gyreUint8: return 1;
    case gyreFloat16: case gyreBfloat16: return 2;
    case gyreInt32: case gyreUint32: case gyreFloat32: return 4;
    default: return 8;
  }
}

static int is_float(gyreDataType_t t) {
  return t == gyreFloat16 || t == gyreBfloat16 || t == gyreFloat32 || t == gyreFloat64;
}

static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* The values used are small and exact in half precision (no rounding needed). */
static uint16_t to_half(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) == 0) return (uint16_t)(u >> 16);
  return (uint16_t)(((u >> 16) & 0x8000u) | ((((u >> 23) & 0xffu) - 127u + 15u) << 10) |
                    ((u >> 13) & 0x3ffu));
}
static float from_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0 && m == 0) return bits_float(sign);
  return bits_float(sign | ((e - 15u + 127u) << 23) | (m << 13));
}

static void put(gyreDataType_t t, void* buf, size_t i, double v) {
  char* p = (char*)buf + i * esize(t);
  switch (t) {
    case gyreInt8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case gyreUint8: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case gyreInt32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case gyreUint32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    case gyreInt64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case gyreUint64: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; }
    case gyreFloat16: { uint16_t x = to_half((float)v); memcpy(p, &x, 2); break; }
    case gyreBfloat16: { uint16_t x = (uint16_t)(float_bits((float)v) >> 16); memcpy(p, &x, 2); break; }
    case gyreFloat32: { float x = (float)v; memcpy(p, &x, 4); break; }
    default: { double x = v; memcpy(p, &x, 8); break; }
  }
}

static double get(gyreDataType_t t, const void* buf, size_t i) {
  const char* p = (const char*)buf + i * esize(t);
  switch (t) {
    case gyreInt8: { int8_t x; memcpy(&x, p, 1); return x; }
    case gyreUint8: { uint8_t x; memcpy(&x, p, 1); return x; }
    case gyreInt32: { int32_t x; memcpy(&x, p, 4); return x; }
    case gyreUint32: { uint32_t x; memcpy(&x, p, 4); return x; }
    case gyreInt64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    case gyreUint64: { uint64_t x; memcpy(&x, p, 8); return (double)x; }
    case gyreFloat16: { uint16_t x; memcpy(&x, p, 2); return from_half(x); }
    case gyreBfloat16: { uint16_t x; memcpy(&x, p, 2); return bits_float((uint32_t)x << 16); }
    case gyreFloat32: { float x; memcpy(&x, p, 4); return x; }
    default: { double x; memcpy(&x, p, 8); return x; }
  }
}

/* Rank r's input for a reduction: small integers whose sums, products and averages over
 * 2 or 4 ranks are exact in every type. */
static double red_in(int r, size_t i, gyreRedOp_t op) {
  return op == gyreProd ? (double)(1 + (r + i) % 2) : (double)(1 + (3 * (size_t)r + i) % 4);
}
static double red_want(gyreDataType_t t, gyreRedOp_t op, size_t i) {
  double acc = red_in(0, i, op);
  int r;
  for (r = 1; r < g_n; ++r) {
    double v = red_in(r, i, op);
    switch (op) {
      case gyreProd: acc *= v; break;
      case gyreMin: acc = v < acc ? v : acc; break;
      case gyreMax: acc = v > acc ? v : acc; break;
      default: acc += v; break;
    }
  }
  if (op == gyreAvg) acc = is_float(t) ? acc / g_n : (double)((long long)acc / g_n);
  return acc;
}
/* A plain value (no reduction), exact in int32 and float32. */
static double plain(int r, size_t i) { return (double)(r * 1000 + (long)(i % 997)); }

/* ---- Device buffers on the stream ------------------------------------------------ */

static void* dev_alloc(size_t bytes) {
  void* p = NULL;
  cuda_ok(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  return p;
}
static void dev_free(void* p) {
  if (p) cuda_ok(cudaFree(p), "cudaFree");
}
static void sleep_briefly(void* arg) {
  struct timespec ts = {0, 3 * 1000 * 1000};
  (void)arg;
  nanosleep(&ts, NULL);
}
/* Behind a sleep on the stream: only a collective in the stream's order sees it. */
static void upload(void* dev, const void* host, size_t bytes) {
  cuda_ok(cudaLaunchHostFunc(g_stream, sleep_briefly, NULL), "cudaLaunchHostFunc");
  cuda_ok(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, g_stream), "cudaMemcpyAsync");
}
static void sentinel(void* dev, size_t bytes) {
  cuda_ok(cudaMemsetAsync(dev, 0x5a, bytes, g_stream), "cudaMemsetAsync");
}
static void finish(const char* what) {
  ok(gyreCudaCommSynchronize(g_comm), what);
  cuda_ok(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
}
static void* download(const void* dev, size_t bytes) {
  void* host = malloc(bytes ? bytes : 1);
  cuda_ok(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return host;
}
static void* host_values(gyreDataType_t t, size_t count, double (*f)(size_t, const void*),
                         const void* ctx) {
  void* h = malloc(count * esize(t) + 1);
  size_t i;
  for (i = 0; i < count; ++i) put(t, h, i, f(i, ctx));
  return h;
}
/* Checks count values of buf against f; reports the first wrong one. */
static int check(const char* what, gyreDataType_t t, const void* buf, size_t count,
                 double (*f)(size_t, const void*), const void* ctx) {
  size_t i;
  for (i = 0; i < count; ++i) {
    double want = f(i, ctx), got = get(t, buf, i);
    if (got != want) {
      failf("%s: element %zu of %zu is %g, expected %g", what, i, count, got, want);
      return 0;
    }
  }
  return 1;
}

/* ---- The collectives ------------------------------------------------------------- */

struct red_ctx { gyreDataType_t t; gyreRedOp_t op; int rank; size_t offset; };
static double red_in_f(size_t i, const void* c) {
  const struct red_ctx* x = (const struct red_ctx*)c;
  return red_in(x->rank, x->offset + i, x->op);
}
static double red_want_f(size_t i, const void* c) {
  const struct red_ctx* x = (const struct red_ctx*)c;
  return red_want(x->t, x->op, x->offset + i);
}

static void allreduce_case(gyreDataType_t t, gyreRedOp_t op, size_t count, int inplace) {
  char what[128];
  struct red_ctx c;
  size_t bytes = count * esize(t);
  void *in, *send, *recv, *out;
  c.t = t, c.op = op, c.rank = g_rank, c.offset = 0;
  snprintf(what, sizeof what, "allreduce type %d op %d count %zu%s", (int)t, (int)op, count,
           inplace ? " in place" : "");
  in = host_values(t, count, red_in_f, &c);
  send = dev_alloc(bytes);
  recv = inplace ? send : dev_alloc(bytes);
  upload(send, in, bytes);
  if (!inplace) sentinel(recv, bytes);
  if (ok(gyreCudaAllReduce(send, recv, count, t, op, g_comm, g_stream), what)) {
    finish(what);
    out = download(recv, bytes);
    check(what, t, out, count, red_want_f, &c);
    free(out);
  }
  free(in);
  if (!inplace) dev_free(recv);
  dev_free(send);
}

static void test_allreduce(void) {
  size_t a, b;
  for (a = 0; a < sizeof kTypes / sizeof kTypes[0]; ++a) {
    for (b = 0; b < sizeof kOps / sizeof kOps[0]; ++b) allreduce_case(kTypes[a], kOps[b], MID, 0);
  }
  allreduce_case(gyreFloat32, gyreSum, BIG, 0);
  allreduce_case(gyreInt32, gyreMax, MID, 1);
  allreduce_case(gyreFloat32, gyreSum, 1, 0);
  ok(gyreCudaAllReduce(NULL, NULL, 0, gyreFloat32, gyreSum, g_comm, g_stream), "allreduce count 0");
  finish("allreduce count 0");
}

struct plain_ctx { int rank; size_t count; int to; };
static double plain_f(size_t i, const void* c) {
  const struct plain_ctx* x = (const struct plain_ctx*)c;
  return plain(x->rank, i) + 100000.0 * x->to;
}

static void broadcast_case(gyreDataType_t t, size_t count, int root, int inplace) {
  char what[128];
  struct plain_ctx c;
  size_t bytes = count * esize(t);
  void *in, *send = NULL, *recv, *out;
  c.rank = root, c.to = 0;
  snprintf(what, sizeof what, "broadcast type %d count %zu root %d%s", (int)t, count, root,
           inplace ? " in place" : "");
  in = host_values(t, count, plain_f, &c);
  recv = dev_alloc(bytes);
  sentinel(recv, bytes);
  if (g_rank == root) {
    send = inplace ? recv : dev_alloc(bytes);
    upload(send, in, bytes);
  }
  if (ok(gyreCudaBroadcast(send, recv, count, t, root, g_comm, g_stream), what)) {
    finish(what);
    out = download(recv, bytes);
    check(what, t, out, count, plain_f, &c);
    free(out);
    if (g_rank == root && !inplace) {
      out = download(send, bytes);
      check("broadcast root's sendbuff afterwards", t, out, count, plain_f, &c);
      free(out);
    }
  }
  free(in);
  if (send && send != recv) dev_free(send);
  dev_free(recv);
}

static void test_broadcast(void) {
  int root;
  for (root = 0; root < g_n; ++root) {
    broadcast_case(gyreInt32, MID, root, 0);
    broadcast_case(gyreFloat64, MID, root, 1);
  }
  broadcast_case(gyreFloat32, BIG, g_n - 1, 0);
}

/* Non-root ranks pass NULL or a buffer that must stay untouched. */
static void reduce_case(gyreDataType_t t, gyreRedOp_t op, size_t count, int root) {
  char what[128];
  struct red_ctx c;
  size_t bytes = count * esize(t), i;
  void *in, *send, *recv = NULL, *out;
  int keep = g_rank != root && (g_rank + root) % 2 == 0;
  c.t = t, c.op = op, c.rank = g_rank, c.offset = 0;
  snprintf(what, sizeof what, "reduce type %d op %d count %zu root %d", (int)t, (int)op, count,
           root);
  in = host_values(t, count, red_in_f, &c);
  send = dev_alloc(bytes);
  upload(send, in, bytes);
  if (g_rank == root || keep) {
    recv = dev_alloc(bytes);
    sentinel(recv, bytes);
  }
  if (ok(gyreCudaReduce(send, recv, count, t, op, root, g_comm, g_stream), what)) {
    finish(what);
    if (g_rank == root) {
      out = download(recv, bytes);
      check(what, t, out, count, red_want_f, &c);
      free(out);
    } else if (recv) {
      unsigned char* u = (unsigned char*)download(recv, bytes);
      for (i = 0; i < bytes; ++i) {
        if (u[i] != 0x5a) {
          failf("%s: a non-root rank's recvbuff was written (byte %zu)", what, i);
          break;
        }
      }
      free(u);
    }
    out = download(send, bytes);
    check("reduce's sendbuff afterwards", t, out, count, red_in_f, &c);
    free(out);
  }
  free(in);
  dev_free(recv);
  dev_free(send);
}

static void test_reduce(void) {
  int root;
  for (root = 0; root < g_n; ++root) {
    reduce_case(gyreInt32, gyreSum, MID, root);
    reduce_case(gyreFloat16, gyreMax, MID, root);
  }
  reduce_case(gyreFloat32, gyreAvg, BIG, 0);  /* grows the scratch buffer */
  reduce_case(gyreInt64, gyreProd, MID, g_n - 1);
}

static double gather_f(size_t i, const void* c) {
  size_t count = *(const size_t*)c;
  return plain((int)(i / count), i % count);
}

static void allgather_case(size_t count, int inplace) {
  char what[96];
  struct plain_ctx c;
  size_t bytes = count * 4;
  void *in, *send, *recv, *out;
  c.rank = g_rank, c.to = 0;
  snprintf(what, sizeof what, "allgather count %zu%s", count, inplace ? " in place" : "");
  in = host_values(gyreFloat32, count, plain_f, &c);
  recv = dev_alloc(bytes * g_n);
  sentinel(recv, bytes * g_n);
  send = inplace ? (char*)recv + bytes * g_rank : dev_alloc(bytes);
  upload(send, in, bytes);
  if (ok(gyreCudaAllGather(send, recv, count, gyreFloat32, g_comm, g_stream), what)) {
    finish(what);
    out = download(recv, bytes * g_n);
    check(what, gyreFloat32, out, count * g_n, gather_f, &count);
    free(out);
  }
  free(in);
  if (!inplace) dev_free(send);
  dev_free(recv);
}

static void test_allgather(void) {
  allgather_case(MID, 0);
  allgather_case(MID, 1);
  allgather_case(BIG / 2, 0);
}

static void reducescatter_case(gyreDataType_t t, gyreRedOp_t op, size_t count) {
  char what[96];
  struct red_ctx c;
  size_t bytes = count * esize(t);
  void *in, *send, *recv, *out;
  c.t = t, c.op = op, c.rank = g_rank, c.offset = 0;
  snprintf(what, sizeof what, "reducescatter type %d op %d count %zu", (int)t, (int)op, count);
  in = host_values(t, count * g_n, red_in_f, &c);
  send = dev_alloc(bytes * g_n);
  recv = dev_alloc(bytes);
  upload(send, in, bytes * g_n);
  sentinel(recv, bytes);
  if (ok(gyreCudaReduceScatter(send, recv, count, t, op, g_comm, g_stream), what)) {
    finish(what);
    out = download(recv, bytes);
    c.offset = count * g_rank;
    check(what, t, out, count, red_want_f, &c);
    free(out);
  }
  free(in);
  dev_free(recv);
  dev_free(send);
}

static void test_reducescatter(void) {
  reducescatter_case(gyreInt32, gyreSum, MID);
  reducescatter_case(gyreBfloat16, gyreMin, MID);
  reducescatter_case(gyreFloat32, gyreSum, BIG / 2);
}

/* All-to-all: element i of the block `from` sends to `to`. */
static double a2a(int from, int to, size_t i) {
  return (double)(from * 100000 + to * 1000 + (long)(i % 997));
}
struct a2a_ctx { size_t count; int send; };
static double a2a_f(size_t i, const void* c) {
  const struct a2a_ctx* x = (const struct a2a_ctx*)c;
  int block = (int)(i / x->count);
  return x->send ? a2a(g_rank, block, i % x->count) : a2a(block, g_rank, i % x->count);
}

static void test_alltoall(void) {
  size_t counts[2] = {MID, BIG / 4}, k;
  for (k = 0; k < 2; ++k) {
    char what[64];
    struct a2a_ctx c;
    size_t total = counts[k] * g_n, bytes = total * 4;
    void *in, *send, *recv, *out;
    c.count = counts[k], c.send = 1;
    snprintf(what, sizeof what, "alltoall count %zu", counts[k]);
    in = host_values(gyreInt32, total, a2a_f, &c);
    send = dev_alloc(bytes);
    recv = dev_alloc(bytes);
    upload(send, in, bytes);
    sentinel(recv, bytes);
    if (ok(gyreCudaAllToAll(send, recv, counts[k], gyreInt32, g_comm, g_stream), what)) {
      finish(what);
      out = download(recv, bytes);
      c.send = 0;
      check(what, gyreInt32, out, total, a2a_f, &c);
      free(out);
    }
    free(in);
    dev_free(recv);
    dev_free(send);
  }
}

static size_t a2av_count(int from, int to) { return (size_t)(1 + from + 3 * to) * 37; }

static void test_alltoallv(void) {
  size_t sc[8], rc[8], sd[8], rd[8], stotal = 0, rtotal = 0, i;
  int p, with_displs;
  for (with_displs = 0; with_displs < 2; ++with_displs) {
    const char* what = with_displs ? "alltoallv (displacements in reverse rank order)"
                                   : "alltoallv (packed)";
    float *in, *want, *out;
    void *send, *recv;
    stotal = rtotal = 0;
    for (p = 0; p < g_n; ++p) {
      sc[p] = a2av_count(g_rank, p);
      rc[p] = a2av_count(p, g_rank);
      stotal += sc[p];
      rtotal += rc[p];
    }
    /* Packed, or the blocks placed last rank first with a gap of 5 after each. */
    {
      size_t s = 0, r = 0;
      for (p = 0; p < g_n; ++p) sd[p] = s, rd[p] = r, s += sc[p], r += rc[p];
      if (with_displs) {
        s = r = 0;
        for (p = g_n - 1; p >= 0; --p) sd[p] = s, rd[p] = r, s += sc[p] + 5, r += rc[p] + 5;
        stotal = s, rtotal = r;
      }
    }
    in = (float*)calloc(stotal, 4);
    want = (float*)malloc(rtotal * 4);
    for (i = 0; i < rtotal; ++i) want[i] = 0; /* the gaps keep the memset's zeros */
    for (p = 0; p < g_n; ++p) {
      for (i = 0; i < sc[p]; ++i) in[sd[p] + i] = (float)a2a(g_rank, p, i);
    }
    send = dev_alloc(stotal * 4);
    recv = dev_alloc(rtotal * 4);
    upload(send, in, stotal * 4);
    cuda_ok(cudaMemsetAsync(recv, 0, rtotal * 4, g_stream), "cudaMemsetAsync");
    for (p = 0; p < g_n; ++p) {
      for (i = 0; i < rc[p]; ++i) want[rd[p] + i] = (float)a2a(p, g_rank, i);
    }
    if (ok(gyreCudaAllToAllv(send, sc, with_displs ? sd : NULL, recv, rc,
                             with_displs ? rd : NULL, gyreFloat32, g_comm, g_stream),
           what)) {
      finish(what);
      out = (float*)download(recv, rtotal * 4);
      for (i = 0; i < rtotal; ++i) {
        if (out[i] != want[i]) {
          failf("%s: element %zu of %zu is %g, expected %g", what, i, rtotal, out[i], want[i]);
          break;
        }
      }
      free(out);
    }
    free(in);
    free(want);
    dev_free(recv);
    dev_free(send);
  }
}

/* Pairs (0,1), (2,3): the even rank sends first; then a ring shift with gyreCudaSendRecv. */
static void test_point_to_point(void) {
  size_t counts[2] = {MID, BIG}, k;
  int peer = g_rank ^ 1;
  struct plain_ctx mine, theirs;
  for (k = 0; k < 2; ++k) {
    char what[96];
    size_t count = counts[k], bytes = count * 4;
    void *in, *send, *recv, *out;
    mine.rank = g_rank, mine.to = peer;
    theirs.rank = peer, theirs.to = g_rank;
    snprintf(what, sizeof what, "send/recv count %zu with rank %d", count, peer);
    in = host_values(gyreFloat32, count, plain_f, &mine);
    send = dev_alloc(bytes);
    recv = dev_alloc(bytes);
    upload(send, in, bytes);
    sentinel(recv, bytes);
    if (g_rank % 2 == 0) {
      ok(gyreCudaSend(send, count, gyreFloat32, peer, g_comm, g_stream), what);
      ok(gyreCudaRecv(recv, count, gyreFloat32, peer, g_comm, g_stream), what);
    } else {
      ok(gyreCudaRecv(recv, count, gyreFloat32, peer, g_comm, g_stream), what);
      ok(gyreCudaSend(send, count, gyreFloat32, peer, g_comm, g_stream), what);
    }
    finish(what);
    out = download(recv, bytes);
    check(what, gyreFloat32, out, count, plain_f, &theirs);
    free(out);

    /* The ring shift: to rank + 1, from rank - 1. */
    mine.to = (g_rank + 1) % g_n;
    theirs.rank = (g_rank + g_n - 1) % g_n, theirs.to = g_rank;
    snprintf(what, sizeof what, "sendrecv count %zu", count);
    free(in);
    in = host_values(gyreFloat32, count, plain_f, &mine);
    upload(send, in, bytes);
    sentinel(recv, bytes);
    if (ok(gyreCudaSendRecv(send, count, mine.to, recv, count, theirs.rank, gyreFloat32, g_comm,
                            g_stream),
           what)) {
      finish(what);
      out = download(recv, bytes);
      check(what, gyreFloat32, out, count, plain_f, &theirs);
      free(out);
    }
    free(in);
    dev_free(recv);
    dev_free(send);
  }
}

static void test_barrier(void) {
  ok(gyreCudaBarrier(g_comm, g_stream), "barrier");
  finish("barrier");
}

/* ---- Errors ----------------------------------------------------------------------- */

/* The call was refused as an argument error, and its message names the call, this rank
 * and `needle`. */
static void refused(gyreResult_t r, const char* call, const char* needle) {
  const char* msg = gyreGetLastError(NULL);
  char rank_text[32];
  snprintf(rank_text, sizeof rank_text, "rank %d", g_rank);
  if (r != gyreInvalidArgument) {
    failf("%s: returned %d, expected gyreInvalidArgument (%s)", call, (int)r, msg);
    return;
  }
  if (strncmp(msg, call, strlen(call)) != 0 || strstr(msg, needle) == NULL ||
      (strstr(needle, "is NULL") == NULL && strstr(msg, rank_text) == NULL)) {
    failf("%s: the message '%s' does not name the call, %s and '%s'", call, msg, rank_text,
          needle);
  }
}

static void test_bad_arguments(void) {
  const size_t n = 16;
  void* a = dev_alloc(n * 4 * 8);
  void* b = dev_alloc(n * 4 * 8);
  void* host = malloc(n * 4 * 8);
  size_t counts[8];
  int p;
  for (p = 0; p < 8; ++p) counts[p] = 1;
  refused(gyreCudaAllReduce(NULL, b, n, gyreFloat32, gyreSum, g_comm, g_stream),
          "gyreCudaAllReduce", "null sendbuf");
  refused(gyreCudaAllReduce(a, b, n, (gyreDataType_t)42, gyreSum, g_comm, g_stream),
          "gyreCudaAllReduce", "unknown datatype 42");
  refused(gyreCudaAllReduce(a, b, n, gyreFloat32, (gyreRedOp_t)17, g_comm, g_stream),
          "gyreCudaAllReduce", "unknown reduction op 17");
  refused(gyreCudaAllReduce(a, b, n, gyreFloat32, gyreSum, NULL, g_stream), "gyreCudaAllReduce",
          "comm is NULL");
  refused(gyreCudaBroadcast(a, b, n, gyreFloat32, g_n, g_comm, g_stream), "gyreCudaBroadcast",
          "root");
  refused(gyreCudaBroadcast(a, b, n, gyreFloat32, -1, g_comm, g_stream), "gyreCudaBroadcast",
          "root -1");
  refused(gyreCudaBroadcast(NULL, b, n, gyreFloat32, g_rank, g_comm, g_stream),
          "gyreCudaBroadcast", "null sendbuff");
  refused(gyreCudaReduce(a, b, n, gyreFloat32, gyreSum, g_n, g_comm, g_stream), "gyreCudaReduce",
          "root");
  refused(gyreCudaReduce(NULL, b, n, gyreFloat32, gyreSum, 0, g_comm, g_stream), "gyreCudaReduce",
          "null sendbuff");
  refused(gyreCudaAllGather(host, b, n, gyreFloat32, g_comm, g_stream), "gyreCudaAllGather",
          "not memory CUDA knows");
  refused(gyreCudaReduceScatter(a, NULL, n, gyreFloat32, gyreSum, g_comm, g_stream),
          "gyreCudaReduceScatter", "null");
  refused(gyreCudaAllToAll(a, a, n, gyreFloat32, g_comm, g_stream), "gyreCudaAllToAll", "overlap");
  refused(gyreCudaAllToAllv(a, NULL, NULL, b, counts, NULL, gyreFloat32, g_comm, g_stream),
          "gyreCudaAllToAllv", "null");
  refused(gyreCudaSend(a, n, gyreFloat32, g_rank, g_comm, g_stream), "gyreCudaSend", "peer");
  refused(gyreCudaRecv(b, n, gyreFloat32, g_n, g_comm, g_stream), "gyreCudaRecv", "peer");
  refused(gyreCudaSendRecv(a, n, -3, b, n, (g_rank + 1) % g_n, gyreFloat32, g_comm, g_stream),
          "gyreCudaSendRecv", "peer");
  refused(gyreCudaCommUsesDeviceIpc(g_comm, NULL), "gyreCudaCommUsesDeviceIpc", "usesIpc is NULL");
  refused(gyreCudaBarrier(NULL, g_stream), "gyreCudaBarrier", "comm is NULL");
  free(host);
  dev_free(b);
  dev_free(a);
  /* Nothing was enqueued anywhere: the communicator goes on. */
  allreduce_case(gyreFloat32, gyreSum, MID, 0);
}

/* ---- Creation, abort ---------------------------------------------------------------- */

static gyreCudaComm_t create(gyreComm_t* host, int ipc) {
  gyreCudaComm_t comm = (gyreCudaComm_t)&g_rank; /* must become NULL on failure */
  gyreComm_t before = *host;
  int uses = -1, v = g_rank + 1, sum = 0, r;
  g_section = "create";
  refused(gyreCudaCommCreate(host, 99, &comm), "gyreCudaCommCreate", "device 99");
  if (comm != NULL) failf("a failed gyreCudaCommCreate left *cudaComm non-NULL");
  if (*host != before) failf("a failed gyreCudaCommCreate changed *hostComm");
  refused(gyreCudaCommCreate(host, -1, NULL), "gyreCudaCommCreate", "cudaComm is NULL");
  refused(gyreCudaCommCreate(NULL, -1, &comm), "gyreCudaCommCreate", "hostComm is NULL");
  /* The host communicator is still usable. */
  if (ok(gyreAllReduce(&v, &sum, 1, gyreInt32, gyreSum, *host), "host allreduce after a failed create")) {
    int want = 0;
    for (r = 0; r < g_n; ++r) want += r + 1;
    if (sum != want) failf("host allreduce after a failed create: %d, expected %d", sum, want);
  }
  if (!ok(gyreCudaCommCreate(host, -1, &comm), "gyreCudaCommCreate")) return NULL;
  if (*host != NULL) failf("gyreCudaCommCreate left *hostComm non-NULL");
  if (ok(gyreCudaCommUsesDeviceIpc(comm, &uses), "gyreCudaCommUsesDeviceIpc") && uses != ipc) {
    failf("gyreCudaCommUsesDeviceIpc: %d, expected %d", uses, ipc);
  }
  return comm;
}

static void test_abort(void) {
  void* a = dev_alloc(64);
  gyreResult_t r;
  if (!c_api_cuda_all_ranks_here("before abort")) failf("the other ranks did not come");
  ok(gyreCudaCommAbort(g_comm), "gyreCudaCommAbort");
  ok(gyreCudaCommAbort(g_comm), "gyreCudaCommAbort again");
  r = gyreCudaAllReduce(a, a, 4, gyreFloat32, gyreSum, g_comm, g_stream);
  if (r != gyreAborted || strstr(gyreGetLastError(NULL), "aborted") == NULL) {
    failf("allreduce after abort: %d '%s', expected gyreAborted", (int)r, gyreGetLastError(NULL));
  }
  r = gyreCudaBroadcast(a, a, 4, gyreFloat32, 0, g_comm, g_stream);
  if (r != gyreAborted) failf("broadcast after abort: %d, expected gyreAborted", (int)r);
  r = gyreCudaCommSynchronize(g_comm);
  if (r == gyreSuccess) failf("synchronize after abort succeeded");
  cuda_ok(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize after abort");
  dev_free(a);
}

static void section(const char* name, void (*body)(void)) {
  int before = g_failures;
  g_section = name;
  body();
  fprintf(stderr, "rank %d: %s %s\n", g_rank, name, g_failures == before ? "ok" : "FAILED");
}

int c_api_cuda_rank(int rank, int nranks, int ipc) {
  gyreComm_t host = NULL;
  g_rank = rank;
  g_n = nranks;
  if (!ok(gyreCommInitFromEnv(&host), "gyreCommInitFromEnv")) return 1;
  cuda_ok(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  g_comm = create(&host, ipc);
  if (g_comm == NULL) {
    gyreCommDestroy(host);
    return 1;
  }
  section("allreduce", test_allreduce);
  section("broadcast", test_broadcast);
  section("reduce", test_reduce);
  section("allgather", test_allgather);
  section("reducescatter", test_reducescatter);
  section("alltoall", test_alltoall);
  section("alltoallv", test_alltoallv);
  section("point to point", test_point_to_point);
  section("barrier", test_barrier);
  section("bad arguments", test_bad_arguments);
  section("abort", test_abort);
  g_section = "destroy";
  gyreCudaCommDestroy(g_comm); /* after an abort: returns, whatever it reports */
  ok(gyreCudaCommDestroy(NULL), "gyreCudaCommDestroy(NULL)");
  cuda_ok(cudaStreamDestroy(g_stream), "cudaStreamDestroy");
  return g_failures == 0 ? 0 : 1;
}

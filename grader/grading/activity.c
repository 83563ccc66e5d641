/* The GPU activity log of a student's kernel at grading (grader/grading/activity.py).
 *
 * The CUDA driver loads this library into the student's process when CUDA starts there
 * (CUDA_INJECTION64_PATH), which happens in the notebook's first cell, a given one, before any
 * of the student's code has run. It connects to the judge's socket (COURSE_ACTIVITY_SOCKET),
 * takes the key the judge sends, and from then on hands every kernel, copy and fill the GPU ran
 * for the process to the judge, with the GPU's own start and end times (CUPTI's activity API),
 * each frame signed with HMAC-SHA256 under that key and numbered. No Python object of the
 * student's process holds the records, the key or the socket's number: the student's code can
 * stop the log (the judge then grades no speed, and says why), not write it.
 *
 * Frames to the judge: u32 length, u64 counter, payload, 32-byte HMAC(key, counter || payload).
 * Payload: records, each one byte of kind then its fields, little-endian:
 *   'K' kernel:  u64 start, u64 end, u32 stream, u32 correlation, i32 grid[3], i32 block[3],
 *                u16 name length, name
 *   'S' memset:  u64 start, u64 end, u32 stream, u64 bytes
 *   'C' memcpy:  u64 start, u64 end, u32 stream, u64 bytes, u8 copy kind
 *   'M' mark:    u64 nonce (every record before it has been sent)
 *   'L' lost:    u64 records dropped by CUPTI
 * Commands from the judge: 'F' and a u64 nonce: flush CUPTI's buffers, then send a mark.
 */
#include <cupti.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define BUFFER_BYTES (8u << 20)
#define KEY_BYTES 32

static int sock = -1;
static uint8_t key[KEY_BYTES];
static uint64_t counter = 0;
static pthread_mutex_t sending = PTHREAD_MUTEX_INITIALIZER;

/* -- SHA-256 and HMAC (FIPS 180-4, RFC 2104) ------------------------------------------------ */

typedef struct { uint32_t h[8]; uint64_t length; uint8_t block[64]; size_t used; } sha256;

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(sha256 *s, const uint8_t *p) {
  uint32_t w[64], a, b, c, d, e, f, g, h;
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ROTR(w[i - 15], 7) ^ ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROTR(w[i - 2], 17) ^ ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
  e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = h + (ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
    uint32_t t2 = (ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
  s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

static void sha256_init(sha256 *s) {
  static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, H0, sizeof H0);
  s->length = 0, s->used = 0;
}

static void sha256_update(sha256 *s, const uint8_t *p, size_t n) {
  s->length += n;
  while (n) {
    size_t take = 64 - s->used < n ? 64 - s->used : n;
    memcpy(s->block + s->used, p, take);
    s->used += take, p += take, n -= take;
    if (s->used == 64) sha256_block(s, s->block), s->used = 0;
  }
}

static void sha256_final(sha256 *s, uint8_t out[32]) {
  uint64_t bits = s->length * 8;
  uint8_t one = 0x80, zero = 0, size[8];
  sha256_update(s, &one, 1);
  while (s->used != 56) sha256_update(s, &zero, 1);
  for (int i = 0; i < 8; i++) size[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha256_update(s, size, 8);
  for (int i = 0; i < 8; i++)
    out[4 * i] = s->h[i] >> 24, out[4 * i + 1] = s->h[i] >> 16, out[4 * i + 2] = s->h[i] >> 8,
    out[4 * i + 3] = s->h[i];
}

static void hmac(const uint8_t *msg1, size_t n1, const uint8_t *msg2, size_t n2, uint8_t out[32]) {
  uint8_t pad[64], inner[32];
  sha256 s;
  memset(pad, 0x36, 64);
  for (int i = 0; i < KEY_BYTES; i++) pad[i] ^= key[i];
  sha256_init(&s), sha256_update(&s, pad, 64), sha256_update(&s, msg1, n1);
  sha256_update(&s, msg2, n2), sha256_final(&s, inner);
  memset(pad, 0x5c, 64);
  for (int i = 0; i < KEY_BYTES; i++) pad[i] ^= key[i];
  sha256_init(&s), sha256_update(&s, pad, 64), sha256_update(&s, inner, 32);
  sha256_final(&s, out);
}

/* -- frames --------------------------------------------------------------------------------- */

static int write_all(const uint8_t *p, size_t n) {
  while (n) {
    ssize_t done = send(sock, p, n, MSG_NOSIGNAL);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return -1;
    p += done, n -= (size_t)done;
  }
  return 0;
}

static void send_frame(const uint8_t *payload, uint32_t n) {
  uint8_t head[12], mac[32];
  if (sock < 0 || n == 0) return;
  pthread_mutex_lock(&sending);
  uint64_t number = counter++;
  memcpy(head, &n, 4), memcpy(head + 4, &number, 8);
  hmac(head + 4, 8, payload, n, mac);
  if (write_all(head, 12) || write_all(payload, n) || write_all(mac, 32)) close(sock), sock = -1;
  pthread_mutex_unlock(&sending);
}

typedef struct { uint8_t *data; uint32_t used, size; } frame;

/* room for a whole record of `n` bytes in the frame: a record never spans two frames */
static void reserve(frame *f, uint32_t n) {
  if (f->used + n > f->size) {
    send_frame(f->data, f->used);
    f->used = 0;
  }
}

static void put(frame *f, const void *p, uint32_t n) {
  memcpy(f->data + f->used, p, n), f->used += n;
}

/* -- CUPTI ---------------------------------------------------------------------------------- */

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *maxRecords) {
  *buffer = aligned_alloc(8, BUFFER_BYTES);
  *size = *buffer ? BUFFER_BYTES : 0;
  *maxRecords = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                               size_t valid) {
  (void)ctx, (void)stream, (void)size;
  uint8_t scratch[1 << 16];
  frame f = {scratch, 0, sizeof scratch};
  CUpti_Activity *record = NULL;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    uint8_t r[64];
    if (record->kind == CUPTI_ACTIVITY_KIND_KERNEL ||
        record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)record;
      const char *name = k->name ? k->name : "";
      uint16_t length = (uint16_t)(strlen(name) < 4000 ? strlen(name) : 4000);
      int32_t dims[6] = {k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ};
      r[0] = 'K';
      memcpy(r + 1, &k->start, 8), memcpy(r + 9, &k->end, 8), memcpy(r + 17, &k->streamId, 4);
      memcpy(r + 21, &k->correlationId, 4), memcpy(r + 25, dims, 24), memcpy(r + 49, &length, 2);
      reserve(&f, 51u + length), put(&f, r, 51), put(&f, name, length);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)record;
      r[0] = 'S';
      memcpy(r + 1, &m->start, 8), memcpy(r + 9, &m->end, 8), memcpy(r + 17, &m->streamId, 4);
      memcpy(r + 21, &m->bytes, 8);
      reserve(&f, 29), put(&f, r, 29);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)record;
      r[0] = 'C';
      memcpy(r + 1, &m->start, 8), memcpy(r + 9, &m->end, 8), memcpy(r + 17, &m->streamId, 4);
      memcpy(r + 21, &m->bytes, 8), r[29] = m->copyKind;
      reserve(&f, 30), put(&f, r, 30);
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped) {
    uint64_t lost = dropped;
    uint8_t r[9] = {'L'};
    memcpy(r + 1, &lost, 8);
    reserve(&f, 9), put(&f, r, 9);
  }
  send_frame(f.data, f.used);
  free(buffer);
}

static void *commands(void *unused) {
  (void)unused;
  uint8_t command[9];
  for (;;) {
    size_t got = 0;
    while (got < sizeof command) {
      ssize_t n = recv(sock, command + got, sizeof command - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return NULL;
      got += (size_t)n;
    }
    if (command[0] != 'F') continue;
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    uint8_t mark[9] = {'M'};
    memcpy(mark + 1, command + 1, 8);
    send_frame(mark, 9);
  }
}

static int read_key(void) {
  size_t got = 0;
  while (got < KEY_BYTES) {
    ssize_t n = recv(sock, key + got, KEY_BYTES - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

int InitializeInjection(void) {
  const char *path = getenv("COURSE_ACTIVITY_SOCKET");
  struct sockaddr_un address = {.sun_family = AF_UNIX};
  if (!path || strlen(path) >= sizeof address.sun_path) return 1;
  strcpy(address.sun_path, path);
  sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return 1;
  if (connect(sock, (struct sockaddr *)&address, sizeof address) || read_key()) {
    close(sock), sock = -1;
    return 1;
  }
  /* a second, higher number for the socket, the first one closed: nothing at a number the
     student's code could know from this library's start */
  int moved = fcntl(sock, F_DUPFD_CLOEXEC, 512);
  if (moved >= 0) close(sock), sock = moved;
  unsetenv("COURSE_ACTIVITY_SOCKET");
  if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS) {
    close(sock), sock = -1;
    return 1;
  }
  pthread_t reader;
  pthread_create(&reader, NULL, commands, NULL);
  pthread_detach(reader);
  return 1;
}

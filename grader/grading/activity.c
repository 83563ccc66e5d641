/* The GPU activity log of a student's kernel at grading (grader/grading/activity.py).
 *
 * The CUDA driver loads this library into the student's process when CUDA starts there
 * (CUDA_INJECTION64_PATH), which happens in the notebook's first cell, a given one, before any
 * of the student's code has run. It connects to the judge's socket (COURSE_ACTIVITY_SOCKET),
 * takes the key the judge sends, and from then on hands every kernel, copy and fill the GPU ran
 * for the process to the judge, with the GPU's own start and end times (CUPTI's activity API),
 * each frame signed with HMAC-SHA256 under that key (OpenSSL's; without libcrypto the log does
 * not start, and the judge grades no speed) and numbered. No Python object of the
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
#include <dlfcn.h>
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
#define FRAME_BYTES (1u << 16) /* records sent in one frame, at most */
#define KEY_BYTES 32

static int sock = -1;
static uint8_t key[KEY_BYTES];
static uint64_t counter = 0;
static pthread_mutex_t sending = PTHREAD_MUTEX_INITIALIZER;

/* -- HMAC-SHA256: the system's OpenSSL (libcrypto), which Python's own hashlib loads ---------- */

typedef const void *(*digest_fn)(void);
typedef unsigned char *(*hmac_fn)(const void *digest, const void *key, int key_bytes,
                                  const unsigned char *data, size_t n, unsigned char *mac,
                                  unsigned int *mac_bytes);
static hmac_fn hmac;
static const void *sha256;

static int load_hmac(void) {
  static const char *names[] = {"libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"};
  void *crypto = NULL;
  for (size_t i = 0; !crypto && i < sizeof names / sizeof *names; i++)
    crypto = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  digest_fn digest = crypto ? (digest_fn)dlsym(crypto, "EVP_sha256") : NULL;
  hmac = crypto ? (hmac_fn)dlsym(crypto, "HMAC") : NULL;
  sha256 = digest ? digest() : NULL;
  return hmac && sha256 ? 0 : -1;
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
  static uint8_t out[12 + FRAME_BYTES + 32];  /* length, counter, payload, HMAC */
  unsigned int signed_bytes = 0;
  if (sock < 0 || n == 0 || n > FRAME_BYTES) return;
  pthread_mutex_lock(&sending);
  uint64_t number = counter++;
  memcpy(out, &n, 4), memcpy(out + 4, &number, 8), memcpy(out + 12, payload, n);
  if (!hmac(sha256, key, KEY_BYTES, out + 4, 8 + n, out + 12 + n, &signed_bytes) ||
      signed_bytes != 32 || write_all(out, 44 + n))
    close(sock), sock = -1;
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
  uint8_t scratch[FRAME_BYTES];
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
  if (!path || strlen(path) >= sizeof address.sun_path || load_hmac()) return 1;
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

/* bench/local/checkpoint.py's workload.  ckptwork MIB TICKS ITERS STATE
   Holds MIB MiB resident (filled from a seed taken at start), then counts ticks:
     ITERS > 0: each tick is ITERS rounds of integer arithmetic (CPU work); exits 0 after TICKS ticks;
     ITERS = 0: each tick sleeps 100 ms, forever.
   After every tick it writes one fixed-size record at offset 0 of STATE, a file it keeps open and
   never grows (CRIU restores an open file only at the size it had when dumped):
     TICK SEED CHECKSUM DONE
   CHECKSUM sums one word per page of the held memory, recomputed at tick 1, every 10th tick and at
   the end.  A process restored from a checkpoint keeps its SEED and CHECKSUM and goes on from its
   TICK; one started again begins at tick 1 with another seed. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RECORD 128

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: ckptwork MIB TICKS ITERS STATE\n");
    return 2;
  }
  size_t words = (size_t)atol(argv[1]) << 17, stride = 4096 / sizeof(uint64_t);
  long ticks = atol(argv[2]), iters = atol(argv[3]);
  int fd = open(argv[4], O_WRONLY | O_CREAT, 0644);
  if (fd < 0 || ftruncate(fd, RECORD) != 0) {
    perror(argv[4]);
    return 1;
  }
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  uint64_t seed = (((uint64_t)now.tv_nsec << 20) ^ (uint64_t)now.tv_sec ^ ((uint64_t)getpid() << 40)) | 1;
  uint64_t s = seed, sum = 0, x = seed;
  uint64_t *mem = malloc(words * sizeof(uint64_t) + sizeof(uint64_t));
  if (!mem) {
    perror("malloc");
    return 1;
  }
  for (size_t i = 0; i < words; i++) mem[i] = next(&s);
  char rec[RECORD];
  for (long tick = 1;; tick++) {
    if (iters > 0) {
      for (long i = 0; i < iters; i++) x = next(&x) + (x >> 3);
    } else {
      struct timespec d = {0, 100000000};
      nanosleep(&d, NULL);
    }
    int done = iters > 0 && tick >= ticks;
    if (tick == 1 || tick % 10 == 0 || done) {
      sum = 0;
      for (size_t i = 0; i < words; i += stride) sum += mem[i];
    }
    memset(rec, ' ', RECORD);
    int n = snprintf(rec, RECORD, "%ld %016llx %016llx %d %llu", tick, (unsigned long long)seed,
                     (unsigned long long)sum, done, (unsigned long long)(x & 0xff));
    rec[n] = ' ';
    rec[RECORD - 1] = '\n';
    if (pwrite(fd, rec, RECORD, 0) != RECORD) {
      perror("pwrite");
      return 1;
    }
    if (done) return 0;
  }
}

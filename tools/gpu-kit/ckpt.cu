// hetflow's GPU checkpoint program (the gpu-check part `checkpoint`; built on the GPU machine
// with nvcc -cudart static, like check.cu).
//   ckpt STEPS MIB OUTDIR   keeps MIB MiB of state in device memory (uint64 words) and, STEPS
//                           times, advances every word by a step-dependent recurrence on the
//                           GPU, then sleeps 100 ms; after each step it prints
//                           "step <i> t=<unix seconds>" and writes OUTDIR/progress; at the
//                           end it prints and writes OUTDIR/result "result <hex checksum>".
// The checksum depends on every step having been applied, in order, to the state as it
// was: a restore that lost or garbled the device memory ends with another checksum than an
// uninterrupted run's, and one that started from zero prints "step 1" again.  The step
// counter lives in host memory (CRIU restores it), the state only on the GPU.
#include <cstdio>
#include <cuda_runtime.h>
#include <time.h>

static long parse(const char *s) {  // no strtol: see check.cu
  long v = 0;
  for (; *s >= '0' && *s <= '9'; ++s) v = v * 10 + (*s - '0');
  return v;
}

__global__ void init(unsigned long long *x, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] = i * 0x9E3779B97F4A7C15ull;
}

__global__ void advance(unsigned long long *x, size_t n, unsigned long long step) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 6364136223846793005ull + (step ^ i) + 1442695040888963407ull;
}

__global__ void fold(const unsigned long long *x, size_t n, unsigned long long *out) {
  __shared__ unsigned long long part[256];
  unsigned long long s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    s += x[i] * (i | 1);
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long t = 0;
    for (unsigned k = 0; k < blockDim.x; ++k) t += part[k];
    atomicAdd(out, t);
  }
}

static int write_file(const char *dir, const char *name, const char *text) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");  // opened and closed each time: no file is open across a dump
  if (!f) return 1;
  fputs(text, f);
  return fclose(f);
}

static int fail(const char *what, cudaError_t e) {
  fprintf(stderr, "ckpt: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: ckpt STEPS MIB OUTDIR\n");
    return 2;
  }
  long steps = parse(argv[1]), mib = parse(argv[2]);
  size_t n = (size_t)mib * (1 << 20) / sizeof(unsigned long long);
  unsigned long long *x, *sum, host = 0;
  cudaError_t e;
  if ((e = cudaMalloc(&x, n * sizeof *x)) != cudaSuccess) return fail("cudaMalloc", e);
  if ((e = cudaMalloc(&sum, sizeof *sum)) != cudaSuccess) return fail("cudaMalloc", e);
  unsigned blocks = (unsigned)((n + 255) / 256);
  init<<<blocks, 256>>>(x, n);
  char line[128];
  for (long i = 1; i <= steps; ++i) {
    advance<<<blocks, 256>>>(x, n, (unsigned long long)i);
    if ((e = cudaDeviceSynchronize()) != cudaSuccess) return fail("step", e);
    snprintf(line, sizeof line, "step %ld t=%ld\n", i, (long)time(NULL));
    fputs(line, stdout);
    fflush(stdout);
    write_file(argv[3], "progress", line);
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  cudaMemset(sum, 0, sizeof *sum);
  fold<<<1024, 256>>>(x, n, sum);
  if ((e = cudaMemcpy(&host, sum, sizeof host, cudaMemcpyDeviceToHost)) != cudaSuccess) return fail("result", e);
  snprintf(line, sizeof line, "result %016llx\n", host);
  fputs(line, stdout);
  fflush(stdout);
  return write_file(argv[3], "result", line);
}

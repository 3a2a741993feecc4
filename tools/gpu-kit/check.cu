// hetflow's GPU acceptance program (tools/gpu-check builds it on the GPU machine with
// nvcc -cudart static, so a container needs only the driver's libcuda and a libc).
//   check matmul N        C = A x B with A = 1, B = 2: every element must be 2N; prints
//                         "ok N=<n> sum=<sum> gpu=<name>" and exits 0, else exits 1.
//   check loop N ITERS    ITERS products of N x N (a fixed amount of work), prints the
//                         seconds it took: the sharing measurement runs 1, 2, 4 of these.
// No strtol/atoi: glibc 2.38 headers map them to __isoc23_* symbols that an image's
// older glibc lacks.
#include <cstdio>
#include <cuda_runtime.h>
#include <time.h>

static long parse(const char *s) {
  long v = 0;
  for (; *s >= '0' && *s <= '9'; ++s) v = v * 10 + (*s - '0');
  return v;
}

__global__ void mm(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && j < n) {
    float s = 0;
    for (int k = 0; k < n; ++k) s += a[i * n + k] * b[k * n + j];
    c[i * n + j] = s;
  }
}

__global__ void fill(float *x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}

#define CK(e) do { cudaError_t r = (e); if (r != cudaSuccess) { \
  printf("cuda error: %s (%s)\n", cudaGetErrorString(r), #e); return 2; } } while (0)

int main(int argc, char **argv) {
  if (argc < 3) { printf("usage: check matmul N | check loop N ITERS\n"); return 2; }
  int n = (int)parse(argv[2]);
  long iters = argc > 3 ? parse(argv[3]) : 1;
  bool loop = argv[1][0] == 'l';
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  size_t bytes = (size_t)n * n * sizeof(float);
  float *a, *b, *c;
  CK(cudaMalloc(&a, bytes)); CK(cudaMalloc(&b, bytes)); CK(cudaMalloc(&c, bytes));
  int nn = n * n;
  fill<<<(nn + 255) / 256, 256>>>(a, 1.0f, nn);
  fill<<<(nn + 255) / 256, 256>>>(b, 2.0f, nn);
  CK(cudaDeviceSynchronize());
  dim3 t(16, 16), g((n + 15) / 16, (n + 15) / 16);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long r = 0; r < (loop ? iters : 1); ++r) mm<<<g, t>>>(a, b, c, n);
  CK(cudaDeviceSynchronize());
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  if (loop) {
    printf("loop n=%d iters=%ld seconds=%.4f gpu=%s devices=%d\n", n, iters, secs, p.name, count);
    return 0;
  }
  float *h = new float[nn];
  CK(cudaMemcpy(h, c, bytes, cudaMemcpyDeviceToHost));
  double sum = 0;
  int bad = 0;
  for (int i = 0; i < nn; ++i) { sum += h[i]; if (h[i] != 2.0f * n) ++bad; }
  if (bad) { printf("wrong: %d of %d elements differ from %d\n", bad, nn, 2 * n); return 1; }
  printf("ok n=%d sum=%.0f expected=%.0f gpu=%s devices=%d\n", n, sum, 2.0 * n * nn, p.name, count);
  return 0;
}

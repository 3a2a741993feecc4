/* whichbuild: one program, several builds; each says which build it is.
 *
 * hetflow's hardware-matched images put several builds of the same program into one
 * image index (examples/hwmatch, `python -m hetflow.hwdemo`).  This program makes the
 * choice visible: it prints the build it is (BUILD and MARCH are set with -D when it
 * is compiled), the instruction sets the compiler was allowed to use, what the CPU it
 * runs on supports, and then does a small real computation that the compiler
 * vectorises differently per level (saxpy, y = a*x + y, over 10^7 floats a block at a
 * time: SSE2 with -march=x86-64, 256-bit AVX2 with FMA with -march=x86-64-v3).
 *
 * The builds (hetflow.examples.build_hwmatch_images; static, so they run in a busybox
 * image with no libc):
 *
 *   gcc -O2 -static -march=x86-64    -DBUILD='"generic"'  -DMARCH='"x86-64"'
 *   gcc -O2 -static -march=x86-64-v3 -DBUILD='"v3"'       -DMARCH='"x86-64-v3"'
 *   gcc -O2 -static -march=x86-64    -DBUILD='"gpu-sm80"' -DMARCH='"x86-64"'
 *
 * The "gpu-sm80" build stands for a CUDA build of the program (nvcc -arch=sm_80 with
 * CUDA >= 12.2): there is no CUDA toolkit or GPU here, so it is the generic CPU code
 * under another name.  It runs anywhere, but the index labels it gpu:sm_80,cuda>=12.2,
 * so hetflow's resolver and registry proxy hand it only to nodes with such a GPU.
 *
 * Usage: whichbuild [N [REPS]]   (defaults 10000000 and 100)
 *        whichbuild --build      prints the build name only
 *
 * The inputs are small integers, so every partial result is exact in float and the
 * checksum is the same for every build (FMA or not); only the time differs.  Exit
 * status: 0 when the checksum is right, 1 when it is not, 2 for bad arguments, 3 when
 * this CPU lacks what the build was compiled for (checked, with baseline code, before
 * the computation starts).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef BUILD
#define BUILD "unnamed"
#endif
#ifndef MARCH
#define MARCH "unknown"
#endif

/* What -march let the compiler use (its predefined macros). */
static const char *compiled_for(void)
{
    return "sse2"
#ifdef __SSE4_2__
           " sse4.2"
#endif
#ifdef __AVX__
           " avx"
#endif
#ifdef __AVX2__
           " avx2"
#endif
#ifdef __FMA__
           " fma"
#endif
#ifdef __AVX512F__
           " avx512f"
#endif
        ;
}

/* Compiled for the baseline whatever -march says, so it is safe to run on any
 * x86-64 CPU before the build's own code runs. */
__attribute__((target("arch=x86-64"), noinline)) static int cpu_lacks_build(void)
{
    __builtin_cpu_init(); /* needed in a static binary before __builtin_cpu_supports */
#ifdef __AVX2__
    if (!__builtin_cpu_supports("avx2"))
        return 1;
#endif
#ifdef __FMA__
    if (!__builtin_cpu_supports("fma"))
        return 1;
#endif
#ifdef __AVX512F__
    if (!__builtin_cpu_supports("avx512f"))
        return 1;
#endif
    return 0;
}

__attribute__((target("arch=x86-64"), noinline)) static void print_cpu(void)
{
    printf("cpu_supports=sse2%s%s%s%s\n", __builtin_cpu_supports("sse4.2") ? " sse4.2" : "",
           __builtin_cpu_supports("avx2") ? " avx2" : "", __builtin_cpu_supports("fma") ? " fma" : "",
           __builtin_cpu_supports("avx512f") ? " avx512f" : "");
}

/* The loop the compiler vectorises: SSE2 (4 floats a step) for x86-64, AVX2 with
 * vfmadd (8 floats a step) for x86-64-v3.  A fixed block length keeps gcc -O2's
 * cheap vectoriser happy (no remainder loop needed) and the block in the L1 cache,
 * so the time shows the instructions rather than the memory. */
#define BLOCK 2048
__attribute__((noinline)) static void saxpy_block(float a, const float *restrict x, float *restrict y)
{
    for (int i = 0; i < BLOCK; i++)
        y[i] = a * x[i] + y[i];
}

/* y = a*x + y, reps times, one cache-sized block at a time. */
static void saxpy(long n, long reps, float a, const float *x, float *y)
{
    long whole = n - n % BLOCK;
    for (long start = 0; start < whole; start += BLOCK)
        for (long r = 0; r < reps; r++)
            saxpy_block(a, x + start, y + start);
    for (long r = 0; r < reps; r++)
        for (long i = whole; i < n; i++)
            y[i] = a * x[i] + y[i];
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long parse_count(const char *text, const char *what)
{
    char *end;
    long value = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || value < 1 || value > 200000000L) {
        fprintf(stderr, "whichbuild: %s must be a whole number from 1 to 200000000, not '%s'\n", what, text);
        exit(2);
    }
    return value;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--build") == 0) {
        puts(BUILD);
        return 0;
    }
    if (argc > 3 || (argc > 1 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: whichbuild [N [REPS]] | whichbuild --build\n");
        return 2;
    }
    long n = argc > 1 ? parse_count(argv[1], "N") : 10000000L;
    long reps = argc > 2 ? parse_count(argv[2], "REPS") : 100;
    if (reps > 1000) {
        fprintf(stderr, "whichbuild: REPS must be at most 1000 (the checksum stays exact up to there)\n");
        return 2;
    }

    printf("BUILD=%s\nMARCH=%s\ncompiled_for=%s\n", BUILD, MARCH, compiled_for());
    print_cpu();
    if (cpu_lacks_build()) {
        fprintf(stderr, "whichbuild: this CPU lacks what build %s needs (%s); run a build for a lower level\n",
                BUILD, compiled_for());
        return 3;
    }

    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    if (x == NULL || y == NULL) {
        fprintf(stderr, "whichbuild: cannot allocate 2 x %ld floats\n", n);
        return 2;
    }
    for (long i = 0; i < n; i++) {
        x[i] = (float)(i % 16);
        y[i] = (float)(i % 7);
    }
    const float a = 2.0f;
    double start = now();
    saxpy(n, reps, a, x, y);
    double took = now() - start;

    /* y[i] = i%7 + reps*a*(i%16), at most 6 + 1000*2*15 = 30006: exact in float and
     * in the double sum. */
    double sum = 0, expected = 0;
    for (long i = 0; i < n; i++) {
        sum += y[i];
        expected += (double)(i % 7) + (double)reps * a * (double)(i % 16);
    }
    int ok = sum == expected;
    printf("saxpy n=%ld reps=%ld checksum=%.1f %s\n", n, reps, sum, ok ? "ok" : "WRONG");
    printf("time=%.3fs gflops=%.2f\n", took, took > 0 ? 2.0 * (double)n * (double)reps / took * 1e-9 : 0.0);
    free(x);
    free(y);
    return ok ? 0 : 1;
}

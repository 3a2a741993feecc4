/* A fake libcuda.so.1 for the checkpoint interface (execute/checkpoint/cudadriver.py).
 *
 * Keeps each pid's CUprocessState and enforces the driver's order (lock a running process,
 * checkpoint a locked one, restore a checkpointed one, unlock a locked one: else
 * CUDA_ERROR_ILLEGAL_STATE), appends every call to $FAKECUDA_LOG, and fails on demand:
 *   FAKECUDA_FAIL=cuCheckpointProcessLock:909   that call returns that CUresult
 *   FAKECUDA_FAIL=cuCheckpointProcessLock:909@9 ... for pid 9 only
 *   FAKECUDA_NOCTX=,123,456,                     these pids hold no CUDA context
 * Built with -DNO_CHECKPOINT_API it is a driver before 570 (no cuCheckpointProcess*).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { unsigned char bytes[16]; } uuid_t16;
typedef struct { uuid_t16 oldUuid, newUuid; } pair_t;
typedef struct { pair_t *pairs; unsigned int count; char reserved[52 - sizeof(void *)]; unsigned long long r1; } restore_t;
typedef struct { unsigned int timeoutMs; unsigned int reserved0; unsigned long long reserved1[7]; } lock_t;

#define MAXP 64
static int pids[MAXP], states[MAXP], npids;

static void note(const char *fmt, int pid, const char *more) {
    const char *path = getenv("FAKECUDA_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, fmt, pid, more);
    fputc('\n', f);
    fclose(f);
}

static int failing(const char *call, int pid) {
    const char *spec = getenv("FAKECUDA_FAIL");
    size_t n = strlen(call);
    if (!spec || strncmp(spec, call, n) != 0 || spec[n] != ':') return 0;
    const char *at = strchr(spec, '@');
    return at && atoi(at + 1) != pid ? 0 : atoi(spec + n + 1);
}

static int *state_of(int pid) {
    char key[32];
    const char *noctx = getenv("FAKECUDA_NOCTX");
    snprintf(key, sizeof key, ",%d,", pid);
    if (noctx && strstr(noctx, key)) return NULL;
    for (int i = 0; i < npids; i++) if (pids[i] == pid) return &states[i];
    if (npids == MAXP) return NULL;
    pids[npids] = pid;
    states[npids] = 0;
    return &states[npids++];
}

/* one transition: from -> to, with the call's log line and its injected failure */
static int step(const char *call, int pid, int from, int to, const char *more) {
    note("%d %s", pid, call);
    if (more && *more) note("%d %s", pid, more);
    int *s = state_of(pid);
    if (!s) return 3; /* CUDA_ERROR_NOT_INITIALIZED: no context in that process */
    int f = failing(call, pid);
    if (f) return f;
    if (*s != from) return 401; /* CUDA_ERROR_ILLEGAL_STATE */
    *s = to;
    return 0;
}

int cuInit(unsigned int flags) { (void)flags; return failing("cuInit", 0); }

int cuDriverGetVersion(int *v) {
    const char *given = getenv("FAKECUDA_VERSION");
    *v = given ? atoi(given) : 13000;
    return 0;
}

int cuGetErrorString(int code, const char **s) {
    switch (code) {
    case 3: *s = "initialization error"; return 0;
    case 401: *s = "the operation cannot be performed in the present state"; return 0;
    case 909: *s = "the launch timed out and was terminated"; return 0;
    case 801: *s = "operation not supported"; return 0;
    default: return 1; /* CUDA_ERROR_INVALID_VALUE: an unknown code */
    }
}

#ifndef NO_CHECKPOINT_API
int cuCheckpointProcessGetState(int pid, int *state) {
    note("%d %s", pid, "cuCheckpointProcessGetState");
    int *s = state_of(pid);
    if (!s) return 3;
    int f = failing("cuCheckpointProcessGetState", pid);
    if (f) return f;
    *state = *s;
    return 0;
}

int cuCheckpointProcessLock(int pid, lock_t *a) {
    char more[64];
    snprintf(more, sizeof more, "timeoutMs=%u", a ? a->timeoutMs : 0);
    return step("cuCheckpointProcessLock", pid, 0, 1, more);
}

int cuCheckpointProcessCheckpoint(int pid, void *a) { (void)a; return step("cuCheckpointProcessCheckpoint", pid, 1, 2, ""); }

int cuCheckpointProcessRestore(int pid, restore_t *a) {
    char more[256] = "";
    if (a && a->count) {
        int n = snprintf(more, sizeof more, "pair ");
        for (int i = 0; i < 16; i++) n += snprintf(more + n, sizeof more - n, "%02x", a->pairs[0].oldUuid.bytes[i]);
        n += snprintf(more + n, sizeof more - n, "->");
        for (int i = 0; i < 16; i++) n += snprintf(more + n, sizeof more - n, "%02x", a->pairs[0].newUuid.bytes[i]);
    }
    return step("cuCheckpointProcessRestore", pid, 2, 1, more);
}

int cuCheckpointProcessUnlock(int pid, void *a) { (void)a; return step("cuCheckpointProcessUnlock", pid, 1, 0, ""); }
#endif

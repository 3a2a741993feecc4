// How many SMs this process may use, as the CUDA driver says (cuCtxGetExecAffinity): the
// device's count alone or under time-slicing, fewer for an MPS client whose
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE limits it.  tools/gpu-check's shared-steps part runs it
// in hetflow's MPS tenants to see that they really are MPS clients (a client that cannot
// reach the daemon runs without MPS, silently: NVIDIA's MPS docs).
// Built there: nvcc -o sms sms.cu -lcuda (the driver API; libcuda comes with the driver).
#include <cstdio>
#include <cuda.h>

#define CK(e) do { CUresult r = (e); if (r != CUDA_SUCCESS) { const char *s = 0; \
  cuGetErrorString(r, &s); printf("cuda error: %s (%s)\n", s ? s : "?", #e); return 2; } } while (0)

int main() {
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  int total = 0;
  CK(cuDeviceGetAttribute(&total, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUexecAffinityParam aff;
  CK(cuCtxGetExecAffinity(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
  printf("sms usable=%u device=%d\n", aff.param.smCount.val, total);
  CK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}

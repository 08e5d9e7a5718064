/* A stand-in for libnvidia-ml.so.1 that answers from files, for the tests
 * of GPU tracking on machines without an NVIDIA GPU (tests/test_gpu_tracking.py
 * builds it with cc). It implements only the calls daisy makes, with the
 * signatures and return codes of NVML's nvml.h:
 *
 *   $FAKE_NVML_STATE/devices   number of devices (default 1)
 *   $FAKE_NVML_STATE/procs     "device pid bytes" per line: running compute
 *                              processes and their used memory
 *   $FAKE_NVML_STATE/util      "device pid timestamp_us sm_util" per line:
 *                              per-process utilisation samples
 *   $FAKE_NVML_STATE/calls     every call is appended here (one letter)
 *
 * Every file is re-read on each call, so a block function can change the
 * answers while its worker measures it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
enum { OK = 0, INVALID_ARG = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6, INSUFFICIENT_SIZE = 7 };

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

static FILE *state(const char *name, const char *mode) {
    const char *dir = getenv("FAKE_NVML_STATE");
    char path[4096];
    if (!dir) return NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return fopen(path, mode);
}

static void called(const char *what) {
    FILE *f = state("calls", "a");
    if (f) { fprintf(f, "%s\n", what); fclose(f); }
}

static unsigned int devices(void) {
    unsigned int n = 1;
    FILE *f = state("devices", "r");
    if (f) { if (fscanf(f, "%u", &n) != 1) n = 1; fclose(f); }
    return n;
}

static unsigned int index_of(nvmlDevice_t d) { return (unsigned int)((unsigned long)d - 1); }

nvmlReturn_t nvmlInit_v2(void) { called("init"); return OK; }
nvmlReturn_t nvmlShutdown(void) { return OK; }
const char *nvmlErrorString(nvmlReturn_t r) { (void)r; return "fake NVML error"; }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { *count = devices(); return OK; }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    if (i >= devices()) return INVALID_ARG;
    *d = (nvmlDevice_t)(unsigned long)(i + 1);
    return OK;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    snprintf(uuid, length, "GPU-fake-%u", index_of(d));
    return OK;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    unsigned int dev, pid, n = 0;
    unsigned long long bytes;
    called("procs");
    FILE *f = state("procs", "r");
    if (f) {
        while (fscanf(f, "%u %u %llu", &dev, &pid, &bytes) == 3) {
            if (dev != index_of(d)) continue;
            if (infos && n < *count) {
                infos[n].pid = pid;
                infos[n].usedGpuMemory = bytes;
                infos[n].gpuInstanceId = infos[n].computeInstanceId = 0xFFFFFFFF;
            }
            n++;
        }
        fclose(f);
    }
    if (!infos || n > *count) { *count = n; return n ? INSUFFICIENT_SIZE : OK; }
    *count = n;
    return OK;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d,
                                             nvmlProcessUtilizationSample_t *samples,
                                             unsigned int *count,
                                             unsigned long long lastSeen) {
    unsigned int dev, pid, sm, n = 0;
    unsigned long long ts;
    called("util");
    FILE *f = state("util", "r");
    if (f) {
        while (fscanf(f, "%u %u %llu %u", &dev, &pid, &ts, &sm) == 4) {
            if (dev != index_of(d) || ts <= lastSeen) continue;
            if (samples && n < *count) {
                memset(&samples[n], 0, sizeof samples[n]);
                samples[n].pid = pid;
                samples[n].timeStamp = ts;
                samples[n].smUtil = sm;
            }
            n++;
        }
        fclose(f);
    }
    if (n == 0) return NOT_FOUND;
    if (!samples || n > *count) { *count = n; return INSUFFICIENT_SIZE; }
    *count = n;
    return OK;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, void *u) {
    (void)d; (void)u;
    return NOT_SUPPORTED;
}

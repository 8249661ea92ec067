// The C interface between the engine and the CUDA plugin (liblongscope-cuda.so), resolved with
// dlsym so nothing in the engine links the CUDA runtime or the driver.
#pragma once

#include <cstddef>
#include <cstdint>

#define LONGSCOPE_CUDA_ABI_VERSION 1

extern "C" {

struct LongscopeCudaDevice {
    char name[256];
    uint64_t total_memory;
    uint64_t free_memory;
    int compute_major;
    int compute_minor;
};

int longscope_cuda_abi_version();

// Fills up to `max` devices and returns how many there are (0 with `reason` filled when none
// can be used: no driver, no device, driver too old...).
int longscope_cuda_probe(LongscopeCudaDevice *devices, int max, char *reason, size_t reason_len);

// Runs RMSNorm of `rows` rows of `n` floats on device `device` and copies the result to `out`
// (a self-test of the kernel build and the device path). Returns 0, or a CUDA error code with
// `reason` filled.
int longscope_cuda_rmsnorm_selftest(int device, const float *x, const float *weight, float *out, int rows, int n,
                                    float eps, char *reason, size_t reason_len);
}

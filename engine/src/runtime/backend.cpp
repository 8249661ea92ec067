#include "longscope/backend.h"

#include "cpu/cpu_backend.h"
#include "cpu/ops.h"
#include "cpu/simd.h"
#include "cuda_host/cuda_api.h"
#include "cuda_host/cuda_backend.h"
#include "runtime/backends.h"

#include <thread>

namespace longscope {

void set_backend_options(const BackendOptions &options) { set_cuda_plugin_override(options.cuda_plugin); }

std::vector<BackendStatus> probe_backends()
{
    BackendStatus cpu;
    cpu.name = "CPU";
    cpu.available = true;
    cpu.detail = std::to_string(std::max(1u, std::thread::hardware_concurrency())) + " hardware threads, " +
                 cpu_kernels().name + " kernels";
    std::vector<BackendStatus> out{cpu};
    try {
        out.push_back(probe_cuda_plugin());
    } catch (const std::exception &e) {
        BackendStatus s;
        s.name = "CUDA";
        s.detail = e.what();
        out.push_back(s);
    }
    return out;
}

std::unique_ptr<Backend> make_backend(ComputeBackend kind, const Model &model, int n_threads)
{
    switch (kind) {
    case ComputeBackend::Cuda:
        return std::make_unique<CudaBackend>(model, HostFunctions{weight_row_f32, f32_to_f16, rope_inv_freq});
    case ComputeBackend::Cpu: break;
    }
    return std::make_unique<CpuBackend>(model, n_threads);
}

} // namespace longscope

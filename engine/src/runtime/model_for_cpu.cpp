// Model's entry points that prepare the weights for the CPU kernels. They live in the runtime
// layer, which may see both the model layer (which does the copying: model/prepare_weights.cpp)
// and the CPU backend (which says what it wants: cpu/weight_preparer.h), so that the model
// layer itself depends on no backend.
#include "cpu/kernel_table.h"
#include "cpu/weight_preparer.h"
#include "longscope/errors.h"
#include "longscope/model.h"
#include "model/loader.h"

namespace longscope {

std::unique_ptr<Model> Model::load(const std::string &path, const LoadProgress &progress, bool for_cpu)
{
    if (progress && !progress(0.0))
        throw Cancelled("loading " + path + " was cancelled");
    auto model = load_files(path);
    if (for_cpu)
        model->prepare_for_cpu(progress);
    else if (progress && !progress(1.0))
        throw Cancelled("loading " + path + " was cancelled");
    return model;
}

void Model::prepare_for_cpu(const LoadProgress &progress)
{
    ModelBuilder::prepare_weights(*this, CpuWeightPreparer(kernel_table()), progress);
}

} // namespace longscope

// Makes the backend a session or a batch runs on.
#pragma once

#include "backend/backend.h"
#include "longscope/model.h"
#include "longscope/settings.h"

#include <memory>

namespace longscope {

// The CPU backend with n_threads workers, or the CUDA backend on GPU 0 (BackendError with
// the reason when CUDA cannot be used: no plugin, no driver or GPU, weights too large).
std::unique_ptr<Backend> make_backend(ComputeBackend kind, const Model &model, int n_threads);

} // namespace longscope

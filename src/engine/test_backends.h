// Test helper: the runners the engine tests run on — the CPU runner always, the CUDA model in
// CUDA builds (fp32 weights: the CPU engine's function; needs a GPU at run time).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cpu_runner.h"
#ifdef GYRE_CUDA
#include "runtime/cuda_model.h"
#endif

namespace gyre::testing {

// A backend: builds a runner over `model` with `slots` state slots and `pages` pages.
struct Backend {
  std::string name;
  std::function<Result<std::unique_ptr<ModelRunner>>(const Model&, int64_t slots, int64_t page_tokens, int64_t pages)> make;
};

inline std::vector<Backend> Backends() {
  std::vector<Backend> b;
  b.push_back({"cpu", [](const Model& m, int64_t slots, int64_t pt, int64_t pages) -> Result<std::unique_ptr<ModelRunner>> {
                 CpuRunnerOptions o;
                 o.num_slots = slots;
                 o.page_tokens = pt;
                 o.num_pages = pages;
                 GYRE_ASSIGN_OR_RETURN(std::unique_ptr<CpuRunner> r, CpuRunner::Create(m, o));
                 return std::unique_ptr<ModelRunner>(std::move(r));
               }});
#ifdef GYRE_CUDA
  b.push_back({"cuda", [](const Model& m, int64_t slots, int64_t pt, int64_t pages) -> Result<std::unique_ptr<ModelRunner>> {
                 CudaModelOptions o;
                 o.max_seqs = slots;
                 o.max_batch_tokens = 256;
                 o.page_tokens = pt;
                 o.kv_tokens = pages * pt;
                 GYRE_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> r, CudaModel::FromHost(m.config(), m.weights(), o));
                 return std::unique_ptr<ModelRunner>(std::move(r));
               }});
#endif
  return b;
}

}  // namespace gyre::testing

// TpRunner: tensor parallelism of the CUDA model behind the one ModelRunner seam
// (docs/parallel.md "TP on the CUDA model"). It holds `size` CudaModels, each built from one
// rank's shard (parallel/tp_model.h) and driven by its own thread, joined by a device
// communicator:
//   * Comm::kShared: the ranks are threads sharing one GPU (SharedDeviceGroup: device copies and a
//     fixed-order sum). It proves the plan's data flow and numerics on one GPU; it measures
//     nothing about NCCL or links.
//   * Comm::kNccl: rank r on GPU r over NCCL (NcclCommunicator); needs `size` GPUs.
// Launch / Collect / checkpoints run on every rank (the caller's thread hands each call to the
// rank threads and waits for all of them, so the pieces' spans need not outlive Launch). Every
// rank gathers the whole logits row and samples the same token; Collect checks that the ranks
// agree and returns rank 0's tokens (Internal when they differ). A rank that fails aborts a shared
// group, so the other ranks stop waiting; an NCCL group times out (the communicator's timeout).
//
// With expert_parallel the routed experts are split by expert instead of by width (EP with TP
// attention, one all-reduce combining; parallel/tp_model.h). With pipeline the ranks are layer
// stages instead (layer split, CudaPpOptions): tokens and logits are the last stage's.
// Not yet: sequence transfer (ReadPages / WritePages / *SlotState return Unimplemented: each rank
// holds a head shard of the KDA state), speculative pieces, W8A8 checkpoints, CUDA graphs.
//
// Only in CUDA builds with NCCL (gyre_devcomm).
// Thread safety: as any ModelRunner, one driving thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/weights.h"
#include "runtime/cuda_model.h"
#include "runtime/model_runner.h"

namespace gyre::parallel {

struct TpRunnerOptions {
  enum class Comm { kShared, kNccl };
  int size = 2;
  Comm comm = Comm::kShared;
  int device = 0;            // kShared: the GPU every rank uses
  bool shard_mlp = true;     // split the MLP / experts' intermediate width too (else replicated)
  // Routed experts split by expert instead (EP with TP attention; parallel/tp_model.h).
  bool expert_parallel = false;
  // Layer split instead of TP: rank r is pipeline stage r with layers Split(L, size, r) whole
  // (ShardModelForPp); the last stage's tokens and logits are returned, and it sends its ids to
  // the first stage on the device (kPrevToken inputs work as on one GPU). No micro-batching yet:
  // a step runs through the stages one after the other, so stages idle.
  bool pipeline = false;
  // Per rank (tp is filled in). With gpu_memory_utilization > 0, rank 0 sizes its page pool from
  // it (divided by `size` under kShared: the ranks share the GPU) and the other ranks take the same
  // number of pages, so page ids mean the same on every rank.
  CudaModelOptions model;
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  // Negative control for the checks (verify parallel --inject-fault): the MLP weights are
  // sharded but the model is told they are not, so its partial sums are never all-reduced.
  bool fault_skip_mlp_reduce = false;
};

class TpRunner final : public ModelRunner {
 public:
  // Errors: InvalidArgument (size < 1, a dimension with fewer items than ranks), Unimplemented
  // (quantized weights; kNccl with fewer GPUs than ranks), and whatever CudaModel or the
  // communicator return.
  static Result<std::unique_ptr<TpRunner>> Create(const ModelConfig& config, const ModelWeights& weights,
                                                  const TpRunnerOptions& opts);
  ~TpRunner() override;
  TpRunner(const TpRunner&) = delete;
  TpRunner& operator=(const TpRunner&) = delete;

  const ModelConfig& config() const override { return config_; }
  RunnerCapacity capacity() const override;
  std::string backend() const override { return "cuda-tp"; }
  int size() const { return static_cast<int>(models_.size()); }
  CudaModel& rank_model(int r) { return *models_[r]; }

  Status Launch(std::span<const StepPiece> pieces, bool want_logits = false) override;
  Status Collect(std::vector<SampledToken>* out, std::vector<float>* logits = nullptr) override;
  Status ReserveCheckpoints(int64_t count) override;
  Status SaveState(SlotId slot, CheckpointId ckpt) override;
  Status RestoreState(CheckpointId ckpt, SlotId slot, int64_t num_tokens) override;
  // Unimplemented under TP (see above).
  Status ReadPages(std::span<const PageId> pages, std::span<std::byte> dst) override;
  Status WritePages(std::span<const PageId> pages, std::span<const std::byte> src) override;
  Status ReadSlotState(SlotId slot, std::span<std::byte> dst) override;
  Status WriteSlotState(SlotId slot, std::span<const std::byte> src, int64_t num_tokens) override;

  struct Workers;  // tp_runner.cc

 private:
  TpRunner() = default;
  // Runs fn(rank) on every rank's thread and waits; the first failure by rank order.
  Status OnRanks(const std::function<Status(int)>& fn);

  ModelConfig config_;
  bool pipeline_ = false;
  std::unique_ptr<Workers> workers_;
  std::vector<std::unique_ptr<CudaModel>> models_;  // destroyed on their rank threads
};

}  // namespace gyre::parallel

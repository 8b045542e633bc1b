#include "parallel/tp_runner.h"

#if defined(GYRE_CUDA) && defined(GYRE_HAVE_DEVCOMM)

#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "parallel/nccl_communicator.h"
#include "parallel/shard.h"
#include "parallel/shared_device_group.h"
#include "parallel/tp_model.h"

namespace gyre::parallel {

// One thread per rank; OnRanks hands every thread the same task and waits for all of them.
struct TpRunner::Workers {
  std::mutex mu;
  std::condition_variable wake, done;
  const std::function<Status(int)>* task = nullptr;
  uint64_t generation = 0;
  int finished = 0;
  bool stop = false;
  std::vector<Status> results;
  std::vector<int> devices;  // the CUDA device of each rank
  std::vector<std::thread> threads;
  // The communicators (one of the two kinds).
  std::unique_ptr<SharedDeviceGroup> shared;
  std::vector<std::unique_ptr<NcclCommunicator>> nccl;

  DeviceCommunicator& Comm(int r) { return shared ? shared->Rank(r) : *nccl[r]; }

  void Start(int n) {
    results.assign(n, Status::Ok());
    for (int r = 0; r < n; ++r) threads.emplace_back([this, r] { Loop(r); });
  }
  void Loop(int r) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<Status(int)>* fn = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu);
        wake.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
        fn = task;
      }
      Status s = Status::Ok();
      if (cudaError_t e = cudaSetDevice(devices[r]); e != cudaSuccess) {
        s = Status::Internal(std::string("cudaSetDevice: ") + cudaGetErrorString(e));
      } else {
        s = (*fn)(r);
      }
      // A failed rank breaks a shared group so the other ranks stop waiting in its collectives.
      if (!s.ok() && shared) shared->Abort(s);
      std::lock_guard<std::mutex> lock(mu);
      results[r] = s;
      if (++finished == static_cast<int>(threads.size())) done.notify_all();
    }
  }
  Status Run(const std::function<Status(int)>& fn) {
    std::unique_lock<std::mutex> lock(mu);
    task = &fn;
    finished = 0;
    ++generation;
    wake.notify_all();
    done.wait(lock, [&] { return finished == static_cast<int>(threads.size()); });
    task = nullptr;
    for (size_t r = 0; r < results.size(); ++r)
      if (!results[r].ok()) return results[r].WithContext("tensor parallel rank " + std::to_string(r));
    return Status::Ok();
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    wake.notify_all();
    for (std::thread& t : threads) t.join();
    threads.clear();
  }
};

Status TpRunner::OnRanks(const std::function<Status(int)>& fn) { return workers_->Run(fn); }

TpRunner::~TpRunner() {
  if (!workers_) return;
  // Models and NCCL communicators are released on their rank's thread (its device current).
  (void)workers_->Run([this](int r) -> Status {
    if (r < static_cast<int>(models_.size())) models_[r].reset();
    if (r < static_cast<int>(workers_->nccl.size())) workers_->nccl[r].reset();
    return Status::Ok();
  });
  workers_->Stop();
  workers_->shared.reset();
}

Result<std::unique_ptr<TpRunner>> TpRunner::Create(const ModelConfig& config, const ModelWeights& weights,
                                                   const TpRunnerOptions& opts) {
  const int n = opts.size;
  if (n < 1 || n > SharedDeviceGroup::kMaxRanks)
    return Status::InvalidArgument("tensor parallel size " + std::to_string(n) + " outside [1, " +
                                   std::to_string(SharedDeviceGroup::kMaxRanks) + "]");
  // Shard on the host first: a config that cannot be split fails before any GPU work.
  std::vector<TpModelShard> shards;
  for (int r = 0; r < n; ++r) {
    GYRE_ASSIGN_OR_RETURN(TpModelShard s, opts.pipeline ? ShardModelForPp(config, weights, n, r)
                                                        : ShardModelForTp(config, weights, n, r,
                                                                          {opts.shard_mlp, opts.expert_parallel}));
    shards.push_back(std::move(s));
  }
  std::unique_ptr<TpRunner> t(new TpRunner());
  t->config_ = config;
  t->pipeline_ = opts.pipeline;
  t->workers_ = std::make_unique<Workers>();
  Workers& w = *t->workers_;
  if (opts.comm == TpRunnerOptions::Comm::kShared) {
    GYRE_ASSIGN_OR_RETURN(w.shared, SharedDeviceGroup::Create(n, opts.device, opts.timeout));
    w.devices.assign(n, opts.device);
  } else {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    if (count < n)
      return Status::Unimplemented("tensor parallel over NCCL needs " + std::to_string(n) + " GPUs, this machine has " +
                                   std::to_string(count) + " (ranks as threads sharing one GPU: the shared communicator)");
    for (int r = 0; r < n; ++r) w.devices.push_back(r);
    w.nccl.resize(n);
  }
  w.Start(n);
  t->models_.resize(n);
  if (!w.nccl.empty()) {
    GYRE_ASSIGN_OR_RETURN(std::vector<uint8_t> id, NcclCommunicator::NewUniqueId());
    NcclOptions no;
    no.timeout = opts.timeout;
    GYRE_RETURN_IF_ERROR(t->OnRanks([&](int r) -> Status {
      GYRE_ASSIGN_OR_RETURN(w.nccl[r], NcclCommunicator::Create(id, n, r, w.devices[r], no));
      return Status::Ok();
    }));
  }
  auto model_opts = [&](int r) {
    CudaModelOptions o = opts.model;
    if (opts.pipeline) {
      o.pp.comm = &w.Comm(r);
      if (!o.kv_cache.layers.empty()) {  // the stage's layers of the whole model's policy
        const Range lr = Split(config.num_hidden_layers, n, r);
        o.kv_cache.layers.assign(opts.model.kv_cache.layers.begin() + lr.begin,
                                 opts.model.kv_cache.layers.begin() + lr.end);
      }
      return o;
    }
    o.tp.comm = &w.Comm(r);
    o.tp.mlp_sharded = (opts.shard_mlp || opts.expert_parallel) && !opts.fault_skip_mlp_reduce;
    if (opts.expert_parallel) {
      o.tp.expert_begin = shards[r].expert_begin;
      o.tp.expert_count = shards[r].expert_count;
    }
    o.tp.vocab_rows = shards[r].vocab_rows;
    o.tp.full_vocab = config.vocab_size;
    return o;
  };
  // One rank first: with gpu_memory_utilization it sizes the page pool, which the others copy. It
  // is rank 0, or under layer split the first stage that has attention layers (a stage without
  // them has no page pool).
  int sizer = 0;
  if (opts.pipeline) {
    for (int r = n - 1; r >= 0; --r) {
      const auto& lt = shards[r].config.layer_types;
      if (std::any_of(lt.begin(), lt.end(), [](AttnKind k) { return k != AttnKind::kKda; })) sizer = r;
    }
  }
  CudaModelOptions first = model_opts(sizer);
  if (first.gpu_memory_utilization > 0 && w.shared) first.gpu_memory_utilization /= n;  // the ranks share the GPU
  GYRE_RETURN_IF_ERROR(t->OnRanks([&](int r) -> Status {
    if (r != sizer) return Status::Ok();
    GYRE_ASSIGN_OR_RETURN(t->models_[r], CudaModel::FromHost(shards[r].config, shards[r].weights, first));
    return Status::Ok();
  }));
  const RunnerCapacity cap0 = t->models_[sizer]->capacity();
  GYRE_RETURN_IF_ERROR(t->OnRanks([&](int r) -> Status {
    if (r == sizer) return Status::Ok();
    CudaModelOptions o = model_opts(r);
    if (o.gpu_memory_utilization > 0) {
      o.gpu_memory_utilization = 0;
      o.reserve_fraction = 0;
      o.kv_tokens = std::max<int64_t>(cap0.num_pages, 1) * cap0.page_tokens;
      if (o.max_seq_tokens <= 0) o.max_seq_tokens = std::min<int64_t>(o.kv_tokens, int64_t(1) << 17);
    }
    GYRE_ASSIGN_OR_RETURN(t->models_[r], CudaModel::FromHost(shards[r].config, shards[r].weights, o));
    const RunnerCapacity cap = t->models_[r]->capacity();
    // (A pipeline stage without attention layers has no page pool: num_pages 0.)
    const bool pages_differ = opts.pipeline ? cap.num_pages > 0 && cap0.num_pages > 0 && cap.num_pages != cap0.num_pages
                                            : cap.num_pages != cap0.num_pages;
    if (pages_differ || cap.num_slots != cap0.num_slots ||
        cap.max_step_tokens != cap0.max_step_tokens || cap.max_step_pieces != cap0.max_step_pieces)
      return Status::Internal("tensor parallel: rank " + std::to_string(r) + "'s capacity differs from rank 0's");
    return Status::Ok();
  }));
  return t;
}

RunnerCapacity TpRunner::capacity() const {
  RunnerCapacity c = models_[0]->capacity();
  // Bytes of the whole model's cache behind one page / slot, summed over the ranks: TP pages hold
  // the replicated latent cache on every rank and slots one head shard of the KDA state each;
  // pipeline stages hold their own layers' pages and slots.
  int64_t slot = 0, page = 0;
  for (const auto& m : models_) {
    slot += m->capacity().bytes_per_slot;
    page += m->capacity().bytes_per_page;
    c.num_pages = std::max(c.num_pages, m->capacity().num_pages);
  }
  c.bytes_per_slot = slot;
  c.bytes_per_page = page;
  return c;
}

Status TpRunner::Launch(std::span<const StepPiece> pieces, bool want_logits) {
  return OnRanks([&](int r) { return models_[r]->Launch(pieces, want_logits); });
}

Status TpRunner::Collect(std::vector<SampledToken>* out, std::vector<float>* logits) {
  std::vector<std::vector<SampledToken>> got(models_.size());
  const int last = static_cast<int>(models_.size()) - 1;
  if (pipeline_) {
    // The last stage's tokens; the others ran the head on their own hidden states (unused).
    GYRE_RETURN_IF_ERROR(OnRanks([&](int r) { return models_[r]->Collect(&got[r], r == last ? logits : nullptr); }));
    if (out) *out = std::move(got[last]);
    return Status::Ok();
  }
  GYRE_RETURN_IF_ERROR(OnRanks([&](int r) { return models_[r]->Collect(&got[r], r == 0 ? logits : nullptr); }));
  for (size_t r = 1; r < got.size(); ++r) {
    bool same = got[r].size() == got[0].size();
    for (size_t i = 0; same && i < got[0].size(); ++i) same = got[r][i].id == got[0][i].id;
    if (!same)
      return Status::Internal("tensor parallel: rank " + std::to_string(r) +
                              " sampled different tokens from rank 0 (the gathered logits differ)");
  }
  if (out) *out = std::move(got[0]);
  return Status::Ok();
}

Status TpRunner::ReserveCheckpoints(int64_t count) {
  return OnRanks([&](int r) { return models_[r]->ReserveCheckpoints(count); });
}
Status TpRunner::SaveState(SlotId slot, CheckpointId ckpt) {
  return OnRanks([&](int r) { return models_[r]->SaveState(slot, ckpt); });
}
Status TpRunner::RestoreState(CheckpointId ckpt, SlotId slot, int64_t num_tokens) {
  return OnRanks([&](int r) { return models_[r]->RestoreState(ckpt, slot, num_tokens); });
}

namespace {
Status NoTransfer() {
  return Status::Unimplemented("tensor parallel runner: sequence transfer (disaggregation) is not implemented under TP");
}
}  // namespace
Status TpRunner::ReadPages(std::span<const PageId>, std::span<std::byte>) { return NoTransfer(); }
Status TpRunner::WritePages(std::span<const PageId>, std::span<const std::byte>) { return NoTransfer(); }
Status TpRunner::ReadSlotState(SlotId, std::span<std::byte>) { return NoTransfer(); }
Status TpRunner::WriteSlotState(SlotId, std::span<const std::byte>, int64_t) { return NoTransfer(); }

}  // namespace gyre::parallel

#endif  // GYRE_CUDA && GYRE_HAVE_DEVCOMM

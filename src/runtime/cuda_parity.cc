#include "runtime/cuda_parity.h"

#ifdef GYRE_CUDA

#include <algorithm>
#include <cmath>

#include "model/safetensors.h"
#include "ops/basic.h"
#include "ops/sampling.h"
#include "runtime/cuda_model.h"
#include "runtime/model.h"
#include "runtime/parity.h"

namespace gyre {

namespace {

std::vector<float> ToF32(const TensorView& t) { return TensorToF32(t); }

std::vector<int32_t> Greedy(const std::vector<float>& logits, int64_t vocab) {
  std::vector<int32_t> ids;
  for (size_t r = 0; r * vocab < logits.size(); ++r)
    ids.push_back(ops::Argmax(std::span<const float>(logits.data() + r * vocab, vocab)));
  return ids;
}

}  // namespace

Result<nlohmann::json> CheckCudaParity(const std::string& dir, double tol) {
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<Model> cpu, Model::Load(dir));
  const ModelConfig& c = cpu->config();
  const int64_t V = c.vocab_size;
  CudaModelOptions o;
  o.max_seqs = 8;
  o.max_batch_tokens = 512;
  o.kv_tokens = 4096;
  o.page_tokens = 16;
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> gpu_model, CudaModel::FromHost(c, cpu->weights(), o));
  RunnerSession gpu_session(*gpu_model);
  RunnerSession* gpu = &gpu_session;
  SampleSpec greedy;
  greedy.enabled = true;
  std::vector<SampledToken> sampled;
  nlohmann::json rep;
  rep["model"] = dir;
  rep["tolerance"] = tol;
  bool pass = true;

  const std::string golden = dir + "/golden_fp32.safetensors";
  GYRE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(golden));
  const auto& t = file->tensors();
  auto ids_it = t.find("input_ids");
  auto lg_it = t.find("logits");
  auto gr_it = t.find("greedy_ids");
  if (ids_it == t.end() || lg_it == t.end() || gr_it == t.end())
    return Status::InvalidArgument(golden + " lacks input_ids, logits or greedy_ids");
  std::vector<int32_t> ids;
  for (float v : ToF32(ids_it->second)) ids.push_back(static_cast<int32_t>(v));
  const std::vector<float> want = ToF32(lg_it->second);

  // 1. Full forward, every row.
  {
    GYRE_ASSIGN_OR_RETURN(int s, gpu->NewSequence());
    RunnerSession::Input in{s, ids, {}, true};
    std::vector<float> got;
    GYRE_RETURN_IF_ERROR(gpu->Step(std::span<const RunnerSession::Input>(&in, 1), nullptr, &got));
    gpu->Release(s);
    SequenceState st = cpu->NewSequence();
    SeqInput ci{&st, ids, true};
    std::vector<float> ref;
    GYRE_RETURN_IF_ERROR(cpu->Forward(std::span<const SeqInput>(&ci, 1), &ref));
    const ops::Diff dg = ops::Compare(got, want), dc = ops::Compare(got, ref);
    rep["golden_logits"] = {{"rel_l2", dg.rel_l2}, {"max_abs", dg.max_abs}, {"tokens", ids.size()}};
    rep["cpu_logits"] = {{"rel_l2", dc.rel_l2}, {"max_abs", dc.max_abs}};
    pass &= dg.rel_l2 <= tol && dc.rel_l2 <= tol;
  }
  // 2. Greedy continuation of the golden prompt.
  {
    std::vector<int32_t> golden_greedy;
    for (float v : ToF32(gr_it->second)) golden_greedy.push_back(static_cast<int32_t>(v));
    const size_t prompt_len = std::min<size_t>(40, ids.size());
    std::vector<int32_t> prompt(ids.begin(), ids.begin() + prompt_len);
    GYRE_ASSIGN_OR_RETURN(int s, gpu->NewSequence());
    SequenceState st = cpu->NewSequence();
    std::vector<int32_t> g_ids, c_ids, next;
    std::vector<float> lg;
    RunnerSession::Input in{s, prompt, greedy};
    GYRE_RETURN_IF_ERROR(gpu->Step(std::span<const RunnerSession::Input>(&in, 1), &sampled));
    next = {sampled[0].id};
    SeqInput ci{&st, prompt, false};
    GYRE_RETURN_IF_ERROR(cpu->Forward(std::span<const SeqInput>(&ci, 1), &lg));
    int32_t cn = Greedy(lg, V).back();
    for (size_t i = 0; i < golden_greedy.size(); ++i) {
      g_ids.push_back(next[0]);
      c_ids.push_back(cn);
      if (i + 1 == golden_greedy.size()) break;
      int32_t gi = next[0];
      RunnerSession::Input d{s, std::span<const int32_t>(&gi, 1), greedy};
      GYRE_RETURN_IF_ERROR(gpu->Step(std::span<const RunnerSession::Input>(&d, 1), &sampled));
      next = {sampled[0].id};
      SeqInput cd{&st, std::span<const int32_t>(&cn, 1), false};
      GYRE_RETURN_IF_ERROR(cpu->Forward(std::span<const SeqInput>(&cd, 1), &lg));
      cn = Greedy(lg, V).back();
    }
    gpu->Release(s);
    rep["greedy"] = {{"prompt_tokens", prompt_len}, {"gpu", g_ids}, {"cpu", c_ids}, {"golden", golden_greedy},
                     {"match_golden", g_ids == golden_greedy}, {"match_cpu", g_ids == c_ids}};
    pass &= g_ids == golden_greedy && g_ids == c_ids;
  }
  // 3. Ragged steps: A prefills 13 then decodes; B prefills in pieces of 7 then decodes; C starts
  // with a single-token prefill in step 2. Token ids come from the golden input (no feedback).
  {
    struct Piece {
      int who, from, len;
    };
    const std::vector<std::vector<Piece>> steps = {
        {{0, 0, 13}, {1, 0, 7}},
        {{0, 13, 1}, {1, 7, 7}, {2, 0, 1}},
        {{0, 14, 1}, {1, 14, 1}, {2, 1, 1}},
        {{2, 2, 9}, {0, 15, 1}, {1, 15, 1}},
        {{1, 16, 1}, {2, 11, 1}, {0, 16, 1}},
    };
    int gs[3];
    std::vector<SequenceState> cs;
    for (int i = 0; i < 3; ++i) {
      GYRE_ASSIGN_OR_RETURN(gs[i], gpu->NewSequence());
      cs.push_back(cpu->NewSequence());
    }
    double worst = 0;
    for (const auto& step : steps) {
      std::vector<RunnerSession::Input> gb;
      std::vector<SeqInput> cb;
      for (const Piece& p : step) {
        if (p.from + p.len > static_cast<int>(ids.size())) return Status::InvalidArgument("golden input too short");
        std::span<const int32_t> sp(ids.data() + p.from, p.len);
        gb.push_back({gs[p.who], sp, {}, true});
        cb.push_back({&cs[p.who], sp, true});
      }
      std::vector<float> gl, cl;
      GYRE_RETURN_IF_ERROR(gpu->Step(gb, nullptr, &gl));
      GYRE_RETURN_IF_ERROR(cpu->Forward(cb, &cl));
      worst = std::max(worst, ops::Compare(gl, cl).rel_l2);
    }
    for (int i = 0; i < 3; ++i) gpu->Release(gs[i]);
    rep["ragged_batch"] = {{"steps", steps.size()}, {"worst_rel_l2", worst}};
    pass &= worst <= tol;
  }
  rep["pass"] = pass;
  return rep;
}

}  // namespace gyre

#endif  // GYRE_CUDA

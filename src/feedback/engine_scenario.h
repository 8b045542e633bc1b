// Engine-level gate scenarios (issue 20 item 1): a load pattern driven through the real engine —
// its scheduler, admission, chunked prefill, preemption and cancellation — instead of the
// model's forward (feedback/bench.h RunScenario's other kinds), so that scheduling faults can
// fail a gate. Kind "engine_load", fields (all optional but `decodes` or `prompts`):
//
//   decodes, decode_prompt_len, decode_tokens   requests submitted first, which then decode
//   prompts, prompt_len, max_tokens             requests that arrive among them, after
//   arrival_ms (between arrivals; 0: a burst)   the first decode token
//   cancel_every (0: none)                      cancel every k-th arriving request right after its
//                                               first token (cancellations among running work)
//   max_num_seqs, max_num_batched_tokens,       the engine's options (EngineOptions; CPU runner)
//   kv_memory (bytes) or kv_pages (pages of this
//   model; few → memory pressure),
//   kv_page_tokens, overlap_steps
//
// Metrics (one sample per repeat; gate predicates name them "<scenario>.<metric>"):
//   ttft_ms_p50, ttft_ms_p99          all requests, Submit → first token
//   arrival_ttft_ms_p99               the arriving prompts only
//   itl_ms_p50, itl_ms_p99            gaps between consecutive tokens of the first `decodes`
//                                     requests while the arrivals run (stalls of running work)
//   itl_p99_over_p50                  their tail over their median gap
//   stall_share                       the longest gap of a running decode inside the arrivals'
//                                     prefill window (first arrival → last arriving prompt's
//                                     first token), over that window: a unit-free scheduling
//                                     signal (chunked prefill: about one chunk's share; a step
//                                     that prefills every arrival at once: about 1)
//   max_queue_ms                      the longest Submit → first admission (starvation)
//   preemptions                       EngineStats::num_preemptions during the run
//   fairness                          Jain's index of the decode requests' token rates (1: equal)
//   completed, errors                 requests that ended stop/length (or cancelled as asked) / kError
//   leaked_pages, leaked_slots        pages and slots in use after the engine drained (must be 0)
//   ms, tok_s                         wall time, generated tokens per second
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "runtime/model.h"

namespace gyre::feedback {

Result<std::map<std::string, double>> RunEngineScenario(const Model& model, const nlohmann::json& spec, int repeat);

}  // namespace gyre::feedback

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
//   long_prompts (0: none), long_prompt_len     requests submitted after the decodes started and
//   (2048), long_max_tokens (2)                 before the arrivals, which begin once the engine
//                                               has prefilled part of them: short requests arriving
//                                               during a long chunked prefill (needs prompts >= 1)
//   max_num_seqs, max_num_batched_tokens,       the engine's options (EngineOptions; CPU runner)
//   long_prefill_token_threshold (default half
//   the step budget, as `gyre serve`; 0: off),
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
//   long_ttft_ms                      (long_prompts > 0) the longest long prompt's TTFT
//   long_ttft_ratio                   (long_prompts > 1) the shortest long TTFT over the longest:
//                                     long prefills that share the budget finish together (about
//                                     1); one after the other, the first at about 1/long_prompts
//   arrivals_during_long              arrivals submitted before the last long prompt's first token
//   arrivals_started_before_long      how many of them had their first token before the last long
//                                     prompt's (an order, not a time: all of them when a waiting
//                                     request gets budget during a long prefill, none when not)
//   long_prefill_ttft_share           the longest TTFT of those arrivals over the long prefill's span
//                                     (first long Submit → last long first token): a request
//                                     admitted but given no prefill budget until the long prompt is
//                                     done reads about 1; one that starts at the next step reads a
//                                     few steps' share (admission is not enough: this is the fault
//                                     max_queue_ms missed, found by the 1M-token run of issue 22)
//   long_prefill_e2e_share            the same for their last token (their decode steps also wait
//                                     if decodes are not scheduled before prefill pieces)
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

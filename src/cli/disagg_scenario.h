// Gate scenario kind "disagg_prefill" (issue 12 item 6, the seeds' gate): the prefill throughput
// of a prefill instance with the cache transfer on, against the same instance with it off, at
// equal load. It drives the real pieces of `gyre serve --role prefill`: an Engine and a
// cli::DisaggNode, whose sink exports each prefilled sequence on the engine thread and sends it
// on a transfer thread (TCP loopback, the full protocol: XXH64 per piece, Ack) to a
// DisaggNode in the decode role in this process (its receivers verify every piece; nothing is
// decoded). With the transfer off the same requests run on the same engine with max_tokens 1:
// the engine frees the cache after the first token. Lives in cli because DisaggNode does
// (feedback's own scenarios cannot see it); `gyre gate` hands this kind here.
//
// Fields (all optional):
//   transfer (true)                 on: through the prefill DisaggNode; off: plain requests
//   prompts (16), prompt_len (256)  a burst of `prompts` random prompts (fresh per repeat), after
//                                   one untimed request through the same path (the instance is
//                                   measured warm: link connected, buffers made)
//   arrival_ms (0)                  gap between submissions (0: all at once)
//   link_bytes_per_s (0: TCP as is) the link's rate, shared by its connections (LinkPacer): the
//                                   sends go through PacedConnections over TCP, so a small model's
//                                   transfer can take the share of the prefill time the full
//                                   model's takes
//   max_num_seqs, max_num_batched_tokens, kv_page_tokens, kv_memory (bytes)   EngineOptions
//   backend ("cpu")                 "cuda": the engine runs on a CudaModel of the same weights
//                                   (GPU builds; bf16_weights, kv_tokens fields size it)
//
// Metrics (one sample per repeat):
//   tok_s          prompt tokens over first submission → last first token: prefill throughput
//   done_tok_s     the same to the last request's end (transfer on: after its Ack and release)
//   ttft_ms_p50, e2e_ms_p50
//   transfers, transfer_failures    completed / failed sends (transfer on; 0 when off)
//   transfer_bytes                  bytes sent
//   transfer_links                  links the prefill node opened to the decode node (one per
//                                   transfer thread that found the others busy: up to 2)
//   send_overlap                    the share of the transfer threads' send time (trace spans
//                                   "transfer.send") that overlapped a forward ("step" spans):
//                                   1 = fully hidden behind compute (off: 1 by definition)
//   exposed_send_share              send time not overlapped by compute, over the wall time
//   engine_export_ms                the engine thread's time in the hand-off ("engine.export"
//                                   spans, summed): the image copy on the CPU, a queueing on the GPU
//   transfer_read_ms, transfer_send_ms   the transfer threads' time reading images (GPU; on the
//                                   CPU the read is the engine's) and sending them to their Ack
//   wall_ms                         first submission to the last request's end
//   completed, errors               requests that ended stop/length / any other way
//   leaked_pages, leaked_slots      pages and slots in use after the engine drained (must be 0)
//
// Tracing is on during both modes (equal overhead); the scenario clears the span buffers.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "runtime/model.h"

namespace gyre::cli {

Result<std::map<std::string, double>> RunDisaggPrefillScenario(const Model& model, const nlohmann::json& spec,
                                                               int repeat);

}  // namespace gyre::cli

// `gyre router`: the front of disaggregated prefill/decode (docs/disaggregation.md).
//
//   gyre router --prefill URL... --decode URL... [--host 127.0.0.1] [--port 8000]
//               [--http-threads N] [--timeout-s S] [--poll-ms MS]
//
// It speaks the OpenAI API to clients (POST /v1/chat/completions and /v1/completions, stream and
// not; GET /v1/models, /health, /disagg/status) and forwards to `gyre serve --role prefill` and
// `--role decode` instances. Per request: pick a prefill and a decode instance (fewest queued and
// running requests, as each reports on GET /disagg/status, polled every --poll-ms, plus the
// router's own requests in flight there; for decode then the most free KV pages), post the body to
// the prefill with a fresh transfer id and the decode's transfer address (stream off); the
// prefill runs the prompt, sends the cache and answers 200 only once the decode instance
// acknowledged it; then post the body to the decode instance with the transfer id and relay its
// answer: SSE chunks are written to the client as the decode instance produces them.
//
// Errors: an instance's error answer is passed through with its status and body (a failed cache
// transfer is the prefill's 503); an unreachable instance is a 502, no instance of a role
// available a 503; nothing of a request is written before the decode instance answered 200. A
// decode instance dying mid-stream ends the stream with an error event.
//
// Once listening it prints "gyre router: listening on http://HOST:PORT". SIGINT/SIGTERM stop it.
#pragma once

#include <functional>

namespace CLI {
class App;
}  // namespace CLI

namespace gyre::cli {

void AddRouterCommand(CLI::App& app, std::function<int()>* runner);

}  // namespace gyre::cli

// `gyre serve`: the OpenAI-compatible HTTP server (src/serve/server.h) over the engine.
//
//   gyre serve [--model DIR] [--host 127.0.0.1] [--port 8000] [--served-model-name NAME]
//              [--api-key KEY] [--max-num-seqs N] [--kv-memory BYTES] [--max-num-batched-tokens N]
//              [--kv-page-tokens N] [--max-waiting N] [--max-model-len N [--allow-long-max-model-len]]
//              [--chat-template FILE] [--http-threads N] [--act f32|bf16]
//              [--allowed-origins LIST [--allowed-methods LIST] [--allowed-headers LIST]]
//              [--log-level debug|info|warning|error] [--log-format text|json] [--disable-log-requests]
//              [--role both|prefill|decode|local-pair [--transfer-port N]]
//
// Without --api-key the key comes from $GYRE_API_KEY (read once, at startup). --max-model-len is
// capped by config.json's max_position_embeddings (a larger value is a usage error unless
// --allow-long-max-model-len). The access log (one line per request) goes to stderr; docs/serve.md
// ("Launch flags") says what each of these does.
//
// --model defaults to tests/fixtures/glm5_mini (relative to the working directory); --port 0 picks
// a free port. --kv-memory takes a byte count with an optional suffix (K, M, G, T: powers of 1024;
// KB/MB/GB: powers of 1000). The chat template is the first of: --chat-template FILE, the
// model's tokenizer_config.json "chat_template", the bundled GLM template
// (src/serve/testdata/chat_templates/glm5.jinja, looked up relative to the working directory and,
// if the build defines GYRE_SOURCE_DIR, to the source tree).
//
// Once listening it prints one line to stdout that starts with "gyre serve: listening on
// http://HOST:PORT" (scripts parse the port from it). SIGINT/SIGTERM shut it down gracefully
// (stop accepting, end in-flight requests, stop the engine) and it exits 0. Exit codes: 0 after a
// clean shutdown, 1 on a startup failure (bad model folder, port in use, ...), 2 on usage errors.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace gyre::cli {

// Registers `serve` on `app` (the lead's convention, as AddFeedbackCommands): when it is selected
// after app.parse(), `*runner` holds the function that runs it and returns the exit code.
void AddServeCommand(CLI::App& app, std::function<int()>* runner);

// Parses a byte count with an optional suffix: "4096", "64M", "1G", "1.5GiB", "500MB".
// nullopt for anything else (negative, empty, unknown suffix, overflow).
std::optional<int64_t> ParseByteSize(const std::string& text);

}  // namespace gyre::cli

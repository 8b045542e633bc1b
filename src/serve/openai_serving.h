// The OpenAI generation endpoints over an Engine: POST /v1/chat/completions, /v1/completions and
// /v1/responses (a chat request in other shapes: responses_protocol.h, responses_output.h).
//
// One request: Prepare (parse and validate the body, build the prompt: chat renders the chat
// template, then tokenizes with special tokens parsed; CPU-heavy, run on a worker, see
// work_pool.h) → Submit on the exchange's strand (check the context length, Engine::Submit with a
// sink) → answer. The sink posts every engine event to the request's HttpExchange strand
// (the engine thread never waits on the network); there the text is detokenized incrementally,
// stop sequences are matched, and either SSE chunks are written (stream) or one JSON response is
// sent at the end. A client that disconnects, or reads too slowly, makes the exchange abort and
// the request is cancelled in the engine.
//
// Thread safety: Prepare and the prompt builders may run on any thread; Submit runs on the
// exchange's strand. The object itself is immutable after construction and shared by all requests.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "serve/access_log.h"
#include "serve/http_server.h"
#include "serve/image_inputs.h"
#include "serve/metrics.h"
#include "serve/openai_output.h"
#include "serve/openai_protocol.h"
#include "tokenizer/tokenizer.h"

namespace gyre::serve {

using Clock = std::chrono::steady_clock;

// Renders a chat template context ({"messages", "add_generation_prompt", "tools", "bos_token",
// "eos_token", ...chat_template_kwargs}) to the prompt text. Errors: InvalidArgument.
using ChatRenderFn = std::function<Result<std::string>(const Json& context)>;

// Disaggregated prefill/decode (docs/disaggregation.md): what the router asks of an instance for
// one request, from its X-Gyre-Transfer-Id / X-Gyre-Transfer-To headers.
struct DisaggTicket {
  uint64_t transfer_id = 0;  // 0 with images_to set: an encode request (no cache moves)
  std::string send_to;  // set: prefill and send the cache to this HOST:PORT; empty: decode an imported cache
  // Encode–prefill–decode (docs/vision.md "Encode role"), X-Gyre-Images-Id: the id of the image
  // rows an encode instance sent (0: none).
  uint64_t images_id = 0;
  // X-Gyre-Images-To, on an encode instance: encode the request's images and send their rows as
  // images_id to these transfer addresses (HOST:PORT), then answer without generating.
  std::vector<std::string> images_to;
};

// Implemented by `gyre serve --role prefill|decode` (cli/disagg_node.h).
class DisaggHandler {
 public:
  virtual ~DisaggHandler() = default;
  // Submits one request of a ticket: its sink gets the engine events as from Engine::Submit.
  // Errors as Engine::Submit; NotFound when no verified cache arrived for the ticket (decode).
  virtual Result<RequestId> Submit(RequestParams params, std::shared_ptr<RequestSink> sink,
                                   const DisaggTicket& ticket) = 0;
  // Encode role: sends the encoded images of one request (`bytes[i]`: image i's bytes, `images[i]`
  // its rows) as `id` to every address in `to`, waiting for each acknowledgement. Unavailable
  // naming the address that failed; InvalidArgument on an instance that is not an encoder.
  virtual Status SendImages(uint64_t id, const std::vector<std::string>& to,
                            const std::vector<std::vector<uint8_t>>& bytes,
                            const std::vector<EncodedImage>& images) = 0;
  // A target of an encoder: the rows sent as `id`, checked against the request's own images
  // (`bytes`: their count and each image's XXH64). Unavailable when nothing arrived in time;
  // InvalidArgument when the rows are not those images' (or another tower's).
  virtual Result<std::vector<EncodedImage>> TakeImages(uint64_t id, const std::vector<std::vector<uint8_t>>& bytes) = 0;
  // Fields for GET /disagg/status (role, transfer counts, bytes held).
  virtual Json StatusJson() const = 0;
  // Prometheus text appended to /metrics; `labels` as in HistogramText.
  virtual std::string Metrics(const std::string& labels) const = 0;
};

struct ServingConfig {
  Engine* engine = nullptr;              // borrowed, started
  const Tokenizer* tokenizer = nullptr;  // borrowed
  TokenizerConfig tokenizer_config;      // bos/eos strings, add_bos_token
  ChatRenderFn render_chat;              // empty: chat requests get 500
  std::string served_model_name;
  ServeMetrics* metrics = nullptr;       // borrowed
  int64_t default_completion_max_tokens = 16;  // /v1/completions without max_tokens (OpenAI's 16)
  // The model's EOS ids. A finishing EOS or stop_token_ids token adds no text unless the request
  // sets include_stop_str_in_output (vLLM's rule).
  std::vector<int32_t> eos_token_ids;
  // The vision tower and image-input options (serve/image_inputs.h); null: chat requests with
  // image parts are refused (a text-only model, or a backend without image support).
  std::shared_ptr<const ImageEncoder> images;
  std::string images_refused_reason;  // said in that refusal
  DisaggHandler* disagg = nullptr;  // --role prefill|decode: requests with a DisaggTicket go there
};

// transformers' continue_final_message: `rendered` (a conversation rendered without a generation
// prompt) cut right after the last occurrence of `content` (the final message's text), so the
// model continues that message; trailing whitespace the template trimmed stays trimmed.
// InvalidArgument naming continue_final_message when the template did not render `content`.
Result<std::string> CutAfterFinalMessage(const std::string& rendered, const std::string& content);

// What a chat answer is parsed for, from the request and its rendered `prompt`: the reasoning
// split unless chat_template_kwargs has enable_thinking false (starting inside the block when the
// prompt ends with <think>), and GLM tool calls when tools were offered in GLM's markup (the
// prompt holds "<arg_key>", as the GLM templates' tool instructions do).
ChatParseOptions ChatParseOptionsFor(const ChatRequest& r, std::string_view prompt);

class OpenAiServing {
 public:
  explicit OpenAiServing(ServingConfig config);

  // A request parsed, validated and tokenized, ready for Submit.
  struct Prepared {
    bool chat = true;
    GenerationRequest gen;
    std::vector<int32_t> prompt;
    std::string echo;  // text the answer starts with (echo): the final assistant message, or the prompt
    ChatParseOptions parse;  // chat: reasoning and tool calls to parse out of the answer
    // /v1/responses (a chat request answered in the Responses shapes, responses_output.h): the
    // request fields its Response object repeats (ResponsesRequest::echo). Null otherwise.
    Json responses;
    std::shared_ptr<const PromptEmbeds> embeds;  // chat with images: the image rows (else null)
    std::optional<DisaggTicket> ticket;  // a request the disaggregation router sent
    int64_t images_sent = 0;  // an encode request: the images whose rows were sent (answered, not run)
  };
  // Parses a /v1/chat/completions (`chat`) or /v1/completions body and builds its prompt ids.
  // With `ticket` (the router's headers): an encode request encodes and sends its images; a
  // request with images_id takes its image rows from the encoder instead of running the tower.
  // Errors: InvalidArgument naming the field; Unavailable for a failed image transfer. Any thread.
  Result<Prepared> Prepare(bool chat, std::string_view body, const DisaggTicket* ticket = nullptr) const;
  // The same for a /v1/responses body (responses_protocol.h): a chat prompt, `responses` set.
  Result<Prepared> PrepareResponses(std::string_view body) const;
  // Submits a prepared request; the answer goes to `ex`, now or later. `arrival` is when the
  // request was read (TTFT and end-to-end latency start there). `record` (may be null) gets the
  // response id, and the token counts before the response completes (or once the client is
  // gone). On the exchange's strand.
  void Submit(Prepared request, std::shared_ptr<HttpExchange> ex, Clock::time_point arrival,
              std::shared_ptr<RequestRecord> record = nullptr) const;

  // The prompt ids of a chat request (template + tokenizer; image placeholders expanded to their
  // token counts, the tower not run). Errors: InvalidArgument.
  Result<std::vector<int32_t>> ChatPromptIds(const ChatRequest& r) const;
  // The prompt text of a chat request (the template rendered, cut for continue_final_message).
  Result<std::string> ChatPromptText(const ChatRequest& r) const;
  // The prompt ids of a completion request (text is tokenized; BOS added if the tokenizer config
  // asks for it).
  Result<std::vector<int32_t>> CompletionPromptIds(const CompletionRequest& r) const;

  // POST /tokenize and /detokenize (tokenization.h): the answer's JSON. Errors: InvalidArgument
  // naming the field, NotFound (ModelNotFound) for another model's name. Any thread.
  Result<Json> Tokenize(std::string_view body) const;
  Result<Json> Detokenize(std::string_view body) const;

  const ServingConfig& config() const { return cfg_; }

 private:
  // Tokenizes prompt text (special tokens parsed), with the tokenizer's BOS first when `add_bos`
  // and its config asks for one. InvalidArgument naming `field`, also when there are no ids.
  Result<std::vector<int32_t>> TextPromptIds(const std::string& text, bool add_bos, const char* field) const;
  // TextPromptIds that allows an empty result.
  Result<std::vector<int32_t>> EncodeText(const std::string& text, bool add_bos, const char* field) const;
  // NotFound unless `model` is empty or the served name.
  Status CheckModel(const std::string& model) const;
  // Validates the model name and the context length and fills the engine parameters.
  // A chat prompt with images (r.images non-empty): fetched, encoded, expanded (image_inputs.h).
  // The bytes of r.images (non-empty), fetched by their URLs. InvalidArgument naming the image
  // field when this server takes no images, too many are sent, or a URL is refused.
  Result<std::vector<std::vector<uint8_t>>> ImageBytes(const ChatRequest& r) const;
  // The prompt ids of the rendered `text` with image i's placeholder expanded to images[i]'s
  // token count, and its rows (BuildImagePrompt with this server's tokenizer).
  Result<ImagePrompt> ExpandImages(const ChatRequest& r, const std::string& text,
                                   const std::vector<EncodedImage>& images) const;
  // With a ticket: sent to an encoder's targets, or taken from an encoder (Prepare).
  Result<ImagePrompt> ChatImagePrompt(const ChatRequest& r, const std::string& text, const DisaggTicket* ticket) const;
  Result<RequestParams> BuildParams(bool chat, const GenerationRequest& gen, std::vector<int32_t> prompt) const;

  // The vocabulary's token trie for structured output, built on first use (thread-safe).
  std::shared_ptr<const structured::TokenTrie> Trie() const;
  // The compiled grammar of `spec`: shared by requests with the same constraint (the last
  // kGrammarCacheSize used), so their per-state masks are computed once. Thread-safe.
  Result<std::shared_ptr<structured::Grammar>> CompiledGrammar(const structured::ConstraintSpec& spec) const;
  static constexpr size_t kGrammarCacheSize = 8;

  const ServingConfig cfg_;
  mutable std::once_flag trie_once_;
  mutable std::shared_ptr<const structured::TokenTrie> trie_;
  mutable std::mutex grammar_mu_;
  // Most recently used first: (the constraint's regex, its grammar). Guarded by grammar_mu_.
  mutable std::vector<std::pair<std::string, std::shared_ptr<structured::Grammar>>> grammars_;
};

// Sends `e` as an OpenAI error response (with Retry-After for 429).
void RespondError(HttpExchange& ex, const ApiError& e);
// Sends `body` as a 200 application/json response.
void RespondJson(HttpExchange& ex, const Json& body, int status = 200);

}  // namespace gyre::serve

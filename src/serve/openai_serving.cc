// Generation endpoints. Sections: responses; GenerationRun (one request's life on its strand) and
// its engine sink; OpenAiServing (prompt building, validation, submit).
#include "serve/openai_serving.h"

#include <algorithm>
#include <ctime>
#include <random>

#include "model/config.h"
#include "serve/openai_output.h"
#include "serve/responses_output.h"
#include "serve/responses_protocol.h"
#include "serve/tokenization.h"
#include "structured/regex.h"

namespace gyre::serve {

// ---- responses --------------------------------------------------------------------------------

void RespondError(HttpExchange& ex, const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = e.Body();
  if (e.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
  ex.Respond(std::move(r));
}

void RespondJson(HttpExchange& ex, const Json& body, int status) {
  HttpResponse r;
  r.status = status;
  r.body = DumpJson(body);
  ex.Respond(std::move(r));
}

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- GenerationRun ----------------------------------------------------------------------------

// One request after a successful Submit. Every method runs on the exchange's strand.
class GenerationRun : public std::enable_shared_from_this<GenerationRun> {
 public:
  struct Setup {
    bool chat = true;
    bool stream = false;
    bool include_usage = false;
    ResponseMeta meta;
    int64_t prompt_tokens = 0;
    Clock::time_point arrival;
    OutputOptions output;
    std::string echo;  // sent before the generated text
    ChatParseOptions parse;  // chat: what the answer is parsed for
    std::shared_ptr<RequestRecord> record;  // may be null
    // /v1/responses: the answer in the Responses shapes (chat is true); null otherwise.
    std::shared_ptr<ResponsesOutput> responses;
  };

  GenerationRun(const ServingConfig& cfg, std::shared_ptr<HttpExchange> ex, Setup s)
      : cfg_(cfg), ex_(std::move(ex)), s_(std::move(s)), out_(*cfg.tokenizer, s_.output), parser_(s_.parse) {}

  // Called right after Submit succeeded, still inside the handler (so before any event).
  void Begin(RequestId id) {
    id_ = id;
    std::weak_ptr<GenerationRun> weak = weak_from_this();
    ex_->OnAbort([weak] {
      if (auto self = weak.lock()) self->OnClientGone();
    });
    if (!s_.stream) return;
    ex_->StartStream(200, "text/event-stream", {{"X-Request-Id", s_.meta.id}});
    if (s_.responses) {
      ex_->Write(s_.responses->Start());
      return;
    }
    if (s_.chat) {
      Write(ChatChunk(s_.meta, Json{{"role", "assistant"}, {"content", ""}}, nullptr, "", s_.include_usage));
    }
    if (s_.echo.empty()) return;
    if (s_.chat) {
      Write(ChatChunk(s_.meta, Json{{"content", s_.echo}}, nullptr, "", s_.include_usage));
    } else {
      SendDelta(TextOutput::Delta{s_.echo, Json(), false});
    }
  }

  void OnToken(const TokenEvent& ev) {
    if (done_) return;
    const auto now = Clock::now();
    if (!first_token_seen_) {
      first_token_seen_ = true;
      cfg_.metrics->ObserveTtft(Seconds(now - s_.arrival));
    } else {
      cfg_.metrics->ObserveItl(Seconds(now - last_token_));
    }
    last_token_ = now;
    TextOutput::Delta d = out_.OnToken(ev);
    SendDelta(d);
    if (d.stopped) {
      cfg_.engine->Cancel(id_);  // the engine's kCancelled finish is ignored (done_)
      Complete("stop");
    }
  }

  void OnFinish(FinishReason reason, const Status& status, const Usage& usage) {
    cfg_.metrics->ObserveEngineFinish(usage);  // also after a client left or a stop string ended it
    if (done_) return;
    if (reason == FinishReason::kError) {
      Fail(status);
      return;
    }
    TextOutput::Delta d = out_.Finish();
    SendDelta(d);
    switch (reason) {
      case FinishReason::kStop: Complete("stop"); break;
      case FinishReason::kLength: Complete(d.stopped ? "stop" : "length"); break;
      default: Complete("abort"); break;  // cancelled by the server (shutdown)
    }
  }

 private:
  void OnClientGone() {
    if (done_) return;
    done_ = true;
    RecordTokens();
    cfg_.engine->Cancel(id_);
    cfg_.metrics->CountFinished("abort");
    cfg_.metrics->ObserveE2e(Seconds(Clock::now() - s_.arrival));
  }

  void Write(const Json& chunk) { ex_->Write(SseData(chunk)); }

  // Chat: parses the text (in both modes: tool call ids are given as calls close); a stream sends
  // what it released. Completions: streams the text.
  void SendDelta(const TextOutput::Delta& d) {
    const bool has_lp = !d.logprobs.is_null();
    if (s_.chat) {
      SendParsed(parser_.Push(d.text), d.logprobs);
    } else if (s_.stream && (!d.text.empty() || has_lp)) {
      Write(CompletionChunk(s_.meta, d.text, has_lp ? d.logprobs : Json(nullptr), "", s_.include_usage));
    }
  }

  // One chunk per reasoning text, content text and tool call, in order; `logprobs` (may be
  // null) go with the first (a chunk with empty content carries them when nothing else does).
  void SendParsed(ChatOutputParser::Parsed p, Json logprobs) {
    if (s_.responses) {
      std::string events = s_.responses->Push(p);
      if (s_.stream && !events.empty()) ex_->Write(std::move(events));
      return;
    }
    std::vector<Json> deltas;
    if (!p.reasoning.empty()) deltas.push_back(Json{{"reasoning_content", std::move(p.reasoning)}});
    for (ToolParseEvent& e : p.events) {
      if (!e.is_call) {
        deltas.push_back(Json{{"content", std::move(e.content)}});
        continue;
      }
      call_ids_.push_back(NewResponseId("call_"));
      Json entry = {{"index", call_ids_.size() - 1}};
      entry.update(ToolCallJson(call_ids_.back(), e.call.name, e.call.arguments));
      deltas.push_back(Json{{"tool_calls", Json::array({std::move(entry)})}});
    }
    if (!s_.stream) return;
    if (deltas.empty() && !logprobs.is_null()) deltas.push_back(Json{{"content", ""}});
    for (size_t i = 0; i < deltas.size(); ++i) {
      Write(ChatChunk(s_.meta, std::move(deltas[i]), i == 0 ? std::move(logprobs) : Json(nullptr), "",
                      s_.include_usage));
    }
  }

  // The non-streamed answer's message.
  Json Message() const {
    Json calls = Json::array();
    for (size_t i = 0; i < call_ids_.size(); ++i) {
      const ParsedToolCall& c = parser_.calls()[i];
      calls.push_back(ToolCallJson(call_ids_[i], c.name, c.arguments));
    }
    return AssistantMessage(s_.echo + parser_.content(), parser_.reasoning(), std::move(calls));
  }

  // Before the response completes: the access log reads the record then.
  void RecordTokens() {
    if (s_.record) s_.record->SetTokens(s_.prompt_tokens, out_.num_tokens());
  }

  void Complete(std::string_view engine_reason) {
    done_ = true;
    RecordTokens();
    if (s_.chat) SendParsed(parser_.Finish(), nullptr);
    // OpenAI: an answer that ends in tool calls finishes with "tool_calls" (a cut one with "length").
    const bool calls = !call_ids_.empty() || (s_.responses && s_.responses->has_calls());
    const std::string_view finish_reason = calls && engine_reason == "stop" ? "tool_calls" : engine_reason;
    const int64_t completion = out_.num_tokens();
    if (s_.responses) {
      std::string events = s_.responses->Finish(finish_reason, s_.prompt_tokens, completion);
      if (s_.stream) {
        ex_->Write(std::move(events));
        ex_->EndStream();
      } else {
        RespondJson(*ex_, s_.responses->Response());
      }
    } else if (s_.stream) {
      if (s_.chat) {
        Write(ChatChunk(s_.meta, Json::object(), nullptr, finish_reason, s_.include_usage));
        if (s_.include_usage) Write(ChatUsageChunk(s_.meta, s_.prompt_tokens, completion));
      } else {
        Write(CompletionChunk(s_.meta, "", nullptr, finish_reason, s_.include_usage));
        if (s_.include_usage) Write(CompletionUsageChunk(s_.meta, s_.prompt_tokens, completion));
      }
      ex_->Write(std::string(kSseDone));
      ex_->EndStream();
    } else if (s_.chat) {
      RespondJson(*ex_, ChatResponse(s_.meta, Message(), out_.logprobs(), finish_reason, s_.prompt_tokens, completion));
    } else {
      RespondJson(*ex_, CompletionResponse(s_.meta, s_.echo + out_.text(), out_.logprobs(), finish_reason,
                                           s_.prompt_tokens, completion));
    }
    cfg_.metrics->CountFinished(engine_reason);
    cfg_.metrics->ObserveE2e(Seconds(Clock::now() - s_.arrival));
  }

  void Fail(const Status& status) {
    done_ = true;
    RecordTokens();
    ApiError e = ApiError::FromStatus(status);
    if (e.status < 500) e = ApiError::FromStatus(Status::Internal(status.message()));
    e.message = "generation failed: " + e.message;
    if (s_.responses && s_.stream) {
      ex_->Write(s_.responses->Fail(e.message));
      ex_->EndStream();
    } else if (s_.stream) {
      ex_->Write(SseData(e.ToJson()));
      ex_->Write(std::string(kSseDone));
      ex_->EndStream();
    } else {
      RespondError(*ex_, e);
    }
    cfg_.metrics->CountFinished("error");
    cfg_.metrics->ObserveE2e(Seconds(Clock::now() - s_.arrival));
  }

  const ServingConfig& cfg_;
  const std::shared_ptr<HttpExchange> ex_;
  const Setup s_;
  TextOutput out_;
  ChatOutputParser parser_;
  std::vector<std::string> call_ids_;  // of the tool calls so far, in order
  RequestId id_ = 0;
  bool done_ = false;
  bool first_token_seen_ = false;
  Clock::time_point last_token_;
};

// Engine thread → strand: never blocks, never touches the run's state directly.
class RunSink final : public RequestSink {
 public:
  RunSink(std::shared_ptr<GenerationRun> run, std::shared_ptr<HttpExchange> ex)
      : run_(std::move(run)), ex_(std::move(ex)) {}
  void OnToken(const TokenEvent& ev) override {
    ex_->Post([run = run_, ev] { run->OnToken(ev); });
  }
  void OnFinish(FinishReason reason, const Status& status, const Usage& usage) override {
    ex_->Post([run = run_, reason, status, usage] { run->OnFinish(reason, status, usage); });
  }

 private:
  const std::shared_ptr<GenerationRun> run_;
  const std::shared_ptr<HttpExchange> ex_;
};

uint64_t RandomSeed() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

}  // namespace

// ---- OpenAiServing ----------------------------------------------------------------------------

OpenAiServing::OpenAiServing(ServingConfig config) : cfg_(std::move(config)) {}

Result<std::vector<int32_t>> OpenAiServing::ChatPromptIds(const ChatRequest& r) const {
  GYRE_ASSIGN_OR_RETURN(std::string text, ChatPromptText(r));
  return TextPromptIds(text, r.gen.add_special_tokens, "messages");
}

Result<std::string> OpenAiServing::ChatPromptText(const ChatRequest& r) const {
  if (!cfg_.render_chat) return Status::Internal("the server has no chat template");
  Json ctx = Json::object();
  ctx["messages"] = r.messages;
  if (!r.tools.is_null()) ctx["tools"] = r.tools;
  ctx["add_generation_prompt"] = r.add_generation_prompt;  // false with continue_final_message
  const TokenizerConfig& tc = cfg_.tokenizer_config;
  ctx["bos_token"] = tc.bos_token ? Json(*tc.bos_token) : Json("");
  ctx["eos_token"] = tc.eos_token ? Json(*tc.eos_token) : Json("");
  for (const auto& [k, v] : r.chat_template_kwargs.items()) ctx[k] = v;  // reserved keys were refused
  auto text = cfg_.render_chat(ctx);
  if (!text.ok()) return Status::InvalidArgument("the chat template failed: " + text.error().message());
  if (r.continue_final_message) {
    GYRE_ASSIGN_OR_RETURN(*text, CutAfterFinalMessage(*text, r.messages.back()["content"].get<std::string>()));
  }
  return std::move(*text);
}

ChatParseOptions ChatParseOptionsFor(const ChatRequest& r, std::string_view prompt) {
  ChatParseOptions o;
  // The template's thinking switch: with enable_thinking false there is no think block to split.
  const Json* thinking = r.chat_template_kwargs.contains("enable_thinking") ? &r.chat_template_kwargs["enable_thinking"]
                                                                            : nullptr;
  o.split_reasoning = !(thinking && thinking->is_boolean() && !thinking->get<bool>());
  o.reasoning_starts_inside = o.split_reasoning && PromptOpensThinking(prompt);
  // Tools offered in GLM's markup (its templates describe <arg_key>): calls come back in it.
  o.parse_tool_calls = r.tools.is_array() && !r.tools.empty() && prompt.find("<arg_key>") != std::string_view::npos;
  if (o.parse_tool_calls) o.tools = r.tools;
  return o;
}

Result<std::vector<int32_t>> OpenAiServing::CompletionPromptIds(const CompletionRequest& r) const {
  if (r.prompt_is_ids) return r.prompt_ids;
  return TextPromptIds(r.prompt_text, r.gen.add_special_tokens, "prompt");
}

Result<std::vector<int32_t>> OpenAiServing::TextPromptIds(const std::string& text, bool add_bos,
                                                          const char* field) const {
  GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> out, EncodeText(text, add_bos, field));
  if (out.empty()) return FieldError(field, "tokenizes to nothing");
  return out;
}

Result<std::vector<int32_t>> OpenAiServing::EncodeText(const std::string& text, bool add_bos,
                                                       const char* field) const {
  auto ids = cfg_.tokenizer->Encode(text, /*parse_special=*/true);
  if (!ids.ok()) return FieldError(field, "cannot be tokenized: " + ids.error().message());
  std::vector<int32_t> out;
  const TokenizerConfig& tc = cfg_.tokenizer_config;
  if (add_bos && tc.add_bos_token && tc.bos_token) {
    if (auto bos = cfg_.tokenizer->TokenToId(*tc.bos_token)) out.push_back(*bos);
  }
  out.insert(out.end(), ids->begin(), ids->end());
  return out;
}

Status OpenAiServing::CheckModel(const std::string& model) const {
  if (!model.empty() && model != cfg_.served_model_name) return ModelNotFound(model);
  return Status::Ok();
}

Result<Json> OpenAiServing::Tokenize(std::string_view body) const {
  GYRE_ASSIGN_OR_RETURN(TokenizeRequest r, ParseTokenizeRequest(body));
  GYRE_RETURN_IF_ERROR(CheckModel(r.model));
  std::vector<int32_t> ids;
  if (r.chat) {
    GYRE_ASSIGN_OR_RETURN(ids, ChatPromptIds(r.chat_request));
  } else {
    GYRE_ASSIGN_OR_RETURN(ids, EncodeText(r.prompt, r.add_special_tokens, "prompt"));
  }
  return TokenizeResponse(ids, cfg_.engine->Stats().max_model_len);
}

Result<Json> OpenAiServing::Detokenize(std::string_view body) const {
  GYRE_ASSIGN_OR_RETURN(DetokenizeRequest r, ParseDetokenizeRequest(body, cfg_.tokenizer->vocab_size()));
  GYRE_RETURN_IF_ERROR(CheckModel(r.model));
  auto text = cfg_.tokenizer->Decode(r.tokens);
  if (!text.ok()) return FieldError("tokens", text.error().message());
  return DetokenizeResponse(*text);
}

Result<std::string> CutAfterFinalMessage(const std::string& rendered, const std::string& content) {
  constexpr const char* kSpace = " \t\n\r\f\v";
  const size_t first = content.find_first_not_of(kSpace);
  const size_t last = content.find_last_not_of(kSpace);
  const std::string stripped = first == std::string::npos ? "" : content.substr(first, last - first + 1);
  const size_t at = rendered.rfind(stripped);
  if (at == std::string::npos) {
    return FieldError("continue_final_message",
                      "cannot be honoured: the chat template does not render the final message's text as sent");
  }
  const std::string lstripped = first == std::string::npos ? "" : content.substr(first);
  // As transformers: keep the message's trailing whitespace if the template kept it.
  const bool kept = rendered.compare(at, lstripped.size(), content) == 0;
  return rendered.substr(0, at + (kept ? lstripped.size() : stripped.size()));
}

std::shared_ptr<const structured::TokenTrie> OpenAiServing::Trie() const {
  std::call_once(trie_once_, [&] {
    trie_ = structured::TokenTrie::FromTokenizer(*cfg_.tokenizer, cfg_.engine->config().vocab_size,
                                                 cfg_.eos_token_ids);
  });
  return trie_;
}

Result<std::shared_ptr<structured::Grammar>> OpenAiServing::CompiledGrammar(
    const structured::ConstraintSpec& spec) const {
  GYRE_ASSIGN_OR_RETURN(std::string re, structured::SpecRegex(spec));
  {
    std::lock_guard<std::mutex> l(grammar_mu_);
    for (size_t i = 0; i < grammars_.size(); ++i) {
      if (grammars_[i].first != re) continue;
      std::rotate(grammars_.begin(), grammars_.begin() + static_cast<std::ptrdiff_t>(i),
                  grammars_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return grammars_.front().second;
    }
  }
  GYRE_ASSIGN_OR_RETURN(structured::ByteDfa dfa, structured::CompileRegex(re));  // outside the lock
  auto g = std::make_shared<structured::Grammar>(std::move(dfa), Trie());
  std::lock_guard<std::mutex> l(grammar_mu_);
  grammars_.insert(grammars_.begin(), {re, g});
  if (grammars_.size() > kGrammarCacheSize) grammars_.pop_back();
  return g;
}

Result<RequestParams> OpenAiServing::BuildParams(bool chat, const GenerationRequest& g,
                                                 std::vector<int32_t> prompt) const {
  RequestParams p;
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t max_len = cfg_.engine->Stats().max_model_len;  // 0 before the engine published
  const char* where = chat ? "messages" : "prompt";
  auto too_long = [&](int64_t completion) {
    return Status::InvalidArgument(
        "This model's maximum context length is " + std::to_string(max_len) + " tokens. However, you requested " +
        std::to_string(n_prompt + completion) + " tokens (" + std::to_string(n_prompt) + " in the " + where + ", " +
        std::to_string(completion) + " in the completion). Please reduce the length of the " + where +
        " or completion.");
  };
  if (g.max_tokens) {
    p.max_tokens = *g.max_tokens;
    if (max_len > 0 && n_prompt + p.max_tokens > max_len) return too_long(p.max_tokens);
  } else if (max_len > 0) {
    if (n_prompt >= max_len) return too_long(1);
    const int64_t room = max_len - n_prompt;
    p.max_tokens = chat ? room : std::min(cfg_.default_completion_max_tokens, room);
  } else {
    p.max_tokens = chat ? 4096 : cfg_.default_completion_max_tokens;
  }
  p.prompt = std::move(prompt);
  p.sampling.temperature = g.temperature;
  p.sampling.top_p = g.top_p;
  p.sampling.top_k = g.top_k;
  p.sampling.min_p = g.min_p;
  p.sampling.seed = g.seed ? *g.seed : RandomSeed();
  p.ignore_eos = g.ignore_eos;
  p.top_logprobs = g.logprobs ? g.top_logprobs : 0;
  p.stop_ids = g.stop_token_ids;
  // A stop sequence that is exactly one token also stops in the engine (needed for special tokens,
  // whose text is skipped; harmless for others, which the text matcher drops too).
  for (const std::string& s : g.stop) {
    auto ids = cfg_.tokenizer->Encode(s, /*parse_special=*/true);
    if (ids.ok() && ids->size() == 1) p.stop_ids.push_back((*ids)[0]);
  }
  if (g.constraint) {
    auto grammar = CompiledGrammar(*g.constraint);
    if (!grammar.ok()) return FieldError(g.constraint_field, grammar.status().message());
    p.constraint = std::make_shared<structured::GrammarConstraint>(*grammar);
  }
  return p;
}

void OpenAiServing::Submit(Prepared request, std::shared_ptr<HttpExchange> ex, Clock::time_point arrival,
                           std::shared_ptr<RequestRecord> record) const {
  const bool chat = request.chat;
  const GenerationRequest& g = request.gen;
  std::vector<int32_t>& prompt = request.prompt;
  if (Status m = CheckModel(g.model); !m.ok()) {
    RespondError(*ex, ApiError::FromStatus(m));
    return;
  }
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const bool responses = !request.responses.is_null();
  const char* prompt_field = responses ? "input" : chat ? "messages" : "prompt";
  auto params = BuildParams(chat, g, std::move(prompt));
  if (!params.ok()) {
    ApiError e = ApiError::FromStatus(params.error());
    if (e.code == "context_length_exceeded") e.param = prompt_field;
    RespondError(*ex, e);
    return;
  }
  GenerationRun::Setup s;
  s.chat = chat;
  s.stream = g.stream;
  s.include_usage = g.include_usage;
  const char* prefix = responses ? "resp_" : chat ? "chatcmpl-" : "cmpl-";
  s.meta = ResponseMeta{g.request_id.empty() ? NewResponseId(prefix) : prefix + g.request_id,
                        static_cast<int64_t>(std::time(nullptr)), cfg_.served_model_name};
  s.prompt_tokens = n_prompt;
  s.arrival = arrival;
  s.output = OutputOptions{.chat = chat,
                           .logprobs = g.logprobs,
                           .top_logprobs = g.top_logprobs,
                           .skip_special = g.skip_special_tokens,
                           .stop = g.stop,
                           .include_stop_str = g.include_stop_str,
                           .stop_token_ids = g.stop_token_ids};
  if (!g.ignore_eos) {
    s.output.stop_token_ids.insert(s.output.stop_token_ids.end(), cfg_.eos_token_ids.begin(), cfg_.eos_token_ids.end());
  }
  s.echo = std::move(request.echo);
  s.parse = std::move(request.parse);
  if (g.constraint) {  // constrained from the first token: the output is the content, never reasoning or markup
    s.parse.split_reasoning = false;
    s.parse.parse_tool_calls = false;
  }
  if (s.parse.split_reasoning || s.parse.parse_tool_calls) s.output.keep_special = ChatMarkupTokens();
  if (responses) s.responses = std::make_shared<ResponsesOutput>(s.meta, std::move(request.responses));
  if (record) record->SetId(s.meta.id);
  s.record = std::move(record);
  auto run = std::make_shared<GenerationRun>(cfg_, ex, std::move(s));
  auto submitted = cfg_.engine->Submit(std::move(*params), std::make_shared<RunSink>(run, ex));
  if (!submitted.ok()) {
    ApiError e = ApiError::FromStatus(submitted.error());
    if (e.code == "context_length_exceeded") e.param = prompt_field;
    RespondError(*ex, e);
    return;
  }
  run->Begin(*submitted);
}

Result<OpenAiServing::Prepared> OpenAiServing::PrepareResponses(std::string_view body) const {
  GYRE_ASSIGN_OR_RETURN(ResponsesRequest r, ParseResponsesRequest(body));
  GYRE_ASSIGN_OR_RETURN(const std::string text, ChatPromptText(r.chat));
  Prepared p;
  p.chat = true;
  GYRE_ASSIGN_OR_RETURN(p.prompt, TextPromptIds(text, r.chat.gen.add_special_tokens, "input"));
  p.parse = ChatParseOptionsFor(r.chat, text);
  p.gen = std::move(r.chat.gen);
  p.responses = std::move(r.echo);
  return p;
}

Result<OpenAiServing::Prepared> OpenAiServing::Prepare(bool chat, std::string_view body) const {
  Prepared p;
  p.chat = chat;
  if (chat) {
    GYRE_ASSIGN_OR_RETURN(ChatRequest r, ParseChatRequest(body));
    GYRE_ASSIGN_OR_RETURN(const std::string text, ChatPromptText(r));
    GYRE_ASSIGN_OR_RETURN(p.prompt, TextPromptIds(text, r.gen.add_special_tokens, "messages"));
    p.parse = ChatParseOptionsFor(r, text);
    // vLLM's chat echo: the final message's content when it has the answer's role.
    const Json& last = r.messages.back();
    const Json content = last.value("content", Json());
    if (r.gen.echo && last["role"] == "assistant" && content.is_string()) p.echo = content;
    p.gen = std::move(r.gen);
  } else {
    GYRE_ASSIGN_OR_RETURN(CompletionRequest r, ParseCompletionRequest(body));
    GYRE_ASSIGN_OR_RETURN(p.prompt, CompletionPromptIds(r));
    if (r.gen.echo) {
      if (!r.prompt_is_ids) {
        p.echo = r.prompt_text;
      } else {
        auto text = cfg_.tokenizer->Decode(r.prompt_ids);
        if (!text.ok()) return FieldError("prompt", text.error().message());
        p.echo = std::move(*text);
      }
    }
    p.gen = std::move(r.gen);
  }
  return p;
}

}  // namespace gyre::serve

#include "cli/mcp_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json_depth.h"

extern char** environ;

namespace gyre::cli {

namespace {

constexpr const char* kLatestProtocol = "2025-11-25";
const std::vector<std::string> kProtocols = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

McpArg Str(std::string name, std::string flag, std::string desc, bool required = false) {
  return {std::move(name), "string", std::move(desc), std::move(flag), required, {}, false};
}
McpArg Int(std::string name, std::string flag, std::string desc) {
  return {std::move(name), "integer", std::move(desc), std::move(flag), false, {}, false};
}
McpArg Num(std::string name, std::string flag, std::string desc) {
  return {std::move(name), "number", std::move(desc), std::move(flag), false, {}, false};
}
McpArg Enum(std::string name, std::string flag, std::string desc, std::vector<std::string> choices,
            bool required = false) {
  return {std::move(name), "string", std::move(desc), std::move(flag), required, std::move(choices), false};
}
McpArg Out(std::string name, std::string flag, std::string desc) {
  return {std::move(name), "string", std::move(desc), std::move(flag), false, {}, true};
}

}  // namespace

nlohmann::json McpTool::InputSchema() const {
  nlohmann::json props = nlohmann::json::object(), req = nlohmann::json::array();
  for (const auto& a : args) {
    nlohmann::json p = {{"type", a.type}, {"description", a.description}};
    if (!a.choices.empty()) p["enum"] = a.choices;
    props[a.name] = p;
    if (a.required) req.push_back(a.name);
  }
  nlohmann::json s = {{"type", "object"}, {"properties", props}, {"additionalProperties", false}};
  if (!req.empty()) s["required"] = req;
  return s;
}

Result<std::vector<std::string>> McpTool::Argv(const nlohmann::json& arguments) const {
  const nlohmann::json a = arguments.is_null() ? nlohmann::json::object() : arguments;
  if (!a.is_object()) return Status::InvalidArgument("arguments must be an object");
  // Not a structured binding: clang 14 (the sanitizer and fuzz presets) cannot capture one in a lambda.
  for (const auto& item : a.items()) {
    const std::string& k = item.key();
    if (std::none_of(args.begin(), args.end(), [&](const McpArg& x) { return x.name == k; }))
      return Status::InvalidArgument("unknown argument '" + k + "' for tool " + name);
  }
  std::vector<std::string> argv = argv_prefix, positional;
  for (const auto& x : args) {
    if (!a.contains(x.name) || a[x.name].is_null()) {
      if (x.required) return Status::InvalidArgument("missing required argument '" + x.name + "'");
      continue;
    }
    const auto& v = a[x.name];
    std::string text;
    if (x.type == "string") {
      if (!v.is_string()) return Status::InvalidArgument("'" + x.name + "' must be a string");
      text = v.get<std::string>();
      if (!x.choices.empty() && std::find(x.choices.begin(), x.choices.end(), text) == x.choices.end())
        return Status::InvalidArgument("'" + x.name + "' must be one of the listed values, not '" + text + "'");
      // A value that starts with '-' would be read as a flag by the command line parser.
      if (!text.empty() && text[0] == '-') return Status::InvalidArgument("'" + x.name + "' must not start with '-'");
    } else if (x.type == "integer") {
      if (!v.is_number_integer()) return Status::InvalidArgument("'" + x.name + "' must be an integer");
      text = std::to_string(v.get<int64_t>());
    } else if (x.type == "number") {
      if (!v.is_number() || !std::isfinite(v.get<double>()))
        return Status::InvalidArgument("'" + x.name + "' must be a finite number");
      std::ostringstream os;
      os.precision(17);
      os << v.get<double>();
      text = os.str();
    } else if (x.type == "boolean") {
      if (!v.is_boolean()) return Status::InvalidArgument("'" + x.name + "' must be true or false");
      if (v.get<bool>()) argv.push_back(x.flag);
      continue;
    }
    if (x.flag.empty()) {
      positional.push_back(text);
    } else {
      argv.push_back(x.flag);
      argv.push_back(text);
    }
  }
  argv.insert(argv.end(), positional.begin(), positional.end());
  return argv;
}

std::vector<McpTool> GyreMcpTools() {
  const std::vector<std::string> backends = {"cpu", "cuda"};
  std::vector<McpTool> t;
  t.push_back({"verify_ops", "Verify ops", "Every registered op (or one) against its fp64 reference on fresh random inputs.",
               {"verify", "ops", "--json"},
               {Str("op", "--op", "only this op"), Enum("backend", "--backend", "cpu or cuda", backends),
                Int("seed", "--seed", "input seed (default random, reported)")}});
  t.push_back({"verify_parallel", "Verify a parallel plan",
               "Each op of a tensor / expert / context parallel plan sharded on in-process ranks vs unsharded.",
               {"verify", "parallel", "--json"},
               {Enum("plan", "--plan", "the plan", {"tp=2", "tp=4", "ep=2", "cp=2", "cp=4"}, true)}});
  t.push_back({"verify_model", "Verify the GPU model", "The CUDA model vs the goldens and the CPU engine on a fixture folder.",
               {"verify", "model", "--json"},
               {Str("model", "--model", "fixture folder with golden_fp32.safetensors", true),
                Num("tol", "--tol", "rel-L2 tolerance (fp32 default 1e-4)"),
                Out("trace", "--trace", "write a Chrome trace with the device timeline here")}});
  t.push_back({"verify_trace", "Verify the device timeline",
               "CUPTI tracing checked on a GPU workload with a known answer (order, streams, launch spans, graph, "
               "clocks, serialized vs overlapped copy).",
               {"verify", "trace", "--json"},
               {Out("out_dir", "--out-dir", "where the checked traces are written"),
                Int("launches", "--launches", "empty launches timed with the trace off and on")}});
  t.push_back({"bench_ceilings", "Measure ceilings", "Memory bandwidth and GEMM rate of this machine.",
               {"bench", "ceilings", "--json"}, {}});
  t.push_back({"bench_op", "Benchmark one op", "Time one op at a shape (Google Benchmark JSON with roofline).",
               {"bench", "op"},
               {Str("name", "", "op name", true), Str("shape", "--shape", "e.g. T=4096,H=4,K=64"),
                Enum("backend", "--backend", "cpu or cuda", backends), Int("repeats", "--repeats", "repeats"),
                Str("ceilings", "--ceilings", "ceilings JSON file")}});
  t.push_back({"bench_model", "Benchmark the model", "Prefill and decode tokens/s with an op breakdown.",
               {"bench", "model"},
               {Str("model", "--model", "model folder"), Str("config", "--config", "config.json (random weights)"),
                Str("batches", "--batches", "decode batch sizes, e.g. 1,4,16"),
                Int("prompt_len", "--prompt-len", "prefill prompt length (cpu)"),
                Int("context", "--context", "decode context tokens"), Int("steps", "--steps", "decode steps per run"),
                Int("repeats", "--repeats", "repeats"), Enum("backend", "--backend", "cpu or cuda", backends),
                Out("trace", "--trace", "trace prefix"), Out("out", "--out", "result JSON file")}});
  t.push_back({"generate_trace", "Trace a generation",
               "Generate from a prompt with the span recorder on (and the device timeline on cuda); the trace file "
               "is then a resource for analyze and advise.",
               {"generate", "--json"},
               {Str("model", "--model", "model folder", true), Str("prompt", "--prompt", "prompt text"),
                Int("max_tokens", "--max-tokens", "new tokens"), Num("temperature", "--temperature", "0 = greedy"),
                Int("seed", "--seed", "sampling seed"), Enum("backend", "--backend", "cpu or cuda", backends),
                {"trace", "string", "the Chrome trace file to write", "--trace", true, {}, true}}});
  t.push_back({"trace_serve_window", "Trace a running server",
               "Record a trace window of a running gyre serve started with --trace-dir (POST /debug/trace); the "
               "answer names the trace file, which analyze and advise read.",
               {"trace-window"},
               {Str("url", "--url", "the server, e.g. http://127.0.0.1:8000", true),
                Num("seconds", "--seconds", "how long to record (at most 60)"),
                Str("api_key", "--api-key", "the server's API key")}});
  t.push_back({"analyze", "Analyze a trace",
               "Per-op self time, categories, idle gaps, device kernels and gaps, overlap, % of roofline.",
               {"analyze", "--json"},
               {Str("trace", "", "Chrome trace written by gyre", true),
                Str("overlap", "--overlap", "A,B: a category, device, cpu or stream:N each"),
                Num("gap_us", "--gap-us", "device gaps shorter than this are not counted"),
                Str("ceilings", "--ceilings", "ceilings JSON file"), Int("top", "--top", "ops to list")}});
  t.push_back({"advise", "Advise from signals",
               "Ranked findings (where the time goes) with the optimization skeletons whose triggers hold.",
               {"advise", "--json"},
               {Str("input", "", "a trace or a gate result JSON", true),
                Str("skeletons", "--skeletons", "catalogue folder"), Str("ceilings", "--ceilings", "ceilings JSON")}});
  t.push_back({"skeletons", "Search skeletons", "Search the optimization-skeleton catalogue by op and words.",
               {"skeletons", "--json"},
               {Str("op", "--op", "only skeletons for this op"), Str("signal", "--signal", "words that must all appear"),
                {"prose", "boolean", "include each entry's prose", "--prose", false, {}, false}}});
  t.push_back({"gate", "Run a scenario gate", "PASS / FAIL / INCONCLUSIVE per predicate with bootstrap evidence.",
               {"gate", "--json"},
               {Str("file", "", "gate JSON (bench/gates/*.json)", true), Str("model", "--model", "model folder"),
                Str("config", "--config", "config.json (random weights)"), Int("repeats", "--repeats", "repeats"),
                Int("seed", "--seed", "seed")}});
  t.push_back({"compare", "Compare two results", "Per-metric change with noise-aware verdicts.",
               {"compare", "--json"},
               {Str("a", "", "baseline result JSON", true), Str("b", "", "candidate result JSON", true),
                Num("threshold", "--threshold", "minimum effect in percent")}});
  t.push_back({"diff", "Find the first divergence", "First layer / op where two engine configurations diverge.",
               {"diff", "--json"},
               {Str("model", "--model", "model folder", true), Str("ids", "--ids", "prompt ids 1,2,3", true),
                Str("model_b", "--model-b", "model folder for B"),
                Enum("act_a", "--act-a", "activation dtype of A", {"f32", "bf16"}),
                Enum("act_b", "--act-b", "activation dtype of B", {"f32", "bf16"}),
                Int("chunk_a", "--chunk-a", "prefill piece size of A"), Int("chunk_b", "--chunk-b", "prefill piece size of B"),
                Num("tol", "--tol", "rel-L2 tolerance")}});
  t.push_back({"inspect", "Inspect a model", "The architecture of a model folder.", {"inspect", "--json"},
               {Str("model", "--model", "model folder", true)}});
  t.push_back({"plan", "Plan GPU memory",
               "Per-GPU memory plan of a model on N GPUs under a TP / EP / PP / CP layout: weights by component, "
               "DSA cache, KDA state, activations, reserve, headroom, the sequences that fit; an impossible plan is "
               "an error with the reason. With project: decode / prefill tokens/s projected from one-GPU op costs.",
               {"plan", "--json"},
               {Str("config", "--config", "config.json of the model (HF form)"), Str("model", "--model", "model folder"),
                {"gpus", "integer", "number of GPUs", "--gpus", true, {}, false}, Str("gpu_memory", "--gpu-memory", "memory of one GPU, e.g. 141G"),
                Int("tp", "--tp", "tensor parallel ranks"), Int("ep", "--ep", "expert parallel ranks"),
                Int("pp", "--pp", "pipeline stages"), Int("cp", "--cp", "context parallel ranks"),
                Enum("weights", "--weights", "weight storage", {"bf16", "fp8", "int8"}),
                Enum("kv_cache_dtype", "--kv-cache-dtype", "DSA/MLA cache storage", {"bf16", "fp8", "int8", "fp32"}),
                Int("max_num_seqs", "--max-num-seqs", "concurrent sequences"),
                Int("max_model_len", "--max-model-len", "longest request in tokens"),
                Str("project", "--project", "a gyre bench model --backend cuda JSON to project tokens/s from")}});
  return t;
}

Result<ChildResult> RunChild(const std::string& exe, const std::vector<std::string>& argv, double timeout_s,
                             const std::atomic<bool>& cancel, const std::function<void(const std::string&)>& on_line) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Status::Internal("pipe failed");
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return Status::Internal("pipe failed");
  }
  std::vector<std::string> all = {exe};
  all.insert(all.end(), argv.begin(), argv.end());
  std::vector<char*> cargv;
  for (auto& s : all) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return Status::Internal("fork failed");
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);  // the child must not read the protocol stream
    setpgid(0, 0);
    execve(exe.c_str(), cargv.data(), environ);
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  ChildResult r;
  std::string line;
  const auto t0 = std::chrono::steady_clock::now();
  bool out_open = true, err_open = true, killed = false;
  char buf[65536];
  while (out_open || err_open) {
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    const int n = poll(fds, 2, 100);
    if (n > 0) {
      for (int i = 0; i < 2; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t got = read(fds[i].fd, buf, sizeof buf);
        if (got <= 0) {
          (i == 0 ? out_open : err_open) = false;
          fds[i].fd = -1;
          continue;
        }
        if (i == 0) {
          r.out.append(buf, static_cast<size_t>(got));
        } else {
          r.err.append(buf, static_cast<size_t>(got));
          line.append(buf, static_cast<size_t>(got));
          for (size_t nl; (nl = line.find('\n')) != std::string::npos; line.erase(0, nl + 1))
            if (on_line && nl > 0) on_line(line.substr(0, nl));
        }
      }
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!killed && (cancel.load() || elapsed > timeout_s)) {
      r.cancelled = cancel.load();
      r.timed_out = !r.cancelled;
      kill(-pid, SIGKILL);  // its whole process group
      killed = true;
    }
    if (!out_open && !err_open) break;
    if (killed) {
      // The pipes close once the group is gone.
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        close(out[0]);
        close(err[0]);
        return r;
      }
    }
  }
  close(out[0]);
  close(err[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!killed) r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

McpServer::McpServer(std::vector<McpTool> tools, std::string exe, std::function<void(const std::string&)> write,
                     double tool_timeout_s, std::string results_dir)
    : tools_(std::move(tools)),
      exe_(std::move(exe)),
      results_dir_(std::move(results_dir)),
      write_(std::move(write)),
      timeout_s_(tool_timeout_s) {}

McpServer::~McpServer() { Shutdown(); }

void McpServer::Shutdown(bool cancel) {
  std::vector<Worker> workers;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (cancel)
      for (auto& [id, flag] : running_) flag->store(true);
    workers.swap(workers_);
  }
  for (auto& w : workers)
    if (w.thread.joinable()) w.thread.join();
}

void McpServer::Reply(const Sink& sink, const nlohmann::json& id, nlohmann::json result) {
  sink({{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}});
}

void McpServer::Error(const Sink& sink, const nlohmann::json& id, int code, const std::string& message) {
  sink({{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}});
}

nlohmann::json McpServer::Resources() {
  std::set<std::string> files;
  {
    std::lock_guard<std::mutex> l(mu_);
    files = written_;
  }
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(results_dir_, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file() && it->path().extension() == ".json") files.insert(it->path().string());
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : files) {
    if (!std::filesystem::is_regular_file(f, ec)) continue;
    const auto abs = std::filesystem::absolute(f, ec).lexically_normal().string();
    list.push_back({{"uri", "file://" + abs},
                    {"name", std::filesystem::path(f).filename().string()},
                    {"mimeType", "application/json"},
                    {"size", static_cast<int64_t>(std::filesystem::file_size(f, ec))}});
  }
  return list;
}

void McpServer::Call(const Sink& sink, const nlohmann::json& id, const nlohmann::json& params) {
  if (!params.is_object() || !params.contains("name") || !params["name"].is_string())
    return Error(sink, id, -32602, "tools/call needs params.name");
  const std::string name = params["name"];
  const auto tool = std::find_if(tools_.begin(), tools_.end(), [&](const McpTool& t) { return t.name == name; });
  if (tool == tools_.end()) return Error(sink, id, -32602, "unknown tool '" + name + "'");
  auto argv = tool->Argv(params.value("arguments", nlohmann::json::object()));
  if (!argv.ok()) return Error(sink, id, -32602, argv.status().message());
  nlohmann::json token;
  if (params.contains("_meta") && params["_meta"].is_object() && params["_meta"].contains("progressToken"))
    token = params["_meta"]["progressToken"];
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  const std::string key = id.dump();
  std::vector<std::string> outputs;
  const nlohmann::json args = params.value("arguments", nlohmann::json::object());
  for (const auto& a : tool->args)
    if (a.output_path && args.contains(a.name) && args[a.name].is_string()) outputs.push_back(args[a.name]);
  std::unique_lock<std::mutex> l(mu_);
  if (running_.count(key)) {
    l.unlock();
    return Error(sink, id, -32600, "duplicate request id");
  }
  running_[key] = cancel;
  std::erase_if(workers_, [](Worker& w) {
    if (!w.done->load()) return false;
    w.thread.join();
    return true;
  });
  auto done = std::make_shared<std::atomic<bool>>(false);
  workers_.push_back({std::thread([this, sink, id, key, argv = *argv, token, cancel, outputs, name, done] {
    struct MarkDone {
      std::atomic<bool>& f;
      ~MarkDone() { f.store(true); }
    } mark{*done};
    int64_t progress = 0;
    auto on_line = [&](const std::string& line) {
      if (token.is_null()) return;
      sink({{"jsonrpc", "2.0"},
            {"method", "notifications/progress"},
            {"params", {{"progressToken", token}, {"progress", ++progress}, {"message", line}}}});
    };
    auto r = RunChild(exe_, argv, timeout_s_, *cancel, on_line);
    {
      std::lock_guard<std::mutex> l2(mu_);
      running_.erase(key);
      for (const auto& o : outputs) {
        std::error_code ec;
        if (std::filesystem::is_directory(o, ec)) {
          for (const auto& f : std::filesystem::directory_iterator(o, ec))
            if (f.path().extension() == ".json") written_.insert(f.path().string());
        } else if (std::filesystem::is_regular_file(o, ec)) {
          written_.insert(o);
        }
      }
    }
    if (!r.ok()) return Error(sink, id, -32603, r.status().message());
    if (r->cancelled) return;  // the client cancelled: no response (MCP cancellation)
    nlohmann::json result;
    std::string text = r->out;
    const bool failed = r->exit_code != 0;
    if (failed) {
      const std::string tail = r->err.size() > 4000 ? r->err.substr(r->err.size() - 4000) : r->err;
      text = (r->timed_out ? "timed out after " + std::to_string(static_cast<int>(timeout_s_)) + " s\n"
                           : name + " exited with status " + std::to_string(r->exit_code) + "\n") +
             tail + (r->out.empty() ? "" : "\n" + r->out);
    }
    result["content"] = nlohmann::json::array({{{"type", "text"}, {"text", text}}});
    if (!r->out.empty() && CheckJsonDepth(r->out, "tool output").ok()) {
      auto j = nlohmann::json::parse(r->out, nullptr, false);
      if (!j.is_discarded()) result["structuredContent"] = j.is_object() ? j : nlohmann::json{{"result", j}};
    }
    result["isError"] = failed;
    Reply(sink, id, std::move(result));
  }), done});
}

void McpServer::HandleLine(const std::string& line) {
  const Sink out = [this](const nlohmann::json& m) {
    std::lock_guard<std::mutex> l(write_mu_);
    write_(m.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  };
  if (line.find_first_not_of(" \t\r\n") == std::string::npos) return;
  if (!CheckJsonDepth(line, "message").ok()) return Error(out, nullptr, -32700, "message nests too deeply");
  nlohmann::json msg = nlohmann::json::parse(line, nullptr, false);
  if (msg.is_discarded()) return Error(out, nullptr, -32700, "parse error: not JSON");
  HandleMessage(msg, out);
}

bool McpServer::HandleMessage(const nlohmann::json& msg, Sink sink) {
  if (!msg.is_object() || msg.value("jsonrpc", "") != "2.0" || !msg.contains("method") || !msg["method"].is_string()) {
    // A response from the client (we send no requests) needs no answer; a batch or junk does.
    if (msg.is_object() && (msg.contains("result") || msg.contains("error"))) return false;
    Error(sink, msg.is_object() && msg.contains("id") ? msg["id"] : nlohmann::json(), -32600, "invalid request");
    return true;
  }
  const std::string method = msg["method"];
  const bool notification = !msg.contains("id");
  const nlohmann::json id = notification ? nlohmann::json() : msg["id"];
  if (!notification && !id.is_string() && !id.is_number_integer()) {
    Error(sink, nullptr, -32600, "id must be a string or an integer");
    return true;
  }
  const nlohmann::json params = msg.value("params", nlohmann::json::object());
  if (method == "notifications/cancelled") {
    if (params.is_object() && params.contains("requestId")) {
      std::lock_guard<std::mutex> l(mu_);
      auto it = running_.find(params["requestId"].dump());
      if (it != running_.end()) it->second->store(true);
    }
    return false;
  }
  if (notification) return false;  // notifications/initialized and others need no answer
  if (method == "initialize") {
    std::string version = kLatestProtocol;
    if (params.is_object() && params.contains("protocolVersion") && params["protocolVersion"].is_string()) {
      const std::string want = params["protocolVersion"];
      if (std::find(kProtocols.begin(), kProtocols.end(), want) != kProtocols.end()) version = want;
    }
    Reply(sink, id,
          {{"protocolVersion", version},
           {"capabilities", {{"tools", {{"listChanged", false}}}, {"resources", {{"listChanged", false}}}}},
           {"serverInfo", {{"name", "gyre"}, {"title", "gyre feedback layer"}, {"version", "0.1.0"}}},
           {"instructions",
            "Tools run gyre's feedback commands (verify, bench, trace, analyze, advise, gate, compare). Start "
            "with generate_trace or bench_model, then analyze / advise the trace; verify_ops guards changes."}});
  } else if (method == "ping") {
    Reply(sink, id, nlohmann::json::object());
  } else if (method == "tools/list") {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& t : tools_)
      list.push_back({{"name", t.name}, {"title", t.title}, {"description", t.description}, {"inputSchema", t.InputSchema()}});
    Reply(sink, id, {{"tools", list}});
  } else if (method == "tools/call") {
    Call(sink, id, params);
  } else if (method == "resources/list") {
    Reply(sink, id, {{"resources", Resources()}});
  } else if (method == "resources/read") {
    if (!params.is_object() || !params.contains("uri") || !params["uri"].is_string()) {
      Error(sink, id, -32602, "resources/read needs params.uri");
      return true;
    }
    const std::string uri = params["uri"];
    for (const auto& r : Resources()) {
      if (r["uri"] != uri) continue;
      std::ifstream in(uri.substr(7));
      std::stringstream ss;
      ss << in.rdbuf();
      Reply(sink, id,
            {{"contents", nlohmann::json::array({{{"uri", uri}, {"mimeType", "application/json"}, {"text", ss.str()}}})}});
      return true;
    }
    Error(sink, id, -32002, "resource not found: " + uri);
  } else {
    Error(sink, id, -32601, "method not found: " + method);
  }
  return true;
}

}  // namespace gyre::cli

// Test-only: the loopback HTTP client and the ServerTest fixture (a Server over a FakeEngine and
// the glm5_tiny tokenizer) shared by server_test.cc and request_fields_test.cc.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "serve/chat_template.h"
#include "serve/server.h"
#include "serve/server_fake_engine.h"

namespace gyre::serve::testing {

// ---- a blocking HTTP/1.1 client ---------------------------------------------------------------

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  Json json() const { return Json::parse(body, nullptr, false); }
  // The `data:` payloads of an SSE body, in order.
  std::vector<std::string> events() const {
    std::vector<std::string> out;
    size_t pos = 0;
    while (true) {
      const size_t end = body.find("\n\n", pos);
      if (end == std::string::npos) break;
      std::string ev = body.substr(pos, end - pos);
      if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
      pos = end + 2;
    }
    return out;
  }
};

class Client {
 public:
  explicit Client(int port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~Client() { Close(); }
  bool ok() const { return ok_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  void SendRaw(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  void Send(const std::string& method, const std::string& path, const std::string& body = "",
            std::vector<std::string> headers = {}) {
    std::string r = method + " " + path + " HTTP/1.1\r\nHost: test\r\n";
    for (auto& h : headers) r += h + "\r\n";
    if (!body.empty() || method == "POST") {
      r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    }
    r += "\r\n" + body;
    SendRaw(r);
  }

  // Reads one response (headers, then a Content-Length, chunked or until-close body).
  Reply Read(int timeout_ms = 10000) {
    Reply rep;
    std::string head;
    while (head.find("\r\n\r\n") == std::string::npos) {
      if (!Fill(timeout_ms)) return rep;
      head = buf_;
    }
    const size_t hend = buf_.find("\r\n\r\n");
    head = buf_.substr(0, hend);
    buf_.erase(0, hend + 4);
    std::istringstream hs(head);
    std::string line;
    std::getline(hs, line);
    rep.status = std::atoi(line.substr(9, 3).c_str());
    while (std::getline(hs, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const size_t c = line.find(':');
      if (c == std::string::npos) continue;
      std::string k = line.substr(0, c), v = line.substr(c + 1);
      for (auto& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      while (!v.empty() && v[0] == ' ') v.erase(0, 1);
      rep.headers[k] = v;
    }
    if (rep.headers.count("content-length")) {
      const size_t n = std::stoul(rep.headers["content-length"]);
      while (buf_.size() < n && Fill(timeout_ms)) {
      }
      rep.body = buf_.substr(0, n);
      buf_.erase(0, std::min(n, buf_.size()));
    } else if (rep.headers["transfer-encoding"] == "chunked") {
      while (true) {
        size_t eol;
        while ((eol = buf_.find("\r\n")) == std::string::npos) {
          if (!Fill(timeout_ms)) return rep;
        }
        const size_t n = std::stoul(buf_.substr(0, eol), nullptr, 16);
        while (buf_.size() < eol + 2 + n + 2) {
          if (!Fill(timeout_ms)) return rep;
        }
        rep.body += buf_.substr(eol + 2, n);
        buf_.erase(0, eol + 2 + n + 2);
        if (n == 0) break;
      }
    } else {
      while (Fill(timeout_ms)) {
      }
      rep.body = buf_;
      buf_.clear();
    }
    return rep;
  }

  // True if the server closed the connection within `timeout_ms`.
  bool ClosedByPeer(int timeout_ms) {
    while (Fill(timeout_ms)) buf_.clear();
    return eof_;
  }

 private:
  bool Fill(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char tmp[16384];
    const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  bool ok_ = false;
  bool eof_ = false;
  std::string buf_;
};

template <typename F>
bool WaitFor(F cond, int timeout_ms = 5000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

// ---- fixture ----------------------------------------------------------------------------------

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = Tokenizer::FromFile(std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny");
    ASSERT_TRUE(t.ok()) << t.error().ToString();
    tok_ = std::move(*t);
    tokenizer_config_.eos_token = "<|endoftext|>";
  }
  void TearDown() override {
    if (server_) server_->Stop(500);
  }

  // Starts a server over a FakeEngine emitting `text` (tokenized) in a loop.
  void Start(FakeEngineOptions eo = {}, ServerOptions so = {}, const std::string& text = "Hello world, this is a test.") {
    if (eo.script == FakeEngineOptions{}.script) eo.script = *tok_->Encode(text);
    engine_ = std::make_unique<FakeEngine>(eo);
    ASSERT_TRUE(engine_->Start().ok());
    so.http.port = 0;
    so.http.num_threads = 2;
    if (so.served_model_name == "gyre") so.served_model_name = "tiny";
    so.kv_page_tokens = 16;
    ServerDeps d;
    d.engine = engine_.get();
    d.tokenizer = tok_.get();
    d.tokenizer_config = tokenizer_config_;
    d.trace = trace_hooks_;
    d.images = images_;
    d.render_chat = [this](const Json& ctx) -> Result<std::string> {
      if (slow_render_ms_ > 0 && ctx["messages"][0]["content"] == "slow") {
        ++slow_renders_;
        std::this_thread::sleep_for(std::chrono::milliseconds(slow_render_ms_));
      }
      {
        std::lock_guard<std::mutex> l(last_context_mu_);  // concurrent requests render on several threads
        last_context_ = ctx;
      }
      if (template_) return template_->Render(ctx);
      std::string s = "[gMASK]<sop>";
      for (const auto& m : ctx["messages"]) {
        s += "<|" + m["role"].get<std::string>() + "|>" + (m["content"].is_string() ? m["content"].get<std::string>() : "");
      }
      if (ctx["add_generation_prompt"].get<bool>()) s += "<|assistant|>";
      return s;
    };
    auto s = Server::Create(std::move(d), so);
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    server_ = std::move(*s);
    ASSERT_TRUE(server_->Start().ok());
    port_ = server_->port();
    ASSERT_GT(port_, 0);
  }

  // Makes Start render chats with the bundled GLM-5 template instead of the "<|role|>content" fake.
  void UseGlmTemplate() {
    std::ifstream in(std::string(GYRE_SOURCE_DIR) + "/src/serve/testdata/chat_templates/glm5.jinja");
    std::stringstream ss;
    ss << in.rdbuf();
    auto t = ChatTemplate::Compile(ss.str());
    ASSERT_TRUE(t.ok()) << t.error().ToString();
    template_ = std::move(*t);
  }

  Reply Do(const std::string& method, const std::string& path, const std::string& body = "",
           std::vector<std::string> headers = {}) {
    Client c(port_);
    EXPECT_TRUE(c.ok());
    c.Send(method, path, body, std::move(headers));
    return c.Read();
  }
  Reply Post(const std::string& path, const Json& body, std::vector<std::string> headers = {}) {
    return Do("POST", path, body.dump(), std::move(headers));
  }
  static Json Chat(Json extra = Json::object()) {
    Json b = {{"model", "tiny"}, {"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 5}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
  }
  static Json Completion(Json extra = Json::object()) {
    Json b = {{"model", "tiny"}, {"prompt", "Hello"}, {"max_tokens", 5}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
  }
  // Checks the OpenAI error shape and returns error.message.
  static std::string ErrorMessage(const Reply& r) {
    const Json j = r.json();
    EXPECT_TRUE(j.is_object() && j.contains("error")) << r.body;
    if (!j.is_object() || !j.contains("error")) return "";
    const Json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string());
    EXPECT_TRUE(e["type"].is_string());
    EXPECT_TRUE(e.contains("param"));
    EXPECT_TRUE(e.contains("code"));
    return e["message"].get<std::string>();
  }

  std::unique_ptr<Tokenizer> tok_;
  TokenizerConfig tokenizer_config_;      // what Start gives the server (eos_token "<|endoftext|>")
  std::unique_ptr<ChatTemplate> template_;  // null: the fake renderer
  TraceHooks trace_hooks_;  // copied into ServerDeps by Start
  std::shared_ptr<const ImageEncoder> images_;  // likewise (null: images refused)
  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<Server> server_;
  int port_ = 0;
  Json last_context_;  // the last render's context (read by tests once their requests finished)
  std::mutex last_context_mu_;
  int slow_render_ms_ = 0;             // > 0: rendering a first message "slow" takes this long
  std::atomic<int> slow_renders_{0};   // slow renders started
};

}  // namespace gyre::serve::testing

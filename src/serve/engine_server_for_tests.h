// Test-only: a Server over the real engine and a random-weight glm5_tiny model with its tokenizer
// (header-only, not part of the gyre_serve library), for HTTP tests that need real generation.
// Failures while building it are test failures.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "engine/engine.h"
#include "runtime/random_model_for_tests.h"
#include "serve/server_test_fixture.h"

namespace gyre::serve::testing {

struct EngineServer {
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Model> model;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Server> server;

  // Random weights from `seed`; `render_chat` may be empty (chat requests then fail).
  void Start(uint64_t seed, const EngineOptions& eo, ChatRenderFn render_chat = nullptr) {
    const std::string dir = std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny";
    auto t = Tokenizer::FromFile(dir);
    ASSERT_TRUE(t.ok()) << t.error().ToString();
    tok = std::move(*t);
    std::ifstream in(dir + "/config.json");
    std::stringstream ss;
    ss << in.rdbuf();
    model = RandomModel(ss.str().c_str(), seed);
    ASSERT_TRUE(model);
    auto e = Engine::Create(*model, eo);
    ASSERT_TRUE(e.ok()) << e.error().ToString();
    engine = std::move(*e);
    ASSERT_TRUE(engine->Start().ok());
    ServerDeps d;
    d.engine = engine.get();
    d.tokenizer = tok.get();
    d.tokenizer_config.eos_token = "<|endoftext|>";
    d.render_chat = std::move(render_chat);
    ServerOptions so;
    so.http.port = 0;
    so.http.num_threads = 2;
    so.served_model_name = "tiny";
    so.kv_page_tokens = 16;
    auto s = Server::Create(std::move(d), so);
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    server = std::move(*s);
    ASSERT_TRUE(server->Start().ok());
  }
  void Stop() {
    if (server) server->Stop(500);
  }
  Reply Post(const std::string& path, const std::string& body) const {
    Client c(server->port());
    EXPECT_TRUE(c.ok());
    c.Send("POST", path, body);
    return c.Read(60000);
  }
};

}  // namespace gyre::serve::testing

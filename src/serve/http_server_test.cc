// HttpServer on its own (server_test.cc drives it through the OpenAI routes).
#include "serve/http_server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "serve/server_test_fixture.h"

namespace gyre::serve {
namespace {

// Keeps one copy of itself queued on the exchange's strand, as an engine sink's OnToken / OnFinish
// can be when the server stops.
struct Requeue {
  std::shared_ptr<HttpExchange> ex;
  void operator()() const {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ex->Post(Requeue{ex});
  }
};

// A handler still queued at Stop holds its exchange, and the exchange holds the io_context: before
// Stop destroyed such handlers nothing freed them, and LeakSanitizer reported the whole server
// (RequestFieldsTest, whose engine posted a last OnFinish just before the stop).
TEST(HttpServerTest, StopDestroysTheHandlersStillQueued) {
  std::weak_ptr<HttpExchange> seen;  // set on the io thread; read after Stop has joined it
  HttpServerOptions o;
  o.port = 0;
  o.num_threads = 1;
  auto s = HttpServer::Create(o, [&seen](HttpRequest, std::shared_ptr<HttpExchange> ex) {
    seen = ex;
    ex->Respond(HttpResponse{.body = "{}"});
    ex->Post(Requeue{ex});
  });
  ASSERT_TRUE(s.ok()) << s.error().ToString();
  std::unique_ptr<HttpServer> server = std::move(*s);
  ASSERT_TRUE(server->Start().ok());
  {
    testing::Client c(server->port());
    ASSERT_TRUE(c.ok());
    c.Send("GET", "/x");
    EXPECT_EQ(c.Read().status, 200);
  }
  server->Stop(0);
  EXPECT_TRUE(seen.expired()) << "a handler left queued at Stop still holds the exchange";
  server.reset();
  EXPECT_TRUE(seen.expired());
}

}  // namespace
}  // namespace gyre::serve

// ObservedExchange: an HttpExchange decorator that the server puts around every request's
// exchange. It adds fixed headers (CORS) to the response, full or streamed, and reports once how
// the exchange ended, for the access log and the metrics:
//   - a full response: when Respond is called (the response is queued for writing);
//   - a stream: when EndStream is called;
//   - an abort (client gone, too slow, server stopping) before either: from a task posted on the
//     exchange's strand, so OnAbort callbacks registered by the handler (which record what the
//     request did) have run first.
// The report carries the status sent (0 if none) and whether the exchange was aborted.
//
// Thread safety: as HttpExchange (any thread). The report runs on the thread that ends the
// exchange, or on its strand after an abort.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "serve/http_server.h"

namespace gyre::serve {

class ObservedExchange final : public HttpExchange {
 public:
  using HeaderList = std::vector<std::pair<std::string, std::string>>;
  struct Outcome {
    int status = 0;        // the status sent; 0 when nothing was
    bool aborted = false;  // ended by an abort, not by a complete response
  };
  using OnDone = std::function<void(const Outcome&)>;

  // `headers` are added to whatever response goes out; `on_done` (may be empty) gets the report.
  static std::shared_ptr<ObservedExchange> Wrap(std::shared_ptr<HttpExchange> inner, HeaderList headers,
                                                OnDone on_done);

  void Respond(HttpResponse response) override;
  void StartStream(int status, std::string content_type, HeaderList headers = {}) override;
  bool Write(std::string data) override { return inner_->Write(std::move(data)); }
  void EndStream() override;
  void Post(std::function<void()> fn) override { inner_->Post(std::move(fn)); }
  void OnAbort(std::function<void()> fn) override { inner_->OnAbort(std::move(fn)); }
  bool aborted() const override { return inner_->aborted(); }

 private:
  // Shared with the abort callback, which may outlive the decorator.
  struct State {
    OnDone on_done;
    std::atomic<int> status{0};
    std::atomic<bool> reported{false};
    void Report(bool aborted);
  };
  ObservedExchange(std::shared_ptr<HttpExchange> inner, HeaderList headers, std::shared_ptr<State> state);

  const std::shared_ptr<HttpExchange> inner_;
  const HeaderList headers_;
  const std::shared_ptr<State> state_;
};

}  // namespace gyre::serve

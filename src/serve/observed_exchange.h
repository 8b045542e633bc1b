// ObservedExchange: an HttpExchange decorator that the server puts around every request's
// exchange. It adds fixed headers (CORS) to the response, full or streamed.
//
// Thread safety: as HttpExchange (any thread).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "serve/http_server.h"

namespace gyre::serve {

class ObservedExchange final : public HttpExchange {
 public:
  using HeaderList = std::vector<std::pair<std::string, std::string>>;
  // `headers` are added to whatever response goes out through this exchange.
  ObservedExchange(std::shared_ptr<HttpExchange> inner, HeaderList headers);

  void Respond(HttpResponse response) override;
  void StartStream(int status, std::string content_type, HeaderList headers = {}) override;
  bool Write(std::string data) override { return inner_->Write(std::move(data)); }
  void EndStream() override { inner_->EndStream(); }
  void Post(std::function<void()> fn) override { inner_->Post(std::move(fn)); }
  void OnAbort(std::function<void()> fn) override { inner_->OnAbort(std::move(fn)); }
  bool aborted() const override { return inner_->aborted(); }

 private:
  const std::shared_ptr<HttpExchange> inner_;
  const HeaderList headers_;
};

}  // namespace gyre::serve

#include "serve/observed_exchange.h"

namespace gyre::serve {

ObservedExchange::ObservedExchange(std::shared_ptr<HttpExchange> inner, HeaderList headers)
    : inner_(std::move(inner)), headers_(std::move(headers)) {}

void ObservedExchange::Respond(HttpResponse response) {
  response.headers.insert(response.headers.end(), headers_.begin(), headers_.end());
  inner_->Respond(std::move(response));
}

void ObservedExchange::StartStream(int status, std::string content_type, HeaderList headers) {
  headers.insert(headers.end(), headers_.begin(), headers_.end());
  inner_->StartStream(status, std::move(content_type), std::move(headers));
}

}  // namespace gyre::serve

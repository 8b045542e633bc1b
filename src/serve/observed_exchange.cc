#include "serve/observed_exchange.h"

namespace gyre::serve {

void ObservedExchange::State::Report(bool aborted) {
  if (reported.exchange(true)) return;
  if (on_done) on_done(Outcome{status.load(), aborted});
}

std::shared_ptr<ObservedExchange> ObservedExchange::Wrap(std::shared_ptr<HttpExchange> inner, HeaderList headers,
                                                         OnDone on_done) {
  auto state = std::make_shared<State>();
  state->on_done = std::move(on_done);
  std::weak_ptr<HttpExchange> weak = inner;
  inner->OnAbort([state, weak] {
    // Posted again: the handler's own OnAbort callbacks (queued after this one) run first.
    if (auto ex = weak.lock()) ex->Post([state] { state->Report(/*aborted=*/true); });
  });
  return std::shared_ptr<ObservedExchange>(new ObservedExchange(std::move(inner), std::move(headers), state));
}

ObservedExchange::ObservedExchange(std::shared_ptr<HttpExchange> inner, HeaderList headers,
                                   std::shared_ptr<State> state)
    : inner_(std::move(inner)), headers_(std::move(headers)), state_(std::move(state)) {}

void ObservedExchange::Respond(HttpResponse response) {
  response.headers.insert(response.headers.end(), headers_.begin(), headers_.end());
  const int status = response.status;
  inner_->Respond(std::move(response));
  if (inner_->aborted()) return;  // dropped; the abort reports
  int none = 0;
  state_->status.compare_exchange_strong(none, status);  // the first response counts
  state_->Report(/*aborted=*/false);
}

void ObservedExchange::StartStream(int status, std::string content_type, HeaderList headers) {
  headers.insert(headers.end(), headers_.begin(), headers_.end());
  inner_->StartStream(status, std::move(content_type), std::move(headers));
  int none = 0;
  state_->status.compare_exchange_strong(none, status);
}

void ObservedExchange::EndStream() {
  inner_->EndStream();
  if (!inner_->aborted()) state_->Report(/*aborted=*/false);
}

}  // namespace gyre::serve

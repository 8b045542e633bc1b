// `gyre serve --role prefill|decode`: one instance of disaggregated prefill/decode
// (docs/disaggregation.md). The router (`gyre router`, cli/router.h) sends a request to a prefill
// instance with X-Gyre-Transfer-Id and X-Gyre-Transfer-To (the decode instance's transfer
// address), then, once that answered 200, the same request to the decode instance with
// X-Gyre-Transfer-Id alone.
//
// Prefill: the request runs with RequestParams::export_prefilled (the prompt, chunked as usual,
// and its first sampled token); the engine hands its cache to the sink, which exports the
// sequence image (DSA pages + KDA slot state + first token) on the engine thread and queues the
// send on a transfer thread; the engine keeps pages and slot until the decode side acknowledged
// (the protocol of transfer/transfer_engine.h: XXH64 per piece, Ack/Nack, retries), then frees
// them and answers the request (200 with the one token, or 503 naming the failed transfer).
// Up to send_threads TCP links per decode address (one per transfer thread at a time), one
// transfer at a time on each.
//
// Decode: listens on the transfer port; every accepted link has its TransferReceiver (which
// verifies every checksum before it hands an image out). A request with a ticket takes its
// verified image (it is there before the router asks: the router asks only after the prefill
// answered 200) and is admitted with Engine::SubmitImported: the image is written into the slot
// and pages the engine allocates, the first token is emitted, and decoding goes on unchanged.
//
// Thread safety: Submit, Status and Metrics from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "serve/metrics.h"
#include "serve/openai_serving.h"
#include "serve/work_pool.h"
#include "transfer/connection.h"
#include "transfer/sequence_image.h"
#include "transfer/tcp_connection.h"
#include "transfer/transfer_engine.h"

namespace gyre::cli {

enum class DisaggRole { kPrefill, kDecode };

struct DisaggNodeOptions {
  DisaggRole role = DisaggRole::kPrefill;
  std::string transfer_host = "127.0.0.1";  // decode: the address the transfer port binds
  int transfer_port = 0;                    // decode: 0 picks a free port
  int send_threads = 2;                     // prefill: transfers in parallel (each on its own link)
  // decode: how long a request waits for its verified image (it normally is there already).
  std::chrono::milliseconds take_timeout{2000};
  // prefill: opens the link to a decode instance's transfer address; empty: TCP (TcpConnect, 2 s
  // timeout). The transport seam: the gate scenario wraps TCP in a PacedConnection.
  std::function<Result<std::unique_ptr<transfer::Connection>>(const std::string& host, uint16_t port)> connect;
};

class DisaggNode final : public serve::DisaggHandler {
 public:
  // Borrows `engine` (started; outlives the node). Decode: binds the transfer port (Unavailable).
  static Result<std::unique_ptr<DisaggNode>> Create(Engine* engine, const DisaggNodeOptions& opts);
  ~DisaggNode() override;
  // Stops the transfer threads; held exports are released with an error. Idempotent.
  void Stop();

  // Decode: the bound transfer port.
  int transfer_port() const { return listener_ ? listener_->port() : 0; }

  Result<RequestId> Submit(RequestParams params, std::shared_ptr<RequestSink> sink,
                           const serve::DisaggTicket& ticket) override;
  serve::Json StatusJson() const override;
  std::string Metrics(const std::string& labels) const override;

  // Prefill: exports `seq` with its first token's event (`first`: its logprob and alternatives go
  // with the cache) and queues its send (the engine thread, from the sink).
  Status StartSend(RequestId id, const serve::DisaggTicket& ticket, const PrefilledSequence& seq,
                   const TokenEvent& first);

 private:
  DisaggNode(Engine* engine, const DisaggNodeOptions& opts);
  struct Link {
    // A transfer thread holds it (guarded by DisaggNode::mu_): one transfer at a time on a link,
    // so its connection and sender are the holder's alone.
    bool busy = false;
    std::unique_ptr<transfer::Connection> conn;
    std::unique_ptr<transfer::TransferSender> sender;
  };
  struct Inbound {
    std::unique_ptr<transfer::Connection> conn;
    std::unique_ptr<transfer::TransferReceiver> receiver;
  };
  // Prefill, on a transfer thread: sends and releases the engine's hold.
  void Send(RequestId id, const serve::DisaggTicket& ticket, const transfer::SequenceImage& image);
  Status SendOn(Link& link, const std::string& to, uint64_t transfer_id, const transfer::SequenceImage& image);
  // Decode: the accept loop, and the verified image of a ticket from any link.
  void AcceptLoop();
  Result<transfer::SequenceImage> Take(uint64_t transfer_id);

  Engine* const engine_;
  const DisaggNodeOptions opts_;
  std::unique_ptr<serve::WorkPool> senders_;          // prefill
  std::unique_ptr<transfer::TcpListener> listener_;   // decode
  std::thread acceptor_;
  std::atomic<bool> stop_{false};

  mutable std::mutex mu_;  // guards links_, inbound_
  std::map<std::string, std::vector<std::shared_ptr<Link>>> links_;  // by decode address: at most send_threads
  std::vector<std::shared_ptr<Inbound>> inbound_;

  // Counters (both roles; a role uses its side's).
  std::atomic<int64_t> in_flight_{0}, completed_{0}, failed_{0}, retries_{0};
  std::atomic<int64_t> bytes_{0}, pages_{0};
  std::atomic<int64_t> import_failures_{0};
  serve::Histogram latency_;
};

}  // namespace gyre::cli

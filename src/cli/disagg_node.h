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
// Encode (docs/vision.md "Encode role"): a request with X-Gyre-Images-To is prepared as usual
// (its images fetched and run through the tower, or taken from the embedding cache), and the rows
// are packed (transfer/embeds_image.h) and sent as X-Gyre-Images-Id to each address listed (the
// prefill and the decode instance), on the request's preparation thread; the answer (200) comes
// after every acknowledgement. Prefill and decode instances both listen on their transfer port,
// and a request with X-Gyre-Images-Id takes its rows from there (TakeImages), checked against the
// tower's fingerprint and each of its own images' XXH64, instead of running the tower.
//
// Thread safety: Submit, SendImages, TakeImages, Status and Metrics from any thread.
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

enum class DisaggRole { kPrefill, kDecode, kEncode };

// XXH64 of a vision tower's configuration and of some of its weights (norms and biases): image
// rows are taken only from an encoder whose tower has the same fingerprint.
uint64_t TowerFingerprint(const serve::ImageEncoder& enc);

struct DisaggNodeOptions {
  DisaggRole role = DisaggRole::kPrefill;
  std::string transfer_host = "127.0.0.1";  // prefill, decode: the address the transfer port binds
  int transfer_port = 0;                    // prefill, decode: 0 picks a free port
  uint64_t tower_fingerprint = 0;           // TowerFingerprint of this instance's tower (images)
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

  // Prefill, decode: the bound transfer port.
  int transfer_port() const { return listener_ ? listener_->port() : 0; }

  Result<RequestId> Submit(RequestParams params, std::shared_ptr<RequestSink> sink,
                           const serve::DisaggTicket& ticket) override;
  Status SendImages(uint64_t id, const std::vector<std::string>& to, const std::vector<std::vector<uint8_t>>& bytes,
                    const std::vector<serve::EncodedImage>& images) override;
  Result<std::vector<serve::EncodedImage>> TakeImages(uint64_t id,
                                                      const std::vector<std::vector<uint8_t>>& bytes) override;
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
  // A link to `to` that no other thread is using (made busy), and its release.
  std::shared_ptr<Link> AcquireLink(const std::string& to);
  void ReleaseLink(Link& link);
  // Prefill, decode: the accept loop, and the verified image of a ticket from any link (waiting up
  // to take_timeout); `what` names it in the NotFound.
  void AcceptLoop();
  Result<transfer::SequenceImage> TakeVerified(uint64_t transfer_id, const char* what);
  Result<transfer::SequenceImage> Take(uint64_t transfer_id);

  Engine* const engine_;
  const DisaggNodeOptions opts_;
  std::unique_ptr<serve::WorkPool> senders_;          // prefill
  std::unique_ptr<transfer::TcpListener> listener_;   // prefill, decode
  std::thread acceptor_;
  std::atomic<bool> stop_{false};

  mutable std::mutex mu_;  // guards links_, inbound_
  std::map<std::string, std::vector<std::shared_ptr<Link>>> links_;  // by decode address: at most send_threads
  std::vector<std::shared_ptr<Inbound>> inbound_;

  // Counters (both roles; a role uses its side's).
  std::atomic<int64_t> in_flight_{0}, completed_{0}, failed_{0}, retries_{0};
  std::atomic<int64_t> bytes_{0}, pages_{0};
  std::atomic<int64_t> import_failures_{0};
  // Image rows (encode: sent, once per address; prefill/decode: taken), and failures.
  std::atomic<int64_t> image_transfers_{0}, image_bytes_{0}, image_failures_{0};
  serve::Histogram latency_;
};

}  // namespace gyre::cli

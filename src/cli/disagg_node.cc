#include "cli/disagg_node.h"

#include <xxhash.h>

#include <charconv>
#include <chrono>
#include <string>

#include "core/trace.h"
#include "transfer/embeds_image.h"

namespace gyre::cli {

namespace {

using Ms = std::chrono::milliseconds;

// Prefill: forwards the engine's events to the request's own sink and hands the prefilled cache
// to the node.
class ExportSink final : public RequestSink {
 public:
  ExportSink(std::shared_ptr<RequestSink> inner, DisaggNode* node, serve::DisaggTicket ticket)
      : inner_(std::move(inner)), node_(node), ticket_(std::move(ticket)) {}
  void OnToken(const TokenEvent& ev) override {
    first_ = ev;  // (an export_prefilled request has one token: the first, sent with the cache)
    inner_->OnToken(ev);
  }
  void OnFinish(FinishReason reason, const Status& status, const Usage& usage) override {
    inner_->OnFinish(reason, status, usage);
  }
  // On the engine thread, after OnToken gave the same token.
  Status OnPrefilled(int64_t id, const PrefilledSequence& seq) override {
    if (first_.id != seq.first_token)
      return Status::Internal("the prefilled token " + std::to_string(seq.first_token) + " is not the emitted one (" +
                              std::to_string(first_.id) + ")");
    return node_->StartSend(id, ticket_, seq, first_);
  }

 private:
  std::shared_ptr<RequestSink> inner_;
  TokenEvent first_{.id = -1};
  DisaggNode* node_;
  const serve::DisaggTicket ticket_;
};

// "HOST:PORT" → (host, port); InvalidArgument otherwise.
Result<std::pair<std::string, uint16_t>> SplitAddress(const std::string& a) {
  const size_t colon = a.rfind(':');
  unsigned port = 0;
  if (colon == std::string::npos || colon == 0) return Status::InvalidArgument("transfer address '" + a + "' is not HOST:PORT");
  const char* end = a.data() + a.size();
  auto [p, ec] = std::from_chars(a.data() + colon + 1, end, port);
  if (ec != std::errc() || p != end || port == 0 || port > 65535)
    return Status::InvalidArgument("transfer address '" + a + "' has no valid port");
  return std::pair{a.substr(0, colon), static_cast<uint16_t>(port)};
}

std::vector<double> TransferBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0};
}

}  // namespace

uint64_t TowerFingerprint(const serve::ImageEncoder& enc) {
  const VisionConfig& c = enc.config;
  std::string key = "vision";
  for (int64_t v : {c.depth, c.hidden_size, c.num_heads, c.intermediate_size, c.in_channels, c.patch_size,
                    c.temporal_patch_size, c.spatial_merge_size, c.out_hidden_size, c.projection_intermediate_size,
                    int64_t{c.image_token_id}, int64_t{c.image_start_token_id}, int64_t{c.image_end_token_id},
                    int64_t{c.attention_bias}})
    key += "," + std::to_string(v);
  for (float v : {c.rms_norm_eps, c.swiglu_limit, c.rope_theta}) key += "," + std::to_string(v);
  uint64_t h = XXH64(key.data(), key.size(), 0);
  const VisionWeights& w = enc.weights;
  for (const std::vector<float>* v : {&w.patch_embed_bias, &w.post_norm, &w.downsample_bias, &w.merger_norm_w,
                                      &w.merger_norm_b})
    h = XXH64(v->data(), v->size() * sizeof(float), h);
  return h;
}

DisaggNode::DisaggNode(Engine* engine, const DisaggNodeOptions& opts)
    : engine_(engine), opts_(opts), latency_(TransferBuckets()) {}

Result<std::unique_ptr<DisaggNode>> DisaggNode::Create(Engine* engine, const DisaggNodeOptions& opts) {
  if (!engine) return Status::InvalidArgument("DisaggNode needs an engine");
  std::unique_ptr<DisaggNode> n(new DisaggNode(engine, opts));
  if (opts.role == DisaggRole::kPrefill) {
    n->senders_ = std::make_unique<serve::WorkPool>(std::max(1, opts.send_threads), int64_t{1} << 20);
  }
  if (opts.role != DisaggRole::kEncode) {  // prefill and decode take image rows; decode takes caches
    if (opts.transfer_port < 0 || opts.transfer_port > 65535)
      return Status::InvalidArgument("--transfer-port must be in [0, 65535]");
    GYRE_ASSIGN_OR_RETURN(n->listener_, transfer::TcpListener::Listen(opts.transfer_host,
                                                                      static_cast<uint16_t>(opts.transfer_port)));
    n->acceptor_ = std::thread([p = n.get()] { p->AcceptLoop(); });
  }
  return n;
}

DisaggNode::~DisaggNode() { Stop(); }

void DisaggNode::Stop() {
  if (stop_.exchange(true)) return;
  if (senders_) senders_->Stop();  // queued sends run with cancelled = true: their holds are released
  if (acceptor_.joinable()) acceptor_.join();
  std::lock_guard<std::mutex> l(mu_);
  for (auto& in : inbound_) in->receiver->Stop();
}

Result<RequestId> DisaggNode::Submit(RequestParams params, std::shared_ptr<RequestSink> sink,
                                     const serve::DisaggTicket& ticket) {
  if (opts_.role == DisaggRole::kEncode)
    return Status::InvalidArgument("this is an encode instance: it takes X-Gyre-Images-Id with X-Gyre-Images-To, "
                                   "not X-Gyre-Transfer-Id");
  if (opts_.role == DisaggRole::kPrefill) {
    if (ticket.send_to.empty())
      return Status::InvalidArgument("a prefill instance needs X-Gyre-Transfer-To (the decode instance's transfer address)");
    GYRE_RETURN_IF_ERROR(SplitAddress(ticket.send_to).status());
    if (params.constraint)
      return Status::InvalidArgument("structured output is not supported with disaggregated prefill/decode");
    params.export_prefilled = true;
    return engine_->Submit(std::move(params), std::make_shared<ExportSink>(std::move(sink), this, ticket));
  }
  if (!ticket.send_to.empty())
    return Status::InvalidArgument("this is a decode instance: X-Gyre-Transfer-To is for prefill instances");
  if (params.constraint)
    return Status::InvalidArgument("structured output is not supported with disaggregated prefill/decode");
  GYRE_ASSIGN_OR_RETURN(transfer::SequenceImage image, Take(ticket.transfer_id));
  ImportedSequence seq;
  seq.num_tokens = image.num_tokens;
  seq.first.id = image.next_token;
  seq.first.logprob = image.next_logprob;
  seq.first.top = image.next_top;
  auto shared = std::make_shared<transfer::SequenceImage>(std::move(image));
  seq.write = [this, shared](ModelRunner& runner, int32_t slot, std::span<const int32_t> pages) {
    GYRE_SPAN("transfer.import", "transfer");
    Status s = transfer::ImportSequence(runner, *shared, slot, pages);
    if (!s.ok()) ++import_failures_;
    return s;
  };
  return engine_->SubmitImported(std::move(params), std::move(seq), std::move(sink));
}

Status DisaggNode::StartSend(RequestId id, const serve::DisaggTicket& ticket, const PrefilledSequence& seq,
                             const TokenEvent& first) {
  if (stop_) return Status::Unavailable("the server is stopping");
  // A runner that reads finished sequences concurrently (the CUDA model) is read on the transfer
  // thread, so the engine thread neither copies nor waits for the steps in flight; the engine
  // holds the pages and slot until ReleaseExported, so nothing writes them meanwhile. Otherwise
  // the image is copied here, on the engine thread, ordered like steps.
  const bool read_later = seq.runner->ReadsFinishedConcurrently();
  auto image = std::make_shared<Result<transfer::SequenceImage>>(Status::Internal("not exported yet"));
  if (!read_later) {
    *image = transfer::ExportSequence(*seq.runner, seq.slot, seq.pages, seq.num_tokens, seq.first_token);
    if (!image->ok()) return image->error().WithContext("exporting the prefilled cache");
  }
  ++in_flight_;
  auto task = [this, id, ticket, image, read_later, runner = seq.runner, slot = seq.slot,
               pages = std::vector<int32_t>(seq.pages.begin(), seq.pages.end()), n = seq.num_tokens,
               tok = seq.first_token, lp = first.logprob, top = first.top](bool cancelled) {
    if (cancelled) {
      engine_->ReleaseExported(id, Status::Unavailable("the server stopped before the transfer"));
      ++failed_;
      --in_flight_;
      return;
    }
    if (read_later) *image = transfer::ExportFinishedSequence(*runner, slot, pages, n, tok);
    if (!image->ok()) {
      engine_->ReleaseExported(id, image->error().WithContext("exporting the prefilled cache"));
      ++failed_;
      --in_flight_;
      return;
    }
    (*image)->next_logprob = lp;
    (*image)->next_top = top;
    Send(id, ticket, **image);
  };
  const bool queued = senders_->TrySubmit(std::move(task));
  if (!queued) {
    --in_flight_;
    return Status::Unavailable("the transfer queue is stopped");
  }
  return Status::Ok();
}

void DisaggNode::Send(RequestId id, const serve::DisaggTicket& ticket, const transfer::SequenceImage& image) {
  // A link to this address that no other transfer thread is using; a new one while there are
  // fewer links than transfer threads (so each thread has its own: transfers to one decode
  // instance go in parallel, up to send_threads).
  std::shared_ptr<Link> link = AcquireLink(ticket.send_to);
  const auto t0 = std::chrono::steady_clock::now();
  Status s = SendOn(*link, ticket.send_to, ticket.transfer_id, image);
  if (s.ok()) {
    latency_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    bytes_ += image.num_bytes();
    pages_ += static_cast<int64_t>(image.pages.size());
    ++completed_;
  } else {
    ++failed_;
    // A failed transfer is an unavailable decode side for the client (503), whatever the cause.
    s = Status::Unavailable("the cache transfer to the decode instance at " + ticket.send_to + " failed: " + s.message());
  }
  ReleaseLink(*link);
  // Pages and slot are freed only now: after the Ack, or after the protocol gave up.
  engine_->ReleaseExported(id, s);
  --in_flight_;
}

std::shared_ptr<DisaggNode::Link> DisaggNode::AcquireLink(const std::string& to) {
  std::lock_guard<std::mutex> l(mu_);
  auto& pool = links_[to];
  std::shared_ptr<Link> link;
  for (const auto& candidate : pool) {
    if (!candidate->busy) {
      link = candidate;
      break;
    }
  }
  if (!link) {
    pool.push_back(std::make_shared<Link>());
    link = pool.back();
  }
  link->busy = true;
  return link;
}

void DisaggNode::ReleaseLink(Link& link) {
  std::lock_guard<std::mutex> l(mu_);
  link.busy = false;
}

Status DisaggNode::SendImages(uint64_t id, const std::vector<std::string>& to,
                              const std::vector<std::vector<uint8_t>>& bytes,
                              const std::vector<serve::EncodedImage>& images) {
  if (opts_.role != DisaggRole::kEncode)
    return Status::InvalidArgument("X-Gyre-Images-To is for encode instances (gyre serve --role encode)");
  if (stop_) return Status::Unavailable("the server is stopping");
  if (bytes.size() != images.size() || images.empty()) return Status::Internal("SendImages: no images or a count mismatch");
  transfer::EmbedsBatch batch;
  batch.tower_fingerprint = opts_.tower_fingerprint;
  for (size_t i = 0; i < images.size(); ++i) {
    transfer::ImageRowsOf im;
    im.content_hash = transfer::ImageContentHash(bytes[i]);
    im.num_tokens = images[i].num_tokens;
    im.rows = images[i].embeds;
    if (i == 0) batch.width = im.num_tokens > 0 ? static_cast<int64_t>(im.rows.size()) / im.num_tokens : 0;
    batch.images.push_back(std::move(im));
  }
  GYRE_ASSIGN_OR_RETURN(transfer::SequenceImage packed, transfer::PackEmbeds(batch));
  for (const std::string& addr : to) {
    GYRE_RETURN_IF_ERROR(SplitAddress(addr).status());
    std::shared_ptr<Link> link = AcquireLink(addr);
    Status s = SendOn(*link, addr, id, packed);
    ReleaseLink(*link);
    if (!s.ok()) {
      ++image_failures_;
      return Status::Unavailable("sending the image rows to " + addr + " failed: " + s.message());
    }
    ++image_transfers_;
    image_bytes_ += packed.num_bytes();
  }
  return Status::Ok();
}

Result<std::vector<serve::EncodedImage>> DisaggNode::TakeImages(uint64_t id, const std::vector<std::vector<uint8_t>>& bytes) {
  if (opts_.role == DisaggRole::kEncode)
    return Status::InvalidArgument("this is an encode instance: X-Gyre-Images-Id without X-Gyre-Images-To is for "
                                   "prefill and decode instances");
  auto fail = [this](Status s) {
    ++image_failures_;
    return s;
  };
  auto taken = TakeVerified(id, "image-row");
  // Rows that did not come are an unavailable encoder side (503: the router tries again), not a
  // missing resource of the client's.
  if (!taken.ok()) return fail(Status::Unavailable(taken.status().message()));
  auto batch = transfer::UnpackEmbeds(*taken, opts_.tower_fingerprint);
  if (!batch.ok()) return fail(batch.status());
  if (batch->images.size() != bytes.size())
    return fail(Status::InvalidArgument("the encoder sent rows of " + std::to_string(batch->images.size()) +
                                        " images; the request has " + std::to_string(bytes.size())));
  std::vector<serve::EncodedImage> out;
  for (size_t i = 0; i < bytes.size(); ++i) {
    transfer::ImageRowsOf& im = batch->images[i];
    if (im.content_hash != transfer::ImageContentHash(bytes[i]))
      return fail(Status::InvalidArgument("the encoder's rows of image " + std::to_string(i) +
                                          " are of other bytes than this request's image"));
    out.push_back(serve::EncodedImage{im.num_tokens, std::move(im.rows)});
  }
  ++image_transfers_;
  image_bytes_ += taken->num_bytes();
  return out;
}

Status DisaggNode::SendOn(Link& link, const std::string& to, uint64_t transfer_id, const transfer::SequenceImage& image) {
  if (!link.conn) {
    GYRE_ASSIGN_OR_RETURN(auto addr, SplitAddress(to));
    auto conn = opts_.connect ? opts_.connect(addr.first, addr.second) : transfer::TcpConnect(addr.first, addr.second, Ms(2000));
    if (!conn.ok()) return conn.error().WithContext("connecting to " + to);
    link.conn = std::move(*conn);
    link.sender = std::make_unique<transfer::TransferSender>(*link.conn, transfer::SenderOptions{});
  }
  GYRE_SPAN("transfer.send", "transfer");
  const int64_t retries_before = link.sender->stats().retries;
  Status s = link.sender->Send(transfer_id, image);
  retries_ += link.sender->stats().retries - retries_before;
  if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded) {
    link.sender.reset();  // the link is dead or unanswered: the next transfer reconnects
    link.conn.reset();
  }
  return s;
}

void DisaggNode::AcceptLoop() {
  while (!stop_) {
    auto conn = listener_->Accept(Ms(100));
    if (!conn.ok()) continue;  // (a timeout: look at stop_ again)
    auto in = std::make_shared<Inbound>();
    in->conn = std::move(*conn);
    in->receiver = std::make_unique<transfer::TransferReceiver>(*in->conn, transfer::ReceiverOptions{});
    std::lock_guard<std::mutex> l(mu_);
    inbound_.push_back(std::move(in));
  }
}

Result<transfer::SequenceImage> DisaggNode::Take(uint64_t transfer_id) {
  auto im = TakeVerified(transfer_id, "cache");
  if (!im.ok()) {
    ++failed_;
    return im;
  }
  bytes_ += im->num_bytes();
  pages_ += static_cast<int64_t>(im->pages.size());
  ++completed_;
  return im;
}

Result<transfer::SequenceImage> DisaggNode::TakeVerified(uint64_t transfer_id, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + opts_.take_timeout;
  while (true) {
    std::vector<std::shared_ptr<Inbound>> links;
    {
      std::lock_guard<std::mutex> l(mu_);
      links = inbound_;
    }
    for (auto& in : links) {
      auto im = in->receiver->Take(transfer_id, Ms(0));
      if (im.ok()) return im;
    }
    if (std::chrono::steady_clock::now() >= deadline || stop_) break;
    std::this_thread::sleep_for(Ms(2));
  }
  return Status::NotFound(std::string("no verified ") + what + " transfer " + std::to_string(transfer_id) +
                          " arrived at this " + (opts_.role == DisaggRole::kDecode ? "decode" : "prefill") + " instance");
}

serve::Json DisaggNode::StatusJson() const {
  const bool prefill = opts_.role == DisaggRole::kPrefill;
  const char* role = prefill ? "prefill" : opts_.role == DisaggRole::kDecode ? "decode" : "encode";
  serve::Json j{{"role", role},
                {"transfers_completed", completed_.load()},
                {"transfers_failed", failed_.load()},
                {"transfer_retries", retries_.load()},
                {"transfer_bytes", bytes_.load()},
                {"transfer_pages", pages_.load()},
                {"image_transfers", image_transfers_.load()},
                {"image_transfer_bytes", image_bytes_.load()},
                {"image_transfer_failures", image_failures_.load()}};
  if (opts_.role != DisaggRole::kDecode) {
    int64_t links = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (const auto& [to, pool] : links_) links += static_cast<int64_t>(pool.size());
    }
    j["transfer_links"] = links;
  }
  if (prefill || opts_.role == DisaggRole::kEncode) j["transfers_in_flight"] = in_flight_.load();
  if (listener_) {
    int64_t held = 0, staged = 0;
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& in : inbound_) {
      held += in->receiver->held_bytes();
      staged += in->receiver->num_in_flight();
    }
    j["transfer_address"] = opts_.transfer_host + ":" + std::to_string(listener_->port());
    j["receiver_held_bytes"] = held;
    if (!prefill) {
      j["transfers_in_flight"] = staged;
      j["import_failures"] = import_failures_.load();
    } else {
      j["receiving_in_flight"] = staged;
    }
  }
  return j;
}

std::string DisaggNode::Metrics(const std::string& labels) const {
  const serve::Json st = StatusJson();
  const std::string l = labels + ",role=\"" + st["role"].get<std::string>() + "\"";
  std::string out;
  struct Series {
    const char* name;
    const char* type;
    const char* help;
    double value;
  };
  auto n = [](const std::atomic<int64_t>& v) { return static_cast<double>(v.load()); };
  const Series series[] = {
      {"gyre_disagg_transfer_bytes_total", "counter",
       "Bytes of sequence caches (pages and KDA state) transferred (sent by prefill, taken by decode).", n(bytes_)},
      {"gyre_disagg_transfer_pages_total", "counter", "KV pages transferred.", n(pages_)},
      {"gyre_disagg_transfers_total", "counter", "Cache transfers completed (acknowledged).", n(completed_)},
      {"gyre_disagg_transfer_failures_total", "counter",
       "Cache transfers that failed (prefill: after the protocol's retries; decode: no verified image).", n(failed_)},
      {"gyre_disagg_transfer_retries_total", "counter", "Transfer attempts retried.", n(retries_)},
      {"gyre_disagg_transfers_in_flight", "gauge",
       "Transfers in progress (prefill: exported, not yet acknowledged; decode: being received).",
       static_cast<double>(st.value("transfers_in_flight", int64_t{0}))},
      {"gyre_disagg_image_transfers_total", "counter",
       "Image-row transfers (encode: sent, one per target; prefill/decode: taken and checked).", n(image_transfers_)},
      {"gyre_disagg_image_transfer_bytes_total", "counter", "Bytes of image-row transfers.", n(image_bytes_)},
      {"gyre_disagg_image_transfer_failures_total", "counter",
       "Image-row transfers that failed (encode: a send; prefill/decode: missing or refused rows).", n(image_failures_)},
  };
  for (const Series& m : series) serve::ScalarText(out, m.name, m.type, m.help, l, m.value);
  serve::HistogramText(out, "gyre_disagg_transfer_latency_seconds",
                       "Histogram of one cache transfer's latency, send to acknowledgement (prefill).", l,
                       latency_.Get());
  return out;
}

}  // namespace gyre::cli

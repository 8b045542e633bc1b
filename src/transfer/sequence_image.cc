#include "transfer/sequence_image.h"

#include <xxhash.h>

#include "core/trace.h"

namespace gyre::transfer {

std::string CacheFormat::ToString() const {
  return backend + " page_tokens=" + std::to_string(page_tokens) + " bytes_per_page=" + std::to_string(bytes_per_page) +
         " bytes_per_slot=" + std::to_string(bytes_per_slot) + " model=" + std::to_string(model_fingerprint);
}

CacheFormat FormatOf(const ModelRunner& runner) {
  const ModelConfig& c = runner.config();
  const RunnerCapacity cap = runner.capacity();
  // The fields that shape a page or a slot: the layer kinds and the widths stored per token/slot.
  std::vector<int64_t> shape = {c.vocab_size,      c.hidden_size,          c.num_hidden_layers, c.kv_lora_rank,
                                c.qk_rope_head_dim, c.index_head_dim,      c.index_kpool,       c.linear_num_heads,
                                c.linear_head_dim, c.linear_conv_kernel_dim};
  for (AttnKind k : c.layer_types) shape.push_back(static_cast<int64_t>(k));
  for (IndexerKind k : c.indexer_types) shape.push_back(static_cast<int64_t>(k));
  CacheFormat f;
  f.backend = runner.backend();
  f.page_tokens = cap.page_tokens;
  f.bytes_per_page = cap.bytes_per_page;
  f.bytes_per_slot = cap.bytes_per_slot;
  shape.push_back(static_cast<int64_t>(cap.cache_layout));  // the KV cache dtype per layer (cuda)
  f.model_fingerprint = XXH64(shape.data(), shape.size() * sizeof(int64_t), 0);
  return f;
}

int64_t SequenceImage::num_bytes() const {
  int64_t n = static_cast<int64_t>(state.size());
  for (const auto& p : pages) n += static_cast<int64_t>(p.size());
  return n;
}

int64_t PagesFor(const CacheFormat& f, int64_t num_tokens) {
  if (f.bytes_per_page == 0 || f.page_tokens <= 0 || num_tokens <= 0) return 0;
  return (num_tokens - 1) / f.page_tokens + 1;  // (no overflow for any count a Begin frame may carry)
}

Status ValidateImage(const SequenceImage& im) {
  if (im.num_tokens < 1) return Status::InvalidArgument("a sequence image holds at least one token");
  const int64_t want = PagesFor(im.format, im.num_tokens);
  if (static_cast<int64_t>(im.pages.size()) != want)
    return Status::InvalidArgument("image of " + std::to_string(im.num_tokens) + " tokens has " +
                                   std::to_string(im.pages.size()) + " pages, " + std::to_string(want) + " expected");
  for (size_t i = 0; i < im.pages.size(); ++i)
    if (static_cast<int64_t>(im.pages[i].size()) != im.format.bytes_per_page)
      return Status::InvalidArgument("image page " + std::to_string(i) + " has " + std::to_string(im.pages[i].size()) +
                                     " bytes, " + std::to_string(im.format.bytes_per_page) + " expected");
  if (static_cast<int64_t>(im.state.size()) != im.format.bytes_per_slot)
    return Status::InvalidArgument("image state has " + std::to_string(im.state.size()) + " bytes, " +
                                   std::to_string(im.format.bytes_per_slot) + " expected");
  return Status::Ok();
}

namespace {

// ExportSequence (concurrent = false: ReadPages + ReadSlotState, ordered like steps) and
// ExportFinishedSequence (ReadFinished, any thread).
Result<SequenceImage> Export(ModelRunner& runner, SlotId slot, std::span<const PageId> pages, int64_t num_tokens,
                             int32_t next_token, bool concurrent) {
  GYRE_SPAN("transfer.export", "transfer");
  SequenceImage im;
  im.format = FormatOf(runner);
  im.num_tokens = num_tokens;
  im.next_token = next_token;
  if (num_tokens < 1) return Status::InvalidArgument("export of a sequence with no tokens");
  const int64_t n = PagesFor(im.format, num_tokens);
  if (static_cast<int64_t>(pages.size()) < n)
    return Status::InvalidArgument("block table of " + std::to_string(pages.size()) + " pages for " +
                                   std::to_string(num_tokens) + " tokens (" + std::to_string(n) + " needed)");
  // One read for all pages (one stream synchronization on the CUDA model), then split.
  std::vector<std::byte> all(static_cast<size_t>(n * im.format.bytes_per_page));
  im.state.resize(static_cast<size_t>(im.format.bytes_per_slot));
  if (concurrent) {
    GYRE_RETURN_IF_ERROR(runner.ReadFinished(pages.first(n), all, slot, im.state));
  } else {
    GYRE_RETURN_IF_ERROR(runner.ReadPages(pages.first(n), all));
    GYRE_RETURN_IF_ERROR(runner.ReadSlotState(slot, im.state));
  }
  im.pages.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    auto first = all.begin() + i * im.format.bytes_per_page;
    im.pages[i].assign(first, first + im.format.bytes_per_page);
  }
  return im;
}

}  // namespace

Result<SequenceImage> ExportSequence(ModelRunner& runner, SlotId slot, std::span<const PageId> pages,
                                     int64_t num_tokens, int32_t next_token) {
  return Export(runner, slot, pages, num_tokens, next_token, /*concurrent=*/false);
}

Result<SequenceImage> ExportFinishedSequence(ModelRunner& runner, SlotId slot, std::span<const PageId> pages,
                                             int64_t num_tokens, int32_t next_token) {
  return Export(runner, slot, pages, num_tokens, next_token, /*concurrent=*/true);
}

Status ImportSequence(ModelRunner& runner, const SequenceImage& im, SlotId slot, std::span<const PageId> pages) {
  GYRE_SPAN("transfer.import", "transfer");
  GYRE_RETURN_IF_ERROR(ValidateImage(im));
  const CacheFormat mine = FormatOf(runner);
  if (!(im.format == mine))
    return Status::InvalidArgument("sequence image of format {" + im.format.ToString() + "} into a runner of {" +
                                   mine.ToString() + "}");
  const int64_t n = static_cast<int64_t>(im.pages.size());
  if (static_cast<int64_t>(pages.size()) < n)
    return Status::InvalidArgument("block table of " + std::to_string(pages.size()) + " pages for an image of " +
                                   std::to_string(n));
  std::vector<std::byte> all;
  all.reserve(static_cast<size_t>(n * im.format.bytes_per_page));
  for (const auto& p : im.pages) all.insert(all.end(), p.begin(), p.end());
  GYRE_RETURN_IF_ERROR(runner.WritePages(pages.first(n), all));
  return runner.WriteSlotState(slot, im.state, im.num_tokens);
}

}  // namespace gyre::transfer

// Host side of the KDA kernels: validate, pick a configuration, lay out the workspace, launch.
#include "ops/cuda/kda_cuda.h"

#include <algorithm>
#include <string>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kda_cuda_config.h"
#include "ops/cuda/kda_kernels.h"

namespace gyre::cuda {

Status CheckKdaHeadDim(int head_dim) {
  if (head_dim < 4 || head_dim % 4 != 0 || KdaPaddedHeadDim(head_dim) == 0)
    return Status::InvalidArgument("kda: head_dim " + std::to_string(head_dim) +
                                   " unsupported (need a multiple of 4 in [4, 128])");
  return Status::Ok();
}

namespace {

constexpr int kChunk = internal::kKdaChunk;


bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

int NumSms() {
  static int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return v;
  }();
  return n;
}

size_t Align256(size_t n) { return (n + 255) / 256 * 256; }

int64_t NumChunks(const std::vector<int64_t>& cu) {
  int64_t n = 0;
  for (size_t i = 0; i + 1 < cu.size(); ++i) n += (cu[i + 1] - cu[i] + kChunk - 1) / kChunk;
  return n;
}

}  // namespace

// ---- recurrent -----------------------------------------------------------------------------------

Status KdaRecurrent(const KdaRecurrentParams& p, cudaStream_t stream, KdaRecurrentConfig cfg) {
  GYRE_RETURN_IF_ERROR(CheckKdaHeadDim(p.head_dim));
  if (p.num_seqs < 0 || p.num_seqs > 65535) return Status::InvalidArgument("kda.recurrent: num_seqs out of [0, 65535]");
  if (p.num_tokens < 1) return Status::InvalidArgument("kda.recurrent: num_tokens must be >= 1");
  if (p.num_heads < 1 || p.num_heads > 65535) return Status::InvalidArgument("kda.recurrent: num_heads out of range");
  if (p.num_slots < 1) return Status::InvalidArgument("kda.recurrent: empty state pool");
  if (!p.q || !p.k || !p.v || !p.g || !p.beta || !p.slots || !p.state)
    return Status::InvalidArgument("kda.recurrent: null pointer");
  if (!Aligned16(p.v) || !Aligned16(p.state) || (p.o && !Aligned16(p.o)))
    return Status::InvalidArgument("kda.recurrent: v, state and o must be 16-byte aligned");
  if (p.num_seqs == 0) return Status::Ok();
  const int k_pad = KdaPaddedHeadDim(p.head_dim);
  if (cfg.block_v == 0) cfg = PickKdaRecurrentConfig(p.num_seqs, p.num_heads, k_pad, NumSms());
  const cudaError_t e = internal::LaunchKdaRecurrent(p, k_pad, cfg.block_v, cfg.num_threads, stream);
  if (e == cudaErrorInvalidConfiguration)
    return Status::InvalidArgument("kda.recurrent: unsupported config block_v=" + std::to_string(cfg.block_v) +
                                   " num_threads=" + std::to_string(cfg.num_threads) + " for head_dim " +
                                   std::to_string(p.head_dim));
  GYRE_CUDA_RETURN_IF_ERROR(e);
  return Status::Ok();
}

// ---- chunked -------------------------------------------------------------------------------------

size_t KdaChunkWorkspaceBytes(const std::vector<int64_t>& cu_seqlens, int num_heads, int head_dim) {
  const int64_t nc = NumChunks(cu_seqlens);
  const int64_t n = cu_seqlens.empty() ? 0 : static_cast<int64_t>(cu_seqlens.size()) - 1;
  const int kp = KdaPaddedHeadDim(head_dim);
  const size_t table = Align256(sizeof(int32_t) * (2 * nc + (n + 1) + n));
  return table + sizeof(float) * static_cast<size_t>(nc) * num_heads * internal::KdaChunkFloatsPerChunkHead(kp);
}

Status KdaChunk(const KdaChunkParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  GYRE_RETURN_IF_ERROR(CheckKdaHeadDim(p.head_dim));
  const auto& cu = p.cu_seqlens;
  if (cu.size() < 2 || cu[0] != 0) return Status::InvalidArgument("kda.chunk: cu_seqlens must start at 0 with N+1 >= 2 entries");
  const int64_t n = static_cast<int64_t>(cu.size()) - 1;
  if (n > 65535) return Status::InvalidArgument("kda.chunk: more than 65535 sequences");
  for (int64_t i = 0; i < n; ++i)
    if (cu[i + 1] < cu[i]) return Status::InvalidArgument("kda.chunk: cu_seqlens decreases at " + std::to_string(i));
  if (cu.back() >= (int64_t(1) << 31)) return Status::InvalidArgument("kda.chunk: more than 2^31 tokens");
  if (static_cast<int64_t>(p.slots.size()) != n) return Status::InvalidArgument("kda.chunk: need one slot per sequence");
  for (int64_t i = 0; i < n; ++i) {
    if (p.slots[i] < 0 || p.slots[i] >= p.num_slots) return Status::InvalidArgument("kda.chunk: slot out of range");
    for (int64_t j = 0; j < i; ++j)
      if (p.slots[j] == p.slots[i]) return Status::InvalidArgument("kda.chunk: two sequences share slot " + std::to_string(p.slots[i]));
  }
  if (p.num_heads < 1 || p.num_heads > 65535) return Status::InvalidArgument("kda.chunk: num_heads out of range");
  if (!p.state || !p.o || (cu.back() > 0 && (!p.q || !p.k || !p.v || !p.g || !p.beta)))
    return Status::InvalidArgument("kda.chunk: null pointer");
  if (!Aligned16(p.q) || !Aligned16(p.k) || !Aligned16(p.v) || !Aligned16(p.g) || !Aligned16(p.state) ||
      !Aligned16(p.o) || !Aligned16(workspace))
    return Status::InvalidArgument("kda.chunk: q, k, v, g, state, o and workspace must be 16-byte aligned");
  const size_t need = KdaChunkWorkspaceBytes(cu, p.num_heads, p.head_dim);
  if (workspace_bytes < need)
    return Status::InvalidArgument("kda.chunk: workspace " + std::to_string(workspace_bytes) + " < " + std::to_string(need) + " bytes");

  // ---- chunk table: [chunk_start NC][chunk_len NC][seq_chunks N+1][slots N] ----
  const int64_t nc = NumChunks(cu);
  std::vector<int32_t> table;
  table.reserve(2 * nc + 2 * n + 1);
  std::vector<int32_t> lens, seq_chunks{0};
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t t = cu[i]; t < cu[i + 1]; t += kChunk) {
      table.push_back(static_cast<int32_t>(t));
      lens.push_back(static_cast<int32_t>(std::min<int64_t>(kChunk, cu[i + 1] - t)));
    }
    seq_chunks.push_back(static_cast<int32_t>(table.size()));
  }
  table.insert(table.end(), lens.begin(), lens.end());
  table.insert(table.end(), seq_chunks.begin(), seq_chunks.end());
  table.insert(table.end(), p.slots.begin(), p.slots.end());
  // Pageable source: the call returns once the table is staged, so `table` may die afterwards.
  GYRE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(workspace, table.data(), table.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));

  const int kp = KdaPaddedHeadDim(p.head_dim);
  auto* ints = static_cast<int32_t*>(workspace);
  float* f = reinterpret_cast<float*>(static_cast<char*>(workspace) + Align256(sizeof(int32_t) * (2 * nc + 2 * n + 1)));
  const int64_t per = nc * p.num_heads;  // (chunk, head) pairs
  internal::KdaChunkBuffers b;
  b.chunk_start = ints;
  b.chunk_len = ints + nc;
  b.seq_chunks = ints + 2 * nc;
  b.slots = ints + 2 * nc + n + 1;
  b.w = f;
  f += per * kChunk * kp;
  b.u = f;
  f += per * kChunk * kp;
  b.kg = f;
  f += per * kChunk * kp;
  b.qg = f;
  f += per * kChunk * kp;
  b.aqk = f;
  f += per * kChunk * kChunk;
  b.gl = f;
  b.num_chunks = static_cast<int>(nc);
  b.num_seqs = static_cast<int>(n);

  // Empty batch (every sequence has length 0): nothing to compute, every state stays as it is.
  if (nc > 0) GYRE_CUDA_RETURN_IF_ERROR(internal::LaunchKdaChunkIntra(p, b, kp, stream));
  if (p.phase_events[0]) GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(p.phase_events[0], stream));
  const int block_v = PickKdaChunkScanBlockV(b.num_seqs, p.num_heads, kp, NumSms());
  if (nc > 0) GYRE_CUDA_RETURN_IF_ERROR(internal::LaunchKdaChunkScan(p, b, kp, block_v, stream));
  if (p.phase_events[1]) GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(p.phase_events[1], stream));
  return Status::Ok();
}

}  // namespace gyre::cuda

// Context parallelism (CP) for a KDA layer: the T tokens of one sequence are split into n
// contiguous shards, rank r holding tokens Split(T, n, r) (docs/parallel.md §CP has the
// derivation; docs/model-kda-kimi-linear.md §1.5 and §5 the chunk math and FLA's KCP).
//
// Per head, the chunked KDA map from a shard's start state S to its outputs and end state is
// affine in S:   o_t = o⁰_t + P_t·S      S_end = M·S + H
// where o⁰, H are the outputs and end state from S = 0, M (K×K) the shard's transition and
// P_t (1×K) the map from the start state to token t's output. With chunk c's intra-chunk terms
// (G = in-chunk cumsum of g, Γ = e^G, W and A_qk as in ops::KdaChunked, K̄ = K ⊙ e^{G_C − G}):
//   Q_eff,c = Q̃⊙Γ − A_qk·W             (C×K)  output of chunk c per unit of its start state
//   M_c     = diag(Γ_C) − K̄ᵀ·W           (K×K)  chunk transition
//   P_c     = Q_eff,c · M_{<c}            rows of P for chunk c, M_{<c} = M_{c−1}···M_1 (M_{<1} = I)
//   M       = M_last ··· M_1
// so one pass over the shard (before any communication) yields o⁰, H, M and P; after the scan
// each rank corrects its outputs with one GEMM, o = o⁰ + P·S_r, with no second pass.
//
// Plan per rank: kda.conv (the W−1 = 3 pre-conv rows before the shard come from the previous
// rank via AllToAllV); SummarizeKdaShard; kda.cp_merge (AllGather of every rank's [M | H], then
// the exclusive scan S_0 = 0, S_{r+1} = M_r·S_r + H_r in rank order); kda.core (o = o⁰ + P·S_r);
// kda.out (gated norm + o_proj, token-local, replicated weights).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/matrix.h"
#include "core/status.h"
#include "ops/kda.h"
#include "parallel/communicator.h"

namespace gyre::parallel {

// Arithmetic of the affine chain: the products M_c·M_{<c}, Q_eff·M_{<c}, M_r·S_r and P·S_r, and
// the [M | H] buffers exchanged at the merge.
//   kF32   fp32 operands and results (the default, and what the tolerance is set for);
//   kBf16  operands rounded to bf16, fp32 accumulation, every result (M, P, H, S) stored as bf16;
//   kTf32  operands rounded to 10 mantissa bits (round to nearest even), fp32 accumulation and
//          results, as a single-pass TF32 tensor-core dot would do.
enum class MergePrecision { kF32, kBf16, kTf32 };
const char* MergePrecisionName(MergePrecision p);
// "fp32" | "bf16" | "tf32". Returns false for anything else.
bool ParseMergePrecision(std::string_view s, MergePrecision* out);
// x rounded to the operand format of `p` (identity for kF32).
float RoundOperand(float x, MergePrecision p);

// One shard's zero-start pass, per head (layouts as ops::KdaChunked, K = V = head_dim).
struct KdaShardSummary {
  std::vector<float> o_zero;  // [T, H, K] outputs from S = 0
  std::vector<float> h;       // [H, K, K] end state from S = 0
  std::vector<float> m;       // [H, K, K] transition
  std::vector<float> p;       // [T, H, K] start-state → output map (o_t[v] += Σ_d P_t[d]·S[d, v])
};
// q, k, v, g: [T, H, K] (q, k not normalised); beta [T, H]. chunk: 64 (the chunking of the
// zero-start pass, which is ops::KdaChunked itself).
KdaShardSummary SummarizeKdaShard(const float* q, const float* k, const float* v, const float* g,
                                  const float* beta, int64_t t, ops::KdaShape s, MergePrecision precision,
                                  int64_t chunk = 64);
// Adds P·s_start to o ([T, H, K], in place) and writes s_end = M·s_start + h ([H, K, K]).
void ApplyStartState(const KdaShardSummary& sum, const float* s_start, int64_t t, ops::KdaShape s,
                     MergePrecision precision, float* o, float* s_end);

// ---- the CP plan ---------------------------------------------------------------------------------

struct KdaCpWeights {
  ops::KdaShape shape;
  Matrix conv;                 // [3P, W]
  std::vector<float> o_norm;   // [K]
  Matrix o;                    // [D, P]
  float eps = 1e-5f;           // gated norm
};

// This rank's rows [begin, begin + t) of the layer's activations after the projections
// (projections are token-local, so under CP each rank applies the replicated weights to its own
// tokens; TP covers their sharding).
struct KdaCpInputs {
  const float* u = nullptr;     // [t, 3P] pre-conv q | k | v
  const float* g = nullptr;     // [t, P] forget gate (log decay)
  const float* beta = nullptr;  // [t, H]
  const float* z = nullptr;     // [t, P] output gate
  int64_t t = 0;
};

struct KdaCpOptions {
  MergePrecision precision = MergePrecision::kF32;
  int64_t chunk = 64;
};

struct KdaCpTrace {
  std::vector<float> conv;     // kda.conv      [t, 3P]
  std::vector<float> s_start;  // kda.cp_merge  [H, K, K] merged initial state of this shard
  std::vector<float> s_end;    // kda.cp_merge  [H, K, K] state after this shard
  std::vector<float> o;        // kda.core      [t, H, K]
  std::vector<float> out;      // kda.out       [t, D]
};

// The sequence starts from zero state (a new sequence). InvalidArgument when a rank that has a
// successor holds fewer than W−1 tokens (the conv halo would span two ranks).
Status KdaCpForward(Communicator& comm, const KdaCpWeights& w, const KdaCpOptions& opt, const KdaCpInputs& in,
                    KdaCpTrace* t);

}  // namespace gyre::parallel

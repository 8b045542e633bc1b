// Token sampling on the GPU (sampling_cuda.h): device code and launcher.
//
// Plan: a cluster of C CTAs per row (C = 1, 2, 4 or 8); CTA r copies its contiguous slice of the
// row into shared memory once, as order-preserving uint32 keys, and every later pass reads them
// from there. Phases, each ending in a cluster barrier:
//   1. load + row max (packed (key, ~id) so ties pick the lowest id): greedy rows stop here.
//   2. top-k: radix descent by count over the keys (digits of 11, 11, 10 bits), then, when the
//      cut splits a run of tied keys, a second descent over the tied ids (lowest first).
//   3. top-p: radix descent by probability mass (integers q = round(p · 2^44)) over the top-k set;
//      the first level's total is the set's mass Z, the target is ceil(top_p · Z).
//   4. draw: kept = top-k cut ∧ top-p cut ∧ p ≥ min_p; exclusive scan of the kept q in id order
//      (per thread a contiguous id range, then the block, then the cluster); the id whose interval
//      holds ⌊u · W⌋ (u a 64-bit Philox draw, W the kept mass) is the sample.
// A descent level: every CTA builds a histogram of its slice in shared memory (warp-aggregated
// atomics), the other CTAs add theirs into rank 0's through distributed shared memory, rank 0
// picks the bin with a block scan and publishes it; two cluster barriers per level.
// NOTE: every sum is an integer, so the cut, the kept set and the drawn id do not depend on the
// cluster size, the thread count or the order of atomics.
#include "ops/cuda/sampling_cuda.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <string>

#include "ops/cuda/cuda_check.h"

namespace gyre::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCluster = 8;
constexpr int kHistBins = 2048;  // the widest digit is 11 bits
constexpr int kMaxBinsPerThread = kHistBins / kThreads;
static_assert(kHistBins % kThreads == 0 && (1 << 10) >= kThreads, "each thread owns whole bins at every level");
// q = round(p · 2^44) with p ∈ [0, 1]; with at most 2^19 ids every sum stays below 2^63.
constexpr float kMassScale = 0x1p44f;
constexpr int64_t kMaxVocabIds = int64_t(1) << 19;
// Ids as descending sort keys: u = kIdKeyMax − id, 21 bits, so the id descent uses levels 1 and 2.
constexpr uint32_t kIdKeyMax = (1u << 21) - 1;
static_assert(kMaxVocabIds <= kIdKeyMax, "ids must fit the id digits");
constexpr int kMinSlice = 2048;  // heuristic: fewest logits per CTA worth splitting a row for

// ---- shared memory -------------------------------------------------------------------------------

// Rank 0's choice at one descent level, read by the whole cluster.
struct Selection {
  uint64_t above;      // count or mass of participants in higher bins
  uint64_t bin_count;  // participants in the chosen bin
  uint64_t bin_mass;   // their mass (mass descents only)
  uint64_t target;     // the level's target (set from the total at a mass descent's first level)
  uint32_t bin;
};

struct alignas(16) SmemHeader {
  uint64_t mass[kHistBins];
  uint32_t count[kHistBins];
  uint64_t scan[kWarps];
  uint64_t part_max;    // this CTA's packed (key, ~id) maximum
  uint64_t part_total;  // this CTA's kept mass
  uint64_t part_draft;  // the draft's kept mass when this CTA's slice holds it (else 0)
  Selection sel;
};
// The slice's keys follow the header: uint32_t keys[slice].
static_assert(sizeof(SmemHeader) % 16 == 0, "keys start 16-byte aligned");

// ---- keys and probabilities ----------------------------------------------------------------------

// Order-preserving key: a > b as floats ⟺ KeyOf(a) > KeyOf(b). NaN ranks as −inf, −0 as +0 (the
// CPU compares them equal, so they must tie).
__device__ __forceinline__ uint32_t KeyOf(float x) {
  uint32_t b = __float_as_uint(x);
  if (isnan(x)) b = 0xFF800000u;
  if (b == 0x80000000u) b = 0;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float ValueOf(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

// Largest key first, then lowest id.
__device__ __forceinline__ uint64_t PackMax(uint32_t key, int32_t id) {
  return (uint64_t(key) << 32) | uint32_t(~uint32_t(id));
}

// p(key) = exp((x − max) / T) relative to the row max (exactly 1 there, so a row whose max is
// ±inf still has finite weights); monotone in the key.
struct Temper {
  uint32_t max_key;
  float max_val;
  float scale;  // log2(e) / T
  __device__ __forceinline__ float P(uint32_t key) const {
    return key == max_key ? 1.0f : exp2f((ValueOf(key) - max_val) * scale);
  }
  __device__ __forceinline__ uint64_t Q(uint32_t key) const { return __float2ull_rn(P(key) * kMassScale); }
};

// A prefix of the row sorted by (key desc, id asc): every key above `key`, and the ties at `key`
// with id <= id_max. The default holds the whole row (no real key is 0: −inf's key is 0x007FFFFF).
struct Cut {
  uint32_t key = 0;
  int32_t id_max = INT_MAX;
  __device__ __forceinline__ bool Has(uint32_t k, int32_t id) const { return k > key || (k == key && id <= id_max); }
};

// ---- Philox-4x32-10 (Salmon et al., SC'11): one 64-bit draw per (seed, offset) ------------------

__device__ __forceinline__ uint64_t Philox64(uint64_t seed, uint64_t offset) {
  uint32_t c0 = uint32_t(offset), c1 = uint32_t(offset >> 32), c2 = 0x53414D50u /* "SAMP" */, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (uint64_t(c1) << 32) | c0;
}

// ---- block and cluster primitives ----------------------------------------------------------------

__device__ __forceinline__ uint64_t WarpInclusiveSum(uint64_t x) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const uint64_t y = __shfl_up_sync(0xffffffffu, x, off);
    if (lane >= off) x += y;
  }
  return x;
}

// Exclusive prefix of v over the block in thread order; *total gets the block's sum. Barriers
// inside; `scratch` is free again on return.
__device__ uint64_t BlockExclusiveSum(uint64_t v, uint64_t* scratch, uint64_t* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint64_t incl = WarpInclusiveSum(v);
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const uint64_t w = WarpInclusiveSum(lane < kWarps ? scratch[lane] : 0);
    if (lane < kWarps) scratch[lane] = w;
  }
  __syncthreads();
  const uint64_t before = warp ? scratch[warp - 1] : 0;
  *total = scratch[kWarps - 1];
  __syncthreads();
  return before + incl - v;
}

__device__ uint64_t BlockMax(uint64_t v, uint64_t* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  uint64_t m = 0;
  for (int w = 0; w < kWarps; ++w) m = max(m, scratch[w]);
  __syncthreads();
  return m;
}

// The CTAs of one row. With C == 1 the "cluster" is the block itself.
struct Row {
  SmemHeader* sh;
  const uint32_t* keys;  // this CTA's slice
  int n;                 // keys in the slice (0 for trailing CTAs of a short row)
  int32_t begin;         // id of keys[0]
  int C;
  unsigned rank;

  __device__ void Sync() const {
    if (C > 1) cg::this_cluster().sync();
    else __syncthreads();
  }
  template <typename T>
  __device__ T* At(T* p, unsigned r) const {
    return C > 1 ? cg::this_cluster().map_shared_rank(p, r) : p;
  }
};

// ---- radix descent -------------------------------------------------------------------------------

struct Level {
  int shift, bits;
};
// Levels 0..2 cover a 32-bit key; a 21-bit id key starts at level 1.
__device__ __forceinline__ Level LevelOf(int l) { return l == 0 ? Level{21, 11} : l == 1 ? Level{10, 11} : Level{0, 10}; }

struct DescentOut {
  uint32_t key;      // the sort key of the element at the target
  uint64_t rest;     // target left inside its tie run: 1-based rank (count) or mass still needed
  uint64_t cnt_eq;   // participants with that key
  uint64_t mass_eq;  // and their mass (mass descents)
};

// Rank 0: picks the bin where the running count (mass) from the top reaches `target`, publishes
// it in sh->sel and clears the histogram for the next level. total_frac >= 0: the target is
// ceil(total_frac · total) of this level's total instead, clamped to [1, total].
template <bool kByMass>
__device__ void SelectBin(SmemHeader* sh, int nb, uint64_t target, double total_frac) {
  const int per = nb / kThreads;
  const int top = nb - 1 - static_cast<int>(threadIdx.x) * per;  // this thread's bins: top, top-1, ...
  uint64_t v[kMaxBinsPerThread];
  uint64_t s = 0;
#pragma unroll
  for (int k = 0; k < kMaxBinsPerThread; ++k) {
    v[k] = 0;
    if (k < per) v[k] = kByMass ? sh->mass[top - k] : sh->count[top - k];
    s += v[k];
  }
  uint64_t total;
  const uint64_t excl = BlockExclusiveSum(s, sh->scan, &total);
  if (total_frac >= 0.0) {
    const double t = ceil(total_frac * static_cast<double>(total));
    target = t < 1.0 ? 1 : (t >= static_cast<double>(total) ? total : static_cast<uint64_t>(t));
  }
  if (excl < target && target <= excl + s) {
    uint64_t acc = excl;
#pragma unroll
    for (int k = 0; k < kMaxBinsPerThread; ++k) {
      if (k < per && target <= acc + v[k]) {
        const int b = top - k;
        sh->sel = Selection{acc, sh->count[b], kByMass ? sh->mass[b] : 0, target, static_cast<uint32_t>(b)};
        break;
      }
      acc += v[k];
    }
  }
  // Each thread clears only the bins it read, after reading them.
  for (int k = 0; k < per; ++k) {
    sh->count[top - k] = 0;
    if (kByMass) sh->mass[top - k] = 0;
  }
}

// Finds, among the participants sorted by sort key descending, the element at 1-based position
// `target` (kByMass: where the running mass first reaches `target`; total_frac as in SelectBin).
// `elem(i, &u)` says whether slice element i takes part and sets its sort key u; `mass(u)` is its
// mass (kByMass). REQUIRES: 1 <= target <= the participants' count (mass). Every thread of every
// CTA of the row calls it; it ends with a cluster barrier.
template <bool kByMass, typename Elem, typename Mass>
__device__ DescentOut Descent(const Row& row, int first_level, uint64_t target, double total_frac, Elem elem,
                              Mass mass) {
  SmemHeader* sh = row.sh;
  const int lane = threadIdx.x & 31;
  const int iters = (row.n + kThreads - 1) / kThreads;
  uint32_t prefix = 0;
  DescentOut out{};
  for (int l = first_level; l < 3; ++l) {
    const Level lv = LevelOf(l);
    const int nb = 1 << lv.bits, hi = lv.shift + lv.bits;
    // -- this CTA's histogram: one atomic per distinct bin per warp step
    for (int j = 0; j < iters; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kThreads;
      uint32_t u = 0;
      bool part = i < row.n && elem(i, &u);
      part = part && (hi >= 32 || (u >> hi) == (prefix >> hi));
      if (!__any_sync(0xffffffffu, part)) continue;
      const uint32_t bin = part ? (u >> lv.shift) & (nb - 1) : 0xFFFFFFFFu;
      const uint32_t peers = __match_any_sync(0xffffffffu, bin);
      const bool leader = part && __ffs(peers) - 1 == lane;
      if constexpr (kByMass) {
        // q <= 2^44: two 22-bit halves, so a warp's sums fit 32 bits.
        const uint64_t q = part ? mass(u) : 0;
        const uint32_t qh = __reduce_add_sync(peers, static_cast<uint32_t>(q >> 22));
        const uint32_t ql = __reduce_add_sync(peers, static_cast<uint32_t>(q & 0x3FFFFFu));
        if (leader) atomicAdd(reinterpret_cast<unsigned long long*>(&sh->mass[bin]), (uint64_t(qh) << 22) + ql);
      }
      if (leader) atomicAdd(&sh->count[bin], static_cast<uint32_t>(__popc(peers)));
    }
    __syncthreads();
    // -- fold the other CTAs' histograms into rank 0's
    if (row.C > 1) {
      if (row.rank != 0) {
        uint32_t* rc = row.At(sh->count, 0);
        unsigned long long* rm = reinterpret_cast<unsigned long long*>(row.At(sh->mass, 0));
        for (int b = threadIdx.x; b < nb; b += kThreads) {
          const uint32_t k = sh->count[b];
          if (k == 0) continue;
          atomicAdd(rc + b, k);
          sh->count[b] = 0;
          if constexpr (kByMass) {
            atomicAdd(rm + b, sh->mass[b]);
            sh->mass[b] = 0;
          }
        }
      }
      row.Sync();
    }
    // -- rank 0 picks the bin; everyone reads it
    if (row.rank == 0) SelectBin<kByMass>(sh, nb, target, l == first_level ? total_frac : -1.0);
    row.Sync();
    const Selection s = *row.At(&sh->sel, 0);
    prefix |= s.bin << lv.shift;
    target = s.target - s.above;
    out.cnt_eq = s.bin_count;
    out.mass_eq = s.bin_mass;
  }
  out.key = prefix;
  out.rest = target;
  return out;
}

// The id of the need-th lowest id among the elements with key `key` inside `within`.
__device__ int32_t IdCut(const Row& row, uint32_t key, Cut within, uint64_t need) {
  const uint32_t* keys = row.keys;
  const int32_t begin = row.begin;
  auto tied = [&](int i, uint32_t* u) {
    const int32_t id = begin + i;
    if (keys[i] != key || !within.Has(key, id)) return false;
    *u = kIdKeyMax - static_cast<uint32_t>(id);
    return true;
  };
  const DescentOut d = Descent<false>(row, 1, need, -1.0, tied, [](uint32_t) { return uint64_t(0); });
  return static_cast<int32_t>(kIdKeyMax - d.key);
}

// ---- the kernel ----------------------------------------------------------------------------------

struct KernelParams {
  const float* logits;             // [rows, vocab]
  const SampleParamsDev* params;   // [rows]
  int32_t* ids;                    // [rows]
  int64_t vocab;
  int slice;                       // logits per CTA (multiple of 4)
  int cluster;                     // CTAs per row
};

// Copies this CTA's slice into shared memory as keys; returns the thread's packed maximum.
template <bool kVec>
__device__ uint64_t LoadSlice(const float* src, int n, uint32_t* keys, int32_t begin) {
  uint64_t best = 0;
  if constexpr (kVec) {
    const float4* src4 = reinterpret_cast<const float4*>(src);
    uint4* keys4 = reinterpret_cast<uint4*>(keys);
    const int n4 = n / 4;
    constexpr int kUnroll = 4;
    for (int g0 = threadIdx.x; g0 < n4; g0 += kUnroll * kThreads) {
      float4 v[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int g = g0 + k * kThreads;
        if (g < n4) v[k] = __ldcs(src4 + g);
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int g = g0 + k * kThreads;
        if (g >= n4) break;
        const uint4 key{KeyOf(v[k].x), KeyOf(v[k].y), KeyOf(v[k].z), KeyOf(v[k].w)};
        keys4[g] = key;
        const int32_t id = begin + 4 * g;
        best = max(best, max(max(PackMax(key.x, id), PackMax(key.y, id + 1)),
                             max(PackMax(key.z, id + 2), PackMax(key.w, id + 3))));
      }
    }
  } else {
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = KeyOf(__ldcs(src + i));
      keys[i] = key;
      best = max(best, PackMax(key, begin + i));
    }
  }
  return best;
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads, 2) SampleKernel(const __grid_constant__ KernelParams kp) {
  extern __shared__ __align__(16) unsigned char smem[];
  SmemHeader* sh = reinterpret_cast<SmemHeader*>(smem);
  uint32_t* keys = reinterpret_cast<uint32_t*>(smem + sizeof(SmemHeader));
  const int C = kp.cluster;
  const unsigned rank = C > 1 ? cg::this_cluster().block_rank() : 0;
  const int64_t r = blockIdx.x / C;
  const int64_t V = kp.vocab;
  const int64_t begin64 = static_cast<int64_t>(rank) * kp.slice;
  const int64_t left = V > begin64 ? V - begin64 : 0;
  const Row row{sh, keys, static_cast<int>(left < kp.slice ? left : kp.slice),
                static_cast<int32_t>(V > begin64 ? begin64 : V), C, rank};
  const float* logits = kp.logits + r * V;
  const SampleParamsDev prm = kp.params[r];

  // ---- 1. load, row max ----
  for (int b = threadIdx.x; b < kHistBins; b += kThreads) {
    sh->count[b] = 0;
    sh->mass[b] = 0;
  }
  const uint64_t best = BlockMax(LoadSlice<kVec>(logits + row.begin, row.n, keys, row.begin), sh->scan);
  if (threadIdx.x == 0) sh->part_max = best;
  row.Sync();
  uint64_t top = 0;
  for (int c = 0; c < C; ++c) top = max(top, *row.At(&sh->part_max, c));
  const uint32_t max_key = static_cast<uint32_t>(top >> 32);

  if (!(prm.temperature > 0.0f)) {
    if (rank == 0 && threadIdx.x == 0) kp.ids[r] = isnan(logits[0]) ? 0 : static_cast<int32_t>(~uint32_t(top));
    row.Sync();  // no CTA leaves while another may still read its shared memory
    return;
  }
  const Temper tp{max_key, ValueOf(max_key), 1.4426950408889634f / prm.temperature};
  auto mass = [&](uint32_t u) { return tp.Q(u); };

  // ---- 2. top-k ----
  Cut ck;
  if (prm.top_k > 0 && prm.top_k < V) {
    auto all = [&](int i, uint32_t* u) {
      *u = keys[i];
      return true;
    };
    const DescentOut d = Descent<false>(row, 0, static_cast<uint64_t>(prm.top_k), -1.0, all, mass);
    ck.key = d.key;
    if (d.rest < d.cnt_eq) ck.id_max = IdCut(row, d.key, Cut{}, d.rest);
  }

  // ---- 3. top-p over the top-k set ----
  Cut cp;
  if (prm.top_p < 1.0f) {  // NaN: off
    auto in_topk = [&](int i, uint32_t* u) {
      *u = keys[i];
      return ck.Has(keys[i], row.begin + i);
    };
    const double frac = prm.top_p > 0.0f ? static_cast<double>(prm.top_p) : 0.0;
    const DescentOut d = Descent<true>(row, 0, 0, frac, in_topk, mass);
    cp.key = d.key;
    const uint64_t q_t = d.mass_eq / d.cnt_eq;  // every tie has the same mass; the bin reached the target, so > 0
    const uint64_t need = min((d.rest + q_t - 1) / q_t, d.cnt_eq);
    if (need < d.cnt_eq) cp.id_max = IdCut(row, d.key, ck, need);
  }

  // ---- 4. min-p, then the draw in id order ----
  const float min_p = prm.min_p > 0.0f ? fminf(prm.min_p, 1.0f) : 0.0f;  // NaN: off
  auto kept_mass = [&](int i) -> uint64_t {
    const uint32_t k = keys[i];
    const int32_t id = row.begin + i;
    if (!ck.Has(k, id) || !cp.Has(k, id)) return 0;
    const float p = tp.P(k);
    return p >= min_p ? __float2ull_rn(p * kMassScale) : 0;
  };
  // Speculative sampling (SampleParamsDev::draft): the draft's mass m_d is set apart, the draft is
  // accepted when a first draw in [0, W + m_d) falls below m_d, else the draw below is over the
  // kept set without the draft (W its mass): the residual of rejection sampling, exact in integers.
  const int32_t draft = prm.draft >= 0 && prm.draft < V ? prm.draft : -1;
  auto drawn_mass = [&](int i) -> uint64_t { return row.begin + i == draft ? 0 : kept_mass(i); };
  const int per = (row.n + kThreads - 1) / kThreads;
  const int lo = min(row.n, static_cast<int>(threadIdx.x) * per), hi = min(row.n, lo + per);
  uint64_t mine = 0;
  for (int i = lo; i < hi; ++i) mine += drawn_mass(i);
  uint64_t cta_total;
  const uint64_t before = BlockExclusiveSum(mine, sh->scan, &cta_total);
  if (threadIdx.x == 0) {
    sh->part_total = cta_total;
    sh->part_draft = draft >= row.begin && draft < row.begin + row.n ? kept_mass(draft - row.begin) : 0;
  }
  row.Sync();
  uint64_t W = 0, base = 0, m_draft = 0;
  for (int c = 0; c < C; ++c) {
    const uint64_t t = *row.At(&sh->part_total, c);
    if (c < static_cast<int>(rank)) base += t;
    W += t;
    m_draft += *row.At(&sh->part_draft, c);
  }
  if (m_draft > 0 && __umul64hi(Philox64(prm.seed ^ 0x5bd1e9955bd1e995ull, prm.offset), W + m_draft) < m_draft) {
    if (rank == 0 && threadIdx.x == 0) kp.ids[r] = draft;  // accepted
    row.Sync();
    return;
  }
  // W >= 2^44 without a draft: the row max (lowest id) passes every cut and has p = 1. With one, W
  // may be 0 only when the draft holds all the mass (then it was accepted above).
  const uint64_t x = __umul64hi(Philox64(prm.seed, prm.offset), W);  // uniform in [0, W)
  if (x >= base && x - base >= before && x - base < before + mine) {
    const uint64_t want = x - base;
    uint64_t acc = before;
    for (int i = lo; i < hi; ++i) {
      acc += drawn_mass(i);
      if (want < acc) {
        kp.ids[r] = row.begin + i;
        break;
      }
    }
  }
  row.Sync();  // no CTA leaves while another may still read its shared memory
}

// ---- launcher ------------------------------------------------------------------------------------

struct DeviceInfo {
  int device = 0, sms = 0, smem_optin = 0, smem_per_sm = 0;
};

Status QueryDevice(DeviceInfo* d) {
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&d->device));
  GYRE_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, d->device));
  GYRE_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&d->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d->device));
  GYRE_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&d->smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, d->device));
  return Status::Ok();
}

int64_t SliceOf(int64_t vocab, int c) { return ((vocab + c - 1) / c + 3) / 4 * 4; }
int64_t SmemBytes(int64_t vocab, int c) { return static_cast<int64_t>(sizeof(SmemHeader)) + 4 * SliceOf(vocab, c); }

// Fewest CTAs whose slices fit two CTAs per SM (one, if no size does), raised while the grid stays
// within about two CTAs per SM and each CTA keeps at least kMinSlice logits.
int PickCluster(int64_t rows, int64_t vocab, const DeviceInfo& d) {
  const int64_t two_per_sm = d.smem_per_sm / 2 - 1024;  // the runtime reserves 1 KiB per CTA
  int c_fit = 0;
  for (int c = 1; c <= kMaxCluster && !c_fit; c *= 2)
    if (SmemBytes(vocab, c) <= two_per_sm) c_fit = c;
  for (int c = 1; c <= kMaxCluster && !c_fit; c *= 2)
    if (SmemBytes(vocab, c) <= d.smem_optin) c_fit = c;
  if (c_fit == 0) return 0;
  int c_par = 1;
  while (c_par < kMaxCluster && rows * c_par * 2 <= 2 * int64_t(d.sms) && vocab / (c_par * 2) >= kMinSlice) c_par *= 2;
  return std::max(c_fit, c_par);
}

// Raises the kernel's dynamic shared memory limit to the device's maximum, once per device.
template <bool kVec>
Status AllowSmem(const DeviceInfo& d) {
  // Bit per device ordinal: acquire/release so a thread that sees the bit also sees the attribute set.
  static std::atomic<uint64_t> done{0};
  const uint64_t bit = uint64_t(1) << (d.device & 63);
  if (done.load(std::memory_order_acquire) & bit) return Status::Ok();
  GYRE_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(SampleKernel<kVec>, cudaFuncAttributeMaxDynamicSharedMemorySize, d.smem_optin));
  done.fetch_or(bit, std::memory_order_release);
  return Status::Ok();
}

template <bool kVec>
Status Launch(const KernelParams& kp, int64_t rows, size_t smem, const DeviceInfo& d, cudaStream_t stream) {
  GYRE_RETURN_IF_ERROR(AllowSmem<kVec>(d));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(rows * kp.cluster));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(kp.cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = kp.cluster > 1 ? 1 : 0;
  GYRE_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&cfg, SampleKernel<kVec>, kp));
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

Status Bad(const std::string& what) { return Status::InvalidArgument("sample: " + what); }

}  // namespace

Status SampleRows(const float* logits, int64_t rows, int64_t vocab, const SampleParamsDev* params, int32_t* ids,
                  cudaStream_t stream, SampleConfig cfg) {
  if (rows < 0) return Bad("rows < 0");
  if (vocab < 1 || vocab > kMaxVocabIds) return Bad("vocab " + std::to_string(vocab) + " out of [1, 2^19]");
  const int c = cfg.cluster_size;
  if (c != 0 && c != 1 && c != 2 && c != 4 && c != 8) return Bad("cluster_size must be 0, 1, 2, 4 or 8");
  if (rows == 0) return Status::Ok();
  if (!logits || !params || !ids) return Bad("null pointer");
  DeviceInfo d;
  GYRE_RETURN_IF_ERROR(QueryDevice(&d));
  const int cluster = c ? c : PickCluster(rows, vocab, d);
  if (cluster == 0 || SmemBytes(vocab, cluster) > d.smem_optin)
    return Bad("vocab " + std::to_string(vocab) + " does not fit shared memory with cluster size " +
               std::to_string(cluster));
  if (rows * cluster > INT_MAX) return Bad("rows * cluster_size exceeds the grid limit");
  const KernelParams kp{logits, params, ids, vocab, static_cast<int>(SliceOf(vocab, cluster)), cluster};
  const size_t smem = static_cast<size_t>(SmemBytes(vocab, cluster));
  const bool vec = vocab % 4 == 0 && (reinterpret_cast<uintptr_t>(logits) & 15) == 0;
  return vec ? Launch<true>(kp, rows, smem, d, stream) : Launch<false>(kp, rows, smem, d, stream);
}

int64_t SampleMaxVocab() {
  DeviceInfo d;
  if (!QueryDevice(&d).ok()) return 0;
  int64_t v = std::min(kMaxVocabIds, (d.smem_optin - static_cast<int64_t>(sizeof(SmemHeader))) / 4 * kMaxCluster);
  while (v > 0 && SmemBytes(v, kMaxCluster) > d.smem_optin) --v;
  return v;
}

int SampleClusterSize(int64_t rows, int64_t vocab) {
  DeviceInfo d;
  if (vocab < 1 || vocab > kMaxVocabIds || rows < 1 || !QueryDevice(&d).ok()) return 0;
  return PickCluster(rows, vocab, d);
}

// ---- log-probabilities of sampled ids ----------------------------------------------------------

namespace {
constexpr int kLpThreads = 512;

__device__ float BlockReduce(float v, float* red, bool is_max) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kLpThreads / 32 ? red[lane] : (is_max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
      const float w = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, w) : v + w;
    }
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  const float r = red[0];
  __syncthreads();
  return r;
}

__global__ void __launch_bounds__(kLpThreads) RowLogProbKernel(const float* __restrict__ logits, int64_t vocab,
                                                               const int32_t* __restrict__ ids, float* __restrict__ out) {
  __shared__ float red[kLpThreads / 32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += kLpThreads) mx = fmaxf(mx, row[i]);
  mx = BlockReduce(mx, red, true);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += kLpThreads) sum += __expf(row[i] - mx);
  sum = BlockReduce(sum, red, false);
  if (threadIdx.x == 0) {
    const int32_t id = ids[blockIdx.x];
    out[blockIdx.x] = id >= 0 && id < vocab ? row[id] - mx - logf(sum) : __int_as_float(0x7fc00000);
  }
}
}  // namespace

Status RowLogProbs(const float* logits, int64_t rows, int64_t vocab, const int32_t* ids, float* out,
                   cudaStream_t stream) {
  if (rows < 0 || vocab < 1) return Status::InvalidArgument("RowLogProbs: bad shape");
  if (rows == 0) return Status::Ok();
  if (!logits || !ids || !out) return Status::InvalidArgument("RowLogProbs: null pointer");
  if (rows > INT_MAX) return Status::InvalidArgument("RowLogProbs: too many rows");
  RowLogProbKernel<<<static_cast<unsigned>(rows), kLpThreads, 0, stream>>>(logits, vocab, ids, out);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

namespace {
// One thread per (row, token): logits[r][i] = −inf where row r has a mask that clears bit i.
__global__ void ApplyTokenMaskKernel(float* logits, int64_t vocab, const int32_t* row_mask, const uint32_t* masks,
                                     int64_t words) {
  const int64_t r = blockIdx.y;
  const int32_t m = row_mask[r];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (m < 0 || i >= vocab) return;
  if (!((masks[m * words + (i >> 5)] >> (i & 31)) & 1u)) logits[r * vocab + i] = -INFINITY;
}
}  // namespace

Status ApplyTokenMask(float* logits, int64_t rows, int64_t vocab, const int32_t* row_mask, const uint32_t* masks,
                      cudaStream_t stream) {
  if (rows == 0) return Status::Ok();
  if (rows < 0 || rows > 65535 || vocab < 1 || !logits || !row_mask || !masks)
    return Status::InvalidArgument("ApplyTokenMask: bad shape or null pointer");
  const dim3 grid(static_cast<unsigned>((vocab + 255) / 256), static_cast<unsigned>(rows));
  ApplyTokenMaskKernel<<<grid, 256, 0, stream>>>(logits, vocab, row_mask, masks, (vocab + 31) / 32);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

}  // namespace gyre::cuda

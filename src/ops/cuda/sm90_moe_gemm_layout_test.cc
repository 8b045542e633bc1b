// Host simulation of the grouped MoE GEMM tiles (sm90_moe_gemm.cu, sm90_moe_wgmma.cu): the cp.async
// loader's swizzled stores, ldmatrix.x4 + mma.m16n8k16 fragments (HMMA), the wgmma K-major
// 128-byte-swizzle descriptor addressing and accumulator layout, and both epilogues (the gate/up
// interleave of gate_up, the pair scatter of down), and the warp-specialized kernel's TMA boxes,
// producer gather and epilogue. Plain C++ on small integers, so results are exact: a layout bug
// shows as a wrong, missing or duplicate output. Runs in the CPU build too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "ops/cuda/sm90_moe_gemm_config.h"

namespace gyre::cuda::internal {
namespace {

struct Tile {
  int block_m, block_n, rows, nt, k_tiles;
  bool gate_up;
};

// A tile's problem: 300 source rows, weights for two n-tiles, row tables as the kernels fill them.
struct Problem {
  int K, feat, inter, n_out;
  std::vector<float> a, w;
  std::vector<int> row_src, row_dst;
  Problem(const Tile& t) {
    K = t.k_tiles * kMoeBlockK;
    feat = t.gate_up ? t.block_n / 2 : t.block_n;
    inter = t.gate_up ? 2 * feat : 0;
    n_out = t.gate_up ? inter : 2 * feat;
    a.resize(300 * K);
    w.resize((t.gate_up ? 2 * inter : n_out) * K);
    uint32_t s = 12345;
    auto next = [&s](int m) { s = s * 1664525u + 1013904223u; return static_cast<float>((s >> 16) % m) - m / 2; };
    for (auto& v : a) v = next(7);
    for (auto& v : w) v = next(5);
    for (int i = 0; i < t.block_m; ++i) {
      row_src.push_back(i < t.rows ? (i * 37 + 11) % 300 : -1);
      row_dst.push_back(i < t.rows ? i * 3 + 1 : -1);
    }
  }
  float Dot(int r, int64_t wrow) const {
    float s = 0;
    for (int k = 0; k < K; ++k) s += a[row_src[r] * K + k] * w[wrow * K + k];
    return s;
  }
};

// The loader of both kernels, for all threads: stage kt of A and B into `smem` (bf16 slots).
void LoadStage(const Tile& t, const Problem& p, int threads, int stage_bytes_a, int kt, int stage_base,
               std::vector<float>& smem) {
  const int pass = threads / 8;
  for (int tid = 0; tid < threads; ++tid) {
    const int c = tid & 7, rr0 = tid >> 3;
    for (int j = 0; j < t.block_m * 8 / threads; ++j) {
      const int src = p.row_src[rr0 + j * pass];
      for (int e = 0; e < 8; ++e)
        smem[(stage_base + MoeSwizzle(rr0, c) + j * pass * kMoeRowBytes) / 2 + e] =
            src >= 0 ? p.a[src * p.K + kt * 64 + c * 8 + e] : 0.f;
    }
    const int64_t w_row0 = t.gate_up ? MoeGateUpRow(rr0, int64_t(t.nt) * p.feat, p.inter) : int64_t(t.nt) * p.feat + rr0;
    const int64_t step = t.gate_up ? pass / 2 : pass;
    for (int j = 0; j < t.block_n * 8 / threads; ++j)
      for (int e = 0; e < 8; ++e)
        smem[(stage_base + stage_bytes_a + MoeSwizzle(rr0, c) + j * pass * kMoeRowBytes) / 2 + e] =
            p.w[(w_row0 + j * step) * p.K + kt * 64 + c * 8 + e];
  }
}

// Output (dst row, feature) → (gate, up) for gate_up, (y, 0) for down; fails on duplicates.
using Outputs = std::map<std::pair<int64_t, int64_t>, std::pair<float, float>>;

// Epilogue of one thread's row r as the kernels write it: the warp (or warpgroup) owns tile columns
// from `warp_col`, the thread columns 2·(lane%4) + q of each n8 block; `acc(n8_block, q)`.
void Store(const Tile& t, const Problem& p, int r, int warp_col, int lane, int n8_blocks,
           const std::function<float(int, int)>& acc, Outputs* out) {
  if (r >= t.rows) return;
  const int64_t dst = p.row_dst[r];
  for (int j = 0; j < n8_blocks; j += t.gate_up ? 2 : 1)
    for (int q = 0; q < 2; ++q) {
      const int64_t f = t.gate_up ? int64_t(t.nt) * p.feat + warp_col / 2 + 2 * (lane % 4) + (j / 2) * 8 + q
                                  : int64_t(t.nt) * p.feat + warp_col + 2 * (lane % 4) + j * 8 + q;
      ASSERT_EQ(out->count({dst, f}), 0u) << "duplicate write";
      (*out)[{dst, f}] = {acc(j, q), t.gate_up ? acc(j + 1, q) : 0.f};
    }
}

void ExpectMatches(const Tile& t, const Problem& p, const Outputs& got) {
  size_t expect = 0;
  for (int r = 0; r < t.rows; ++r)
    for (int f = t.nt * p.feat; f < (t.nt + 1) * p.feat; ++f, ++expect) {
      auto it = got.find({p.row_dst[r], f});
      ASSERT_NE(it, got.end()) << "missing r=" << r << " f=" << f;
      EXPECT_EQ(it->second.first, p.Dot(r, f)) << "r=" << r << " f=" << f;
      if (t.gate_up) {
        EXPECT_EQ(it->second.second, p.Dot(r, p.inter + f)) << "up r=" << r << " f=" << f;
      }
    }
  EXPECT_EQ(got.size(), expect);
}

// ---- HMMA: ldmatrix.x4 + mma.m16n8k16 (row.col) --------------------------------------------------

// ldmatrix.x4: lane l addresses row l%8 of matrix l/8; thread t receives, of matrix m, row t/4,
// columns 2(t%4) and 2(t%4)+1.
void LdMatrix(const std::vector<float>& smem, const int (&addr)[32], float (&out)[32][4][2]) {
  for (int m = 0; m < 4; ++m)
    for (int t = 0; t < 32; ++t)
      for (int e = 0; e < 2; ++e) out[t][m][e] = smem[(addr[m * 8 + t / 4] + (2 * (t % 4) + e) * 2) / 2];
}

// d[t][q] += A·B with A (16×16) and B (16×8) assembled from the PTX fragment layouts.
void Mma(float (&d)[32][4], const float (&a)[32][4][2], const float (&b)[32][2][2]) {
  float A[16][16], B[16][8];
  for (int t = 0; t < 32; ++t)
    for (int e = 0; e < 2; ++e) {
      const int g = t / 4, c = 2 * (t % 4) + e;
      A[g][c] = a[t][0][e], A[g + 8][c] = a[t][1][e], A[g][c + 8] = a[t][2][e], A[g + 8][c + 8] = a[t][3][e];
      B[c][g] = b[t][0][e], B[c + 8][g] = b[t][1][e];
    }
  for (int t = 0; t < 32; ++t)
    for (int q = 0; q < 4; ++q) {
      const int row = t / 4 + (q >= 2 ? 8 : 0), col = 2 * (t % 4) + (q & 1);
      for (int k = 0; k < 16; ++k) d[t][q] += A[row][k] * B[k][col];
    }
}

template <class Cfg>
void RunMma(int rows, int nt, int k_tiles, bool gate_up) {
  const Tile t{Cfg::kBlockM, Cfg::kBlockN, rows, nt, k_tiles, gate_up};
  const Problem p(t);
  const int warps = Cfg::kNumThreads / 32;
  std::vector<float> smem(Cfg::kNumStages * Cfg::kStageBytes / 2, NAN);
  // acc[warp][mi][ni][lane][q]
  std::vector<float> acc(warps * Cfg::kMmaM * Cfg::kMmaN * 32 * 4, 0.f);
  auto A = [&](int w, int mi, int ni, int l, int q) -> float& {
    return acc[((((w * Cfg::kMmaM) + mi) * Cfg::kMmaN + ni) * 32 + l) * 4 + q];
  };
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int sa = (kt % Cfg::kNumStages) * Cfg::kStageBytes, sb = sa + Cfg::kStageBytesA;
    LoadStage(t, p, Cfg::kNumThreads, Cfg::kStageBytesA, kt, sa, smem);
    for (int w = 0; w < warps; ++w) {
      const int wm = w / Cfg::kWarpsN, wn = w % Cfg::kWarpsN;
      for (int kk = 0; kk < kMoeBlockK / 16; ++kk) {
        static float fa[8][32][4][2], fb[16][32][4][2];
        int addr[32];
        for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
          for (int l = 0; l < 32; ++l) addr[l] = sa + MoeLdmA(wm * Cfg::kWarpM + mi * 16, kk, l);
          LdMatrix(smem, addr, fa[mi]);
        }
        for (int nj = 0; nj < Cfg::kMmaN / 2; ++nj) {
          for (int l = 0; l < 32; ++l) addr[l] = sb + MoeLdmB(wn * Cfg::kWarpN + nj * 16, kk, l);
          LdMatrix(smem, addr, fb[nj]);
        }
        for (int mi = 0; mi < Cfg::kMmaM; ++mi)
          for (int ni = 0; ni < Cfg::kMmaN; ++ni) {
            float b[32][2][2], d[32][4];
            for (int l = 0; l < 32; ++l) {
              for (int e = 0; e < 2; ++e) {
                b[l][0][e] = fb[ni / 2][l][(ni & 1) * 2][e];
                b[l][1][e] = fb[ni / 2][l][(ni & 1) * 2 + 1][e];
              }
              for (int q = 0; q < 4; ++q) d[l][q] = A(w, mi, ni, l, q);
            }
            Mma(d, fa[mi], b);
            for (int l = 0; l < 32; ++l)
              for (int q = 0; q < 4; ++q) A(w, mi, ni, l, q) = d[l][q];
          }
      }
    }
  }
  Outputs got;
  for (int w = 0; w < warps; ++w)
    for (int l = 0; l < 32; ++l)
      for (int mi = 0; mi < Cfg::kMmaM; ++mi)
        for (int h = 0; h < 2; ++h) {
          const int r = (w / Cfg::kWarpsN) * Cfg::kWarpM + mi * 16 + l / 4 + 8 * h;
          Store(t, p, r, (w % Cfg::kWarpsN) * Cfg::kWarpN, l, Cfg::kMmaN,
                [&](int j, int q) { return A(w, mi, j, l, 2 * h + q); }, &got);
        }
  ExpectMatches(t, p, got);
}

TEST(MoeGemmLayout, Mma16x128) {
  RunMma<MoeMma16x128>(16, 1, 2, true);
  RunMma<MoeMma16x128>(5, 0, 3, true);
  RunMma<MoeMma16x128>(11, 1, 2, false);
}
TEST(MoeGemmLayout, Mma64x256) {
  RunMma<MoeMma64x256>(64, 1, 2, true);
  RunMma<MoeMma64x256>(37, 0, 2, false);
}
TEST(MoeGemmLayout, Mma128x256) {
  RunMma<MoeMma128x256>(100, 1, 2, true);
  RunMma<MoeMma128x256>(128, 1, 5, false);
}

// ---- wgmma: descriptors on the swizzled stages ---------------------------------------------------

// The hardware's address of element (row r, k in [0, 16)) of a K-major, 128B-swizzled operand whose
// descriptor starts at `start` with 1024 bytes between 8-row groups: XOR of address bits [4:6]
// with bits [7:9].
int WgmmaAddr(int start, int r, int k) {
  const int a = start + (r / 8) * 1024 + (r % 8) * 128 + k * 2;
  return (a & ~0x70) | ((((a >> 4) & 7) ^ ((a >> 7) & 7)) << 4);
}

// Geometry of sm90_moe_wgmma.cu's MoeWgmmaConfig: 256 threads, block_n 256; 128-row tiles give
// each warpgroup 64 rows × 256 columns, 64-row tiles 64 rows × 128 columns.
void RunWgmma(int block_m, int rows, int nt, int k_tiles, bool gate_up) {
  const Tile t{block_m, 256, rows, nt, k_tiles, gate_up};
  const Problem p(t);
  const int stage_a = block_m * kMoeRowBytes, stage = stage_a + 256 * kMoeRowBytes, stages = 4;
  const int wg_cols = block_m == 128 ? 256 : 128, num_acc = wg_cols / 2;
  std::vector<float> smem(stages * stage / 2, NAN), acc(256 * num_acc, 0.f);
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int base = (kt % stages) * stage;
    LoadStage(t, p, 256, stage_a, kt, base, smem);
    for (int wg = 0; wg < 2; ++wg) {
      const int wg_row = block_m == 128 ? 64 * wg : 0, wg_col = block_m == 128 ? 0 : wg * wg_cols;
      const int sa = base + wg_row * kMoeRowBytes, sb = base + stage_a + wg_col * kMoeRowBytes;
      for (int kk = 0; kk < 4; ++kk)
        for (int th = 0; th < 128; ++th)
          for (int i = 0; i < num_acc; ++i) {
            const int row = 16 * (th / 32) + (th % 32) / 4 + (i % 4 >= 2 ? 8 : 0);
            const int col = (i / 4) * 8 + 2 * (th % 4) + (i % 2);
            for (int k = 0; k < 16; ++k)
              acc[(wg * 128 + th) * num_acc + i] +=
                  smem[WgmmaAddr(sa + kk * 32, row, k) / 2] * smem[WgmmaAddr(sb + kk * 32, col, k) / 2];
          }
    }
  }
  Outputs got;
  for (int tid = 0; tid < 256; ++tid) {
    const int wg = tid / 128, l = tid % 32, wg_warp = (tid / 32) % 4;
    const int wg_row = block_m == 128 ? 64 * wg : 0, wg_col = block_m == 128 ? 0 : wg * wg_cols;
    for (int h = 0; h < 2; ++h)
      Store(t, p, wg_row + 16 * wg_warp + l / 4 + 8 * h, wg_col, l, wg_cols / 8,
            [&](int j, int q) { return acc[tid * num_acc + 4 * j + 2 * h + q]; }, &got);
  }
  ExpectMatches(t, p, got);
}

TEST(MoeGemmLayout, Wgmma128x256) {
  RunWgmma(128, 100, 1, 2, true);
  RunWgmma(128, 128, 0, 2, false);
}
TEST(MoeGemmLayout, Wgmma64x256) {
  RunWgmma(64, 64, 1, 2, true);
  RunWgmma(64, 33, 1, 2, false);
}

// ---- warp-specialized wgmma: TMA weight boxes, the producer's gather, the consumers' epilogue ----

// TMA with the 128-byte swizzle writes box row r (box 1024-byte aligned), 16-byte chunk c, at
// r·128 + ((c ^ r % 8) · 16) = MoeSwizzle(r, c). The producer's 128 threads load A chunk tid % 8 of
// rows tid / 8 + 16·j, and only rows below the tile's count.
template <class Cfg>
void RunWs(int rows, int nt, int k_tiles, bool gate_up) {
  const Tile t{Cfg::kBlockM, Cfg::kBlockN, rows, nt, k_tiles, gate_up};
  const Problem p(t);
  std::vector<float> smem(Cfg::kNumStages * Cfg::kStageBytes / 2, NAN);
  std::vector<float> acc(2 * 128 * Cfg::kNumAcc, 0.f);
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int base = (kt % Cfg::kNumStages) * Cfg::kStageBytes;
    for (int tid = 0; tid < Cfg::kProducerThreads; ++tid) {
      const int c = tid & 7;
      for (int j = 0; j < Cfg::kChunksPerThreadA; ++j) {
        const int rr = tid / 8 + j * Cfg::kRowsPerPassA;
        if (rr >= rows) continue;
        for (int e = 0; e < 8; ++e)
          smem[(base + MoeSwizzle(rr, c)) / 2 + e] = p.a[p.row_src[rr] * p.K + kt * 64 + c * 8 + e];
      }
    }
    for (int b = 0; b < Cfg::kNumBoxes; ++b) {
      const int64_t f0 = int64_t(nt) * p.feat;
      const int64_t wrow = gate_up ? MoeWsGateUpBoxRow(b, f0, p.inter) : f0 + b * Cfg::kBoxRows;
      for (int r = 0; r < Cfg::kBoxRows; ++r)
        for (int c = 0; c < 8; ++c)
          for (int e = 0; e < 8; ++e)
            smem[(base + Cfg::kStageBytesA + b * Cfg::kBoxBytes + MoeSwizzle(r, c)) / 2 + e] =
                p.w[(wrow + r) * p.K + kt * 64 + c * 8 + e];
    }
    for (int cw = 0; cw < 2; ++cw) {
      const int wg_row = Cfg::kBlockM == 128 ? 64 * cw : 0, wg_col = Cfg::kBlockM == 128 ? 0 : cw * Cfg::kWgCols;
      if (wg_row >= rows) continue;  // the kernel skips an empty warpgroup
      const int sa = base + wg_row * kMoeRowBytes, sb = base + Cfg::kStageBytesA + wg_col * kMoeRowBytes;
      for (int kk = 0; kk < 4; ++kk)
        for (int th = 0; th < 128; ++th)
          for (int i = 0; i < Cfg::kNumAcc; ++i) {
            const int row = 16 * (th / 32) + (th % 32) / 4 + (i % 4 >= 2 ? 8 : 0);
            const int col = (i / 4) * 8 + 2 * (th % 4) + (i % 2);
            if (wg_row + row >= rows) continue;  // rows never loaded: never stored either
            for (int k = 0; k < 16; ++k)
              acc[(cw * 128 + th) * Cfg::kNumAcc + i] +=
                  smem[WgmmaAddr(sa + kk * 32, row, k) / 2] * smem[WgmmaAddr(sb + kk * 32, col, k) / 2];
          }
    }
  }
  Outputs got;
  for (int cw = 0; cw < 2; ++cw) {
    const int wg_row = Cfg::kBlockM == 128 ? 64 * cw : 0, wg_col = Cfg::kBlockM == 128 ? 0 : cw * Cfg::kWgCols;
    for (int th = 0; th < 128; ++th) {
      const int warp = th / 32, lane = th % 32;
      const float* a = &acc[(cw * 128 + th) * Cfg::kNumAcc];
      for (int h = 0; h < 2; ++h) {
        const int r = wg_row + 16 * warp + lane / 4 + 8 * h;
        if (r >= rows) continue;
        const int64_t dst = p.row_dst[r];
        for (int j = 0; j < Cfg::kWgCols / 8; ++j)
          for (int q = 0; q < 2; ++q) {
            int64_t f;
            std::pair<float, float> v;
            if (gate_up) {
              if ((j & 15) >= 8) continue;
              f = int64_t(nt) * p.feat + MoeWsGateFeature(wg_col + 8 * j) + 2 * (lane % 4) + q;
              v = {a[4 * j + 2 * h + q], a[4 * (j + 8) + 2 * h + q]};
            } else {
              f = int64_t(nt) * p.feat + wg_col + 8 * j + 2 * (lane % 4) + q;
              v = {a[4 * j + 2 * h + q], 0.f};
            }
            ASSERT_EQ(got.count({dst, f}), 0u) << "duplicate write";
            got[{dst, f}] = v;
          }
      }
    }
  }
  ExpectMatches(t, p, got);
}

TEST(MoeGemmLayout, WgmmaWs128x256) {
  RunWs<MoeWs128x256>(100, 1, 2, true);
  RunWs<MoeWs128x256>(128, 0, 5, false);
  RunWs<MoeWs128x256>(37, 1, 2, true);  // tail tile: the second consumer skips
  RunWs<MoeWs128x256>(3, 0, 2, false);
}
TEST(MoeGemmLayout, WgmmaWs64x256) {
  RunWs<MoeWs64x256>(64, 1, 2, true);
  RunWs<MoeWs64x256>(33, 1, 6, false);
}

}  // namespace
}  // namespace gyre::cuda::internal

// Host emulation of shaders/cuda/gemv.cu for tests/host_emulation.rs: compiles the kernel
// source as C++ (TS_HOST) and runs each warp's lanes one after another, summing their
// partials where the GPU's butterfly shuffle would. Only row_partial (all the
// format-specific decoding and indexing) runs here; the shuffle reduction and the launch
// are the small shared part exercised on the device alone.
#define TS_HOST 1
#include "gemv.cu"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

template <int FMT, int GS, int S>
static void run(const Args& a, float* y) {
    constexpr int R = RowsPerWarp<S>::R;
    for (int row0 = 0; row0 < a.O; row0 += R) {
        float total[R][S];
        for (int r = 0; r < R; ++r)
            for (int s = 0; s < S; ++s) total[r][s] = 0.0f;
        for (int lane = 0; lane < 32; ++lane) {
            float acc[R][S];
            row_partial<FMT, GS, S, R>(a, row0, lane, acc);
            for (int r = 0; r < R; ++r)
                for (int s = 0; s < S; ++s) total[r][s] += acc[r][s];
        }
        for (int r = 0; r < R; ++r)
            if (row0 + r < a.O)
                for (int s = 0; s < S; ++s) y[(i64)s * a.O + row0 + r] = total[r][s];
    }
}

template <int FMT, int GS>
static int run_s(int S, const Args& a, float* y) {
    switch (S) {
        case 1: run<FMT, GS, 1>(a, y); return 0;
        case 2: run<FMT, GS, 2>(a, y); return 0;
        case 3: run<FMT, GS, 3>(a, y); return 0;
        case 4: run<FMT, GS, 4>(a, y); return 0;
        case 8: run<FMT, GS, 8>(a, y); return 0;
        case 16: run<FMT, GS, 16>(a, y); return 0;
        default: return -2;
    }
}

static void* aligned_copy(const void* src, i64 n) {
    i64 size = ((n + 255) / 256 + 1) * 256;
    void* p = std::aligned_alloc(256, (size_t)size);
    std::memset(p, 0, (size_t)size);
    if (n > 0) std::memcpy(p, src, (size_t)n);
    return p;
}

// Returns 0 on success, -1 for an unknown format id / group size, -2 for an S not built.
extern "C" int ts_emu_gemv(int fmt, int gs, int S, const u8* w, i64 wlen, const u8* sc, i64 sclen, const float* x,
                           i64 xlen, float* y, i64 rb, int O, int I, int xs, int sc_row) {
    // Device allocations are 256-byte aligned; so are these copies, so the kernels' aligned
    // vector loads see the same addresses modulo 256 as on the GPU.
    Args a;
    a.w = (const u8*)aligned_copy(w, wlen);
    a.sc = (const u8*)aligned_copy(sc, sclen);
    a.x = (const float*)aligned_copy(x, xlen * 4);
    a.rb = rb;
    a.O = O;
    a.I = I;
    a.xs = xs;
    a.sc_row = sc_row;
    int rc = -1;
    switch (fmt) {
        case TS_FMT_F32: rc = run_s<TS_FMT_F32, 0>(S, a, y); break;
        case TS_FMT_F16: rc = run_s<TS_FMT_F16, 0>(S, a, y); break;
        case TS_FMT_BF16: rc = run_s<TS_FMT_BF16, 0>(S, a, y); break;
        case TS_FMT_INT8_ROW: rc = run_s<TS_FMT_INT8_ROW, 0>(S, a, y); break;
        case TS_FMT_INT4_ROW: rc = run_s<TS_FMT_INT4_ROW, 0>(S, a, y); break;
        case TS_FMT_INT2_ROW: rc = run_s<TS_FMT_INT2_ROW, 0>(S, a, y); break;
        case TS_FMT_INT4_G:
            switch (gs) {
                case 16: rc = run_s<TS_FMT_INT4_G, 16>(S, a, y); break;
                case 32: rc = run_s<TS_FMT_INT4_G, 32>(S, a, y); break;
                case 48: rc = run_s<TS_FMT_INT4_G, 48>(S, a, y); break;
                case 64: rc = run_s<TS_FMT_INT4_G, 64>(S, a, y); break;
                case 96: rc = run_s<TS_FMT_INT4_G, 96>(S, a, y); break;
                case 128: rc = run_s<TS_FMT_INT4_G, 128>(S, a, y); break;
                case 192: rc = run_s<TS_FMT_INT4_G, 192>(S, a, y); break;
                case 256: rc = run_s<TS_FMT_INT4_G, 256>(S, a, y); break;
                default: rc = -1;
            }
            break;
        case TS_FMT_INT3_G64: rc = run_s<TS_FMT_INT3_G64, 0>(S, a, y); break;
        case TS_FMT_E8: rc = run_s<TS_FMT_E8, 0>(S, a, y); break;
        case TS_FMT_FP8_F32: rc = run_s<TS_FMT_FP8_F32, 0>(S, a, y); break;
        case TS_FMT_FP8_UE8M0: rc = run_s<TS_FMT_FP8_UE8M0, 0>(S, a, y); break;
        case TS_FMT_HFQ4: rc = run_s<TS_FMT_HFQ4, 0>(S, a, y); break;
        case TS_FMT_MQ4_V2: rc = run_s<TS_FMT_MQ4_V2, 0>(S, a, y); break;
        case TS_FMT_MQ4C: rc = run_s<TS_FMT_MQ4C, 0>(S, a, y); break;
        case TS_FMT_MQ4K: rc = run_s<TS_FMT_MQ4K, 0>(S, a, y); break;
        case TS_FMT_MXFP4: rc = run_s<TS_FMT_MXFP4, 0>(S, a, y); break;
        default: rc = -1;
    }
    std::free((void*)a.w);
    std::free((void*)a.sc);
    std::free((void*)a.x);
    return rc;
}

// ---- the tensor-core kernel: each block's warps in turn, each warp's 32 lanes at once ----

// -DTS_EMU_PERSIST=<G> runs the persistent build's schedule (gemv.cu TS_MMA_PERSIST) with a
// grid of min(G, units) blocks: each block's warps walk the block's share of the (tile,
// round) units (`mma_walk`, the kernel's own walk and ring), the block's warps' partials are
// summed per tile, and a tile split between blocks goes through per-part partials summed in
// part order once all its parts arrived (blocks run in order here, so the last part's block
// sums them, as on the device the last to arrive does).
#ifndef TS_EMU_PERSIST
#define TS_EMU_PERSIST 0
#endif
template <int FMT, int GS, int CBT, int S>
static void run_mma_persist(const MArgs& a, float* y) {
    enum { NT = MmaShape<S>::NT, NCLS = MmaClasses<FMT, GS, CBT>::N };
    const int rs = persist_rounds(mma_kblocks<FMT, CBT>(a), TS_MMA_WARPS, TS_MMA_STAGE / CBT);
    const int tiles = (a.O + 15) / 16;
    const i64 n = (i64)tiles * rs;
    const int g = (int)(n < TS_EMU_PERSIST ? n : TS_EMU_PERSIST);
    float* ws = (float*)std::calloc((size_t)rs * S * a.O, sizeof(float));
    int* cnt = (int*)std::calloc((size_t)tiles, sizeof(int));
    typedef float Tot[32][NT][4];
    for (int b = 0; b < g; ++b) {
        const MmaWalk wk = persist_share(b, g, tiles, rs);
        if (wk.ulo >= wk.uhi) continue;
        const int tf = wk.ulo / rs, tl = (wk.uhi - 1) / rs;
        Tot* tot = (Tot*)std::calloc((size_t)(tl - tf + 1), sizeof(Tot));
        int ends = 0;
        for (int warp = 0; warp < TS_MMA_WARPS; ++warp) {
            float acc[32][NT][4];
            int seen = 0;
            auto tile_end = [&](int tile, float (&ac)[32][NT][4]) {
                for (int lane = 0; lane < 32; ++lane)
                    for (int nt = 0; nt < NT; ++nt)
                        for (int q = 0; q < 4; ++q) tot[tile - tf][lane][nt][q] += ac[lane][nt][q];
                ++seen;
            };
            mma_walk<FMT, GS, S, CBT, 32>(a, wk, warp, TS_MMA_WARPS, 0, acc, tile_end);
            // Every warp ends every tile of the block's share (the kernel's barrier count).
            if (warp > 0 && seen != ends) std::abort();
            ends = seen;
        }
        if (ends != tl - tf + 1) std::abort();
        for (int tile = tf; tile <= tl; ++tile) {
            mma_class_sum<S, NCLS, 32>(tot[tile - tf]);
            const i64 t0 = (i64)tile * rs, t1 = t0 + rs;
            if (t0 >= wk.ulo && t1 <= wk.uhi) {
                for (int lane = 0; lane < 32; ++lane) mma_store<FMT, S, NCLS>(a, 16 * tile, lane, tot[tile - tf][lane], y);
                continue;
            }
            const int f = persist_block_of(t0, g, n), np = persist_block_of(t1 - 1, g, n) - f + 1;
            if (b - f < 0 || b - f >= np || np > rs) std::abort();
            for (int lane = 0; lane < 32; ++lane)
                mma_store<FMT, S, NCLS>(a, 16 * tile, lane, tot[tile - tf][lane], ws + (i64)(b - f) * S * a.O);
            if (++cnt[tile] == np) {
                for (int k = 0; k < 16 * S; ++k) {
                    const int row = 16 * tile + (k & 15), s = k >> 4;
                    if (row >= a.O) continue;
                    float v = 0.0f;
                    for (int pp = 0; pp < np; ++pp) v += ws[((i64)pp * S + s) * a.O + row];
                    y[(i64)s * a.O + row] = v;
                }
            }
        }
        std::free(tot);
    }
    std::free(ws);
    std::free(cnt);
}

template <int FMT, int GS, int CBT, int S>
static void run_mma(const MArgs& a, float* y) {
    enum { NT = MmaShape<S>::NT, NCLS = MmaClasses<FMT, GS, CBT>::N };
    if constexpr (TS_EMU_PERSIST > 0 && S <= 4) {
        run_mma_persist<FMT, GS, CBT, S>(a, y);
        return;
    }
    for (int r0 = 0; r0 < a.O; r0 += 16) {
        float tot[32][NT][4] = {};
        for (int warp = 0; warp < TS_MMA_WARPS; ++warp) {
            float acc[32][NT][4];
            mma_warp<FMT, GS, S, CBT, 32>(a, r0, warp, TS_MMA_WARPS, 0, acc);
            for (int lane = 0; lane < 32; ++lane)
                for (int nt = 0; nt < NT; ++nt)
                    for (int q = 0; q < 4; ++q) tot[lane][nt][q] += acc[lane][nt][q];
        }
        mma_class_sum<S, NCLS, 32>(tot);
        for (int lane = 0; lane < 32; ++lane) mma_store<FMT, S, NCLS>(a, r0, lane, tot[lane], y);
    }
}

// S = S_ when the build exists: group classes (MmaClasses) need 2 S N <= 8.
template <int FMT, int GS, int CBT, int S_>
static int run_mma_if(const MArgs& a, float* y) {
    if constexpr (MmaClasses<FMT, GS, CBT>::N == 1 || 2 * S_ * MmaClasses<FMT, GS, CBT>::N <= 8) {
        run_mma<FMT, GS, CBT, S_>(a, y);
        return 0;
    } else {
        (void)a;
        (void)y;
        return -2;
    }
}

template <int FMT, int GS, int CBT>
static int run_mma_s(int S, const MArgs& a, float* y) {
    switch (S) {
        case 1: return run_mma_if<FMT, GS, CBT, 1>(a, y);
        case 2: return run_mma_if<FMT, GS, CBT, 2>(a, y);
        case 3: return run_mma_if<FMT, GS, CBT, 3>(a, y);
        case 4: return run_mma_if<FMT, GS, CBT, 4>(a, y);
        case 8: return run_mma_if<FMT, GS, CBT, 8>(a, y);
        case 16: return run_mma_if<FMT, GS, CBT, 16>(a, y);
        default: return -2;
    }
}

// xh: [2S, xs] f16 bits; xa: [S] 1/p then [S, xs / 128] segment sums (layout.rs).
// Returns 0, -1 for a (format, group, chunk) with no tensor-core build, -2 for an S not built.
extern "C" int ts_emu_gemv_mma(int fmt, int gs, int cbt, int S, const u8* w, i64 wlen, const u8* sc, i64 sclen,
                               const unsigned short* xh, i64 xhlen, const float* xa, i64 xalen, float* y, i64 rb,
                               int O, int xs, int sc_row) {
    MArgs a;
    a.w = (const u8*)aligned_copy(w, wlen);
    a.sc = (const u8*)aligned_copy(sc, sclen);
    a.xh = (const u8*)aligned_copy(xh, xhlen * 2);
    a.xa = (const float*)aligned_copy(xa, xalen * 4);
    a.rb = rb;
    a.O = O;
    a.xs = xs;
    a.sc_row = sc_row;
    int rc = -1;
#define TS_EMU_MMA(F_, G_, C_) \
    if (fmt == F_ && gs == G_ && cbt == C_) rc = run_mma_s<F_, G_, C_>(S, a, y);
    TS_EMU_MMA(TS_FMT_INT4_ROW, 0, 16)
    TS_EMU_MMA(TS_FMT_INT4_G, 32, 4)
    TS_EMU_MMA(TS_FMT_INT4_G, 64, 8)
    TS_EMU_MMA(TS_FMT_INT4_G, 32, 8)
    TS_EMU_MMA(TS_FMT_INT4_G, 32, 16)
    TS_EMU_MMA(TS_FMT_INT4_G, 64, 16)
    TS_EMU_MMA(TS_FMT_INT4_G, 96, 4)
    TS_EMU_MMA(TS_FMT_INT4_G, 128, 16)
    TS_EMU_MMA(TS_FMT_INT4_G, 192, 8)
    TS_EMU_MMA(TS_FMT_INT4_G, 256, 16)
    TS_EMU_MMA(TS_FMT_INT8_ROW, 0, 16)
    TS_EMU_MMA(TS_FMT_FP8_F32, 0, 16)
    TS_EMU_MMA(TS_FMT_FP8_UE8M0, 0, 16)
    TS_EMU_MMA(TS_FMT_HFQ4, 0, 16)
    TS_EMU_MMA(TS_FMT_MQ4_V2, 0, 16)
    TS_EMU_MMA(TS_FMT_MQ4C, 0, 16)
#undef TS_EMU_MMA
    std::free((void*)a.w);
    std::free((void*)a.sc);
    std::free((void*)a.xh);
    std::free((void*)a.xa);
    return rc;
}

// ---- the GEMM: each block's stages in turn (the stage copy as one "thread"), each warp's
// 32 lanes at once, as the device runs them between its barriers ----

// DQ: dequantized decoding (TS_DEQ), with the row powers gemm_row_pow_k would write.
template <int FMT, int GS, int CBT, int P, int NTW, bool DQ>
static void run_gemm(GArgs a, float* y) {
    typedef GemmShape<FMT, CBT> G;
    const i64 nkb = mma_kblocks<FMT, CBT>(a.m), nst = (nkb + G::U - 1) / G::U;
    std::vector<float> rexp;
    if constexpr (DQ) {
        rexp.resize((size_t)a.m.O);
        for (int row = 0; row < a.m.O; ++row) rexp[(size_t)row] = gemm_row_pow<FMT, GS, CBT>(a.m, row);
        a.rexp = rexp.data();
    } else {
        a.rexp = 0;
    }
    u8* smem = (u8*)std::aligned_alloc(256, (size_t)(NTW * G::TILE));
    typedef float Acc[32][2][NTW][4];
    Acc* acc = (Acc*)std::malloc(sizeof(Acc) * TS_GEMM_WARPS);
#ifdef TS_WGMMA
    // The warpgroup build's per-warp k-block products and the k-block pending their fold.
    Acc* c = (Acc*)std::malloc(sizeof(Acc) * TS_GEMM_WARPS);
    std::vector<WgPending<FMT, 32>> pend(TS_GEMM_WARPS);
#endif
    for (int rb0 = 0; rb0 < a.m.O; rb0 += 32 * TS_GEMM_WARPS)
        for (int nt0 = 0; nt0 < a.nbt; nt0 += NTW) {
            std::memset(acc, 0, sizeof(Acc) * TS_GEMM_WARPS);
#ifdef TS_WGMMA
            for (auto& pw : pend) pw.kb = -1;
#endif
            for (i64 st = 0; st < nst; ++st) {
                gemm_stage_x<FMT, CBT, NTW>(a, st, nt0, smem, 0, 1);
                for (int warp = 0; warp < TS_GEMM_WARPS; ++warp) {
                    const int r0w = rb0 + 32 * warp;
                    if (r0w >= a.m.O) continue;
                    u32 wv[32][2][2][G::U][G::NW];
                    u32 sv[32][2][2][G::U][MmaFmt<FMT>::NR];
                    gemm_load_w<FMT, GS, CBT, 32>(a, r0w, st, 0, wv, sv);
                    float inv[32][2][2];
                    gemm_row_inverses<32>(a, r0w, 0, inv);
#ifdef TS_WGMMA
                    // The warpgroup build runs every format on the canonical layout.
                    if constexpr (NTW == 8) {
                        gemm_compute_wg<FMT, CBT, P, NTW, 32, DQ>(a, st, 0, nt0, wv, sv, smem, inv, acc[warp], c[warp],
                                                                  pend[warp]);
                        continue;
                    }
#endif
                    gemm_compute<FMT, GS, CBT, P, NTW, 32, DQ>(a, r0w, st, 0, wv, sv, smem, nt0, inv, acc[warp]);
                }
            }
            for (int warp = 0; warp < TS_GEMM_WARPS; ++warp) {
                const int r0w = rb0 + 32 * warp;
#ifdef TS_WGMMA
                if constexpr (NTW == 8 && !DQ)
                    wg_fold_pending<FMT, CBT, P, NTW, 32>(a, 0, nt0, pend[warp], c[warp], acc[warp]);
#endif
                if (r0w < a.m.O) gemm_store<FMT, P, NTW, 32, DQ>(a, r0w, nt0, 0, acc[warp], y);
            }
        }
    std::free(acc);
#ifdef TS_WGMMA
    std::free(c);
#endif
    std::free(smem);
}

// xg: the GEMM's activation halves (layout.rs gemm_activations) of nbt n8 tiles; xa: [sp]
// 1/p then [sp, xs / 128] sums. nt must be the layout's tiles per block (4 or 8 here).
// parts: 1 or 2, or 3 for one part with dequantized decoding (TS_DEQ; the scaled formats
// but hfq4). Returns 0, -1 for a (format, group, chunk) without a GEMM, -2 for an
// unsupported P / nt.
extern "C" int ts_emu_gemm(int fmt, int gs, int cbt, int parts, int nt, const u8* w, i64 wlen, const u8* sc,
                           i64 sclen, const unsigned short* xg, i64 xglen, const float* xa, i64 xalen, float* y,
                           i64 rb, int O, int S, int xs, int sc_row, int nbt, int sp) {
    GArgs a;
    a.m.w = (const u8*)aligned_copy(w, wlen);
    a.m.sc = (const u8*)aligned_copy(sc, sclen);
    a.m.xh = 0;
    a.m.xa = (const float*)aligned_copy(xa, xalen * 4);
    a.m.rb = rb;
    a.m.O = O;
    a.m.xs = xs;
    a.m.sc_row = sc_row;
    a.xg = (const u8*)aligned_copy(xg, xglen * 2);
    a.S = S;
    a.nbt = nbt;
    a.sp = sp;
    a.rexp = 0;
    int rc = -1;
#define TS_EMU_GEMM_PN(F_, G_, C_, P_, N_, DQ_) \
    if (fmt == F_ && gs == G_ && cbt == C_ && parts == (DQ_ ? 3 : P_) && nt == N_) \
        rc = (run_gemm<F_, G_, C_, P_, N_, DQ_>(a, y), 0);
#define TS_EMU_GEMM(F_, G_, C_)              \
    TS_EMU_GEMM_PN(F_, G_, C_, 2, 8, false) \
    TS_EMU_GEMM_PN(F_, G_, C_, 1, 8, false) \
    TS_EMU_GEMM_PN(F_, G_, C_, 1, 4, false) \
    TS_EMU_GEMM_PN(F_, G_, C_, 2, 4, false)
#define TS_EMU_GEMM_DQ(F_, G_, C_)          \
    TS_EMU_GEMM(F_, G_, C_)                 \
    TS_EMU_GEMM_PN(F_, G_, C_, 1, 8, true) \
    TS_EMU_GEMM_PN(F_, G_, C_, 1, 4, true)
    TS_EMU_GEMM(TS_FMT_INT4_ROW, 0, 16)
    TS_EMU_GEMM_DQ(TS_FMT_INT4_G, 32, 4)
    TS_EMU_GEMM_DQ(TS_FMT_INT4_G, 64, 8)
    TS_EMU_GEMM_DQ(TS_FMT_INT4_G, 96, 4)
    TS_EMU_GEMM_DQ(TS_FMT_INT4_G, 128, 16)
    TS_EMU_GEMM_DQ(TS_FMT_INT4_G, 192, 8)
    TS_EMU_GEMM_DQ(TS_FMT_INT4_G, 256, 16)
    TS_EMU_GEMM(TS_FMT_INT8_ROW, 0, 16)
    TS_EMU_GEMM_DQ(TS_FMT_FP8_F32, 0, 16)
    TS_EMU_GEMM_DQ(TS_FMT_FP8_UE8M0, 0, 16)
    TS_EMU_GEMM(TS_FMT_HFQ4, 0, 16)
    TS_EMU_GEMM_DQ(TS_FMT_MQ4_V2, 0, 16)
    TS_EMU_GEMM_DQ(TS_FMT_MQ4C, 0, 16)
#undef TS_EMU_GEMM_DQ
#undef TS_EMU_GEMM
#undef TS_EMU_GEMM_PN
    std::free((void*)a.m.w);
    std::free((void*)a.m.sc);
    std::free((void*)a.m.xa);
    std::free((void*)a.xg);
    return rc;
}

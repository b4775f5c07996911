// Host emulation of shaders/cuda/gemv.cu for tests/host_emulation.rs: compiles the kernel
// source as C++ (TS_HOST) and runs each warp's lanes one after another, summing their
// partials where the GPU's butterfly shuffle would. Only row_partial (all the
// format-specific decoding and indexing) runs here; the shuffle reduction and the launch
// are the small shared part exercised on the device alone.
#define TS_HOST 1
#include "gemv.cu"

#include <cstdlib>
#include <cstring>

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

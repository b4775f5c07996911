// tessera CUDA tier: y[S, O] = x[S, I] . W^T. GEMV for every registry format at S = 1..16
// (CUDA cores, and tensor cores where a format's codes are exact in f16: the 16-row kernel
// TS_MMA, or the GEMM kernel with split-K over the row), GEMM for S >= 17 on the tensor
// cores (TS_GEMM, below the GEMV), the MoE grouped GEMV (TS_MOE), and the device-side
// activation split for the tensor-core GEMVs (TS_PREP).
//
// Compiled by NVRTC at run time (crates/kernels-cuda/src/compile.rs), one module per build.
// The CUDA-core GEMV build:
//   -DTS_FMT=<format id below> [-DTS_GS=<group size>] [-DTS_MUTATE_...]
//   -DTS_S=<S>
// exports gemv_s<S> (gemv_s1 .. gemv_s16), all with the same parameters:
//   (const u8* w, const u8* sc, const float* x, float* y,
//    long long row_bytes, int O, int I, int x_stride, int sc_row)
// - w, sc: the container's own weight and sidecar-scale bytes, exactly as stored;
// - x: [S, x_stride] f32, zero-padded past I (x_stride is a multiple of 1024), already in
//   the format's stored domain (rotated formats: the host rotated it);
// - y: [S, O] f32;
// - row_bytes: the registry's bytes of one stored row; sc_row: stored scales of one row
//   (grouped formats) or of one 128-row tile band (fp8).
//
// Shape of the CUDA-core kernel: one warp owns R consecutive rows (R from S, see rows_per_warp),
// its lanes stride over the rows' bytes with the widest aligned loads the row allows, keep
// R*S partial sums in registers (the weights are read once for all S activations), fold
// group / tile / block scales into the partial sum once per group, then a butterfly
// shuffle reduces across the warp. `row_partial` is the lane-local part and has no
// cross-lane communication, so tests/host_emulation.rs runs this very source on the CPU
// (TS_HOST) lane by lane against the f64 oracle.
//
// No header is included: NVRTC needs none, and the same file compiles as host C++.

#ifdef TS_HOST
#define TS_DEV static inline
#define TS_RESTRICT
#else
#define TS_DEV __device__ __forceinline__
#define TS_RESTRICT __restrict__
#endif

typedef unsigned int u32;
typedef unsigned char u8;
typedef long long i64;

// Format ids; crates/kernels-cuda/src/caps.rs holds the same numbers (`FormatKernel::id`).
#define TS_FMT_F32 0
#define TS_FMT_F16 1
#define TS_FMT_BF16 2
#define TS_FMT_INT8_ROW 3
#define TS_FMT_INT4_ROW 4
#define TS_FMT_INT2_ROW 5
#define TS_FMT_INT4_G 6
#define TS_FMT_INT3_G64 7
#define TS_FMT_E8 8
#define TS_FMT_FP8_F32 9
#define TS_FMT_FP8_UE8M0 10
#define TS_FMT_HFQ4 11
#define TS_FMT_MQ4_V2 12
#define TS_FMT_MQ4C 13
#define TS_FMT_MQ4K 14
#define TS_FMT_MXFP4 15

// ---- deliberate defects, compiled in only when a mutation test asks (never by default) ----
#ifdef TS_MUTATE_SWAP_NIBBLES
#define TS_NIB(j) ((j) ^ 1)
#else
#define TS_NIB(j) (j)
#endif
#ifdef TS_MUTATE_SCALE_1PCT
#define TS_SCALE(s) ((s) * 1.01f)
#else
#define TS_SCALE(s) (s)
#endif
#ifdef TS_MUTATE_GROUP_OFF_BY_ONE
// The next group of the row (wrapping, so the read stays inside the buffer).
#define TS_GROUP(g, n) (((g) + 1) < (n) ? ((g) + 1) : 0)
#else
#define TS_GROUP(g, n) (g)
#endif
#ifdef TS_MUTATE_SPLIT_SUM
// The split-K reductions leave out split 1's partial.
#define TS_SPLIT_SKIP(z) ((z) == 1)
#else
#define TS_SPLIT_SKIP(z) false
#endif

struct alignas(16) U4 {
    u32 x, y, z, w;
};
struct alignas(8) U2 {
    u32 x, y;
};
struct alignas(16) F4 {
    float x, y, z, w;
};

union F32Bits {
    u32 u;
    float f;
};
TS_DEV float as_f(u32 u) {
    F32Bits c;
    c.u = u;
    return c.f;
}
// The bits of f (as_f's inverse).
TS_DEV u32 bits_of(float f) {
    F32Bits c;
    c.f = f;
    return c.u;
}

#define TS_NAN (as_f(0x7FC00000u))

// IEEE binary16 -> f32, exact (every half is an f32).
TS_DEV float f16_to_f32(u32 h) {
#ifdef TS_HOST
    u32 s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F) return as_f(s | 0x7F800000u | (m << 13));
    if (e != 0) return as_f(s | ((e + 112) << 23) | (m << 13));
    // Subnormal half: m * 2^-24, exact in f32.
    float v = (float)m * 5.9604644775390625e-8f;
    return s ? -v : v;
#else
    float f;
    unsigned short hs = (unsigned short)h;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(hs));
    return f;
#endif
}

TS_DEV float bf16_to_f32(u32 h) { return as_f((h & 0xFFFFu) << 16); }

// UE8M0 byte -> 2^(e-127); 0xFF is NaN; 0 is the subnormal 2^-127.
TS_DEV float ue8m0(u32 e) {
    if (e == 0xFFu) return TS_NAN;
    if (e == 0) return as_f(0x00400000u);
    return as_f(e << 23);
}

// 2^23 + k as f32 for a small unsigned k: `as_f(MAGIC | k) - MAGIC_F` is k exactly, without
// an integer-to-float conversion (which issues at a quarter of the FMA rate).
#define TS_MAGIC 0x4B000000u
#define TS_MAGIC_F 8388608.0f

// Signed nibble j (0..7) of a word of 8 offset-binary nibbles: q = nibble - 8.
TS_DEV float nib_q(u32 w, int j) { return as_f(TS_MAGIC | ((w >> (4 * j)) & 0xFu)) - (TS_MAGIC_F + 8.0f); }
// Unsigned nibble j (0..7): q in [0, 15].
TS_DEV float nib_u(u32 w, int j) { return as_f(TS_MAGIC | ((w >> (4 * j)) & 0xFu)) - TS_MAGIC_F; }

// E4M3-FN byte (low 8 bits of b) -> f32, exact for every finite code, subnormals included:
// the 7 magnitude bits land on the f32 exponent/mantissa boundary and 2^120 rebiases
// (an E4M3 subnormal becomes an f32 subnormal, which the multiply scales exactly; NVRTC
// does not flush denormals unless asked). The NaN codes are handled by the caller.
TS_DEV float e4m3(u32 b) { return as_f(((b & 0x7Fu) << 20) | ((b & 0x80u) << 24)) * 0x1p120f; }

// E2M1 nibble -> f32, exact, by the same rebias (2^126).
TS_DEV float e2m1(u32 n) { return as_f(((n & 7u) << 22) | ((n & 8u) << 28)) * 0x1p126f; }

// ---- loads ------------------------------------------------------------------------------

// NW little-endian words from `row` at byte `off`, with the widest loads the row allows.
// Bytes at or past `rb` read as zero (their activations are zero-padded too), so a partial
// last chunk never reads the next row.
template <int NW>
TS_DEV void load_words(const u8* TS_RESTRICT row, i64 off, i64 rb, u32 (&v)[NW]) {
    if (off + 4 * NW <= rb) {
        if ((NW % 4) == 0 && (rb & 15) == 0 && (off & 15) == 0) {
#pragma unroll
            for (int k = 0; k < NW / 4; ++k) {
                U4 q = *reinterpret_cast<const U4*>(row + off + 16 * k);
                v[4 * k] = q.x;
                v[4 * k + 1] = q.y;
                v[4 * k + 2] = q.z;
                v[4 * k + 3] = q.w;
            }
            return;
        }
        if ((NW % 2) == 0 && (rb & 7) == 0 && (off & 7) == 0) {
#pragma unroll
            for (int k = 0; k < NW / 2; ++k) {
                U2 q = *reinterpret_cast<const U2*>(row + off + 8 * k);
                v[2 * k] = q.x;
                v[2 * k + 1] = q.y;
            }
            return;
        }
        if ((rb & 3) == 0 && (off & 3) == 0) {
#pragma unroll
            for (int k = 0; k < NW; ++k) v[k] = *reinterpret_cast<const u32*>(row + off + 4 * k);
            return;
        }
    }
#pragma unroll
    for (int k = 0; k < NW; ++k) {
        u32 word = 0;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            i64 at = off + 4 * k + b;
            u32 byte = at < rb ? (u32)row[at] : 0u;
            word |= byte << (8 * b);
        }
        v[k] = word;
    }
}

TS_DEV F4 load_x4(const float* TS_RESTRICT x, i64 at) { return *reinterpret_cast<const F4*>(x + at); }

// f32 scale k of a sidecar (4-byte aligned: the sidecar is its own allocation).
TS_DEV float scale_f32(const u8* TS_RESTRICT sc, i64 k) { return *reinterpret_cast<const float*>(sc + 4 * k); }

// ---- per-format lane partials -----------------------------------------------------------
//
// acc[r][s] += this lane's share of sum_i W[row0 + r, i] * x[s, i]. Rows >= O are skipped
// (uniformly across the warp). Indices i >= I only ever meet zero activations.

struct Args {
    const u8* w;
    const u8* sc;
    const float* x;
    i64 rb;
    int O;
    int I;
    int xs;
    int sc_row;
};

// Dot of 4 consecutive weights with activation s at i.
#define TS_DOT4(S_, acc_, a_, at_, w0, w1, w2, w3)                 \
    do {                                                            \
        _Pragma("unroll") for (int s = 0; s < S_; ++s) {            \
            F4 xv = load_x4((a_).x, (i64)s * (a_).xs + (at_));      \
            acc_[s] += (w0) * xv.x + (w1) * xv.y + (w2) * xv.z + (w3) * xv.w; \
        }                                                           \
    } while (0)

// Byte-stream formats: a lane takes CB bytes (WPC weights) at a time.
template <int FMT>
struct Stream;
template <>
struct Stream<TS_FMT_F32> { enum { CB = 16, WPC = 4 }; };
template <>
struct Stream<TS_FMT_F16> { enum { CB = 16, WPC = 8 }; };
template <>
struct Stream<TS_FMT_BF16> { enum { CB = 16, WPC = 8 }; };
template <>
struct Stream<TS_FMT_INT8_ROW> { enum { CB = 16, WPC = 16 }; };
template <>
struct Stream<TS_FMT_INT4_ROW> { enum { CB = 16, WPC = 32 }; };
template <>
struct Stream<TS_FMT_INT2_ROW> { enum { CB = 16, WPC = 64 }; };
template <>
struct Stream<TS_FMT_INT4_G> { enum { CB = 16, WPC = 32 }; };
template <>
struct Stream<TS_FMT_INT3_G64> { enum { CB = 24, WPC = 64 }; };
template <>
struct Stream<TS_FMT_FP8_F32> { enum { CB = 16, WPC = 16 }; };
template <>
struct Stream<TS_FMT_FP8_UE8M0> { enum { CB = 16, WPC = 16 }; };
template <>
struct Stream<TS_FMT_MXFP4> { enum { CB = 16, WPC = 32 }; };

// One chunk of one row: t[s] += sum over the chunk's weights (before any group/tile scale,
// which the caller applies), for the formats whose chunk has a single scale.
// Returns via `t`; `nan` collects E4M3 NaN codes.
template <int FMT, int GS, int S>
TS_DEV void chunk_dot(const Args& a, int row, i64 c, const u32 (&v)[Stream<FMT>::CB / 4], float (&acc)[S],
                      u32& nan) {
    const i64 i0 = c * Stream<FMT>::WPC;
    if constexpr (FMT == TS_FMT_F32) {
        TS_DOT4(S, acc, a, i0, as_f(v[0]), as_f(v[1]), as_f(v[2]), as_f(v[3]));
    } else if constexpr (FMT == TS_FMT_F16 || FMT == TS_FMT_BF16) {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            u32 p = v[2 * k], q = v[2 * k + 1];
            if constexpr (FMT == TS_FMT_F16) {
                TS_DOT4(S, acc, a, i0 + 4 * k, f16_to_f32(p & 0xFFFFu), f16_to_f32(p >> 16), f16_to_f32(q & 0xFFFFu),
                        f16_to_f32(q >> 16));
            } else {
                TS_DOT4(S, acc, a, i0 + 4 * k, bf16_to_f32(p), bf16_to_f32(p >> 16), bf16_to_f32(q), bf16_to_f32(q >> 16));
            }
        }
    } else if constexpr (FMT == TS_FMT_INT8_ROW) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            // Flip the sign bits: byte ^ 0x80 = q + 128 in [1, 255].
            u32 u = v[k] ^ 0x80808080u;
            const float off = TS_MAGIC_F + 128.0f;
            TS_DOT4(S, acc, a, i0 + 4 * k, as_f(TS_MAGIC | (u & 0xFFu)) - off, as_f(TS_MAGIC | ((u >> 8) & 0xFFu)) - off,
                    as_f(TS_MAGIC | ((u >> 16) & 0xFFu)) - off, as_f(TS_MAGIC | (u >> 24)) - off);
        }
    } else if constexpr (FMT == TS_FMT_INT4_ROW) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            u32 w = v[k];
            TS_DOT4(S, acc, a, i0 + 8 * k, nib_q(w, TS_NIB(0)), nib_q(w, TS_NIB(1)), nib_q(w, TS_NIB(2)), nib_q(w, TS_NIB(3)));
            TS_DOT4(S, acc, a, i0 + 8 * k + 4, nib_q(w, TS_NIB(4)), nib_q(w, TS_NIB(5)), nib_q(w, TS_NIB(6)),
                    nib_q(w, TS_NIB(7)));
        }
    } else if constexpr (FMT == TS_FMT_INT2_ROW) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            u32 w = v[k];
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                const float off = TS_MAGIC_F + 2.0f;
                TS_DOT4(S, acc, a, i0 + 16 * k + 4 * h, as_f(TS_MAGIC | ((w >> (8 * h)) & 3u)) - off,
                        as_f(TS_MAGIC | ((w >> (8 * h + 2)) & 3u)) - off, as_f(TS_MAGIC | ((w >> (8 * h + 4)) & 3u)) - off,
                        as_f(TS_MAGIC | ((w >> (8 * h + 6)) & 3u)) - off);
            }
        }
    } else if constexpr (FMT == TS_FMT_FP8_F32 || FMT == TS_FMT_FP8_UE8M0) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            u32 w = v[k];
            // A byte is NaN iff its low 7 bits are 0x7F: +1 then carries into bit 7 of that
            // byte only (no byte's low 7 bits exceed 0x7F, so nothing crosses bytes).
            nan |= ((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;
            TS_DOT4(S, acc, a, i0 + 4 * k, e4m3(w), e4m3(w >> 8), e4m3(w >> 16), e4m3(w >> 24));
        }
    } else if constexpr (FMT == TS_FMT_MXFP4) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            u32 w = v[k];
            TS_DOT4(S, acc, a, i0 + 8 * k, e2m1(w >> (4 * TS_NIB(0))), e2m1(w >> (4 * TS_NIB(1))),
                    e2m1(w >> (4 * TS_NIB(2))), e2m1(w >> (4 * TS_NIB(3))));
            TS_DOT4(S, acc, a, i0 + 8 * k + 4, e2m1(w >> (4 * TS_NIB(4))), e2m1(w >> (4 * TS_NIB(5))),
                    e2m1(w >> (4 * TS_NIB(6))), e2m1(w >> (4 * TS_NIB(7))));
        }
    }
}

template <int FMT, int GS, int S, int R>
TS_DEV void stream_partial(const Args& a, int row0, int lane, float (&acc)[R][S]) {
    enum { CB = Stream<FMT>::CB, NW = CB / 4, WPC = Stream<FMT>::WPC };
    const i64 nch = (a.rb + CB - 1) / CB;
    u32 nan[R];
#pragma unroll
    for (int r = 0; r < R; ++r) nan[r] = 0;
    auto step = [&](i64 c) {
        u32 v[R][NW];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (row0 + r < a.O) load_words<NW>(a.w + (i64)(row0 + r) * a.rb, c * CB, a.rb, v[r]);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int row = row0 + r;
            if (row >= a.O) continue;
            if constexpr (FMT == TS_FMT_INT4_G) {
                const i64 i0 = c * WPC;
                // GS is a multiple of 16, so an 8-weight word never straddles two groups; a
                // GS that is a multiple of 32 puts the whole 32-weight chunk in one group.
                const int ng = a.sc_row;
                if constexpr (GS % 32 == 0) {
                    float t[S];
#pragma unroll
                    for (int s = 0; s < S; ++s) t[s] = 0.0f;
#pragma unroll
                    for (int k = 0; k < NW; ++k) {
                        u32 w = v[r][k];
                        TS_DOT4(S, t, a, i0 + 8 * k, nib_q(w, TS_NIB(0)), nib_q(w, TS_NIB(1)), nib_q(w, TS_NIB(2)),
                                nib_q(w, TS_NIB(3)));
                        TS_DOT4(S, t, a, i0 + 8 * k + 4, nib_q(w, TS_NIB(4)), nib_q(w, TS_NIB(5)), nib_q(w, TS_NIB(6)),
                                nib_q(w, TS_NIB(7)));
                    }
                    const int g = (int)(i0 / GS);
                    const float d = g < ng ? TS_SCALE(scale_f32(a.sc, (i64)row * ng + TS_GROUP(g, ng))) : 0.0f;
#pragma unroll
                    for (int s = 0; s < S; ++s) acc[r][s] += d * t[s];
                } else {
#pragma unroll
                    for (int k = 0; k < NW; ++k) {
                        float t[S];
#pragma unroll
                        for (int s = 0; s < S; ++s) t[s] = 0.0f;
                        u32 w = v[r][k];
                        TS_DOT4(S, t, a, i0 + 8 * k, nib_q(w, TS_NIB(0)), nib_q(w, TS_NIB(1)), nib_q(w, TS_NIB(2)),
                                nib_q(w, TS_NIB(3)));
                        TS_DOT4(S, t, a, i0 + 8 * k + 4, nib_q(w, TS_NIB(4)), nib_q(w, TS_NIB(5)), nib_q(w, TS_NIB(6)),
                                nib_q(w, TS_NIB(7)));
                        const int g = (int)((i0 + 8 * k) / GS);
                        const float d = g < ng ? TS_SCALE(scale_f32(a.sc, (i64)row * ng + TS_GROUP(g, ng))) : 0.0f;
#pragma unroll
                        for (int s = 0; s < S; ++s) acc[r][s] += d * t[s];
                    }
                }
            } else if constexpr (FMT == TS_FMT_INT3_G64) {
                // A 24-byte chunk is eight 24-bit words, 64 codes: exactly group c.
                const i64 i0 = c * WPC;
                float t[S];
#pragma unroll
                for (int s = 0; s < S; ++s) t[s] = 0.0f;
#pragma unroll
                for (int m = 0; m < 8; ++m) {
                    const int bit = 24 * m, k = bit / 32, sh = bit % 32;
                    unsigned long long pair = (unsigned long long)v[r][k];
                    if (k + 1 < NW) pair |= (unsigned long long)v[r][k + 1] << 32;
                    const u32 word = (u32)(pair >> sh) & 0xFFFFFFu;
                    const float off = TS_MAGIC_F + 4.0f;
                    TS_DOT4(S, t, a, i0 + 8 * m, as_f(TS_MAGIC | (word & 7u)) - off, as_f(TS_MAGIC | ((word >> 3) & 7u)) - off,
                            as_f(TS_MAGIC | ((word >> 6) & 7u)) - off, as_f(TS_MAGIC | ((word >> 9) & 7u)) - off);
                    TS_DOT4(S, t, a, i0 + 8 * m + 4, as_f(TS_MAGIC | ((word >> 12) & 7u)) - off,
                            as_f(TS_MAGIC | ((word >> 15) & 7u)) - off, as_f(TS_MAGIC | ((word >> 18) & 7u)) - off,
                            as_f(TS_MAGIC | ((word >> 21) & 7u)) - off);
                }
                const int ng = a.sc_row;
                const int g = (int)c;
                const float d = g < ng ? TS_SCALE(scale_f32(a.sc, (i64)row * ng + TS_GROUP(g, ng))) : 0.0f;
#pragma unroll
                for (int s = 0; s < S; ++s) acc[r][s] += d * t[s];
            } else if constexpr (FMT == TS_FMT_FP8_F32 || FMT == TS_FMT_FP8_UE8M0 || FMT == TS_FMT_MXFP4) {
                float t[S];
#pragma unroll
                for (int s = 0; s < S; ++s) t[s] = 0.0f;
                chunk_dot<FMT, GS, S>(a, row, c, v[r], t, nan[r]);
                float d;
                if constexpr (FMT == TS_FMT_MXFP4) {
                    // Block c of the row: 16 bytes, 32 weights, one UE8M0 byte.
                    const int ng = a.sc_row;
                    const int g = (int)c;
                    d = g < ng ? TS_SCALE(ue8m0(a.sc[(i64)row * ng + TS_GROUP(g, ng)])) : 0.0f;
                } else {
                    // 16 weights at i0 = 16c sit in one 128-column tile.
                    const int tpr = a.sc_row;
                    const int tc = (int)((c * WPC) / 128);
                    const i64 k = (i64)(row / 128) * tpr + TS_GROUP(tc, tpr);
                    if constexpr (FMT == TS_FMT_FP8_F32) {
                        d = TS_SCALE(scale_f32(a.sc, k));
                    } else {
                        d = TS_SCALE(ue8m0(a.sc[k]));
                    }
                }
#pragma unroll
                for (int s = 0; s < S; ++s) acc[r][s] += d * t[s];
            } else {
                chunk_dot<FMT, GS, S>(a, row, c, v[r], acc[r], nan[r]);
            }
        }
        };
    // Two chunks in flight per lane where the batch is small (memory-bound); larger batches
    // are arithmetic-bound, and unrolling them only multiplies NVRTC's compile time.
    if constexpr (S <= 4) {
#pragma unroll 2
        for (i64 c = lane; c < nch; c += 32) step(c);
    } else {
#pragma unroll 1
        for (i64 c = lane; c < nch; c += 32) step(c);
    }
    // Per-row scales fold in once (the sum is linear); a NaN weight poisons its whole row.
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int row = row0 + r;
        if (row >= a.O) continue;
        if constexpr (FMT == TS_FMT_INT8_ROW || FMT == TS_FMT_INT4_ROW || FMT == TS_FMT_INT2_ROW) {
            const float d = TS_SCALE(scale_f32(a.sc, row));
#pragma unroll
            for (int s = 0; s < S; ++s) acc[r][s] *= d;
        }
        if (nan[r] != 0) {
#pragma unroll
            for (int s = 0; s < S; ++s) acc[r][s] = TS_NAN;
        }
    }
}

// The 136-byte affine family (hfq4 / mq4 / mq4-v2 / mq4c): a half-warp per 256-weight
// block, each lane 8 payload bytes (16 weights) and the block's 8-byte header.
// sum_j (q_j * scale + zero) * x_j = scale * sum_j q_j x_j + zero * sum_j x_j.
template <int FMT, int S, int R>
TS_DEV void affine_partial(const Args& a, int row0, int lane, float (&acc)[R][S]) {
    const int l16 = lane & 15, half = lane >> 4;
    const int nb = (int)(a.rb / 136);
    auto step = [&](int b) {
        U2 hdr[R], pay[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (row0 + r >= a.O) continue;
            const u8* row = a.w + (i64)(row0 + r) * a.rb;
            hdr[r] = *reinterpret_cast<const U2*>(row + (i64)TS_GROUP(b, nb) * 136);
            pay[r] = *reinterpret_cast<const U2*>(row + (i64)b * 136 + 8 + 8 * l16);
        }
        const i64 i0 = (i64)b * 256 + 16 * l16;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (row0 + r >= a.O) continue;
            float scale, zero;
            if constexpr (FMT == TS_FMT_HFQ4) {
                scale = as_f(hdr[r].x);
                zero = as_f(hdr[r].y);
            } else if constexpr (FMT == TS_FMT_MQ4_V2) {
                // Weights 0-127 of the block (lanes 0-7) use the first pair, 128-255 the second.
                const u32 p = l16 < 8 ? hdr[r].x : hdr[r].y;
                scale = f16_to_f32(p & 0xFFFFu);
                zero = f16_to_f32(p >> 16);
            } else {
                scale = f16_to_f32(hdr[r].x & 0xFFFFu);
                zero = f16_to_f32(hdr[r].x >> 16);
            }
            scale = TS_SCALE(scale);
            float t[S], u[S];
#pragma unroll
            for (int s = 0; s < S; ++s) {
                t[s] = 0.0f;
                u[s] = 0.0f;
            }
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                const u32 w = k == 0 ? pay[r].x : pay[r].y;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const float q0 = nib_u(w, TS_NIB(4 * h)), q1 = nib_u(w, TS_NIB(4 * h + 1));
                    const float q2 = nib_u(w, TS_NIB(4 * h + 2)), q3 = nib_u(w, TS_NIB(4 * h + 3));
#pragma unroll
                    for (int s = 0; s < S; ++s) {
                        F4 xv = load_x4(a.x, (i64)s * a.xs + i0 + 8 * k + 4 * h);
                        t[s] += q0 * xv.x + q1 * xv.y + q2 * xv.z + q3 * xv.w;
                        u[s] += (xv.x + xv.y) + (xv.z + xv.w);
                    }
                }
            }
#pragma unroll
            for (int s = 0; s < S; ++s) acc[r][s] += scale * t[s] + zero * u[s];
        }
    };
    if constexpr (S <= 4) {
#pragma unroll 2
        for (int b = half; b < nb; b += 2) step(b);
    } else {
#pragma unroll 1
        for (int b = half; b < nb; b += 2) step(b);
    }
}

// GGML's get_scale_min_k4 over the 12 packed bytes q (in words q0..q2, little-endian).
TS_DEV void kq_scale_min(int j, u32 q0, u32 q1, u32 q2, u32& sc, u32& m) {
    // byte(n) of the 12.
#define TS_QB(n) ((((n) < 4 ? q0 : (n) < 8 ? q1 : q2) >> (8 * ((n) & 3))) & 0xFFu)
    if (j < 4) {
        sc = TS_QB(j) & 63u;
        m = TS_QB(j + 4) & 63u;
    } else {
        sc = (TS_QB(j + 4) & 0xFu) | ((TS_QB(j - 4) >> 6) << 4);
        m = (TS_QB(j + 4) >> 4) | ((TS_QB(j) >> 6) << 4);
    }
#undef TS_QB
}

// mq4-k (GGML Q4_K blocks, 144 bytes): a half-warp per block; lane l16 takes qs bytes
// 8*l16 .. +7 of the block: chunk c = l16/4 of 64 weights, bytes l = 8*(l16%4) .. +7, whose
// low nibbles are weights 64c + l.. (sub-block 2c) and high nibbles 64c + 32 + l..
// (sub-block 2c+1). w = (d*sc) * q - (dmin*m).
template <int S, int R>
TS_DEV void mq4k_partial(const Args& a, int row0, int lane, float (&acc)[R][S]) {
    const int l16 = lane & 15, half = lane >> 4;
    const int c = l16 >> 2, l = 8 * (l16 & 3);
    const int nb = (int)(a.rb / 144);
    auto step = [&](int b) {
        U4 hdr[R];
        U2 pay[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (row0 + r >= a.O) continue;
            const u8* blk = a.w + (i64)(row0 + r) * a.rb + (i64)b * 144;
            hdr[r] = *reinterpret_cast<const U4*>(blk);
            pay[r] = *reinterpret_cast<const U2*>(blk + 16 + 8 * l16);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (row0 + r >= a.O) continue;
            const float d = TS_SCALE(f16_to_f32(hdr[r].x & 0xFFFFu));
            const float dmin = f16_to_f32(hdr[r].x >> 16);
#pragma unroll
            for (int hi = 0; hi < 2; ++hi) {
                // hi = 0: low nibbles, sub-block 2c; hi = 1: high nibbles, sub-block 2c + 1.
                const int j = TS_GROUP(2 * c + hi, 8);
                u32 sc, m;
                kq_scale_min(j, hdr[r].y, hdr[r].z, hdr[r].w, sc, m);
                const float scale = d * (float)sc, zero = dmin * (float)m;
                const i64 i0 = (i64)b * 256 + 64 * c + 32 * hi + l;
                // Nibble position of weight e (0..7) of this run: byte e's low or high nibble.
                float q[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const u32 w = e < 4 ? pay[r].x : pay[r].y;
                    const int sel = TS_NIB(hi);
                    q[e] = nib_u(w, 2 * (e & 3) + sel);
                }
                float t[S], u[S];
#pragma unroll
                for (int s = 0; s < S; ++s) {
                    F4 x0 = load_x4(a.x, (i64)s * a.xs + i0);
                    F4 x1 = load_x4(a.x, (i64)s * a.xs + i0 + 4);
                    t[s] = q[0] * x0.x + q[1] * x0.y + q[2] * x0.z + q[3] * x0.w + q[4] * x1.x + q[5] * x1.y +
                           q[6] * x1.z + q[7] * x1.w;
                    u[s] = ((x0.x + x0.y) + (x0.z + x0.w)) + ((x1.x + x1.y) + (x1.z + x1.w));
                }
#pragma unroll
                for (int s = 0; s < S; ++s) acc[r][s] += scale * t[s] - zero * u[s];
            }
        }
    };
    if constexpr (S <= 4) {
#pragma unroll 2
        for (int b = half; b < nb; b += 2) step(b);
    } else {
#pragma unroll 1
        for (int b = half; b < nb; b += 2) step(b);
    }
}

// e8-lattice (98-byte blocks: fp16 d, 32 x 24-bit codes): a warp per block, lane k decodes
// code k (weights 8k .. 8k+7 of the block). w = (d * tensor_scale) * v_j.
template <int S, int R>
TS_DEV void e8_partial(const Args& a, int row0, int lane, float (&acc)[R][S]) {
    const int nb = (int)(a.rb / 98);
    const float ts = scale_f32(a.sc, 0);
    for (int b = 0; b < nb; ++b) {
        const i64 i0 = (i64)b * 256 + 8 * lane;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (row0 + r >= a.O) continue;
            const u8* row = a.w + (i64)(row0 + r) * a.rb;
            const u8* blk = row + (i64)b * 98;
            const u8* hb = row + (i64)TS_GROUP(b, nb) * 98;
            const float d = TS_SCALE(f16_to_f32((u32)hb[0] | ((u32)hb[1] << 8))) * ts;
            const u8* cb = blk + 2 + 3 * lane;
            const u32 code = (u32)cb[0] | ((u32)cb[1] << 8) | ((u32)cb[2] << 16);
            const float half = (code & 1u) ? 0.5f : 0.0f;
            float v[8];
            u32 usum = 0;
#pragma unroll
            for (int j = 0; j < 7; ++j) {
                const u32 uj = (code >> (1 + 3 * j)) & 7u;
                usum += uj;
                v[j] = (float)((int)uj - 4) + half;
            }
            const int m = (int)((code >> 22) & 3u);
            v[7] = (float)(2 * m - 4 + (int)(usum & 1u)) + half;
#pragma unroll
            for (int s = 0; s < S; ++s) {
                F4 x0 = load_x4(a.x, (i64)s * a.xs + i0);
                F4 x1 = load_x4(a.x, (i64)s * a.xs + i0 + 4);
                const float t = v[0] * x0.x + v[1] * x0.y + v[2] * x0.z + v[3] * x0.w + v[4] * x1.x + v[5] * x1.y +
                                v[6] * x1.z + v[7] * x1.w;
                acc[r][s] += d * t;
            }
        }
    }
}

// Rows a warp owns: several for small S so activation loads are shared across rows.
template <int S>
struct RowsPerWarp {
    enum { R = S <= 4 ? 2 : 4 };
};

template <int FMT, int GS, int S, int R>
TS_DEV void row_partial(const Args& a, int row0, int lane, float (&acc)[R][S]) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int s = 0; s < S; ++s) acc[r][s] = 0.0f;
    if constexpr (FMT == TS_FMT_HFQ4 || FMT == TS_FMT_MQ4_V2 || FMT == TS_FMT_MQ4C) {
        affine_partial<FMT, S, R>(a, row0, lane, acc);
    } else if constexpr (FMT == TS_FMT_MQ4K) {
        mq4k_partial<S, R>(a, row0, lane, acc);
    } else if constexpr (FMT == TS_FMT_E8) {
        e8_partial<S, R>(a, row0, lane, acc);
    } else {
        stream_partial<FMT, GS, S, R>(a, row0, lane, acc);
    }
}

// ---- tensor-core path (mma.sync m16n8k16, f16 in, f32 accumulate) -----------------------
//
// Used where a capability row names an MMA chunk (caps.rs `MmaKernel`) and the row length
// allows it. Every code of int4 / int8 / E4M3 / the 4-bit affine formats is exact in f16,
// so the weights go into the tensor cores unrounded. The activation cannot: the host splits
// it (layout.rs `split_activations`) into x_hi = f16(x * p) and x_lo = f16(x * p - x_hi),
// with p a power of two that puts max|x| near 2^14 (no overflow, no f16 subnormal loss);
// x_hi + x_lo carries ~22 bits, and the two halves are just two more B columns. So column
// n of the B operand (n = 0 .. 2S-1) is activation n/2, part n%2; per 8 columns one MMA.
//
// A block of TS_MMA_WARPS warps owns 16 rows; its warps split the row's k-blocks among
// them and add their partials through shared memory at the end. A k-block is what one
// quad (4 lanes, same rows) loads in one step: each lane CBT contiguous bytes of row g and
// of row g + 8. The MMA contracts over k in any order, so each lane feeds its own bytes'
// columns to its own k slots (2t, 2t+1, 2t+8, 2t+9) and fetches the activations of exactly
// those columns: no shuffles, no shared memory for the weights. A k-block never straddles
// a group, tile or half-block (caps.rs picks CBT so), so scales fold once per k-block.
//
// Lane-local work is written over L lanes: L = 1 on the device (the lane is threadIdx),
// L = 32 in the host emulation, where `mma16816` gathers the 32 lanes' fragments and does
// the product in plain C++. So tests/emu runs this very indexing and decoding.

TS_DEV u32 prmt(u32 a, u32 b, u32 sel) {
#ifdef TS_HOST
    const unsigned long long ab = (unsigned long long)a | ((unsigned long long)b << 32);
    u32 r = 0;
    for (int k = 0; k < 4; ++k) r |= (u32)((ab >> (8 * ((sel >> (4 * k)) & 7u))) & 0xFFu) << (8 * k);
    return r;
#else
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
#endif
}

// (a & b) | c as one LOP3. Written in C, ptxas emits an AND and an OR, each with its one
// immediate operand; here the constants come in registers (hoisted out of the loops), so a
// nibble pair costs one instruction (session 10: LOP3 was 30% of the 16-row GEMV's
// instructions, ncu, int4-g64 [28672 x 4096]).
TS_DEV u32 and_or(u32 a, u32 b, u32 c) {
#ifdef TS_HOST
    return (a & b) | c;
#else
    u32 r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#endif
}

#ifdef TS_HOST
// f32 -> IEEE binary16 bits, round to nearest even (host only; the device uses PTX).
static inline u32 f32_to_f16_bits(float f) {
    union {
        float f;
        u32 u;
    } c;
    c.f = f;
    const u32 sign = (c.u >> 16) & 0x8000u, ax = c.u & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return sign | 0x7E00u;
    if (ax >= 0x477FF000u) return sign | 0x7C00u;
    if (ax >= 0x38800000u) {
        const u32 m = ax - 0x38000000u;
        return sign | ((m + 0xFFFu + ((m >> 13) & 1u)) >> 13);
    }
    c.u = ax;
    const float v = c.f * 16777216.0f;  // exact: a power of two
    u32 q = (u32)v;
    const float fr = v - (float)q;
    if (fr > 0.5f || (fr == 0.5f && (q & 1u))) ++q;
    return sign | q;
}
static inline u32 pack_h2(float lo, float hi) { return f32_to_f16_bits(lo) | (f32_to_f16_bits(hi) << 16); }
#endif

TS_DEV u32 hsub2(u32 a, u32 b) {
#ifdef TS_HOST
    return pack_h2(f16_to_f32(a & 0xFFFFu) - f16_to_f32(b & 0xFFFFu), f16_to_f32(a >> 16) - f16_to_f32(b >> 16));
#else
    u32 r;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#endif
}

TS_DEV u32 hfma2(u32 a, u32 b, u32 c) {
#ifdef TS_HOST
    return pack_h2((float)((double)f16_to_f32(a & 0xFFFFu) * f16_to_f32(b & 0xFFFFu) + f16_to_f32(c & 0xFFFFu)),
                   (float)((double)f16_to_f32(a >> 16) * f16_to_f32(b >> 16) + f16_to_f32(c >> 16)));
#else
    u32 r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#endif
}

TS_DEV u32 hmul2(u32 a, u32 b) {
#ifdef TS_HOST
    // The product of two halves is exact in f32 (22 significant bits), so this rounds once.
    return pack_h2(f16_to_f32(a & 0xFFFFu) * f16_to_f32(b & 0xFFFFu), f16_to_f32(a >> 16) * f16_to_f32(b >> 16));
#else
    u32 r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#endif
}

// f32 -> the f16x2 (v, v), round to nearest.
TS_DEV u32 f16x2_splat(float v) {
#ifdef TS_HOST
    return pack_h2(v, v);
#else
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %1;" : "=r"(r) : "f"(v));
    return r;
#endif
}

// Two E4M3-FN bytes (low 16 bits of v) -> f16x2, exact (E4M3 subnormals are f16 normals);
// the NaN codes give NaN, which the MMA spreads over the whole row, as the oracle wants.
TS_DEV u32 e4m3x2_f16x2(u32 v) {
#ifdef TS_HOST
    u32 r = 0;
    for (int k = 0; k < 2; ++k) {
        const u32 b = (v >> (8 * k)) & 0xFFu;
        r |= ((b & 0x7Fu) == 0x7Fu ? 0x7FFFu : f32_to_f16_bits(e4m3(b))) << (16 * k);
    }
    return r;
#else
    u32 r;
    unsigned short h = (unsigned short)(v & 0xFFFFu);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(h));
    return r;
#endif
}

// c += A . B for one warp (PTX fragment layout of m16n8k16: g = lane / 4, t = lane % 4;
// a0: A[g][2t, 2t+1], a1: A[g+8][2t, 2t+1], a2: A[g][2t+8, 2t+9], a3: A[g+8][2t+8, 2t+9];
// b0: B[2t, 2t+1][g], b1: B[2t+8, 2t+9][g]; c0, c1: C[g][2t, 2t+1], c2, c3: C[g+8][2t, 2t+1]).
#ifdef TS_HOST
// The host emulation's A [16 x 16] of a warp's 32 lanes' fragments (layout above).
static void emu_gather_a(const u32 (&a)[32][4], float (&A)[16][16]) {
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        for (int h = 0; h < 2; ++h) {
            A[g][2 * t + h] = f16_to_f32((a[lane][0] >> (16 * h)) & 0xFFFFu);
            A[g + 8][2 * t + h] = f16_to_f32((a[lane][1] >> (16 * h)) & 0xFFFFu);
            A[g][2 * t + 8 + h] = f16_to_f32((a[lane][2] >> (16 * h)) & 0xFFFFu);
            A[g + 8][2 * t + 8 + h] = f16_to_f32((a[lane][3] >> (16 * h)) & 0xFFFFu);
        }
    }
}
#endif
template <int L>
TS_DEV void mma16816(const u32 (&a)[L][4], const u32 (&b)[L][2], float (&c)[L][4]) {
#ifdef TS_HOST
    static_assert(L == 32, "the host emulation runs a whole warp");
    float A[16][16], B[16][8];
    emu_gather_a(a, A);
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        for (int h = 0; h < 2; ++h) {
            B[2 * t + h][g] = f16_to_f32((b[lane][0] >> (16 * h)) & 0xFFFFu);
            B[2 * t + 8 + h][g] = f16_to_f32((b[lane][1] >> (16 * h)) & 0xFFFFu);
        }
    }
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        for (int q = 0; q < 4; ++q) {
            const int row = g + 8 * (q >> 1), col = 2 * t + (q & 1);
            float s = 0.0f;
            for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];  // products exact in f32
            c[lane][q] += s;
        }
    }
#else
    static_assert(L == 1, "one lane per thread on the device");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0][0]), "+f"(c[0][1]), "+f"(c[0][2]), "+f"(c[0][3])
        : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "r"(b[0][0]), "r"(b[0][1]));
#endif
}

// Streamed weight loads: read once, so they bypass L1 (the activations keep it).
// -DTS_L2PF=<128|256> adds the L2 prefetch-size hint (`.L2::128B` / `.L2::256B`): L2 fetches
// that many bytes around each miss from DRAM, so neighbouring lanes' and warps' requests meet
// lines already on their way.
#if defined(TS_L2PF) && TS_L2PF == 256
#define TS_LDS "ld.global.nc.L1::no_allocate.L2::256B"
#elif defined(TS_L2PF) && TS_L2PF == 128
#define TS_LDS "ld.global.nc.L1::no_allocate.L2::128B"
#else
#define TS_LDS "ld.global.nc.L1::no_allocate"
#endif
template <int NW>
TS_DEV void ld_stream(const u8* p, u32 (&v)[NW]) {
#ifdef TS_HOST
    for (int k = 0; k < NW; ++k) v[k] = *reinterpret_cast<const u32*>(p + 4 * k);
#else
    if constexpr (NW == 4) {
        asm volatile(TS_LDS ".v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                     : "l"(p));
    } else if constexpr (NW == 2) {
        asm volatile(TS_LDS ".v2.u32 {%0, %1}, [%2];" : "=r"(v[0]), "=r"(v[1]) : "l"(p));
    } else {
        static_assert(NW == 1, "4, 8 or 16 bytes");
        asm volatile(TS_LDS ".u32 %0, [%1];" : "=r"(v[0]) : "l"(p));
    }
#endif
}

// One lane's chunk of a row (CBT bytes = NW words). The 136-byte affine blocks start on
// 8-byte boundaries only, so their 16-byte chunks load as two 8-byte halves.
template <int FMT, int NW>
TS_DEV void ld_chunk(const u8* p, u32 (&v)[NW]) {
    if constexpr (FMT == TS_FMT_HFQ4 || FMT == TS_FMT_MQ4_V2 || FMT == TS_FMT_MQ4C) {
        static_assert(NW == 4, "the affine chunk is 16 bytes");
        u32 a[2], b[2];
        ld_stream<2>(p, a);
        ld_stream<2>(p + 8, b);
        v[0] = a[0];
        v[1] = a[1];
        v[2] = b[0];
        v[3] = b[1];
    } else {
        ld_stream<NW>(p, v);
    }
}

// Activation halves (16-byte aligned, L1-cached: every row tile reads them): the 8 halves of B row xr (2s + part), columns c .. c + 7 (c a multiple of 8). The split
// buffer ([2S, xs], layout.rs split_activations) holds them at 2 (xr xs + c).
TS_DEV const u8* x_group(const u8* xh, int xs, int xr, i64 c) { return xh + 2 * ((i64)xr * xs + c); }
template <int NW>
TS_DEV void ld_xg(const u8* xh, int xs, int xr, i64 c, u32 (&v)[NW]) {
#pragma unroll
    for (int k = 0; k < NW / 4; ++k) {
        const U4 q = *reinterpret_cast<const U4*>(x_group(xh, xs, xr, c + 8 * k));
        v[4 * k] = q.x;
        v[4 * k + 1] = q.y;
        v[4 * k + 2] = q.z;
        v[4 * k + 3] = q.w;
    }
}

// Programmatic dependent launch (-DTS_PDL, sm_90+): the kernel lets the next kernel of the
// stream launch at once (`pdl_launch`) and waits for the previous one (`pdl_wait`) only
// before it touches data a kernel may have written (activations, outputs, scratch). A
// kernel launched with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may start
// while its predecessor runs; without the attribute, or without TS_PDL, both are no-ops.
TS_DEV void pdl_launch() {
#if defined(TS_PDL) && !defined(TS_HOST)
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
TS_DEV void pdl_wait() {
#if defined(TS_PDL) && !defined(TS_HOST)
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Warps of a tensor-core GEMV block (device.rs passes the backend's `Tuning::mma_warps`,
// default layout.rs MMA_WARPS): they split one 16-row tile's k-blocks.
#ifndef TS_MMA_WARPS
#define TS_MMA_WARPS 8
#endif

// Pipeline depth of the tensor-core GEMV: stages (64 bytes a lane each) a warp keeps in
// flight (-DTS_MMA_DEPTH). Measured on the H200 (docs/CUDA.md, 2026-11-30): a deeper ring
// costs registers, hence resident blocks, and lost 10-50% at S = 1; 2 with 3 blocks an SM
// (TS_MMA_MIN_BLOCKS) was fastest.
template <int S>
struct MmaDepth {
#ifdef TS_MMA_DEPTH
    enum { D = TS_MMA_DEPTH };
#else
    enum { D = 2 };
#endif
};

// Bytes of one row that a lane's pipeline stage holds in the tensor-core GEMV
// (-DTS_MMA_STAGE, a multiple of the chunk): U = TS_MMA_STAGE / CBT k-blocks a stage. A
// smaller stage with a deeper ring keeps the same registers but refills a slot sooner (the
// slot is reloaded only once its stage has been decoded and multiplied).
#ifndef TS_MMA_STAGE
#define TS_MMA_STAGE 32
#endif

// Diagnostic builds (-DTS_DIAG, never the default; the results are wrong by design):
// 1: the weight decode is replaced by the raw word (loads, x loads and MMAs stay);
// 2: weights and scales are loaded with the same pattern and pipeline, and only XORed into
//    the accumulator (no x loads, no decode, no MMA): the kernel's pure streaming rate.
#ifndef TS_DIAG
#define TS_DIAG 0
#endif

// Independent accumulator chains of the tensor-core GEMV's k-block (-DTS_MMA_CHAINS): at
// small S a k-block's MMAs all feed one n8 tile, so with one chain each waits for the last.
template <int S>
struct MmaChains {
#ifdef TS_MMA_CHAINS
    enum { CH = TS_MMA_CHAINS };
#else
    enum { CH = S <= 4 ? 2 : 1 };
#endif
};

// Columns of one segment of the split activation (layout.rs MMA_SUM_SEGMENT, split.cuh
// TS_SPLIT_SEG): each has its own p in the 16-row layout, and its sum of x p (the 4-bit
// affine formats' zero term: zero * (sum of x over a k-block)).
#define TS_SUM_SEG 128

struct MArgs {
    const u8* w;
    const u8* sc;
    const u8* xh;     // [2S, xs] f16: row 2s = x_hi of activation s, row 2s + 1 = x_lo
    // [S, xs / TS_SUM_SEG] 1/p of each segment, then [S, xs / TS_SUM_SEG] sums of x * p
    // over segments (layout.rs split_activations). With -DTS_SEG_P each segment has its own
    // p (a producer that sees only its own segments wrote the split) and every k-block is
    // folded with its segment's 1/p; without, every segment carries the row's p and the
    // kernel applies segment 0's at the end.
    const float* xa;
    i64 rb;
    int O;
    int xs;
    int sc_row;
};

template <int FMT>
struct MmaFmt {
    // 4-bit codes (2 columns a byte) or 8-bit (1); the 136-byte affine blocks; per-row scale.
    enum {
        NIBBLES = FMT == TS_FMT_INT4_ROW || FMT == TS_FMT_INT4_G || FMT == TS_FMT_HFQ4 || FMT == TS_FMT_MQ4_V2 ||
                  FMT == TS_FMT_MQ4C,
        AFFINE = FMT == TS_FMT_HFQ4 || FMT == TS_FMT_MQ4_V2 || FMT == TS_FMT_MQ4C,
        ROW_SCALE = FMT == TS_FMT_INT4_ROW || FMT == TS_FMT_INT8_ROW,
        CPB = NIBBLES ? 2 : 1,
        // half2 pairs a decoded word gives, MMAs a word feeds
        PW = NIBBLES ? 4 : 2,
        // raw scale words a k-block needs per row (hfq4: f32 scale and zero)
        NR = FMT == TS_FMT_HFQ4 ? 2 : 1,
        MPW = PW / 2,
    };
    static_assert(FMT == TS_FMT_INT4_ROW || FMT == TS_FMT_INT4_G || FMT == TS_FMT_INT8_ROW || FMT == TS_FMT_FP8_F32 ||
                      FMT == TS_FMT_FP8_UE8M0 || AFFINE,
                  "no tensor-core path for this format");
};

// Word of 4 bytes -> f16x2 pairs. Nibble formats: (n0, n4), (n1, n5), (n2, n6), (n3, n7)
// (nibble j = column j of the word); 8-bit: (b0, b1), (b2, b3). MMA j of the word takes
// pairs 2j (k slots 2t, 2t+1) and 2j + 1 (k slots 2t+8, 2t+9).
template <int FMT>
TS_DEV void mma_decode(u32 w, u32 (&p)[MmaFmt<FMT>::PW]) {
#if TS_DIAG == 1
#pragma unroll
    for (int k = 0; k < MmaFmt<FMT>::PW; ++k) p[k] = w;
    return;
#endif
    if constexpr (MmaFmt<FMT>::NIBBLES) {
#ifdef TS_MUTATE_SWAP_NIBBLES
        w = ((w & 0x0F0F0F0Fu) << 4) | ((w >> 4) & 0x0F0F0F0Fu);
#endif
        // 0x6400 | n is the half 1024 + n; 0x6400 | 16n is 1024 + 16n.
        const u32 w8 = w >> 8;
        // One LOP3 a pair (and_or) for int4-row / int4-g; the affine formats keep the AND and
        // the OR, with which they ran faster (session 10, H200: mq4-g256-v2 [6144 x 16384]
        // 25.1 -> 25.8 us at S = 1 and 63.8 -> 66.6 at S = 16 with and_or; int4-row 20.4 ->
        // 17.6 and int4-g64 21.1 -> 19.9 at S = 1).
        u32 l0, h0, l1, h1;
        if constexpr (MmaFmt<FMT>::AFFINE) {
            l0 = (w & 0x000F000Fu) | 0x64006400u;
            h0 = (w & 0x00F000F0u) | 0x64006400u;
            l1 = (w8 & 0x000F000Fu) | 0x64006400u;
            h1 = (w8 & 0x00F000F0u) | 0x64006400u;
        } else {
            l0 = and_or(w, 0x000F000Fu, 0x64006400u);
            h0 = and_or(w, 0x00F000F0u, 0x64006400u);
            l1 = and_or(w8, 0x000F000Fu, 0x64006400u);
            h1 = and_or(w8, 0x00F000F0u, 0x64006400u);
        }
        // Signed codes q = n - 8: subtract 1032, or scale by 1/16 and subtract 72;
        // unsigned (affine) codes: 1024 and 64.
        const u32 sub = MmaFmt<FMT>::AFFINE ? 0x64006400u : 0x64086408u;
        const u32 add = MmaFmt<FMT>::AFFINE ? 0xD400D400u : 0xD480D480u;
        p[0] = hsub2(l0, sub);
        p[1] = hfma2(h0, 0x2C002C00u, add);
        p[2] = hsub2(l1, sub);
        p[3] = hfma2(h1, 0x2C002C00u, add);
    } else if constexpr (FMT == TS_FMT_INT8_ROW) {
        // byte ^ 0x80 = q + 128; 0x6400 | u = 1024 + u; minus 1152 = q.
        const u32 u = w ^ 0x80808080u;
        p[0] = hsub2(prmt(u, 0x64646464u, 0x4140u), 0x64806480u);
        p[1] = hsub2(prmt(u, 0x64646464u, 0x4342u), 0x64806480u);
    } else {
        p[0] = e4m3x2_f16x2(w);
        p[1] = e4m3x2_f16x2(w >> 16);
    }
}

// B fragment of MMA j of word wi from the lane's activation words xw (its chunk's columns).
// For the nibble formats the host stores each 8 columns as 0, 4, 1, 5, 2, 6, 3, 7
// (layout.rs `split_activations`), the pairs `mma_decode` makes of a word, so each half of
// the fragment is one word as loaded.
template <int FMT, int NXW>
TS_DEV void mma_b(const u32 (&xw)[NXW], int wi, int j, u32 (&b)[2]) {
    if constexpr (MmaFmt<FMT>::NIBBLES) {
        b[0] = xw[4 * wi + 2 * j];
        b[1] = xw[4 * wi + 2 * j + 1];
    } else {
        (void)j;
        b[0] = xw[2 * wi];
        b[1] = xw[2 * wi + 1];
    }
}

template <int S>
struct MmaShape {
    enum { NT = (2 * S + 7) / 8 };
};

// Group classes of the 16-row GEMV's k-block (int4-g only): a k-block of 4 lanes x CBT bytes
// may span N = KB_COLS / GS groups (16-byte chunks of int4-g64: 2, of int4-g32: 4) when the
// batch leaves n8 columns free (2 S N <= 8). Lane t's bytes belong to class t N / 4; B column
// n = 2 S c + 2 s + part carries activation s, part `part`, only in the k slots of class c's
// lanes (zero elsewhere), so one MMA keeps each group's partial in its own C columns and lane
// t folds class t / S with that group's scale. The classes are summed across the quad at the
// end (`mma_class_sum`). N = 1 is the plain kernel (a k-block inside one group).
template <int FMT, int GS, int CBT>
struct MmaClasses {
    enum {
        KB_COLS = 4 * CBT * MmaFmt<FMT>::CPB,
        N = (FMT == TS_FMT_INT4_G && GS > 0 && GS < KB_COLS) ? KB_COLS / (GS > 0 ? GS : 1) : 1,
    };
};

// Byte offset (within a row) of lane-quad position t's chunk of k-block kb, and its first
// column.
template <int FMT, int CBT>
TS_DEV i64 mma_chunk_off(i64 kb, int t) {
    if constexpr (MmaFmt<FMT>::AFFINE) {
        static_assert(CBT == 16, "a 136-byte block is 2 k-blocks of 64 payload bytes");
        return (kb >> 1) * 136 + 8 + (kb & 1) * 64 + 16 * t;
    } else {
        return kb * (4 * CBT) + CBT * t;
    }
}
template <int FMT, int CBT>
TS_DEV i64 mma_col0(i64 kb, int t) {
    return (i64)MmaFmt<FMT>::CPB * (kb * (4 * CBT) + CBT * t);
}

template <int FMT, int CBT>
TS_DEV i64 mma_kblocks(const MArgs& a) {
    if constexpr (MmaFmt<FMT>::AFFINE) {
        return (a.rb / 136) * 2;
    } else {
        return a.rb / (4 * CBT);
    }
}

// The raw scale words of k-block kb for row `row` (loaded with the weights, decoded at the
// fold): int4-g / fp8: the f32 bits (or UE8M0 byte) of its group / tile scale; affine: the
// block's 8-byte header. Rows past O read nothing.
template <int FMT, int GS, int CBT>
TS_DEV void mma_scale_raw(const MArgs& a, int r0, int row, i64 kb, u32 (&sr)[MmaFmt<FMT>::NR], int cls = 0) {
#pragma unroll
    for (int k = 0; k < MmaFmt<FMT>::NR; ++k) sr[k] = 0;
    if (row >= a.O) return;
    const i64 col_kb = mma_col0<FMT, CBT>(kb, 0);
    if constexpr (FMT == TS_FMT_INT4_G) {
        // cls: the group class of the k-block (MmaClasses; 0 when the k-block is one group).
        const int ng = a.sc_row, grp = (int)(col_kb / GS) + cls;
        sr[0] = *reinterpret_cast<const u32*>(a.sc + 4 * ((i64)row * ng + TS_GROUP(grp, ng)));
    } else if constexpr (FMT == TS_FMT_FP8_F32 || FMT == TS_FMT_FP8_UE8M0) {
        // The 16-row tile sits in one 128-row band, the k-block in one 128-column tile.
        const int tpr = a.sc_row, tc = (int)(col_kb / 128);
        const i64 k = (i64)(r0 / 128) * tpr + TS_GROUP(tc, tpr);
        if constexpr (FMT == TS_FMT_FP8_F32) {
            sr[0] = *reinterpret_cast<const u32*>(a.sc + 4 * k);
        } else {
            sr[0] = a.sc[k];
        }
    } else if constexpr (MmaFmt<FMT>::AFFINE) {
        const int nb = (int)(a.rb / 136), b = (int)(kb >> 1);
        (void)nb;  // read by TS_GROUP only under a mutation
        const u8* h = a.w + (i64)row * a.rb + (i64)TS_GROUP(b, nb) * 136;
        if constexpr (FMT == TS_FMT_HFQ4) {
            const U2 hdr = *reinterpret_cast<const U2*>(h);
            sr[0] = hdr.x;
            sr[1] = hdr.y;
        } else {
            // mq4-v2: k-block 0 of a block holds its weights 0-127 (first pair), k-block 1
            // weights 128-255 (second); mq4c: one pair. The word is picked by its address,
            // not by a select after an 8-byte load: the select is the load's first use, and
            // the ring issues these loads stages ahead, so it stalled the warp for the whole
            // DRAM latency at every load (half of ncu's stall samples, H100, session 17).
            const int word = (FMT == TS_FMT_MQ4_V2) ? (int)(kb & 1) : 0;
            sr[0] = *reinterpret_cast<const u32*>(h + 4 * word);
        }
    } else {
        (void)r0;
        (void)col_kb;
    }
}

// The k-block's scale d and zero z (affine formats; 0 otherwise) from its raw words.
template <int FMT>
TS_DEV void mma_scale_decode(const u32 (&r)[MmaFmt<FMT>::NR], float& d, float& z) {
    z = 0.0f;
    if constexpr (FMT == TS_FMT_INT4_G || FMT == TS_FMT_FP8_F32) {
        d = TS_SCALE(as_f(r[0]));
    } else if constexpr (FMT == TS_FMT_FP8_UE8M0) {
        d = TS_SCALE(ue8m0(r[0]));
    } else if constexpr (FMT == TS_FMT_HFQ4) {
        d = TS_SCALE(as_f(r[0]));
        z = as_f(r[MmaFmt<FMT>::NR - 1]);
    } else if constexpr (FMT == TS_FMT_MQ4_V2 || FMT == TS_FMT_MQ4C) {
        d = TS_SCALE(f16_to_f32(r[0] & 0xFFFFu));
        z = f16_to_f32(r[0] >> 16);
    } else {
        // Row-scaled formats fold nothing per k-block.
        (void)r;
        d = 1.0f;
    }
}

// acc[l][nt][q] (+)= this warp's share of the 16-row tile at r0: k-blocks warp,
// warp + nwarps, ... C layout: q = 0, 1: row g, columns 2t, 2t+1 of n-tile nt (activation
// 4nt + t, hi and lo parts); q = 2, 3: row g + 8. Scales of groups, tiles and blocks, and
// the affine zero terms, are folded in; per-row scales and 1/p are the caller's.
//
// Software pipeline: the weights and scale words of the next U k-blocks are in flight
// while the current U are decoded and multiplied, so DRAM latency is never waited on in
// the steady state.
//
// Persistent walk (WALK, `mma_walk`): the warp takes the block's units [w.ulo, w.uhi) of the
// whole launch's (tile, round) sequence (`MmaWalk`), the k-blocks of each unit as above, with
// its ring kept full across tile boundaries: the next tile's first stages are issued before
// `tile_end(tile, acc)` reduces and stores the finished one (acc is zeroed after it).
struct MmaWalk {
    int ulo, uhi;  // the block's units
    int rs;        // rounds (units) per tile
};
struct MmaNoTileEnd {
    template <class A>
#ifdef TS_HOST
    void operator()(int, A&) {}
#else
    __device__ void operator()(int, A&) {}
#endif
};
template <int FMT, int GS, int S, int CBT, int L, bool WALK, class TileEnd>
TS_DEV void mma_warp_impl(const MArgs& a, int r0, int warp, int nwarps, int lane0,
                          float (&acc)[L][MmaShape<S>::NT][4], MmaWalk walk,
                          TileEnd& tile_end) {
    typedef MmaFmt<FMT> F;
    enum {
        NT = MmaShape<S>::NT,
        NW = CBT / 4,            // weight words per lane and row
        NXW = CBT * F::CPB / 2,  // activation words (f16x2) per lane and B row
        U = TS_MMA_STAGE / CBT,  // k-blocks a stage: 2 rows * CBT * U bytes a lane (64 by default)
        KB_COLS = 4 * CBT * F::CPB,
        SCALED = !F::ROW_SCALE,
#ifdef TS_SEG_P
        SEG_P = 1,
#else
        SEG_P = 0,
#endif
        FOLD = SCALED || SEG_P,
        CH = MmaChains<S>::CH,
        NCLS = MmaClasses<FMT, GS, CBT>::N,
    };
    static_assert(U >= 1 && TS_MMA_STAGE % CBT == 0, "a stage is whole chunks");
    static_assert(TS_SUM_SEG % KB_COLS == 0, "a k-block sits inside one segment of the split");
    static_assert(GS == 0 || GS % (KB_COLS / NCLS) == 0, "a k-block class must sit inside one group");
    static_assert(NCLS == 1 || (KB_COLS % NCLS == 0 && 2 * S * NCLS <= 8 && (4 % NCLS) == 0),
                  "group classes need 2 S N <= 8 free B columns");
#pragma unroll
    for (int l = 0; l < L; ++l)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[l][nt][q] = 0.0f;
    const i64 klo = 0, khi = mma_kblocks<FMT, CBT>(a);
    // The warp's k-blocks: interleaved (warp, warp + nwarps, ...: the block's warps read
    // neighbouring bytes of a row at once), or with -DTS_MMA_CONTIG one contiguous range of
    // whole stages per warp (each warp streams its own run of every row).
#ifdef TS_MMA_CONTIG
    const i64 per = (khi - klo + (i64)nwarps * U - 1) / ((i64)nwarps * U) * U;
    const i64 kbeg = klo + (i64)warp * per, kend = kbeg + per < khi ? kbeg + per : khi;
    const i64 ustep = 1, stride = U;
#else
    const i64 kbeg = klo + warp, kend = khi;
    const i64 ustep = nwarps, stride = (i64)nwarps * U;
#endif

    auto load = [&](int r0, i64 kb0, u32 (&w)[U][L][2][NW], u32 (&r)[U][L][2][F::NR]) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 kb = kb0 + (i64)u * ustep;
#pragma unroll
            for (int l = 0; l < L; ++l) {
                const int lane = lane0 + l, g = lane >> 2, t = lane & 3;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = r0 + g + 8 * h;
                    if (kb < kend && row < a.O) {
                        if constexpr (F::AFFINE) {
                            // The 136-byte blocks are only 8-byte aligned, so a lane's chunk is
                            // two 8-byte loads; taken as bytes 8t and 32 + 8t of the quad's 64,
                            // each load of the quad is one whole 32-byte sector (a contiguous
                            // 16-byte chunk split in two would touch each sector twice). Its
                            // columns are 16t.. and 64 + 16t.. of the k-block (see the x loads).
                            const u8* p = a.w + (i64)row * a.rb + (kb >> 1) * 136 + 8 + (kb & 1) * 64 + 8 * t;
                            u32 pa[2], pb[2];
                            ld_stream<2>(p, pa);
                            ld_stream<2>(p + 32, pb);
                            w[u][l][h][0] = pa[0];
                            w[u][l][h][1] = pa[1];
                            w[u][l][h][2] = pb[0];
                            w[u][l][h][3] = pb[1];
                        } else {
                            ld_chunk<FMT, NW>(a.w + (i64)row * a.rb + mma_chunk_off<FMT, CBT>(kb, t), w[u][l][h]);
                        }
                    } else {
#pragma unroll
                        for (int k = 0; k < NW; ++k) w[u][l][h][k] = 0;
                    }
                    if constexpr (SCALED) {
                        // With group classes, lane t folds the C columns of class t / S.
                        const int cls = NCLS > 1 ? t / S : 0;
                        if (kb < kend && cls < NCLS) {
                            mma_scale_raw<FMT, GS, CBT>(a, r0, row, kb, r[u][l][h], cls);
                        } else {
#pragma unroll
                            for (int k = 0; k < F::NR; ++k) r[u][l][h][k] = 0;
                        }
                    }
                }
            }
        }
    };

    auto compute = [&](i64 kb0, const u32 (&w)[U][L][2][NW], const u32 (&r)[U][L][2][F::NR]) {
#if TS_DIAG == 2
        (void)kb0;
#pragma unroll
        for (int l = 0; l < L; ++l) {
            u32 v = 0;
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
#pragma unroll
                    for (int k = 0; k < NW; ++k) v ^= w[u][l][h][k];
                    // (Row-scaled formats load no scale words: r is not set there.)
                    if constexpr (SCALED) {
#pragma unroll
                        for (int k = 0; k < F::NR; ++k) v ^= r[u][l][h][k];
                    }
                }
            acc[l][0][0] += as_f(v & 0x3F7FFFFFu);
        }
        return;
#endif
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 kb = kb0 + (i64)u * ustep;
            if (kb >= kend) break;  // uniform across the warp
            // With TS_SEG_P, the k-block's segment 1/p and sum (affine formats) of each
            // activation this lane folds, loaded with the activations so their latency
            // overlaps (C columns 2t, 2t + 1 of n-tile nt are activation 4 nt + t; with group
            // classes activation t % S of class t / S). Without, the sum is loaded at the
            // fold (registers held across the MMAs cost the 80-register builds: session 9,
            // mq4-g256-v2 [28672 x 4096] 28.0 -> 29.2 us queued when hoisted).
            const i64 segs = a.xs / TS_SUM_SEG, seg = mma_col0<FMT, CBT>(kb, 0) / TS_SUM_SEG;
            float inv[L][NT], xsum[L][NT];
#pragma unroll
            for (int l = 0; l < L; ++l) {
                const int t = (lane0 + l) & 3;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int s = NCLS > 1 ? t % S : 4 * nt + t;
                    inv[l][nt] = 1.0f;
                    xsum[l][nt] = 0.0f;
                    if (SEG_P && s < S) {
                        inv[l][nt] = a.xa[(i64)s * segs + seg];
                        if constexpr (F::AFFINE) xsum[l][nt] = a.xa[(i64)(S + s) * segs + seg];
                    }
                }
            }
            u32 xv[L][NT][NXW];
#pragma unroll
            for (int l = 0; l < L; ++l) {
                const int lane = lane0 + l, g = lane >> 2, t = lane & 3;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int n = 8 * nt + g;
                    // Group classes: column n belongs to class n / 2S, and only that class's
                    // lanes (t N / 4) put the activation in their k slots.
                    const bool on = NCLS > 1 ? (n < 2 * S * NCLS && n / (2 * S) == t * NCLS / 4) : n < 2 * S;
                    if (on) {
                        const int xr = NCLS > 1 ? n % (2 * S) : n;
                        if constexpr (F::AFFINE) {
                            // The lane's two 8-byte pieces: columns 16t.. and 64 + 16t.. (load).
                            static_assert(NXW == 16, "two 16-column pieces");
                            const i64 c0 = mma_col0<FMT, CBT>(kb, 0) + 16 * t;
                            u32 xa8[8], xb8[8];
                            ld_xg<8>(a.xh, a.xs, xr, c0, xa8);
                            ld_xg<8>(a.xh, a.xs, xr, c0 + 64, xb8);
#pragma unroll
                            for (int k = 0; k < 8; ++k) {
                                xv[l][nt][k] = xa8[k];
                                xv[l][nt][8 + k] = xb8[k];
                            }
                        } else {
                            ld_xg<NXW>(a.xh, a.xs, xr, mma_col0<FMT, CBT>(kb, t), xv[l][nt]);
                        }
                    } else {
#pragma unroll
                        for (int k = 0; k < NXW; ++k) xv[l][nt][k] = 0;
                    }
                }
            }
            // Row-scaled formats with the row's p accumulate straight into acc; otherwise
            // each k-block's partial is folded into acc with its scale (and with TS_SEG_P
            // its segment's 1/p). The k-block's MMAs alternate between CH independent
            // accumulators (chains), so consecutive MMAs do not wait on each other; they are
            // summed after the k-block.
            float cc[CH][L][NT][4];
#pragma unroll
            for (int ch = 0; ch < CH; ++ch)
#pragma unroll
                for (int l = 0; l < L; ++l)
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int q = 0; q < 4; ++q) cc[ch][l][nt][q] = (FOLD || ch > 0) ? 0.0f : acc[l][nt][q];
#pragma unroll
            for (int wi = 0; wi < NW; ++wi) {
                u32 p[L][2][F::PW];
#pragma unroll
                for (int l = 0; l < L; ++l)
#pragma unroll
                    for (int h = 0; h < 2; ++h) mma_decode<FMT>(w[u][l][h][wi], p[l][h]);
#pragma unroll
                for (int j = 0; j < F::MPW; ++j) {
                    u32 fa[L][4];
#pragma unroll
                    for (int l = 0; l < L; ++l) {
                        fa[l][0] = p[l][0][2 * j];
                        fa[l][1] = p[l][1][2 * j];
                        fa[l][2] = p[l][0][2 * j + 1];
                        fa[l][3] = p[l][1][2 * j + 1];
                    }
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        u32 fb[L][2];
                        float fc[L][4];
                        const int ch = (wi * F::MPW + j) % CH;
#pragma unroll
                        for (int l = 0; l < L; ++l) {
                            mma_b<FMT, NXW>(xv[l][nt], wi, j, fb[l]);
#pragma unroll
                            for (int q = 0; q < 4; ++q) fc[l][q] = cc[ch][l][nt][q];
                        }
                        mma16816<L>(fa, fb, fc);
#pragma unroll
                        for (int l = 0; l < L; ++l)
#pragma unroll
                            for (int q = 0; q < 4; ++q) cc[ch][l][nt][q] = fc[l][q];
                    }
                }
            }
            float c[L][NT][4];
#pragma unroll
            for (int l = 0; l < L; ++l)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        float v = cc[0][l][nt][q];
#pragma unroll
                        for (int ch = 1; ch < CH; ++ch) v += cc[ch][l][nt][q];
                        c[l][nt][q] = v;
                    }
            if constexpr (!FOLD) {
#pragma unroll
                for (int l = 0; l < L; ++l)
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int q = 0; q < 4; ++q) acc[l][nt][q] = c[l][nt][q];
            } else {
                // Fold this k-block's partial with its scale (and zero term) and, with
                // TS_SEG_P, its segment's 1/p.
#pragma unroll
                for (int l = 0; l < L; ++l) {
                    float d[2], z[2];
                    if constexpr (SCALED) {
#pragma unroll
                        for (int h = 0; h < 2; ++h) mma_scale_decode<FMT>(r[u][l][h], d[h], z[h]);
                    } else {
                        d[0] = d[1] = 1.0f;
                        z[0] = z[1] = 0.0f;
                    }
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        if constexpr (F::AFFINE && !SEG_P) {
                            const int s = NCLS > 1 ? ((lane0 + l) & 3) % S : 4 * nt + ((lane0 + l) & 3);
                            if (s < S) xsum[l][nt] = a.xa[(i64)(S + s) * segs + seg];
                        }
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const float di = d[h] * inv[l][nt];
                            acc[l][nt][2 * h] += di * c[l][nt][2 * h] + (z[h] * inv[l][nt]) * xsum[l][nt];
                            acc[l][nt][2 * h + 1] += di * c[l][nt][2 * h + 1];
                        }
                    }
                }
            }
        }
    };

    // A ring of D stages: while stage d is decoded and multiplied, the next D - 1 are in
    // flight, and its registers are refilled (D stages ahead) as soon as it is consumed.
    // Loads past the row's last k-block are skipped (the load guards each k-block).
    enum { D = MmaDepth<S>::D };
    if constexpr (WALK) {
#ifdef TS_MMA_CONTIG
        static_assert(!WALK, "the persistent walk keeps the interleaved k order");
#endif
        (void)r0;
        (void)kbeg;
        // Unit u = (tile, round): rows 16 tile.., k-blocks round stride + warp + j nwarps.
        // Two cursors, the ring's next load (lt, lr) and the stage being computed (ct, cr),
        // advance one unit at a time (no division in the loop).
        const int ulo = walk.ulo, uhi = walk.uhi, rs = walk.rs;
        if (ulo >= uhi) return;  // block-uniform: the block's every warp leaves
        int lt = ulo / rs, lr = ulo - lt * rs;
        u32 wv[D][U][L][2][NW];
        u32 sr[D][U][L][2][F::NR];
#pragma unroll
        for (int d = 0; d < D; ++d) {
            // (A unit past the block's share loads real or zeroed bytes that are never used.)
            load(16 * lt, (i64)lr * stride + warp, wv[d], sr[d]);
            if (++lr == rs) {
                lr = 0;
                ++lt;
            }
        }
        pdl_wait();
        int ct = ulo / rs, cr = ulo - ct * rs;
        for (int u0 = ulo; u0 < uhi; u0 += D) {
#pragma unroll
            for (int d = 0; d < D; ++d) {
                const int u = u0 + d;
                if (u >= uhi) break;  // uniform across the block
                compute((i64)cr * stride + warp, wv[d], sr[d]);
                if (u + D < uhi) load(16 * lt, (i64)lr * stride + warp, wv[d], sr[d]);
                if (++lr == rs) {
                    lr = 0;
                    ++lt;
                }
                if (++cr == rs || u + 1 == uhi) {
                    tile_end(ct, acc);
#pragma unroll
                    for (int l = 0; l < L; ++l)
#pragma unroll
                        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                            for (int q = 0; q < 4; ++q) acc[l][nt][q] = 0.0f;
                    cr = 0;
                    ++ct;
                }
            }
        }
        return;
    }
    if (kbeg >= kend) {
        return;
    }
    u32 wv[D][U][L][2][NW];
    u32 sr[D][U][L][2][F::NR];
#pragma unroll
    for (int d = 0; d < D; ++d) load(r0, kbeg + d * stride, wv[d], sr[d]);
    // Programmatic dependent launch: the first stages' weights and scales (never written by a
    // kernel) are in flight; the activations may come from the previous kernel.
    pdl_wait();
    for (i64 kb0 = kbeg; kb0 < kend; kb0 += D * stride) {
#pragma unroll
        for (int d = 0; d < D; ++d) {
            const i64 k = kb0 + d * stride;
            if (k >= kend) break;  // uniform across the warp
            compute(k, wv[d], sr[d]);
            if (k + D * stride < kend) load(r0, k + D * stride, wv[d], sr[d]);
        }
    }
}

template <int FMT, int GS, int S, int CBT, int L>
TS_DEV void mma_warp(const MArgs& a, int r0, int warp, int nwarps, int lane0,
                     float (&acc)[L][MmaShape<S>::NT][4]) {
    MmaNoTileEnd none;
    mma_warp_impl<FMT, GS, S, CBT, L, false>(a, r0, warp, nwarps, lane0, acc, MmaWalk{0, 0, 1}, none);
}

template <int FMT, int GS, int S, int CBT, int L, class TileEnd>
TS_DEV void mma_walk(const MArgs& a, MmaWalk walk, int warp, int nwarps, int lane0,
                     float (&acc)[L][MmaShape<S>::NT][4], TileEnd& tile_end) {
    mma_warp_impl<FMT, GS, S, CBT, L, true>(a, 0, warp, nwarps, lane0, acc, walk, tile_end);
}

// ---- persistent schedule of the 16-row GEMV (-DTS_MMA_PERSIST, layout.rs twins) ---------
//
// The launch's work is the sequence of units (tile, round), tile-major: a tile is 16 rows, a
// round one stage of every warp of a block over the tile's row (stride = warps x U
// k-blocks; rs = ceil(k-blocks / stride) rounds a tile). The grid's G blocks take equal
// contiguous shares, block b the units [b N / G, (b + 1) N / G) of N = tiles x rs, so every
// warp of the launch runs the same number of stages (+-1) and they all end together. A tile
// whose units all lie in one block is stored by that block; a tile split between blocks gets
// one partial per block (its part = b - the tile's first block), and the last to arrive sums
// them in part order (deterministic for a given grid).

// Rounds a tile: stages of the block's warps over one row (at least one, so a row without
// k-blocks still gets its tile stored, as zeros; layout.rs `PersistPlan` counts the same).
TS_DEV int persist_rounds(i64 nkb, int nwarps, int u) {
    const i64 stride = (i64)nwarps * u;
    return nkb > 0 ? (int)((nkb + stride - 1) / stride) : 1;
}
// First unit of block b of g over n units.
TS_DEV int persist_lo(int b, int g, i64 n) { return (int)((i64)b * n / g); }
// The block whose share holds unit v: the largest b with persist_lo(b) <= v.
TS_DEV int persist_block_of(i64 v, int g, i64 n) { return (int)(((v + 1) * g - 1) / n); }
// Block b's share of the units: equal shares of the units, of `tiles` tiles of rs units
// each on a grid of g blocks.
TS_DEV MmaWalk persist_share(int b, int g, int tiles, int rs) {
    const i64 n = (i64)tiles * rs;
    return MmaWalk{persist_lo(b, g, n), persist_lo(b + 1, g, n), rs};
}

// Group classes: lane t holds class t / S of activation t % S; the sum over the quad's
// lanes t with the same t % S (butterfly over masks S, 2S < 4) leaves each activation's
// total in lanes t < S. L = 32 (host): the lanes of one warp in an array.
template <int S, int NCLS, int L>
TS_DEV void mma_class_sum(float (&tot)[L][MmaShape<S>::NT][4]) {
    enum { NT = MmaShape<S>::NT };
    if constexpr (NCLS > 1) {
#pragma unroll
        for (int m = S; m < 4; m <<= 1) {
#ifdef TS_HOST
            float nv[L][NT][4];
            for (int l = 0; l < L; ++l)
                for (int nt = 0; nt < NT; ++nt)
                    for (int q = 0; q < 4; ++q) nv[l][nt][q] = tot[l][nt][q] + tot[l ^ m][nt][q];
            for (int l = 0; l < L; ++l)
                for (int nt = 0; nt < NT; ++nt)
                    for (int q = 0; q < 4; ++q) tot[l][nt][q] = nv[l][nt][q];
#else
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int q = 0; q < 4; ++q) tot[0][nt][q] += __shfl_xor_sync(0xffffffffu, tot[0][nt][q], m);
#endif
        }
    } else {
        (void)tot;
    }
}

// Lane-local end: the (warp-summed) tile partial of this lane -> y, times 1/p (with
// TS_SEG_P already folded per k-block) and the per-row scale.
// With group classes (NCLS > 1), after `mma_class_sum` lane t < S holds activation t.
template <int FMT, int S, int NCLS = 1>
TS_DEV void mma_store(const MArgs& a, int r0, int lane, const float (&tot)[MmaShape<S>::NT][4], float* y) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < MmaShape<S>::NT; ++nt) {
        const int s = NCLS > 1 ? t : 4 * nt + t;
        if (s >= S) continue;
#ifdef TS_SEG_P
        const float inv_p = 1.0f;
#else
        const float inv_p = a.xa[(i64)s * (a.xs / TS_SUM_SEG)];  // every segment's: the row's
#endif
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = r0 + g + 8 * h;
            if (row >= a.O) continue;
            float v = (tot[nt][2 * h] + tot[nt][2 * h + 1]) * inv_p;
            if constexpr (MmaFmt<FMT>::ROW_SCALE) v *= TS_SCALE(scale_f32(a.sc, row));
            y[(i64)s * a.O + row] = v;
        }
    }
}

// ---- GEMM (S >= 17) on the tensor cores ------------------------------------------------
//
// The same exact f16 weight decoding and the same k-block indexing as the tensor-core GEMV,
// arranged for large S. The activation is split into P f16 parts per row (layout.rs
// `gemm_activations`): P = 2 is x p = hi + lo (about 22 bits, the 1e-4 path), P = 1 is hi
// alone (11 bits: every product w x is off by at most 2^-11 of itself, the declared
// `GemmPrecision::F16` bound). B column n = P s + part.
//
// A block of TS_GEMM_WARPS warps owns 32 rows per warp (two m16 tiles) and 8 TS_GEMM_NT B
// columns. Each warp loads its own rows' bytes straight from global memory into registers,
// one stage ahead (no shared memory for weights, as in the GEMV), and multiplies them with
// all of the block's B columns, so every weight byte is read once per block. The activation
// parts of a stage are staged in shared memory by cp.async, TS_GEMM_STAGES deep, and read
// by all warps.
//
// A stage is 16 bytes of each of a lane's 4 rows: U = 16 / CBT k-blocks, SC = 64 CPB
// columns. The host stores the parts in exactly the order the lanes read them: per stage,
// per n8 tile, per (k-block, quad q), per (g, t) 16 bytes holding the 8 columns of quad q of
// lane t's chunk for B column g, in the order the B fragment takes them (nibble formats:
// columns 0, 4, 1, 5, 2, 6, 3, 7, matching `mma_decode`'s pairs; 8-bit formats: in order).
// So each B fragment is half of one conflict-free 16-byte shared load, with no permutes.

#ifndef TS_GEMM_NT
#define TS_GEMM_NT 8
#endif
#ifndef TS_GEMM_WARPS
#define TS_GEMM_WARPS 8
#endif
#ifndef TS_GEMM_STAGES
#define TS_GEMM_STAGES 4
#endif

struct GArgs {
    MArgs m;         // m.xh unused; m.xa: [sp] 1/p, then [sp, xs / TS_SUM_SEG] sums
    const u8* xg;    // activation parts in stage order (above)
    int S;           // activations; outputs of s >= S are not written
    int nbt;         // n8 tiles of B columns in xg, a multiple of TS_GEMM_NT
    int sp;          // activations xa holds (8 nbt / P)
    const float* rexp;  // dequantized builds (TS_DEQ): each row's 2^e (gemm_row_pow); else 0
};

template <int FMT, int CBT>
struct GemmShape {
    enum {
        CPB = MmaFmt<FMT>::CPB,
        NW = CBT / 4,         // weight words of one row per lane and k-block
        U = 16 / CBT,         // k-blocks a stage
        KBC = 4 * CBT * CPB,  // columns a k-block
        SC = U * KBC,         // columns a stage (64 CPB)
        WPQ = 2 / CPB,        // weight words per 8-column quad
        NQ = CBT * CPB / 8,   // quads per lane and k-block
        TILE = SC * 8 * 2,    // bytes of one n8 tile of one stage
    };
};

// 16 bytes global -> shared (device: cp.async, bypassing L1; host: a copy).
TS_DEV void cp16(u8* dst, const u8* src) {
#ifdef TS_HOST
    *reinterpret_cast<U4*>(dst) = *reinterpret_cast<const U4*>(src);
#else
    u32 d;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(d) : "l"(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#endif
}

// Thread `tid` of `nthreads` copies its share of stage `st` of the block's n8 tiles
// nt0 .. nt0 + NTW - 1 (contiguous in xg) to `dst`.
template <int FMT, int CBT, int NTW>
TS_DEV void gemm_stage_x(const GArgs& a, i64 st, int nt0, u8* dst, int tid, int nthreads) {
    typedef GemmShape<FMT, CBT> G;
    const u8* src = a.xg + (st * a.nbt + nt0) * (i64)G::TILE;
    for (int k = tid; k < NTW * G::TILE / 16; k += nthreads) cp16(dst + 16 * k, src + 16 * k);
}

// The warp's weights of stage st: rows r0w + 16 mt + g + 8 h, k-blocks U st + u, and the
// raw scale words of each (row, k-block). Rows past O and k-blocks past the row read zeros.
template <int FMT, int GS, int CBT, int L>
TS_DEV void gemm_load_w(const GArgs& a, int r0w, i64 st, int lane0,
                        u32 (&w)[L][2][2][GemmShape<FMT, CBT>::U][GemmShape<FMT, CBT>::NW],
                        u32 (&r)[L][2][2][GemmShape<FMT, CBT>::U][MmaFmt<FMT>::NR],
                        i64 st_end = (i64)1 << 62) {
    typedef GemmShape<FMT, CBT> G;
    // Stages at or past st_end (the end of a split-K block's range) load nothing: they
    // belong to the next block, and reading them would only waste bandwidth.
    const i64 nkb = st < st_end ? mma_kblocks<FMT, CBT>(a.m) : 0;
#pragma unroll
    for (int l = 0; l < L; ++l) {
        const int lane = lane0 + l, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int u = 0; u < G::U; ++u) {
                    const int r0 = r0w + 16 * mt, row = r0 + g + 8 * h;
                    const i64 kb = st * G::U + u;
                    if (kb < nkb && row < a.m.O) {
                        ld_chunk<FMT, G::NW>(a.m.w + (i64)row * a.m.rb + mma_chunk_off<FMT, CBT>(kb, t), w[l][mt][h][u]);
                    } else {
#pragma unroll
                        for (int k = 0; k < G::NW; ++k) w[l][mt][h][u][k] = 0;
                    }
                    if constexpr (!MmaFmt<FMT>::ROW_SCALE) {
                        if (kb < nkb) {
                            mma_scale_raw<FMT, GS, CBT>(a.m, r0, row, kb, r[l][mt][h][u]);
                        } else {
#pragma unroll
                            for (int k = 0; k < MmaFmt<FMT>::NR; ++k) r[l][mt][h][u][k] = 0;
                        }
                    } else {
                        r[l][mt][h][u][0] = 0;
                    }
                }
    }
}

// The dequantized GEMM's (TS_DEQ, below) f16x2 scale d 2^-e and offset z 2^-e of k-block u
// for each of the lane's rows.
template <int FMT, int L>
struct DeqScales {
    u32 d[L][2][2];
    u32 z[L][2][2];
};

// The decoded f16 pairs of quad q of k-block u of the warp's rows (its 2 m16 tiles x 2 row
// halves), each weight word decoded once; with DQ, times the k-block's scales `s` (d q, or
// d q + z for the affine formats: one rounding each).
template <int FMT, int CBT, int L, bool DQ>
TS_DEV void gemm_decode_quad(const u32 (&w)[L][2][2][GemmShape<FMT, CBT>::U][GemmShape<FMT, CBT>::NW], int u, int q,
                             u32 (&p)[L][2][2][GemmShape<FMT, CBT>::WPQ][MmaFmt<FMT>::PW], const DeqScales<FMT, L>& s) {
    typedef GemmShape<FMT, CBT> G;
#pragma unroll
    for (int l = 0; l < L; ++l)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int k = 0; k < G::WPQ; ++k) {
                    u32(&v)[MmaFmt<FMT>::PW] = p[l][mt][h][k];
                    mma_decode<FMT>(w[l][mt][h][u][q * G::WPQ + k], v);
                    if constexpr (DQ) {
#pragma unroll
                        for (int i = 0; i < MmaFmt<FMT>::PW; ++i)
                            v[i] = MmaFmt<FMT>::AFFINE ? hfma2(v[i], s.d[l][mt][h], s.z[l][mt][h])
                                                       : hmul2(v[i], s.d[l][mt][h]);
                    }
                }
}

// Lane l's A fragment of m16 tile mt for the MMA fed by half jj of decoded word k.
template <int FMT, int CBT, int L>
TS_DEV void gemm_frag_a(const u32 (&p)[L][2][2][GemmShape<FMT, CBT>::WPQ][MmaFmt<FMT>::PW], int l, int mt, int k,
                        int jj, u32 (&fa)[4]) {
    fa[0] = p[l][mt][0][k][2 * jj];
    fa[1] = p[l][mt][1][k][2 * jj];
    fa[2] = p[l][mt][0][k][2 * jj + 1];
    fa[3] = p[l][mt][1][k][2 * jj + 1];
}

// The raw scale words of k-block u of a stage, per lane, m tile and row half.
template <int FMT, int CBT, int L>
TS_DEV void gemm_kblock_scales(const u32 (&r)[L][2][2][GemmShape<FMT, CBT>::U][MmaFmt<FMT>::NR], int u,
                               u32 (&rk)[L][2][2][MmaFmt<FMT>::NR]) {
#pragma unroll
    for (int l = 0; l < L; ++l)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int n = 0; n < MmaFmt<FMT>::NR; ++n) rk[l][mt][h][n] = r[l][mt][h][u][n];
}

// ---- dequantized decoding (-DTS_DEQ: GemmPrecision::F16Dequant) ------------------------
//
// The scaled formats but hfq4 (whose f32 scale and zero would each round: no bound relative
// to |w| where they cancel) can take each weight times its k-block's scale, plus the affine
// offset, rounded once to f16 before the MMA, in units of its row's power of two 2^e. Then
// every k-block accumulates in place like a row-scaled format's: no second accumulator, no
// fold, no wait for the tensor cores a k-block; the store multiplies by 2^e. A product w x
// is then off by the f16 roundings of x, of the scale (f32 scales only) and of the weight,
// at most 3 * 2^-11 of itself: GemmPrecision::F16Dequant's 1.5e-3. f16 scales and offsets
// (mq4-g256-v2, mq4c-g256) and UE8M0 scales are exact in f16 after the shift (unless they
// fall below its normals), and fma rounds q d + z once.

// Largest |code| a weight's scale multiplies: int4 q - 8, E4M3's 448, affine q <= 15.
template <int FMT>
struct DeqFmt {
    enum { QMAX = (FMT == TS_FMT_FP8_F32 || FMT == TS_FMT_FP8_UE8M0) ? 448 : MmaFmt<FMT>::AFFINE ? 15 : 8 };
};

// Row `row`'s 2^e: its bound max over k-blocks of QMAX |d| + |z| times 2^-e lies in
// [2^13, 2^14), so no decoded weight overflows f16 (65504) and the row's largest keep their
// 11 bits; e is clamped to [-100, 100] (2^e and 2^-e stay normal f32). A zero row gives 1,
// and so does a non-finite bound (NaN scales are skipped by the max; an infinite one still
// decodes to infinity, as the oracle's would).
template <int FMT, int GS, int CBT>
TS_DEV float gemm_row_pow(const MArgs& m, int row) {
#ifdef TS_MUTATE_ROW_POW_ONE
    // Test-only (host emulation): every row at 2^0, to show the powers are needed.
    (void)m;
    (void)row;
    return 1.0f;
#endif
    const i64 nkb = mma_kblocks<FMT, CBT>(m);
    float b = 0.0f;
    for (i64 kb = 0; kb < nkb; ++kb) {
        u32 sr[MmaFmt<FMT>::NR];
        mma_scale_raw<FMT, GS, CBT>(m, row, row, kb, sr);
        float d, z;
        mma_scale_decode<FMT>(sr, d, z);
        const float v = (float)DeqFmt<FMT>::QMAX * (d < 0.0f ? -d : d) + (z < 0.0f ? -z : z);
        if (v > b) b = v;  // NaN compares false
    }
    const u32 bb = bits_of(b);
    if (!(b > 0.0f) || (bb >> 23) >= 0xFFu) return 1.0f;
    int e = (int)(bb >> 23) - 127 - 13;  // b in [2^(e + 13), 2^(e + 14)) (subnormal b: e = -140)
    e = e < -100 ? -100 : (e > 100 ? 100 : e);
    return as_f((u32)(e + 127) << 23);
}

// 2^-e from 2^e, exact.
TS_DEV float pow2_inverse(float p) { return as_f(0x7F000000u - bits_of(p)); }

// f(l, mt, h) for each of the lane's rows: L lanes x 2 m16 tiles x 2 row halves.
template <int L, class Fn>
TS_DEV void for_lane_rows(Fn f) {
#pragma unroll
    for (int l = 0; l < L; ++l)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) f(l, mt, h);
}

// The lane's rows' 2^-e (rows past O: 1).
template <int L>
TS_DEV void gemm_row_inverses(const GArgs& a, int r0w, int lane0, float (&inv)[L][2][2]) {
    for_lane_rows<L>([&](int l, int mt, int h) {
        const int row = r0w + 16 * mt + ((lane0 + l) >> 2) + 8 * h;
        inv[l][mt][h] = a.rexp != 0 && row < a.m.O ? pow2_inverse(a.rexp[row]) : 1.0f;
    });
}

// k-block u's DeqScales from its raw scale words and the rows' 2^-e.
template <int FMT, int CBT, int L>
TS_DEV void gemm_deq_scales(const u32 (&r)[L][2][2][GemmShape<FMT, CBT>::U][MmaFmt<FMT>::NR], int u,
                            const float (&inv)[L][2][2], DeqScales<FMT, L>& s) {
    for_lane_rows<L>([&](int l, int mt, int h) {
        float d, z;
        mma_scale_decode<FMT>(r[l][mt][h][u], d, z);
        s.d[l][mt][h] = f16x2_splat(d * inv[l][mt][h]);
        s.z[l][mt][h] = f16x2_splat(z * inv[l][mt][h]);
    });
}

// acc += k-block kb's products c (C layout) times the k-block's scale, plus its zero term
// (affine formats: z times the activations' sum over the k-block's segment). With P = 2
// the hi and lo columns of an activation are summed into acc[.][2h] (acc[.][2h+1] stays
// 0); with P = 1 each column is its own activation.
template <int FMT, int CBT, int P, int NTW, int L>
TS_DEV void gemm_fold_kblock(const GArgs& a, i64 kb, int lane0, int nt0, const u32 (&rk)[L][2][2][MmaFmt<FMT>::NR],
                             const float (&c)[L][2][NTW][4], float (&acc)[L][2][NTW][4]) {
    typedef MmaFmt<FMT> F;
    const i64 seg = mma_col0<FMT, CBT>(kb, 0) / TS_SUM_SEG;
    const i64 segs = a.m.xs / TS_SUM_SEG;
#pragma unroll
    for (int l = 0; l < L; ++l) {
        const int t = (lane0 + l) & 3;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            float d[2], z[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) mma_scale_decode<FMT>(rk[l][mt][h], d[h], z[h]);
#pragma unroll
            for (int j = 0; j < NTW; ++j) {
                if constexpr (P == 2) {
                    const int s = 4 * (nt0 + j) + t;
                    const float xsum = F::AFFINE ? a.m.xa[a.sp + (i64)s * segs + seg] : 0.0f;
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        acc[l][mt][j][2 * h] += d[h] * (c[l][mt][j][2 * h] + c[l][mt][j][2 * h + 1]) + z[h] * xsum;
                } else {
                    const int s0 = 8 * (nt0 + j) + 2 * t;
                    float xsum[2] = {0.0f, 0.0f};
                    if constexpr (F::AFFINE) {
                        xsum[0] = a.m.xa[a.sp + (i64)s0 * segs + seg];
                        xsum[1] = a.m.xa[a.sp + (i64)(s0 + 1) * segs + seg];
                    }
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            acc[l][mt][j][2 * h + e] += d[h] * c[l][mt][j][2 * h + e] + z[h] * xsum[e];
                }
            }
        }
    }
}

// acc (+)= the warp's 32 rows x the block's B columns over stage st, with `xs` the stage's
// activation tiles in shared memory. C layout per (m tile mt, n tile j): q = 0, 1: row g,
// B columns 2t, 2t + 1; q = 2, 3: row g + 8. Row-scaled formats accumulate in acc; the
// others per k-block in c, folded with the k-block's scale (and zero term) into acc: with
// P = 2 the hi and lo columns of an activation are summed there (acc[.][2h], acc[.][2h+1]
// stays 0), with P = 1 each column is its own activation.
// DQ (dequantized decoding, above): the scaled formats accumulate in place too, their
// weights scaled as decoded (`inv`: the lane's rows' 2^-e).
template <int FMT, int GS, int CBT, int P, int NTW, int L, bool DQ>
TS_DEV void gemm_compute(const GArgs& a, int r0w, i64 st, int lane0,
                         const u32 (&w)[L][2][2][GemmShape<FMT, CBT>::U][GemmShape<FMT, CBT>::NW],
                         const u32 (&r)[L][2][2][GemmShape<FMT, CBT>::U][MmaFmt<FMT>::NR], const u8* xs, int nt0,
                         const float (&inv)[L][2][2], float (&acc)[L][2][NTW][4]) {
    typedef MmaFmt<FMT> F;
    typedef GemmShape<FMT, CBT> G;
    enum { SCALED = !F::ROW_SCALE && !DQ };
    static_assert(!DQ || (!F::ROW_SCALE && FMT != TS_FMT_HFQ4), "dequantized decoding: scaled formats but hfq4");
    static_assert(P == 1 || P == 2, "one or two activation parts");
    static_assert(GS == 0 || GS % G::KBC == 0, "a k-block must sit inside one group");
    const i64 nkb = mma_kblocks<FMT, CBT>(a.m);
#pragma unroll
    for (int u = 0; u < G::U; ++u) {
        const i64 kb = st * G::U + u;
        if (kb >= nkb) break;  // uniform across the block
        float c[L][2][NTW][4];
#pragma unroll
        for (int l = 0; l < L; ++l)
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int j = 0; j < NTW; ++j)
#pragma unroll
                    for (int q = 0; q < 4; ++q) c[l][mt][j][q] = SCALED ? 0.0f : acc[l][mt][j][q];
#pragma unroll
        DeqScales<FMT, L> ds{};
        if constexpr (DQ) gemm_deq_scales<FMT, CBT, L>(r, u, inv, ds);
#pragma unroll
        for (int q = 0; q < G::NQ; ++q) {
            u32 p[L][2][2][G::WPQ][F::PW];
            gemm_decode_quad<FMT, CBT, L, DQ>(w, u, q, p, ds);
#pragma unroll
            for (int j = 0; j < NTW; ++j) {
                u32 xq[L][4];
#pragma unroll
                for (int l = 0; l < L; ++l) {
                    const int lane = lane0 + l, g = lane >> 2, t = lane & 3;
                    const U4 v = *reinterpret_cast<const U4*>(xs + j * G::TILE + ((u * G::NQ + q) * 8 + g) * 64 + t * 16);
                    xq[l][0] = v.x;
                    xq[l][1] = v.y;
                    xq[l][2] = v.z;
                    xq[l][3] = v.w;
                }
#pragma unroll
                for (int k = 0; k < G::WPQ; ++k)
#pragma unroll
                    for (int jj = 0; jj < F::MPW; ++jj) {
                        const int bi = 2 * (k * F::MPW + jj);
                        u32 fb[L][2];
#pragma unroll
                        for (int l = 0; l < L; ++l) {
                            fb[l][0] = xq[l][bi];
                            fb[l][1] = xq[l][bi + 1];
                        }
#pragma unroll
                        for (int mt = 0; mt < 2; ++mt) {
                            u32 fa[L][4];
                            float fc[L][4];
#pragma unroll
                            for (int l = 0; l < L; ++l) {
                                gemm_frag_a<FMT, CBT, L>(p, l, mt, k, jj, fa[l]);
#pragma unroll
                                for (int e = 0; e < 4; ++e) fc[l][e] = c[l][mt][j][e];
                            }
                            mma16816<L>(fa, fb, fc);
#pragma unroll
                            for (int l = 0; l < L; ++l)
#pragma unroll
                                for (int e = 0; e < 4; ++e) c[l][mt][j][e] = fc[l][e];
                        }
                    }
            }
        }
        if constexpr (!SCALED) {
#pragma unroll
            for (int l = 0; l < L; ++l)
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int j = 0; j < NTW; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[l][mt][j][e] = c[l][mt][j][e];
        } else {
            u32 rk[L][2][2][F::NR];
            gemm_kblock_scales<FMT, CBT, L>(r, u, rk);
            gemm_fold_kblock<FMT, CBT, P, NTW, L>(a, kb, lane0, nt0, rk, c, acc);
        }
    }
}

// The warp's outputs: y[s, row] = (its parts' sum) / p_s, times the row scale (DQ: the
// row's 2^e).
template <int FMT, int P, int NTW, int L, bool DQ>
TS_DEV void gemm_store(const GArgs& a, int r0w, int nt0, int lane0, const float (&acc)[L][2][NTW][4], float* y) {
#pragma unroll
    for (int l = 0; l < L; ++l) {
        const int lane = lane0 + l, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = r0w + 16 * mt + g + 8 * h;
                if (row >= a.m.O) continue;
                float rs = 1.0f;
                if constexpr (MmaFmt<FMT>::ROW_SCALE) rs = TS_SCALE(scale_f32(a.m.sc, row));
                if constexpr (DQ) rs = a.rexp[row];
#pragma unroll
                for (int j = 0; j < NTW; ++j) {
                    if constexpr (P == 2) {
                        const int s = 4 * (nt0 + j) + t;
                        if (s < a.S)
                            y[(i64)s * a.m.O + row] = (acc[l][mt][j][2 * h] + acc[l][mt][j][2 * h + 1]) * a.m.xa[s] * rs;
                    } else {
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int s = 8 * (nt0 + j) + 2 * t + e;
                            if (s < a.S) y[(i64)s * a.m.O + row] = acc[l][mt][j][2 * h + e] * a.m.xa[s] * rs;
                        }
                    }
                }
            }
    }
}

#ifdef TS_WGMMA
// ---- the GEMM on the warpgroup MMA (-DTS_WGMMA, sm_90a; row-scaled formats) -------------
//
// The four warps of a warpgroup issue one wgmma.m64n64k16 for their four m16 tiles: A from
// each warp's registers (the fragments mma16816 takes, decoded the same way), B (the
// block's 8 n8 tiles) read by the tensor cores from the stage's tiles in shared memory,
// which the host lays out as core matrices (layout.rs `GemmLayout::canonical`): a k16
// slice is 256 bytes of each n8 tile, its two k halves 128 bytes apart (the descriptor's
// leading offset), the n8 tiles TILE bytes apart (its stride offset), each core matrix 8
// columns of 16 bytes. The MMAs run asynchronously: a warp decodes the next slice pair
// while the tensor cores multiply the last one, one commit group in flight behind it.
// The accumulators stay in registers in mma16816's C layout, so the store is unchanged.
// Warp w's outputs depend only on its own A fragment and B, so the host emulation runs
// each warp alone (wg_mma_n64 below), which checks the layout and the indexing; the probe
// example (examples/tensor_probe.rs) checks on the device that the tensor cores read the
// canonical layout so.
// The canonical layout's byte offsets: a k16 slice of one n8 tile, and its second k half.
enum { WG_SLICE = 256, WG_LEAD = 128 };
#ifdef TS_HOST
TS_DEV void wg_fence() {}
TS_DEV void wg_commit() {}
template <int N>
TS_DEV void wg_wait() {}
#else
TS_DEV void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
TS_DEV void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
TS_DEV void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Writes by the generic proxy (cp.async's landed bytes) made visible to the tensor cores'.
TS_DEV void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
TS_DEV u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }
// Shared-memory matrix descriptor, no swizzle: start, leading and stride byte offsets.
TS_DEV unsigned long long wg_desc(u32 addr, u32 lead, u32 stride) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)((lead >> 4) & 0x3FFFu) << 16) |
           ((unsigned long long)((stride >> 4) & 0x3FFFu) << 32);
}
#endif

// acc[.][mt] (+)= A (each lane's warp's 16 rows of the warpgroup's 64, in mma16816's A
// layout) . B [16 x 64], the k16 slice of the stage's tiles at `b` (`tile` bytes an n8 tile):
// added to acc where `add`, written over it where not (the instruction's scale-d).
template <int L>
TS_DEV void wg_mma_n64(float (&acc)[L][2][8][4], int mt, const u32 (&a)[L][4], const u8* b, int tile, bool add) {
#ifdef TS_HOST
    static_assert(L == 32, "the host emulation runs a whole warp");
    float A[16][16], B[16][64];
    emu_gather_a(a, A);
    for (int k = 0; k < 16; ++k)
        for (int n = 0; n < 64; ++n) {
            const u8* e = b + (k >> 3) * WG_LEAD + (n >> 3) * tile + (n & 7) * 16 + (k & 7) * 2;
            B[k][n] = f16_to_f32((u32)e[0] | ((u32)e[1] << 8));
        }
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        for (int j = 0; j < 8; ++j)
            for (int q = 0; q < 4; ++q) {
                const int row = g + 8 * (q >> 1), col = 8 * j + 2 * t + (q & 1);
                float s = 0.0f;
                for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];  // products exact in f32
                acc[lane][mt][j][q] = add ? acc[lane][mt][j][q] + s : s;
            }
    }
#else
    static_assert(L == 1, "one lane per thread on the device");
    const unsigned long long desc = wg_desc(smem_u32(b), WG_LEAD, (u32)tile);
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(acc[0][mt][0][0]), "+f"(acc[0][mt][0][1]), "+f"(acc[0][mt][0][2]), "+f"(acc[0][mt][0][3]),
          "+f"(acc[0][mt][1][0]), "+f"(acc[0][mt][1][1]), "+f"(acc[0][mt][1][2]), "+f"(acc[0][mt][1][3]),
          "+f"(acc[0][mt][2][0]), "+f"(acc[0][mt][2][1]), "+f"(acc[0][mt][2][2]), "+f"(acc[0][mt][2][3]),
          "+f"(acc[0][mt][3][0]), "+f"(acc[0][mt][3][1]), "+f"(acc[0][mt][3][2]), "+f"(acc[0][mt][3][3]),
          "+f"(acc[0][mt][4][0]), "+f"(acc[0][mt][4][1]), "+f"(acc[0][mt][4][2]), "+f"(acc[0][mt][4][3]),
          "+f"(acc[0][mt][5][0]), "+f"(acc[0][mt][5][1]), "+f"(acc[0][mt][5][2]), "+f"(acc[0][mt][5][3]),
          "+f"(acc[0][mt][6][0]), "+f"(acc[0][mt][6][1]), "+f"(acc[0][mt][6][2]), "+f"(acc[0][mt][6][3]),
          "+f"(acc[0][mt][7][0]), "+f"(acc[0][mt][7][1]), "+f"(acc[0][mt][7][2]), "+f"(acc[0][mt][7][3])
        : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "l"(desc), "r"(add ? 1u : 0u));
#endif
}

// The k-block whose products wait in the warpgroup GEMM's c to be scaled into acc (scaled
// formats): its raw scale words and index (kb < 0: none). Carried across stages, since the
// stage's scale registers are refilled before its last k-block is folded.
template <int FMT, int L>
struct WgPending {
    u32 rk[L][2][2][MmaFmt<FMT>::NR];
    i64 kb;
};

// Folds the pending k-block, if any, once its MMAs are done.
template <int FMT, int CBT, int P, int NTW, int L>
TS_DEV void wg_fold_pending(const GArgs& a, int lane0, int nt0, WgPending<FMT, L>& pend, const float (&c)[L][2][NTW][4],
                            float (&acc)[L][2][NTW][4]) {
    if (pend.kb < 0) return;  // uniform across the block
    wg_wait<0>();
    gemm_fold_kblock<FMT, CBT, P, NTW, L>(a, pend.kb, lane0, nt0, pend.rk, c, acc);
    pend.kb = -1;
}

// acc += the warp's 32 rows (two m16 tiles, each one quarter of a warpgroup m64 tile) x the
// block's 64 B columns over stage st, whose tiles are at xs in shared memory. Row-scaled
// formats accumulate straight into acc. Scaled ones multiply each k-block into c (its first
// MMA writes over c) and fold c with the k-block's scales into acc when the next k-block's
// first quad is decoded (or at the end, `wg_fold_pending`): the tensor cores cannot scale
// their accumulator, so a k-block's MMAs are waited for once, after the decode that
// overlaps them.
// DQ: the scaled formats decode with their k-block's scales (`inv`, the lane's rows' 2^-e)
// and accumulate in place like the row-scaled ones; c and pend are then unused.
template <int FMT, int CBT, int P, int NTW, int L, bool DQ>
TS_DEV void gemm_compute_wg(const GArgs& a, i64 st, int lane0, int nt0,
                            const u32 (&w)[L][2][2][GemmShape<FMT, CBT>::U][GemmShape<FMT, CBT>::NW],
                            const u32 (&r)[L][2][2][GemmShape<FMT, CBT>::U][MmaFmt<FMT>::NR], const u8* xs,
                            const float (&inv)[L][2][2], float (&acc)[L][2][NTW][4], float (&c)[L][2][NTW][4],
                            WgPending<FMT, L>& pend) {
    typedef MmaFmt<FMT> F;
    typedef GemmShape<FMT, CBT> G;
    enum { SCALED = !F::ROW_SCALE && !DQ };
    static_assert(!DQ || (!F::ROW_SCALE && FMT != TS_FMT_HFQ4), "dequantized decoding: scaled formats but hfq4");
    static_assert(NTW == 8, "one m64n64k16 a k16 slice");
    static_assert(G::WPQ * F::MPW == 2, "two k16 slices a quad");
    float(&dst)[L][2][NTW][4] = SCALED ? c : acc;
    const i64 nkb = mma_kblocks<FMT, CBT>(a.m);
#pragma unroll
    for (int u = 0; u < G::U; ++u) {
        const i64 kb = st * G::U + u;
        if (kb >= nkb) break;  // uniform across the block
        DeqScales<FMT, L> ds{};
        if constexpr (DQ) gemm_deq_scales<FMT, CBT, L>(r, u, inv, ds);
#pragma unroll
        for (int q = 0; q < G::NQ; ++q) {
            // The group before the last is done: its A registers and its shared tiles are free.
            wg_wait<1>();
            u32 p[L][2][2][G::WPQ][F::PW];
            gemm_decode_quad<FMT, CBT, L, DQ>(w, u, q, p, ds);
            if constexpr (SCALED)
                if (q == 0) wg_fold_pending<FMT, CBT, P, NTW, L>(a, lane0, nt0, pend, c, acc);
            wg_fence();
#pragma unroll
            for (int k = 0; k < G::WPQ; ++k)
#pragma unroll
                for (int jj = 0; jj < F::MPW; ++jj) {
                    const u8* b = xs + ((u * G::NQ + q) * 2 + k * F::MPW + jj) * WG_SLICE;
                    const bool add = !SCALED || q > 0 || k > 0 || jj > 0;
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt) {
                        u32 fa[L][4];
#pragma unroll
                        for (int l = 0; l < L; ++l) gemm_frag_a<FMT, CBT, L>(p, l, mt, k, jj, fa[l]);
                        wg_mma_n64<L>(dst, mt, fa, b, G::TILE, add);
                    }
                }
            wg_commit();
        }
        if constexpr (SCALED) {
            gemm_kblock_scales<FMT, CBT, L>(r, u, pend.rk);
            pend.kb = kb;
        }
    }
}
#endif  // TS_WGMMA

// ---- the kernels ------------------------------------------------------------------------

#ifndef TS_HOST

#ifndef TS_GS
#define TS_GS 0
#endif

TS_DEV float warp_sum(float v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
        float o;
        asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(v), "r"(m));
        v += o;
    }
    return v;
}

#ifdef TS_FMT
template <int S>
__device__ __forceinline__ void gemv_body(const u8* __restrict__ w, const u8* __restrict__ sc, const float* __restrict__ x,
                                          float* __restrict__ y, i64 row_bytes, int O, int I, int x_stride, int sc_row) {
    enum { R = RowsPerWarp<S>::R };
    const int lane = threadIdx.x & 31;
    const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const i64 row0l = warp * R;
    if (row0l >= O) return;  // uniform across the warp
    const int row0 = (int)row0l;
    Args a;
    a.w = w;
    a.sc = sc;
    a.x = x;
    a.rb = row_bytes;
    a.O = O;
    a.I = I;
    a.xs = x_stride;
    a.sc_row = sc_row;
    float acc[R][S];
    row_partial<TS_FMT, TS_GS, S, R>(a, row0, lane, acc);
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int s = 0; s < S; ++s) {
            const float v = warp_sum(acc[r][s]);
            if (lane == 0 && row0 + r < O) y[(i64)s * O + row0 + r] = v;
        }
    }
}
#endif  // TS_FMT

#if defined(TS_GEMM)
// GEMM build (-DTS_GEMM=<P> -DTS_MMA=<CBT>): exports gemm_p<P>,
//   (const u8* w, const u8* sc, const u8* xg, const float* xa, float* y,
//    long long row_bytes, int O, int S, int x_stride, int sc_row, int nbt, int sp,
//    float* ws, unsigned* cnt)
// Grid: (ceil(O / (32 TS_GEMM_WARPS)), nbt / TS_GEMM_NT, splits); dynamic shared memory
// TS_GEMM_STAGES * TS_GEMM_NT * GemmShape::TILE bytes.
//
// Split-K (gridDim.z = splits > 1; the GEMV at S <= 16 runs this kernel with few n8 tiles,
// and a row block alone would leave most SMs idle): block z takes stages
// [z sps, (z + 1) sps) of the row, writes its partial outputs (1/p and row scale applied:
// the sum is linear) to ws [splits, S, O], and the last block of a (row block, column
// block) to finish, found by an atomic counter in cnt (zero before the launch; that block
// resets it), sums the splits in z order (deterministic) and writes y. So every output
// is written by one store, after all its partials, in one launch.
// TS_GEMM_WDEPTH: stages of weights a warp holds in registers (WDEPTH - 1 in flight while
// one is multiplied); TS_GEMM_MINB: the register cap (__launch_bounds__ minimum blocks).
#ifndef TS_FMT
#error "compile with -DTS_FMT=<format id>"
#endif
#ifndef TS_GEMM_WDEPTH
#define TS_GEMM_WDEPTH 2
#endif
#ifndef TS_GEMM_MINB
#define TS_GEMM_MINB 1
#endif
TS_DEV void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
TS_DEV void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// -DTS_DEQ (GemmPrecision::F16Dequant): dequantized decoding, and one more parameter after
// cnt, rexp: each row's 2^e (gemm_row_pow, written by the TS_GEMM_ROWPOW build).
#ifdef TS_DEQ
#define TS_GEMM_DQ true
#define TS_GEMM_REXP_PARAM , const float* __restrict__ rexp
#define TS_GEMM_REXP_ARG rexp
#else
#define TS_GEMM_DQ false
#define TS_GEMM_REXP_PARAM
#define TS_GEMM_REXP_ARG 0
#endif
#define TS_GEMM_KERNEL_(P_)                                                                                    \
    extern "C" __global__ void __launch_bounds__(32 * TS_GEMM_WARPS, TS_GEMM_MINB)                             \
        gemm_p##P_(const u8* __restrict__ w, const u8* __restrict__ sc, const u8* __restrict__ xg,             \
                   const float* __restrict__ xa, float* __restrict__ y, i64 row_bytes, int O, int S, int x_stride, \
                   int sc_row, int nbt, int sp, float* __restrict__ ws,                                         \
                   unsigned* __restrict__ cnt TS_GEMM_REXP_PARAM) {                                             \
        gemm_body<P_>(w, sc, xg, xa, y, row_bytes, O, S, x_stride, sc_row, nbt, sp, ws, cnt, TS_GEMM_REXP_ARG); \
    }
template <int P>
__device__ __forceinline__ void gemm_body(const u8* __restrict__ w, const u8* __restrict__ sc,
                                          const u8* __restrict__ xg, const float* __restrict__ xa,
                                          float* __restrict__ y, i64 row_bytes, int O, int S, int x_stride,
                                          int sc_row, int nbt, int sp, float* __restrict__ ws,
                                          unsigned* __restrict__ cnt, const float* __restrict__ rexp) {
    typedef GemmShape<TS_FMT, TS_MMA> G;
    typedef MmaFmt<TS_FMT> F;
    enum { NTW = TS_GEMM_NT, ST = TS_GEMM_STAGES, SB = NTW * G::TILE, WD = TS_GEMM_WDEPTH };
    constexpr bool DQ = TS_GEMM_DQ;
    static_assert(ST >= 2, "at least double buffering");
    static_assert(WD >= 1 && WD <= 6, "1 .. 6 weight stages");
    extern __shared__ __align__(16) u8 smem[];
    __shared__ unsigned last_block;
    GArgs a;
    a.m.w = w;
    a.m.sc = sc;
    a.m.xh = 0;
    a.m.xa = xa;
    a.m.rb = row_bytes;
    a.m.O = O;
    a.m.xs = x_stride;
    a.m.sc_row = sc_row;
    a.xg = xg;
    a.S = S;
    a.nbt = nbt;
    a.sp = sp;
    a.rexp = rexp;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int rb0 = blockIdx.x * (32 * TS_GEMM_WARPS);
    const int r0w = rb0 + 32 * warp;
    float inv[1][2][2];
    gemm_row_inverses<1>(a, r0w, lane, inv);
    const int nt0 = blockIdx.y * NTW;
    const bool active = r0w < O;  // uniform across the warp; idle warps still stage and sync
    const i64 nkb = mma_kblocks<TS_FMT, TS_MMA>(a.m);
    const i64 nst = (nkb + G::U - 1) / G::U;
    const int nz = (int)gridDim.z;
    const i64 sps = (nst + nz - 1) / nz;
    const i64 st0 = (i64)blockIdx.z * sps;
    const i64 st1 = st0 + sps < nst ? st0 + sps : nst;
#ifdef TS_WGMMA
    // A stage's tiles are rewritten two stages after its last MMA was issued (one group
    // of MMAs may still read the previous stage), so one stage fewer is in flight.
    enum { AHEAD = ST - 2 };
#else
    enum { AHEAD = ST - 1 };
#endif
    static_assert(AHEAD >= 1, "at least one activation stage in flight");
#pragma unroll
    for (int k = 0; k < AHEAD; ++k) {
        if (st0 + k < st1) gemm_stage_x<TS_FMT, TS_MMA, NTW>(a, st0 + k, nt0, smem + ((st0 + k) % ST) * SB, tid, blockDim.x);
        cp_commit();
    }
    float acc[1][2][NTW][4];
#ifdef TS_WGMMA
    // Scaled formats: a k-block's products, and the k-block they wait to be folded for.
    float c[1][2][NTW][4];
    WgPending<TS_FMT, 1> pend;
    pend.kb = -1;
#endif
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int j = 0; j < NTW; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                acc[0][mt][j][e] = 0.0f;
#ifdef TS_WGMMA
                c[0][mt][j][e] = 0.0f;
#endif
            }
    // A ring of WD weight stages: while stage st is multiplied, st + 1 .. st + WD - 1 are
    // in flight; its registers are refilled WD stages ahead right after.
    u32 wv[WD][1][2][2][G::U][G::NW];
    u32 sv[WD][1][2][2][G::U][F::NR];
#pragma unroll
    for (int d = 0; d < WD; ++d) gemm_load_w<TS_FMT, TS_GS, TS_MMA, 1>(a, r0w, st0 + d, lane, wv[d], sv[d], st1);
    for (i64 sb = st0; sb < st1; sb += WD) {
#pragma unroll
        for (int d = 0; d < WD; ++d) {
            const i64 st = sb + d;
            if (st >= st1) break;  // uniform across the block
            // Stage st has landed (at most AHEAD - 1 newer groups pending), and every warp is
            // done with the stage whose buffer the next copy overwrites (st - 1; with the
            // warpgroup MMA st - 2, whose MMAs the last wg_wait<1> saw finish).
            cp_wait<AHEAD - 1>();
#ifdef TS_WGMMA
            proxy_fence();
#endif
            __syncthreads();
            const i64 nx = st + AHEAD;
            if (nx < st1) gemm_stage_x<TS_FMT, TS_MMA, NTW>(a, nx, nt0, smem + (nx % ST) * SB, tid, blockDim.x);
            cp_commit();
#ifdef TS_WGMMA
            // Every warp of a warpgroup takes part (rows past O are zeros); only the store
            // is guarded.
            gemm_compute_wg<TS_FMT, TS_MMA, P, NTW, 1, DQ>(a, st, lane, nt0, wv[d], sv[d], smem + (st % ST) * SB, inv,
                                                           acc, c, pend);
#else
            if (active)
                gemm_compute<TS_FMT, TS_GS, TS_MMA, P, NTW, 1, DQ>(a, r0w, st, lane, wv[d], sv[d], smem + (st % ST) * SB,
                                                                  nt0, inv, acc);
#endif
            gemm_load_w<TS_FMT, TS_GS, TS_MMA, 1>(a, r0w, st + WD, lane, wv[d], sv[d], st1);
        }
    }
#ifdef TS_WGMMA
    wg_wait<0>();
    if constexpr (!F::ROW_SCALE && !DQ) wg_fold_pending<TS_FMT, TS_MMA, P, NTW, 1>(a, lane, nt0, pend, c, acc);
#endif
    if (nz == 1) {
        if (active) gemm_store<TS_FMT, P, NTW, 1, DQ>(a, r0w, nt0, lane, acc, y);
        return;
    }
    if (active) gemm_store<TS_FMT, P, NTW, 1, DQ>(a, r0w, nt0, lane, acc, ws + (i64)blockIdx.z * S * O);
    // Publish the partial, then count this block in; the last one reduces.
    __threadfence();
    __syncthreads();
    const unsigned ctr = blockIdx.y * gridDim.x + blockIdx.x;
    if (tid == 0) last_block = atomicAdd(cnt + ctr, 1u) == (unsigned)(nz - 1) ? 1u : 0u;
    __syncthreads();
    if (last_block == 0u) return;
    __threadfence();
    // A thread a row, RU activations at a time: their RU loads of each split are in flight
    // together (one at a time, each waited for, this loop took 12% of the GEMM's stall
    // samples at two splits: ncu on an H100, session 20). Splits are still added in z order.
    enum { ROWS = 32 * TS_GEMM_WARPS, RU = 8 };
    const int s_lo = nt0 * 8 / P, s_hi = (nt0 + NTW) * 8 / P;
    const int s_end = s_hi < S ? s_hi : S;
    for (int r = tid; r < ROWS; r += blockDim.x) {
        const int row = rb0 + r;
        if (row >= O) continue;
        for (int s0 = s_lo; s0 < s_end; s0 += RU) {
            float v[RU];
#pragma unroll
            for (int u = 0; u < RU; ++u) v[u] = 0.0f;
            for (int z = 0; z < nz; ++z) {
                const float* wz = ws + ((i64)z * S + s0) * O + row;
#pragma unroll
                for (int u = 0; u < RU; ++u)
                    if (s0 + u < s_end && !TS_SPLIT_SKIP(z)) v[u] += __ldcg(wz + (i64)u * O);
            }
#pragma unroll
            for (int u = 0; u < RU; ++u)
                if (s0 + u < s_end) y[(i64)(s0 + u) * O + row] = v[u];
        }
    }
    if (tid == 0) cnt[ctr] = 0u;  // ready for the next launch
}
#define TS_GEMM_KERNEL(P_) TS_GEMM_KERNEL_(P_)
TS_GEMM_KERNEL(TS_GEMM)

#elif defined(TS_GEMM_ROWPOW)
// The dequantized GEMM's row powers (-DTS_GEMM_ROWPOW -DTS_FMT -DTS_GS -DTS_MMA):
// gemm_row_pow_k (const u8* w, const u8* sc, float* rexp, long long row_bytes, int O,
// int sc_row), a thread a row, run once per tensor before its first TS_DEQ GEMM.
extern "C" __global__ void gemm_row_pow_k(const u8* __restrict__ w, const u8* __restrict__ sc,
                                          float* __restrict__ rexp, i64 row_bytes, int O, int sc_row) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= O) return;
    MArgs m;
    m.w = w;
    m.sc = sc;
    m.xh = 0;
    m.xa = 0;
    m.rb = row_bytes;
    m.O = O;
    m.xs = 0;
    m.sc_row = sc_row;
    rexp[row] = gemm_row_pow<TS_FMT, TS_GS, TS_MMA>(m, row);
}

#elif defined(TS_PREP)
// Activation builds (-DTS_PREP -DTS_MMA=<CBT> -DTS_PREP_NIB=<0|1>), for activations already
// on the device ([S, xs] f32, zero past I, in the stored domain).
//
// Without -DTS_PREP_ROWS: tile_prep (const float* x, unsigned short* xg, float* xa, int S,
// int xs, int nbt, int sp) writes the split-K tile GEMV's layout, the device twin of
// layout.rs `gemm_activations` with two parts: per row s one p = 2^(14 - e) with max |x| in
// [2^e, 2^(e+1)) (split.cuh's rule over the whole row), x_hi = f16(x p), x_lo = f16(x p -
// x_hi), both round-to-nearest of values exact in f32, so the halves are the host's; xa =
// [sp] 1/p, then [sp, xs / 128] sums of x p (summed in f32 here, in f64 on the host). Rows s
// in [S, sp) are padding: zero halves, 1/p = 1, zero sums. Grid: (ceil(xs / TS_PREP_COLS),
// sp) blocks of 256 threads, block (c, s) splitting columns c TS_PREP_COLS .. of row s.
//
// With -DTS_PREP_ROWS: the 16-row tensor-core GEMV's layout (layout.rs `split_activations`,
// split.cuh, the row's p in every segment's slot, for the GEMV built without TS_SEG_P):
// tile_prep with the same parameters (sp = S, nbt unused), and norm_prep, the engine's
// RMSNorm computed inside the split (below).
#ifndef TS_PREP_NIB
#error "compile with -DTS_PREP_NIB=<0|1>"
#endif
// Columns one tile_prep block splits (8 a thread): grid (ceil(xs / TS_PREP_COLS), sp).
#define TS_PREP_COLS 2048

// The max of m over the block (every thread gets it); `red` holds one float a warp.
TS_DEV float block_max_prep(float m, float* red) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, warps = blockDim.x >> 5;
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, k));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    float mm = 0.0f;
    for (int k = 0; k < warps; ++k) mm = fmaxf(mm, red[k]);
    return mm;
}

#ifndef TS_PREP_ROWS
// Offset (in halves) of B column n, column i: layout.rs GemmLayout::offset.
TS_DEV i64 tile_offset(int n, i64 i, int nbt) {
    enum { CPB = TS_PREP_NIB ? 2 : 1, SC = 64 * CPB, LANE_COLS = TS_MMA * CPB, KBC = 4 * LANE_COLS, NQ = LANE_COLS / 8 };
    const i64 st = i / SC;
    const int ii = (int)(i % SC);
    const int kb = ii / KBC, c = ii % KBC;
    const int t = c / LANE_COLS, cw = c % LANE_COLS;
    const int q = cw / 8, e = cw % 8;
    const int pos = TS_PREP_NIB ? 2 * (e % 4) + e / 4 : e;
    const int nt = n / 8, g = n % 8;
    return (st * nbt + nt) * (i64)(SC * 8) + (((kb * NQ + q) * 8 + g) * 4 + t) * 8 + pos;
}

// Thread 0 of the block derives p and 1/p from the row's max |x| (split.cuh `ts_split_p`)
// into pp[0], pp[1], and block 0 of the row stores 1/p at xa[s]. `red` holds the block's
// warp maxima.
TS_DEV void prep_scale(float m, float* red, float* pp, float* __restrict__ xa, int s) {
    const float mm = block_max_prep(m, red);
    if (threadIdx.x == 0) {
        ts_split_p(mm, pp[0], pp[1]);
        if (blockIdx.x == 0) xa[s] = pp[1];
    }
    __syncthreads();
}

// Stores one thread's 8 columns i0 .. i0 + 7 of row s (`v`: x p, zeros past the row or on
// padding rows) as halves in the tile layout, and the sums of x p over 128-column segments
// (16 threads' columns, half a warp). Every thread of the block calls it (the sums shuffle
// over the whole warp); `in`: the columns exist (i0 < xs).
TS_DEV void prep_store(const float (&v)[8], bool in, int s, i64 i0, unsigned short* __restrict__ xg,
                       float* __restrict__ xa, int xs, int nbt, int sp) {
    const int lane = threadIdx.x & 31;
    if (in) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const u32 hi = ts_f16_rn(v[e]), lo = ts_f16_rn(v[e] - ts_f16_f32(hi));
            xg[tile_offset(2 * s, i0 + e, nbt)] = (unsigned short)hi;
            xg[tile_offset(2 * s + 1, i0 + e, nbt)] = (unsigned short)lo;
        }
    }
    float t = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
#pragma unroll
    for (int k = 8; k > 0; k >>= 1) t += __shfl_xor_sync(0xffffffffu, t, k);
    if (in && (lane & 15) == 0) xa[sp + (i64)s * (xs / TS_SUM_SEG) + i0 / TS_SUM_SEG] = t;
}
#endif  // !TS_PREP_ROWS

extern "C" __global__ void __launch_bounds__(256) tile_prep(const float* __restrict__ x, unsigned short* __restrict__ xg,
                                                           float* __restrict__ xa, int S, int xs, int nbt, int sp) {
    // Programmatic dependent launch (-DTS_PDL): the GEMV after this split may launch now and
    // load its weights; x and the split buffers are touched only after the previous kernel.
    pdl_launch();
    pdl_wait();
    const int s = blockIdx.y, tid = threadIdx.x;
    const bool real = s < S;
    const float* row = x + (i64)s * xs;
    // This thread's 8 columns (an aligned nibble-order group).
    const i64 i0 = (i64)blockIdx.x * TS_PREP_COLS + 8 * tid;
    const bool in = i0 < xs;
    // Every block of row s finds the same max over the whole row (x is a few KB and sits in
    // L2), so all of them derive the same p without a grid-wide step. xs is a multiple of
    // 1024, so float4 loads never run past the row.
    __shared__ float red[8];
    float m = 0.0f;
    if (real) {
#pragma unroll 4
        for (int i = 4 * tid; i < xs; i += 1024) {
            const F4 v = load_x4(row, i);
            m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
        }
    }
#ifdef TS_PREP_ROWS
    (void)nbt;
    (void)sp;
    m = block_max_prep(m, red);
    float v[8];
    if (real && in) {
        const F4 a = load_x4(row, i0), b = load_x4(row, i0 + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = 0.0f;
    }
    ts_seg_split(v, in && real, s, S, i0, xg, xa, xs, TS_PREP_NIB != 0, m);
#else
    __shared__ float pp[2];
    prep_scale(m, red, pp, xa, s);
    const float p = pp[0];
    float v[8];
    if (real && in) {
        const F4 a = load_x4(row, i0), b = load_x4(row, i0 + 4);
        v[0] = a.x * p, v[1] = a.y * p, v[2] = a.z * p, v[3] = a.w * p;
        v[4] = b.x * p, v[5] = b.y * p, v[6] = b.z * p, v[7] = b.w * p;
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = 0.0f;
    }
    prep_store(v, in, s, i0, xg, xa, xs, nbt, sp);
#endif
}

#ifdef TS_PREP_ROWS
// Threads of a norm_prep block, 8 columns each: grid ceil(xs / (8 x this)). Small blocks
// won on the H200 (session 8, docs/ENGINE.md): 128 against 256 in front of the same GEMVs,
// 256 against 512 and 1024 over the whole decode step.
#define TS_PREP_FUSED_THREADS 128
// Columns a fused-split thread loads at once in its whole-row pass.
#define TS_PREP_SLOTS 16

// The engine's RMSNorm fused into the split (S = 1: row 0 of the 16-row layout). Grid:
// ceil(xs / (8 blockDim.x)) blocks (blockDim.x = TS_PREP_FUSED_THREADS), block c splitting
// columns c 8 blockDim.x .. Every block first reads the whole row (a few tens of KB from
// L2, TS_PREP_SLOTS loads a thread in flight) for its sum of squares and its max, so all of
// them derive the same norm and p without a grid-wide step.
//
// norm_prep: x = w v / sqrt(mean(v^2) + eps) over n columns (0 for n <= i < xs) with
// v = src + d, or v = src where d is null (decode_ops.cu add_rmsnorm's arithmetic, summed
// in another order). Where d is not null each block also stores v into dst for its own
// columns: the residual stream moves to dst, which must alias neither src nor d (every
// block reads all of them).
extern "C" __global__ void __launch_bounds__(TS_PREP_FUSED_THREADS)
    norm_prep(const float* __restrict__ src, const float* __restrict__ d, const float* __restrict__ w,
              float* __restrict__ dst, int n, float eps, unsigned short* __restrict__ xg,
              float* __restrict__ xa, int xs, int nbt) {
    __shared__ float red[32];
    __shared__ float red2[32];
    (void)nbt;
    pdl_launch();
    pdl_wait();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, warps = blockDim.x >> 5;
    float ss = 0.0f, mw = 0.0f;
    // TS_PREP_SLOTS columns a thread a round, all loaded before any is used: the row is a
    // round or two, each one trip to L2 (a loop that used each load before issuing the
    // next would wait out the latency once a column).
    for (int base = 0; base < n; base += TS_PREP_SLOTS * (int)blockDim.x) {
        float a[TS_PREP_SLOTS], b[TS_PREP_SLOTS], c[TS_PREP_SLOTS];
#pragma unroll
        for (int k = 0; k < TS_PREP_SLOTS; ++k) {
            const int i = base + k * (int)blockDim.x + tid;
            const bool ok = i < n;
            a[k] = ok ? src[i] : 0.0f;
            b[k] = ok && d != nullptr ? d[i] : 0.0f;
            c[k] = ok ? w[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < TS_PREP_SLOTS; ++k) {
            const float v = d != nullptr ? a[k] + b[k] : a[k];
            ss += v * v;
            mw = fmaxf(mw, fabsf(c[k] * v));
        }
    }
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, k);
    if (lane == 0) red2[warp] = ss;
    __syncthreads();
    float total = 0.0f;
    for (int k = 0; k < warps; ++k) total += red2[k];
    const float r = 1.0f / sqrtf(total / (float)n + eps);
    // max |w v r| = r max |w v| up to rounding, which can move p by a factor of 2 at most:
    // the split is exact either way.
    const float m = block_max_prep(mw, red) * r;
    const i64 i0 = (i64)blockIdx.x * (8 * blockDim.x) + 8 * tid;
    const bool in = i0 < xs;
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        const i64 i = i0 + e;
        float o = 0.0f;
        if (i < n) {
            const float x = d != nullptr ? src[i] + d[i] : src[i];
            if (d != nullptr) dst[i] = x;
            o = w[i] * (x * r);
        }
        v[e] = o;
    }
    ts_seg_split(v, in, 0, 1, i0, xg, xa, xs, TS_PREP_NIB != 0, m);
}
#endif  // TS_PREP_ROWS

#elif defined(TS_MOE)
// MoE grouped GEMV build (-DTS_MOE=<pairs per work item> -DTS_MOE_LIST=<variants>):
// exports moe_gemv,
//   (const unsigned long long* desc, const int* items, const float* x, float* y,
//    int O, int I, int x_stride)
// desc: per expert 4 words: weights address, scales address, row bytes,
//   (variant << 32) | sc_row. items: per work item 8 ints: expert, then TS_MOE pair indices
//   (-1: none). x: [items, TS_MOE, x_stride], each pair's activation already in its expert's
//   stored domain, zero rows for missing pairs. y: [pairs, O].
// TS_MOE_LIST is a sequence of TS_MOE_CASE(variant, format id, group size): the (format,
// group) kernels the experts of this call need, so one launch serves mixed formats. Grid:
// (row blocks of grid_blocks(O, TS_MOE), items); a block's warps each own R rows of its item.
#define TS_MOE_CASE(V_, F_, G_) \
    case V_:                    \
        row_partial<F_, G_, S, R>(a, row0, lane, acc); \
        break;
extern "C" __global__ void __launch_bounds__(128) moe_gemv(const unsigned long long* __restrict__ desc,
                                                          const int* __restrict__ items, const float* __restrict__ x,
                                                          float* __restrict__ y, int O, int I, int x_stride) {
    enum { S = TS_MOE, R = RowsPerWarp<TS_MOE>::R };
    static_assert(TS_MOE <= 7, "an item holds at most 7 pairs");
    const int* it = items + 8 * (i64)blockIdx.y;
    const unsigned long long* d = desc + 4 * (i64)it[0];
    const int lane = threadIdx.x & 31;
    const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const i64 row0l = warp * R;
    if (row0l >= O) return;  // uniform across the warp
    const int row0 = (int)row0l;
    Args a;
    a.w = reinterpret_cast<const u8*>(d[0]);
    a.sc = reinterpret_cast<const u8*>(d[1]);
    a.x = x + (i64)blockIdx.y * S * x_stride;
    a.rb = (i64)d[2];
    a.O = O;
    a.I = I;
    a.xs = x_stride;
    a.sc_row = (int)(d[3] & 0xFFFFFFFFull);
    float acc[R][S];
    switch ((int)(d[3] >> 32)) {  // uniform across the grid block
        TS_MOE_LIST
        default:
            return;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int s = 0; s < S; ++s) {
            const float v = warp_sum(acc[r][s]);
            const int p = it[1 + s];
            if (lane == 0 && p >= 0 && row0 + r < O) y[(i64)p * O + row0 + r] = v;
        }
    }
}

#else
#ifndef TS_FMT
#error "compile with -DTS_FMT=<format id>"
#endif
#ifndef TS_S
#error "compile with -DTS_S=<batch, 1..16>"
#endif

#ifdef TS_MMA
// Tensor-core build (-DTS_MMA=<CBT>): exports gemv_mma_s<S>,
//   (const u8* w, const u8* sc, const u8* xh, const float* xa, float* y,
//    long long row_bytes, int O, int x_stride, int sc_row)
// with xh / xa the split activations (see MArgs). A block of TS_MMA_WARPS warps owns 16
// rows.
// Blocks an SM must hold at once (the register cap: 65536 / (32 TS_MMA_WARPS x this)): 3
// keeps a 6144-row GEMV (384 blocks) in one wave on 132 SMs at small S (<= 85 registers);
// larger S needs the registers more than the residency (3 spills there and ran 1.2-2x
// slower). -DTS_MMA_MIN_BLOCKS overrides it.
#ifndef TS_MMA_MIN_BLOCKS
#define TS_MMA_MIN_BLOCKS (TS_S <= 4 ? 3 : 2)
#endif
//
// Persistent (-DTS_MMA_PERSIST, `Tuning::mma_persistent`, S <= 4): two more parameters
// (float* ws, unsigned* cnt);
// gridDim.x = G blocks (at most the device's resident blocks) walk equal shares of the
// launch's (tile, round) units (`persist_lo`), each warp's weight ring kept full across
// tile boundaries (`mma_walk`); a tile split between blocks goes through ws [parts, S, O]
// and the per-tile counter in cnt (zero before the launch, reset by the tile's last block),
// summed by its last block in part order.
#ifdef TS_MMA_PERSIST
#define TS_MMA_SPLIT_PARAMS , float *__restrict__ ws, unsigned *__restrict__ cnt
#define TS_MMA_SPLIT_ARGS , ws, cnt
#else
#define TS_MMA_SPLIT_PARAMS
#define TS_MMA_SPLIT_ARGS
#endif
#define TS_MMA_KERNEL_(S_)                                                                                       \
    extern "C" __global__ void __launch_bounds__(32 * TS_MMA_WARPS, TS_MMA_MIN_BLOCKS) gemv_mma_s##S_(          \
        const u8* __restrict__ w, const u8* __restrict__ sc, const u8* __restrict__ xh,                         \
        const float* __restrict__ xa, float* __restrict__ y, i64 row_bytes, int O, int x_stride,                 \
        int sc_row TS_MMA_SPLIT_PARAMS) {                                                                        \
        gemv_mma_body<S_>(w, sc, xh, xa, y, row_bytes, O, x_stride, sc_row TS_MMA_SPLIT_ARGS);                  \
    }
template <int S>
__device__ __forceinline__ void gemv_mma_body(const u8* __restrict__ w, const u8* __restrict__ sc,
                                              const u8* __restrict__ xh, const float* __restrict__ xa,
                                              float* __restrict__ y, i64 row_bytes, int O, int x_stride,
                                              int sc_row TS_MMA_SPLIT_PARAMS) {
    enum { NT = MmaShape<S>::NT };
#ifndef TS_MMA_PERSIST
    __shared__ float red[TS_MMA_WARPS][NT][4][32];
#endif
    MArgs a;
    a.w = w;
    a.sc = sc;
    a.xh = xh;
    a.xa = xa;
    a.rb = row_bytes;
    a.O = O;
    a.xs = x_stride;
    a.sc_row = sc_row;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = blockIdx.x * 16;
    enum { NCLS = MmaClasses<TS_FMT, TS_GS, TS_MMA>::N };
    pdl_launch();
    float acc[1][NT][4];
#ifdef TS_MMA_PERSIST
    static_assert(S <= 4, "the persistent schedule serves S <= 4");
    (void)r0;
    // Two reduction buffers: warp 0 may still read one tile's partials while the other warps
    // already store the next tile's (one barrier a tile).
    __shared__ float red2[2][TS_MMA_WARPS][NT][4][32];
    const int g = (int)gridDim.x, b = (int)blockIdx.x;
    const int rs = persist_rounds(mma_kblocks<TS_FMT, TS_MMA>(a), TS_MMA_WARPS, TS_MMA_STAGE / TS_MMA);
    const i64 n = (i64)((O + 15) / 16) * rs;
    const MmaWalk wk = persist_share(b, g, (O + 15) / 16, rs);
    int par = 0;
    auto tile_end = [&](int tile, float (&ac)[1][NT][4]) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int q = 0; q < 4; ++q) red2[par][warp][nt][q][lane] = ac[0][nt][q];
        __syncthreads();
        if (warp == 0) {
            float tot[1][NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    float v = 0.0f;
#pragma unroll
                    for (int k = 0; k < TS_MMA_WARPS; ++k) v += red2[par][k][nt][q][lane];
                    tot[0][nt][q] = v;
                }
            mma_class_sum<S, NCLS, 1>(tot);
            const i64 t0 = (i64)tile * rs, t1 = t0 + rs;
            const int r0t = 16 * tile;
            if (t0 >= wk.ulo && t1 <= wk.uhi) {
                mma_store<TS_FMT, S, NCLS>(a, r0t, lane, tot[0], y);
            } else {
                const int f = persist_block_of(t0, g, n), np = persist_block_of(t1 - 1, g, n) - f + 1;
                mma_store<TS_FMT, S, NCLS>(a, r0t, lane, tot[0], ws + (i64)(b - f) * S * O);
                __threadfence();
                __syncwarp();
                unsigned last = 0;
                if (lane == 0) last = atomicAdd(cnt + tile, 1u) == (unsigned)(np - 1) ? 1u : 0u;
                last = __shfl_sync(0xffffffffu, last, 0);
                if (last != 0u) {
                    __threadfence();
                    for (int k = lane; k < 16 * S; k += 32) {
                        const int row = r0t + (k & 15), s = k >> 4;
                        if (row >= O) continue;
                        float v = 0.0f;
                        for (int pp = 0; pp < np; ++pp) v += __ldcg(ws + ((i64)pp * S + s) * O + row);
                        y[(i64)s * O + row] = v;
                    }
                    if (lane == 0) cnt[tile] = 0u;  // ready for the next launch
                }
            }
        }
        par ^= 1;
    };
    mma_walk<TS_FMT, TS_GS, S, TS_MMA, 1>(a, wk, warp, TS_MMA_WARPS, lane, acc, tile_end);
#else
    mma_warp<TS_FMT, TS_GS, S, TS_MMA, 1>(a, r0, warp, TS_MMA_WARPS, lane, acc);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int q = 0; q < 4; ++q) red[warp][nt][q][lane] = acc[0][nt][q];
    __syncthreads();
    if (warp == 0) {
        float tot[1][NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                float v = 0.0f;
#pragma unroll
                for (int k = 0; k < TS_MMA_WARPS; ++k) v += red[k][nt][q][lane];
                tot[0][nt][q] = v;
            }
        mma_class_sum<S, NCLS, 1>(tot);
        pdl_wait();  // y may be read or written by the previous kernel
        mma_store<TS_FMT, S, NCLS>(a, r0, lane, tot[0], y);
    }
#endif  // TS_MMA_PERSIST
}
#define TS_MMA_KERNEL(S_) TS_MMA_KERNEL_(S_)
TS_MMA_KERNEL(TS_S)
#else

// One module per (format, S): only the kernel a launch needs is compiled.
#define TS_KERNEL_(S_)                                                                                         \
    extern "C" __global__ void __launch_bounds__(128) gemv_s##S_(                                              \
        const u8* __restrict__ w, const u8* __restrict__ sc, const float* __restrict__ x, float* __restrict__ y, \
        i64 row_bytes, int O, int I, int x_stride, int sc_row) {                                               \
        gemv_body<S_>(w, sc, x, y, row_bytes, O, I, x_stride, sc_row);                                         \
    }
#define TS_KERNEL(S_) TS_KERNEL_(S_)
TS_KERNEL(TS_S)
#endif  // TS_MMA
#endif  // TS_GEMM / TS_MOE / GEMV

#endif  // !TS_HOST

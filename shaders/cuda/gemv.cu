// tessera CUDA tier: GEMV y[S, O] = x[S, I] . W^T for every registry format, S = 1..16.
//
// Compiled by NVRTC at run time (crates/kernels-cuda/src/compile.rs), one module per format and S:
//   -DTS_FMT=<format id below> [-DTS_GS=<group size>] [-DTS_MUTATE_...]
//   -DTS_S=<S>
// The module exports gemv_s<S> (gemv_s1 .. gemv_s16), all with the same parameters:
//   (const u8* w, const u8* sc, const float* x, float* y,
//    long long row_bytes, int O, int I, int x_stride, int sc_row)
// - w, sc: the container's own weight and sidecar-scale bytes, exactly as stored;
// - x: [S, x_stride] f32, zero-padded past I (x_stride is a multiple of 1024), already in
//   the format's stored domain (rotated formats: the host rotated it);
// - y: [S, O] f32;
// - row_bytes: the registry's bytes of one stored row; sc_row: stored scales of one row
//   (grouped formats) or of one 128-row tile band (fp8).
//
// Shape of every kernel: one warp owns R consecutive rows (R from S, see rows_per_warp),
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

struct alignas(16) U4 {
    u32 x, y, z, w;
};
struct alignas(8) U2 {
    u32 x, y;
};
struct alignas(16) F4 {
    float x, y, z, w;
};

TS_DEV float as_f(u32 u) {
    union {
        u32 u;
        float f;
    } c;
    c.u = u;
    return c.f;
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
#pragma unroll 2
    for (i64 c = lane; c < nch; c += 32) {
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
#pragma unroll 2
    for (int b = half; b < nb; b += 2) {
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
#pragma unroll 2
    for (int b = half; b < nb; b += 2) {
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

// ---- the kernels ------------------------------------------------------------------------

#ifndef TS_HOST

#ifndef TS_FMT
#error "compile with -DTS_FMT=<format id>"
#endif
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

#ifndef TS_S
#error "compile with -DTS_S=<batch, 1..16>"
#endif

// One module per (format, S): only the kernel a launch needs is compiled.
#define TS_KERNEL_(S_)                                                                                         \
    extern "C" __global__ void __launch_bounds__(128) gemv_s##S_(                                              \
        const u8* __restrict__ w, const u8* __restrict__ sc, const float* __restrict__ x, float* __restrict__ y, \
        i64 row_bytes, int O, int I, int x_stride, int sc_row) {                                               \
        gemv_body<S_>(w, sc, x, y, row_bytes, O, I, x_stride, sc_row);                                         \
    }
#define TS_KERNEL(S_) TS_KERNEL_(S_)
TS_KERNEL(TS_S)

#endif  // !TS_HOST

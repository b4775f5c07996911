// split.cuh: the activation split of the 16-row tensor-core GEMV, one 128-column segment at
// a time (crates/kernels-cuda/src/layout.rs `split_activations` is its host twin and
// documents the layout). NVRTC builds prepend this text to gemv.cu (tile_prep, norm_prep)
// and to decode_ops.cu (attention and SwiGLU write the split of the GEMV after them), so
// the rule lives once. Device code only; no headers.
//
// Per segment of TS_SPLIT_SEG columns of activation s: p = 2^(14 - e) with max |x| in
// [2^e, 2^(e+1)) (clamped to 2^-100 .. 2^100; 1 for an all-zero or non-finite max), the max
// of the segment (a producer that sees only its own segments: the GEMV after it is built
// with TS_SEG_P) or of the whole row (every segment then carries the row's p), x_hi =
// f16(x p), x_lo = f16(x p - x_hi) (round to nearest, both of values exact in f32).
// Halves [2S, xs]: row 2s x_hi, row 2s + 1 x_lo, 4-bit formats (nib) in the order
// 0, 4, 1, 5, 2, 6, 3, 7 of each 8 columns (the pairs gemv.cu `mma_decode` makes of a word).
// xa: [S, xs / TS_SPLIT_SEG] 1/p, then the same shape of sums of x p over the segment (the
// affine formats' zero term).

#define TS_SPLIT_SEG 128

// p and 1/p of a segment whose max |x| is mm; e from mm's exponent bits (a subnormal reads
// e = -127, which the clamp maps to the same 2^100 as its true exponent).
__device__ __forceinline__ void ts_split_p(float mm, float& p, float& inv) {
    p = 1.0f;
    inv = 1.0f;
    if (mm > 0.0f && mm <= 3.40282347e38f) {
        int k = 14 - ((int)((__float_as_uint(mm) >> 23) & 0xFFu) - 127);
        k = k < -100 ? -100 : (k > 100 ? 100 : k);
        p = __uint_as_float((unsigned)(127 + k) << 23);
        inv = __uint_as_float((unsigned)(127 - k) << 23);
    }
}

__device__ __forceinline__ unsigned ts_f16_rn(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return (unsigned)h;
}

__device__ __forceinline__ float ts_f16_f32(unsigned h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
}

// Splits one thread's 8 columns i0 .. i0 + 7 (i0 a multiple of 8) of activation s of S,
// values x (zeros past the activation's length), where `in` (i0 < xs), with the p of
// `row_max` (the row's max |x|), or where row_max < 0 of the segment's own max. The 16
// lanes of each half-warp must hold the 128 columns of one segment, lane 16 h + j columns
// 8 j .. 8 j + 7 of it: they find the segment's max and sum by shuffles, so every lane of
// the warp calls this (lanes that hold no columns with `in` false). Lane 0 of the
// half-warp stores the segment's 1/p and sum.
__device__ __forceinline__ void ts_seg_split(const float (&x)[8], bool in, int s, int S, long long i0,
                                             unsigned short* __restrict__ xg, float* __restrict__ xa, int xs,
                                             bool nib, float row_max) {
    float m = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) m = fmaxf(m, fabsf(x[e]));
#pragma unroll
    for (int k = 8; k > 0; k >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, k));
    float p, inv;
    ts_split_p(row_max >= 0.0f ? row_max : m, p, inv);
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = x[e] * p;  // exact: p is a power of two in range
    float t = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
#pragma unroll
    for (int k = 8; k > 0; k >>= 1) t += __shfl_xor_sync(0xffffffffu, t, k);
    if (!in) return;
    unsigned hi[8], lo[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        hi[e] = ts_f16_rn(v[e]);
        lo[e] = ts_f16_rn(v[e] - ts_f16_f32(hi[e]));
    }
    uint4 h, l;
    if (nib) {
        h = make_uint4(hi[0] | (hi[4] << 16), hi[1] | (hi[5] << 16), hi[2] | (hi[6] << 16), hi[3] | (hi[7] << 16));
        l = make_uint4(lo[0] | (lo[4] << 16), lo[1] | (lo[5] << 16), lo[2] | (lo[6] << 16), lo[3] | (lo[7] << 16));
    } else {
        h = make_uint4(hi[0] | (hi[1] << 16), hi[2] | (hi[3] << 16), hi[4] | (hi[5] << 16), hi[6] | (hi[7] << 16));
        l = make_uint4(lo[0] | (lo[1] << 16), lo[2] | (lo[3] << 16), lo[4] | (lo[5] << 16), lo[6] | (lo[7] << 16));
    }
    *reinterpret_cast<uint4*>(xg + (long long)(2 * s) * xs + i0) = h;
    *reinterpret_cast<uint4*>(xg + (long long)(2 * s + 1) * xs + i0) = l;
    if ((threadIdx.x & 15) == 0) {
        const long long segs = xs / TS_SPLIT_SEG, seg = i0 / TS_SPLIT_SEG;
        xa[(long long)s * segs + seg] = inv;
        xa[(long long)(S + s) * segs + seg] = t;
    }
}

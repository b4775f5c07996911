// decode_ops.cu: the non-GEMV operations of the engine's device-resident decode path
// (crates/kernels-cuda/src/resident.rs launches them; crates/engine/src/resident.rs chains
// them with the GEMVs on one stream). One token at a time (S = 1), f32 throughout, written
// to follow crates/engine/src/ops.rs and llama.rs step for step:
//   add_rmsnorm      x += d (optional); out = w * x / sqrt(mean(x^2) + eps), zero padding
//                    (where the GEMV after it allows, the engine runs gemv.cu's norm_prep
//                    inside the GEMV's activation split instead)
//   add_vec          y += b (biases)
//   attention_rope   per query head: optional RMSNorm of q and k (Qwen3 q_norm / k_norm)
//                    and RoPE (rotate_half pairs (i, i + R/2), R = 2 * len(inv_freq)),
//                    the rotated k and the new v written to the device KV cache, then one query token's
//                    GQA attention over the cache, softmax with max subtraction, output into
//                    the o_proj input (padding untouched)
//   attention_chunks the same with the positions in chunks of TS_ATT_CHUNK, a block each,
//                    combined by each head's last block (the engine's default); with a
//                    split buffer it also writes the o projection's split (split.cuh), so
//                    that GEMV needs no split launch of its own
//   swiglu           out = silu(g) * u
//   swiglu_split     the same, also writing the split of the GEMV after it (split.cuh)
//   argmax           first index of the largest logit
// Compiled by NVRTC (no headers; split.cuh's text is prepended). TS_MUTATE_DROP_ROPE (mutation tests only) skips the
// rotation, so the engine's GPU test can be shown to catch a broken kernel.
//
// Programmatic dependent launch (sm_90+): every kernel starts with TS_PDL_ENTER, which lets
// the stream's next kernel launch at once (launch_dependents) and then waits until the
// previous kernel has completed and its writes are visible (wait) before it touches
// memory. Launched with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
// (kernels-cuda resident.rs), a kernel thus starts while its predecessor runs; launched
// without it, or before sm_90, both are no-ops.

#define TS_BLOCK 1024
// Values an add_rmsnorm thread loads at once, and an argmax thread. (Session 8, H200: the
// step's other kernels, add_rmsnorm among them, took 447 us with 4 and 467 us with 8, the
// latter in a call that also ran TS_ATT_ROWS 8.)
#define TS_NORM_SLOTS 4
#define TS_ARGMAX_SLOTS 8
// The most warps an attention_rope block may have when it splits the positions (`split`).
#define TS_ATT_WARPS 8
// Positions a warp of attention_rope loads at once (scores and, split, the value sums); 8
// measured no faster on the H200 (session 8).
#define TS_ATT_ROWS 4
#define TS_NEG_INF __int_as_float(0xff800000)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TS_PDL_ENTER() asm volatile("griddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;" ::: "memory")
#else
#define TS_PDL_ENTER() ((void)0)
#endif

// Sum over the block; every thread gets the total. `red` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = 0.f;
    for (int k = 0; k < warps; ++k) t += red[k];
    return t;
}

__device__ __forceinline__ float block_max(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = red[0];
    for (int k = 1; k < warps; ++k) t = fmaxf(t, red[k]);
    return t;
}

// One block. x [n] (the residual stream) += d [n] when d is not null; out [stride]
// = w * x * r for i < n, 0 for n <= i < stride.
extern "C" __global__ void add_rmsnorm(float* __restrict__ x, const float* __restrict__ d,
                                       const float* __restrict__ w, float* __restrict__ out,
                                       int n, int stride, float eps) {
    TS_PDL_ENTER();
    __shared__ float red[32];
    float ss = 0.f;
    // TS_NORM_SLOTS columns a thread a round, all loaded before any is used (one trip to
    // memory a round; a loop that used each load first pays the latency once a column).
    for (int base = 0; base < n; base += TS_NORM_SLOTS * (int)blockDim.x) {
        float a[TS_NORM_SLOTS], b[TS_NORM_SLOTS];
#pragma unroll
        for (int k = 0; k < TS_NORM_SLOTS; ++k) {
            const int i = base + k * (int)blockDim.x + (int)threadIdx.x;
            a[k] = i < n ? x[i] : 0.f;
            b[k] = i < n && d != nullptr ? d[i] : 0.f;
        }
#pragma unroll
        for (int k = 0; k < TS_NORM_SLOTS; ++k) {
            const int i = base + k * (int)blockDim.x + (int)threadIdx.x;
            float v = a[k];
            if (d != nullptr && i < n) {
                v += b[k];
                x[i] = v;
            }
            ss += v * v;
        }
    }
    const float total = block_sum(ss, red);
    const float r = 1.0f / sqrtf(total / (float)n + eps);
    for (int i = threadIdx.x; i < stride; i += blockDim.x) {
        out[i] = i < n ? w[i] * (x[i] * r) : 0.f;
    }
}

// y [n] += b [n].
extern "C" __global__ void add_vec(float* __restrict__ y, const float* __restrict__ b, int n) {
    TS_PDL_ENTER();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += b[i];
}

// In place on one head in shared memory (all threads of the block call it): RMSNorm with
// `nw` ([hd]; null: none), then RoPE at `pos`, pairs (i, i + half) as ops.rs's apply_half.
__device__ void norm_rope_head(float* head, int hd, const float* __restrict__ nw, float eps,
                               const float* __restrict__ inv_freq, int half, float af, int pos,
                               float* red) {
    if (nw != nullptr) {
        float ss = 0.f;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) ss += head[i] * head[i];
        const float total = block_sum(ss, red);
        const float r = 1.0f / sqrtf(total / (float)hd + eps);
        for (int i = threadIdx.x; i < hd; i += blockDim.x) head[i] = nw[i] * (head[i] * r);
        __syncthreads();
    }
#ifndef TS_MUTATE_DROP_ROPE
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float ang = (float)pos * inv_freq[i];
        const float c = cosf(ang) * af, s = sinf(ang) * af;
        const float a = head[i], b = head[i + half];
        head[i] = a * c - b * s;
        head[i + half] = b * c + a * s;
    }
#endif
    __syncthreads();
}

// The head's start, shared by both attention kernels (all threads of the block call it):
// query head h and its group g's new k into shared memory, each normalised and rotated at
// `pos` (norm_rope_head).
__device__ void att_load_rotate(const float* __restrict__ q, const float* __restrict__ knew, float* qs,
                                float* ks, int h, int g, int hd, const float* __restrict__ qn,
                                const float* __restrict__ kn, float eps, const float* __restrict__ inv_freq,
                                int half, float af, int pos, float* red) {
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        qs[i] = q[(size_t)h * hd + i];
        ks[i] = knew[(size_t)g * hd + i];
    }
    __syncthreads();
    norm_rope_head(qs, hd, qn, eps, inv_freq, half, af, pos, red);
    norm_rope_head(ks, hd, kn, eps, inv_freq, half, af, pos, red);
}

// Row `pos` of the caches for group g: the rotated k and the new v (one block a group).
__device__ void att_append(float* __restrict__ kc, float* __restrict__ vc, const float* ks,
                           const float* __restrict__ vn, int pos, int kvw, int g, int hd) {
    float* krow = kc + (size_t)pos * kvw + (size_t)g * hd;
    float* vrow = vc + (size_t)pos * kvw + (size_t)g * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        krow[i] = ks[i];
        vrow[i] = vn[i];
    }
}

// acc[u] += q . k_u over dims i0 + lane + 32 t (t < 4, below hd), kv[u][t] holding those
// dims of row u.
__device__ __forceinline__ void att_dot_add(const float* qs, const float (&kv)[TS_ATT_ROWS][4], int i0, int hd,
                                            int lane, float (&acc)[TS_ATT_ROWS]) {
#pragma unroll
    for (int u = 0; u < TS_ATT_ROWS; ++u)
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const int i = i0 + lane + 32 * t;
            if (i < hd) acc[u] += qs[i] * kv[u][t];
        }
}

// Each acc[u] summed over the warp (every lane gets the totals).
__device__ __forceinline__ void att_warp_sum(float (&acc)[TS_ATT_ROWS]) {
#pragma unroll
    for (int u = 0; u < TS_ATT_ROWS; ++u)
        for (int o = 16; o > 0; o >>= 1) acc[u] += __shfl_xor_sync(0xffffffffu, acc[u], o);
}

// Scores of up to TS_ATT_ROWS positions for one warp: acc[u] = q . k_u over hd dims, the
// k rows at kp[u] (null: no position; acc[u] stays 0), summed over i = lane, lane + 32, ..
// in that order, then over the warp (every lane gets the totals). Each round loads 4 dims
// of every row before any is used, so one trip to memory serves 4 x TS_ATT_ROWS loads (a
// loop that used each load before issuing the next paid the latency once a dim and row).
__device__ __forceinline__ void att_scores(const float* qs, const float* (&kp)[TS_ATT_ROWS], int hd,
                                           int lane, float (&acc)[TS_ATT_ROWS]) {
#pragma unroll
    for (int u = 0; u < TS_ATT_ROWS; ++u) acc[u] = 0.f;
    for (int i0 = 0; i0 < hd; i0 += 128) {
        float kv[TS_ATT_ROWS][4];
#pragma unroll
        for (int u = 0; u < TS_ATT_ROWS; ++u)
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                const int i = i0 + lane + 32 * t;
                kv[u][t] = kp[u] != nullptr && i < hd ? kp[u][i] : 0.f;
            }
        att_dot_add(qs, kv, i0, hd, lane, acc);
    }
    att_warp_sum(acc);
}

// Grid: nh blocks (query heads), one token at position `pos` = *pos_p, read from device
// memory (the host writes it before each step) so the launch's arguments do not change
// from step to step and a CUDA graph captured once replays every step; the grid does not
// depend on the position either (each block loops over the positions). A position outside
// [0, cap) makes the launch a no-op (the host checks it first). q [nh * hd], knew and vnew
// [kvw] as q_proj / k_proj / v_proj wrote them (slices of one fused output); kc / vc
// [cap, kvw] with kvw = nkv * hd. Each block normalises (Qwen3: qn / kn, [hd]; null for
// Llama) and rotates its q head and its group's k head in shared memory; the first block of
// each group writes the rotated k and the new v into the caches' row `pos`, which no block
// of this launch reads (each reads its own k copy and vnew for position pos), so there is
// no race. Then softmax over the pos + 1 positions (scores: scratch [nh, cap]) and
// out[h * hd + d] = sum_j p_j v_j[d]: each thread one d over every j (split = 0), or the
// j split over the warps and the partial sums added in shared memory (split = 1).
extern "C" __global__ void attention_rope(const float* __restrict__ q,
                                          const float* __restrict__ knew,
                                          const float* __restrict__ vnew, float* __restrict__ kc,
                                          float* __restrict__ vc,
                                          float* __restrict__ scores, float* __restrict__ out,
                                          int hd, int group, int kvw, const int* __restrict__ pos_p, int cap,
                                          float scale, const float* __restrict__ qn,
                                          const float* __restrict__ kn, float eps,
                                          const float* __restrict__ inv_freq, int half,
                                          float af, int split) {
    TS_PDL_ENTER();
    const int pos = *pos_p;
    if (pos < 0 || pos >= cap) return;  // uniform over the block: before any barrier
    __shared__ float red[32];
    __shared__ float qs[1024];
    __shared__ float ks[1024];
    __shared__ float part[TS_ATT_WARPS * 1024];  // split: the warps' partial outputs
    const int h = blockIdx.x, g = h / group;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const float* vn = vnew + (size_t)g * hd;
    att_load_rotate(q, knew, qs, ks, h, g, hd, qn, kn, eps, inv_freq, half, af, pos, red);
    if (h % group == 0) att_append(kc, vc, ks, vn, pos, kvw, g, hd);
    const int seen = pos + 1;
    float* p = scores + (size_t)h * cap;
    // Each warp scores TS_ATT_ROWS positions at once (j0 + u warps, att_scores).
    for (int j0 = warp; j0 < seen; j0 += TS_ATT_ROWS * warps) {
        const float* kp[TS_ATT_ROWS];
        float acc[TS_ATT_ROWS];
#pragma unroll
        for (int u = 0; u < TS_ATT_ROWS; ++u) {
            const int j = j0 + u * warps;
            kp[u] = j < seen ? (j == pos ? ks : kc + (size_t)j * kvw + (size_t)g * hd) : nullptr;
        }
        att_scores(qs, kp, hd, lane, acc);
#pragma unroll
        for (int u = 0; u < TS_ATT_ROWS; ++u)
            if (lane == 0 && kp[u] != nullptr) p[j0 + u * warps] = acc[u] * scale;
    }
    __syncthreads();
    float m = TS_NEG_INF;
    for (int j = threadIdx.x; j < seen; j += blockDim.x) m = fmaxf(m, p[j]);
    m = block_max(m, red);
    float sum = 0.f;
    for (int j = threadIdx.x; j < seen; j += blockDim.x) {
        const float e = expf(p[j] - m);
        p[j] = e;
        sum += e;
    }
    sum = block_sum(sum, red);  // its leading __syncthreads orders the p[j] writes too
    const float inv = 1.0f / sum;
    if (!split) {
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            const float* vd = vc + (size_t)g * hd + d;
            float acc = 0.f;
            for (int j = 0; j < pos; ++j) acc += (p[j] * inv) * vd[(size_t)j * kvw];
            acc += (p[pos] * inv) * vn[d];
            out[(size_t)h * hd + d] = acc;
        }
        return;
    }
    // split (blockDim.x <= 32 * TS_ATT_WARPS): the positions j = warp, warp + warps, ...
    // go to the warps, the dims d = lane + 32 i to the lanes, so a thread's loads do not
    // wait on each other and many are in flight at once (the loop above waits on one
    // position's row after another, slow when the cache has left L2); the warps' partial
    // sums meet in shared memory.
    // Four dims a lane (d0 + lane + 32 t) and TS_ATT_ROWS positions a round, all loaded
    // before any is used; each dim's sum runs over j = warp, warp + warps, .. in order.
    for (int d0 = 0; d0 < hd; d0 += 128) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        const float* vb = vc + (size_t)g * hd + d0 + lane;
        for (int j0 = warp; j0 < pos; j0 += TS_ATT_ROWS * warps) {
            float pj[TS_ATT_ROWS], vv[TS_ATT_ROWS][4];
#pragma unroll
            for (int u = 0; u < TS_ATT_ROWS; ++u) {
                const int j = j0 + u * warps;
                pj[u] = j < pos ? p[j] * inv : 0.f;
#pragma unroll
                for (int t = 0; t < 4; ++t)
                    vv[u][t] = j < pos && d0 + lane + 32 * t < hd ? vb[(size_t)j * kvw + 32 * t] : 0.f;
            }
#pragma unroll
            for (int u = 0; u < TS_ATT_ROWS; ++u)
#pragma unroll
                for (int t = 0; t < 4; ++t)
                    if (j0 + u * warps < pos) acc[t] += pj[u] * vv[u][t];
        }
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const int d = d0 + lane + 32 * t;
            if (d < hd) {
                float a = acc[t];
                if (warp == pos % warps) a += (p[pos] * inv) * vn[d];
                part[warp * hd + d] = a;
            }
        }
    }
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.f;
        for (int w = 0; w < warps; ++w) acc += part[w * hd + d];
        out[(size_t)h * hd + d] = acc;
    }
}

// Rows of one warp's chunk positions jc + warp + u TS_ATT_WARPS (u < TS_ATT_ROWS) of a
// cache [cap, kvw] for group g, dims d0 + lane + 32 t (t < 4): the current position's from
// `cur` (its row may not be in the cache yet for this block; null: read as zero, the
// caller fills it), zero past the chunk's end or past hd.
__device__ __forceinline__ void att_rows(const float* __restrict__ cur, const float* __restrict__ cache, int jc,
                                         int jend, int pos, int warp, int lane, int kvw, int g, int hd, int d0,
                                         float (&vv)[TS_ATT_ROWS][4]) {
#pragma unroll
    for (int u = 0; u < TS_ATT_ROWS; ++u) {
        const int j = jc + warp + u * TS_ATT_WARPS;
        const float* vj = j == pos ? cur : cache + (size_t)j * kvw + (size_t)g * hd;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const int d = d0 + lane + 32 * t;
            vv[u][t] = j < jend && d < hd && vj != nullptr ? vj[d] : 0.f;
        }
    }
}

// Head h's output o [hd] (shared memory, past a barrier) into the split of the GEMV after
// attention (split.cuh: the 16-row layout, S = 1, columns h hd ..). hd is a multiple of
// TS_SPLIT_SEG (the host checks), so the head's segments are its own: threads 0 .. hd / 8
// take 8 columns each, whole warps call the split (its shuffles), the rest leave.
__device__ void att_split(const float* o, int h, int hd, unsigned short* __restrict__ xg,
                          float* __restrict__ xa, int xs, int nib) {
    const int tid = threadIdx.x, cols = hd / 8;
    if ((tid >> 5) * 32 >= cols) return;  // whole warps
    const bool in = tid < cols;
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = in ? o[8 * tid + e] : 0.f;
    ts_seg_split(v, in, 0, 1, (long long)h * hd + 8 * tid, xg, xa, xs, nib != 0, -1.0f);
}

// The same attention with the positions cut into chunks of TS_ATT_CHUNK, one block each
// (flash decoding): grid (nh, ceil(cap / TS_ATT_CHUNK)), TS_ATT_WARPS warps a block; block
// (h, c) with c TS_ATT_CHUNK > pos leaves at once, so the grid does not depend on the
// position. Each block normalises and rotates q and k as above (the block holding `pos`
// among its group's first head writes the cache row), scores its chunk (one load round:
// TS_ATT_ROWS positions a warp), takes the chunk's max m_c, its weights e^(s - m_c) and
// their sum l_c in shared memory, and sums o_c = sum e^(s - m_c) v over the chunk (one more
// round). A single chunk writes o_c / l_c. Otherwise each block stores (m_c, l_c, o_c) in
// ws [nh, chunks, hd + 2]; the last block of a head to arrive (cnt [nh], zero before the
// launch, reset by that block) combines them: M = max m_c, out = sum e^(m_c - M) o_c /
// sum e^(m_c - M) l_c. A block thus waits on two rounds of loads, where attention_rope's
// block waits on two for every 32 positions.
#define TS_ATT_CHUNK (TS_ATT_WARPS * TS_ATT_ROWS)
extern "C" __global__ void attention_chunks(const float* __restrict__ q,
                                            const float* __restrict__ knew,
                                            const float* __restrict__ vnew, float* __restrict__ kc,
                                            float* __restrict__ vc, float* __restrict__ ws,
                                            unsigned* __restrict__ cnt, float* __restrict__ out,
                                            int hd, int group, int kvw, const int* __restrict__ pos_p,
                                            int cap, float scale, const float* __restrict__ qn,
                                            const float* __restrict__ kn, float eps,
                                            const float* __restrict__ inv_freq, int half, float af,
                                            unsigned short* __restrict__ xg, float* __restrict__ xa, int xs,
                                            int nib) {
    TS_PDL_ENTER();
    const int pos = *pos_p;
    const int c = blockIdx.y, jc = c * TS_ATT_CHUNK;
    if (pos < 0 || pos >= cap || jc > pos) return;  // uniform over the block
    __shared__ float red[32];
    __shared__ float qs[1024];
    __shared__ float ks[1024];
    __shared__ float ps[TS_ATT_CHUNK];
    __shared__ float part[TS_ATT_WARPS * 1024];
    __shared__ unsigned last;
    const int h = blockIdx.x, g = h / group;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nc = pos / TS_ATT_CHUNK + 1;  // chunks holding positions 0 .. pos
    const int chunks = (cap + TS_ATT_CHUNK - 1) / TS_ATT_CHUNK;
    const int jend = jc + TS_ATT_CHUNK < pos + 1 ? jc + TS_ATT_CHUNK : pos + 1;
    const float* vn = vnew + (size_t)g * hd;
    // The cached keys and values of the warp's positions, first 128 dims (four a lane),
    // loaded before q and k: none depends on them, so all their trips to memory overlap
    // (the current position's key is the rotated one in shared memory, taken below).
    float k0[TS_ATT_ROWS][4], v0[TS_ATT_ROWS][4];
    att_rows(nullptr, kc, jc, jend, pos, warp, lane, kvw, g, hd, 0, k0);
    att_rows(vn, vc, jc, jend, pos, warp, lane, kvw, g, hd, 0, v0);
    att_load_rotate(q, knew, qs, ks, h, g, hd, qn, kn, eps, inv_freq, half, af, pos, red);
    if (h % group == 0 && c == nc - 1) att_append(kc, vc, ks, vn, pos, kvw, g, hd);
    // Scores of the chunk: warp w takes positions jc + w + u TS_ATT_WARPS, u < TS_ATT_ROWS,
    // summed over d = lane, lane + 32, .. as att_scores does (dims past 128 loaded here).
    {
        bool real[TS_ATT_ROWS];
        float acc[TS_ATT_ROWS];
#pragma unroll
        for (int u = 0; u < TS_ATT_ROWS; ++u) {
            const int j = jc + warp + u * TS_ATT_WARPS;
            real[u] = j < jend;
            acc[u] = 0.f;
            if (j == pos) {
#pragma unroll
                for (int t = 0; t < 4; ++t) k0[u][t] = lane + 32 * t < hd ? ks[lane + 32 * t] : 0.f;
            }
        }
        att_dot_add(qs, k0, 0, hd, lane, acc);
        for (int i0 = 128; i0 < hd; i0 += 128) {
            float kv[TS_ATT_ROWS][4];
            att_rows(ks, kc, jc, jend, pos, warp, lane, kvw, g, hd, i0, kv);
            att_dot_add(qs, kv, i0, hd, lane, acc);
        }
        att_warp_sum(acc);
#pragma unroll
        for (int u = 0; u < TS_ATT_ROWS; ++u)
            if (lane == 0) ps[warp + u * TS_ATT_WARPS] = real[u] ? acc[u] * scale : TS_NEG_INF;
    }
    __syncthreads();
    // The chunk's max and weights (every thread reads the TS_ATT_CHUNK scores).
    float m = TS_NEG_INF;
    for (int t = 0; t < TS_ATT_CHUNK; ++t) m = fmaxf(m, ps[t]);
    __syncthreads();
    if (threadIdx.x < TS_ATT_CHUNK) ps[threadIdx.x] = jc + (int)threadIdx.x < jend ? expf(ps[threadIdx.x] - m) : 0.f;
    __syncthreads();
    float l = 0.f;
    for (int t = 0; t < TS_ATT_CHUNK; ++t) l += ps[t];
    // o_c[d] = sum_j e_j v_j[d]: warp w the positions w + u TS_ATT_WARPS, four dims a lane.
    for (int d0 = 0; d0 < hd; d0 += 128) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        float vv[TS_ATT_ROWS][4];
        if (d0 == 0) {
#pragma unroll
            for (int u = 0; u < TS_ATT_ROWS; ++u)
#pragma unroll
                for (int t = 0; t < 4; ++t) vv[u][t] = v0[u][t];
        } else {
            att_rows(vn, vc, jc, jend, pos, warp, lane, kvw, g, hd, d0, vv);
        }
#pragma unroll
        for (int u = 0; u < TS_ATT_ROWS; ++u)
#pragma unroll
            for (int t = 0; t < 4; ++t) acc[t] += ps[warp + u * TS_ATT_WARPS] * vv[u][t];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const int d = d0 + lane + 32 * t;
            if (d < hd) part[warp * hd + d] = acc[t];
        }
    }
    __syncthreads();
    float* wsc = ws + ((size_t)h * chunks + c) * (size_t)(hd + 2);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.f;
        for (int w = 0; w < TS_ATT_WARPS; ++w) o += part[w * hd + d];
        if (nc == 1) {
            out[(size_t)h * hd + d] = qs[d] = o / l;  // qs: free since the scores
        } else {
            wsc[2 + d] = o;
        }
    }
    if (nc == 1) {
        if (xg != nullptr) {
            __syncthreads();
            att_split(qs, h, hd, xg, xa, xs, nib);
        }
        return;
    }
    if (threadIdx.x == 0) {
        wsc[0] = m;
        wsc[1] = l;
    }
    // Publish this chunk, then the last block of the head combines (the usual
    // threadfence-then-count pattern: every store above is visible before the count).
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(cnt + h, 1u) == (unsigned)(nc - 1) ? 1u : 0u;
    __syncthreads();
    if (last == 0u) return;
    __threadfence();
    const float* wsh = ws + (size_t)h * chunks * (size_t)(hd + 2);
    float mm = TS_NEG_INF;
    for (int k = 0; k < nc; ++k) mm = fmaxf(mm, __ldcg(wsh + (size_t)k * (hd + 2)));
    float lsum = 0.f;
    for (int k = 0; k < nc; ++k) {
        const float* wk = wsh + (size_t)k * (hd + 2);
        lsum += __ldcg(wk + 1) * expf(__ldcg(wk) - mm);
    }
    const float inv = 1.0f / lsum;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.f;
        for (int k = 0; k < nc; ++k) {
            const float* wk = wsh + (size_t)k * (hd + 2);
            o += __ldcg(wk + 2 + d) * expf(__ldcg(wk) - mm);
        }
        out[(size_t)h * hd + d] = qs[d] = o * inv;
    }
    if (threadIdx.x == 0) cnt[h] = 0u;  // ready for the next launch
    if (xg != nullptr) {
        __syncthreads();
        att_split(qs, h, hd, xg, xa, xs, nib);
    }
}

// out [n] = silu(g) * u.
extern "C" __global__ void swiglu(const float* __restrict__ g, const float* __restrict__ u,
                                  float* __restrict__ out, int n) {
    TS_PDL_ENTER();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = g[i];
        out[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

// swiglu that also writes the split of the GEMV after it (split.cuh: the 16-row layout,
// S = 1, columns 0 .. xs, zeros past n): one block of TS_SPLIT_SEG threads a segment, one
// column a thread (as many threads in flight as swiglu's), the segment's max and sum by a
// block reduction. Same arithmetic as swiglu.
extern "C" __global__ void swiglu_split(const float* __restrict__ g, const float* __restrict__ u,
                                        float* __restrict__ out, int n, unsigned short* __restrict__ xg,
                                        float* __restrict__ xa, int xs, int nib) {
    TS_PDL_ENTER();
    __shared__ float red[TS_SPLIT_SEG / 32][2];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long i = (long long)blockIdx.x * TS_SPLIT_SEG + tid;
    float v = 0.f;
    if (i < n) {
        const float gv = g[i];
        v = gv / (1.0f + expf(-gv)) * u[i];
        out[i] = v;
    }
    float m = fabsf(v);
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, k));
    if (lane == 0) red[warp][0] = m;
    __syncthreads();
    m = red[0][0];
#pragma unroll
    for (int w = 1; w < TS_SPLIT_SEG / 32; ++w) m = fmaxf(m, red[w][0]);
    float p, inv;
    ts_split_p(m, p, inv);
    const float x = v * p;  // exact: p is a power of two in range
    float t = x;
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) t += __shfl_xor_sync(0xffffffffu, t, k);
    if (lane == 0) red[warp][1] = t;
    if (i >= xs) return;  // (xs is a multiple of the block: uniform)
    const unsigned hi = ts_f16_rn(x), lo = ts_f16_rn(x - ts_f16_f32(hi));
    const int e = (int)(i & 7);
    const long long at = i - e + (nib ? 2 * (e & 3) + (e >> 2) : e);
    xg[at] = (unsigned short)hi;
    xg[(long long)xs + at] = (unsigned short)lo;
    __syncthreads();
    if (tid == 0) {
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < TS_SPLIT_SEG / 32; ++w) sum += red[w][1];
        const long long segs = xs / TS_SPLIT_SEG;
        xa[blockIdx.x] = inv;
        xa[segs + blockIdx.x] = sum;
    }
}

// One block: out[0] = the first index of the largest of x [n] (NaN never wins).
extern "C" __global__ void argmax(const float* __restrict__ x, int n, int* __restrict__ out) {
    TS_PDL_ENTER();
    __shared__ float bv[TS_BLOCK];
    __shared__ int bi[TS_BLOCK];
    float best = TS_NEG_INF;
    int idx = n;  // "none yet": larger than every real index
    // TS_ARGMAX_SLOTS values a thread a round, loaded before any is compared (one trip to
    // memory a round); each thread still visits its indices in increasing order.
    for (int base = 0; base < n; base += TS_ARGMAX_SLOTS * (int)blockDim.x) {
        float v[TS_ARGMAX_SLOTS];
#pragma unroll
        for (int k = 0; k < TS_ARGMAX_SLOTS; ++k) {
            const int i = base + k * (int)blockDim.x + (int)threadIdx.x;
            v[k] = i < n ? x[i] : TS_NEG_INF;
        }
#pragma unroll
        for (int k = 0; k < TS_ARGMAX_SLOTS; ++k) {
            const int i = base + k * (int)blockDim.x + (int)threadIdx.x;
            if (i < n && (v[k] > best || (idx == n && v[k] == best))) {
                best = v[k];
                idx = i;
            }
        }
    }
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            const float ov = bv[threadIdx.x + s];
            const int oi = bi[threadIdx.x + s];
            if (ov > bv[threadIdx.x] || (ov == bv[threadIdx.x] && oi < bi[threadIdx.x])) {
                bv[threadIdx.x] = ov;
                bi[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = bi[0] < n ? bi[0] : 0;
}

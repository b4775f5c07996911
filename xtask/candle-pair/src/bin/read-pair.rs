//! Tessera's GEMV against a plain streaming read of the same number of bytes, timed call by
//! call in alternation in one process: the "% of read bandwidth" of issue 2, measured in
//! the same seconds.
//!
//! Why: `../shared/anchors/read_bw.c` and the criterion bench run minutes apart, and this
//! VM's read bandwidth moved between 30 and 58 GB/s in ten runs within two minutes
//! (docs/PERF.md), so a ratio of the two carries that drift. Here the read is read_bw.c's
//! loop (four 512-bit accumulators over each thread's contiguous share, as its OpenMP
//! static schedule splits the buffer; on a CPU without AVX-512, where read_bw.c does not
//! build, eight 256-bit ones), over buffers of exactly the tensor's stored bytes,
//! copied until they hold 256 MB, in tessera's weight buffers (`quant_core::memory`, the
//! pages the GEMV's copies get).
//! Output, one line each:
//! `readpair <format> <path> <O>x<I> read_us <m> tessera_us <m> bytes <n> copies <n> calls <n>`.
//!
//! Usage: `read-pair [FORMATS] [SHAPES]` (defaults: issue 2's int8-row, int4-row, int4-g64,
//! fp8-e4m3-b128, mq4-g256-v2, and issue 8's q8_0, q4_k, q6_k — how near the memory bound
//! the GGUF kernels, and so candle's, run — on 4096x4096, 14336x4096, 6144x16384).
//! `TESSERA_READ_PAIR_OFFSET=M` (0..64) moves every copy of the weights, and the read's
//! buffers, to start M bytes past a cache line (by default both start on one, as
//! `quant_core::memory::WeightBytes` puts them; before session 26 they sat where glibc's
//! allocator puts a large `Vec`, 16 bytes past one: `TESSERA_READ_PAIR_OFFSET=16`).

use candle_pair::{copies, formats_and_shapes, median};
use quant_core::kernels::{KernelPath, gemm_with, has_int8_activations};
use quant_core::memory::WeightBytes;
use quant_core::testdata::{Rng, activations, weights};
use quant_core::{EncodeOptions, QTensor, encode};
use std::time::Instant;

/// read_bw.c's inner loop over `b`: 64-byte loads into four independent accumulators.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn read_part(b: &[u8]) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_ps(); 4];
    let chunks = b.chunks_exact(256);
    for c in chunks {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: 64 readable bytes at 64k of a 256-byte chunk.
            let v = unsafe { _mm512_loadu_ps(c.as_ptr().add(64 * k).cast()) };
            *a = _mm512_add_ps(*a, v);
        }
    }
    _mm512_reduce_add_ps(_mm512_add_ps(
        _mm512_add_ps(acc[0], acc[1]),
        _mm512_add_ps(acc[2], acc[3]),
    ))
}

/// The same loop with 32-byte loads, eight accumulators (the bytes in flight of the
/// 512-bit loop), for CPUs without AVX-512, where read_bw.c itself does not build.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn read_part_avx(b: &[u8]) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); 8];
    for c in b.chunks_exact(256) {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: 32 readable bytes at 32k of a 256-byte chunk.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr().add(32 * k).cast()) };
            *a = _mm256_add_ps(*a, v);
        }
    }
    let mut lanes = [0f32; 8];
    for a in acc {
        let mut v = [0f32; 8];
        // SAFETY: 8 writable floats.
        unsafe { _mm256_storeu_ps(v.as_mut_ptr(), a) };
        for (l, x) in lanes.iter_mut().zip(v) {
            *l += x;
        }
    }
    lanes.iter().sum()
}

/// One streaming read of `b` on every rayon thread, each over its contiguous share, with
/// the widest loop the CPU runs.
fn read(b: &[u8], avx512: bool) -> f32 {
    use rayon::prelude::*;
    let n = rayon::current_num_threads().max(1);
    let share = b.len().div_ceil(n).next_multiple_of(256);
    b.par_chunks(share)
        // SAFETY: `avx512` is the runtime check of that feature; AVX is checked by the
        // caller.
        .map(|p| unsafe {
            if avx512 {
                read_part(p)
            } else {
                read_part_avx(p)
            }
        })
        .sum()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if !std::is_x86_feature_detected!("avx") {
        eprintln!("skipped: the read probe needs AVX; this CPU has none");
        return Ok(());
    }
    let avx512 = std::is_x86_feature_detected!("avx512f");
    let offset = match std::env::var("TESSERA_READ_PAIR_OFFSET") {
        Ok(v) => Some(v.parse::<usize>().ok().filter(|&m| m < 64).ok_or_else(|| {
            format!("TESSERA_READ_PAIR_OFFSET: expected a byte offset below 64, got {v:?}")
        })?),
        Err(_) => None,
    };
    if !avx512 {
        eprintln!(
            "note: no AVX-512: the read probe runs its 256-bit form (read_bw.c's loop needs AVX-512)"
        );
    }
    let (formats, shapes) =
        formats_and_shapes("int8-row,int4-row,int4-g64,fp8-e4m3-b128,mq4-g256-v2,q8_0,q4_k,q6_k");
    for &(o, i) in &shapes {
        let mut rng = Rng::new(0x7e55e7a);
        let w = weights(&mut rng, o, i);
        let x = activations(&mut rng, 1, i);
        for &format in &formats {
            let enc = encode(format, o, i, &w, &EncodeOptions::default())?;
            let bytes = enc.weights.len() + enc.scales.len();
            let copies = copies(bytes);
            let ours: Vec<_> = (0..copies).map(|_| enc.clone()).collect();
            let plain: Vec<WeightBytes> = (0..copies)
                .map(|_| quant_core::memory::weight_buffer(bytes.next_multiple_of(256) + 128))
                .collect();
            // The weights where `clone` left them, or moved `offset` bytes past a line (and
            // the read's buffers with them).
            let moved: Vec<WeightBytes> = match offset {
                Some(_) => ours
                    .iter()
                    .map(|e| quant_core::memory::weight_buffer(e.weights.len() + 128))
                    .collect(),
                None => Vec::new(),
            };
            let at = |b: &[u8]| offset.map_or(0, |m| (64 - b.as_ptr() as usize % 64) % 64 + m);
            let mut moved = moved;
            for (dst, e) in moved.iter_mut().zip(&ours) {
                let k = at(dst);
                dst[k..k + e.weights.len()].copy_from_slice(&e.weights);
            }
            let views: Vec<QTensor<'_>> = ours
                .iter()
                .enumerate()
                .map(|(k, e)| match moved.get(k) {
                    Some(dst) => {
                        let a = at(dst);
                        QTensor::new(
                            format,
                            o,
                            i,
                            &dst[a..a + e.weights.len()],
                            &e.scales,
                            e.rotation_seed,
                        )
                    }
                    None => Ok(e.view()),
                })
                .collect::<Result<_, _>>()?;
            let plain: Vec<&[u8]> = plain
                .iter()
                .map(|b| &b[at(b)..at(b) + bytes.next_multiple_of(256)])
                .collect();
            let mut paths = vec![KernelPath::Exact];
            if has_int8_activations(format) {
                paths.push(KernelPath::Int8Activations);
            }
            for path in paths {
                let mut y = vec![0f32; o];
                for k in 0..copies {
                    std::hint::black_box(read(plain[k], avx512));
                    gemm_with(path, &views[k], &x, 1, &mut y)?;
                }
                let calls = (3 * copies).max(200);
                let (mut tr, mut tt) = (vec![], vec![]);
                for r in 0..calls {
                    let (a, b) = (r % copies, (r + copies / 2) % copies);
                    let t = Instant::now();
                    std::hint::black_box(read(plain[a], avx512));
                    tr.push(t.elapsed().as_secs_f64());
                    let t = Instant::now();
                    gemm_with(path, &views[b], &x, 1, &mut y)?;
                    std::hint::black_box(&y);
                    tt.push(t.elapsed().as_secs_f64());
                }
                println!(
                    "readpair {format} {} {o}x{i} read_us {:.1} tessera_us {:.1} bytes {bytes} copies {copies} calls {calls}",
                    path.name(),
                    median(tr) * 1e6,
                    median(tt) * 1e6
                );
            }
        }
    }
    Ok(())
}

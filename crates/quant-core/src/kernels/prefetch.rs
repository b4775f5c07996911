//! Software prefetch of the weight streams: how many bytes ahead of its loads a kernel asks
//! for its weights, chosen once per process.
//!
//! Why: a GEMV at S = 1 interleaves its loads with arithmetic, and on some CPUs the hardware
//! prefetchers then leave too few lines in flight for a core to reach the read bandwidth
//! that a plain streaming loop gets. Measured on a 2-core Intel Xeon VM (family 6 model 207,
//! AVX-512 VNNI / BF16 / FP16, 2026-12-06, `read-pair`, the read and the GEMV alternated
//! call by call, off and on alternated twice): int4-row's int8-activation kernel on
//! [4096 x 4096] read 54-55% of the read's speed without prefetch and 79-83% with the line
//! 4096 bytes ahead of its one row's stream; int4-g64 59% -> 82-84%; docs/PERF.md has the
//! table. The distance is a total over the rows a tile streams side by side: eight rows at
//! a time take 512 bytes each (4096 bytes ahead on each of eight rows read 66% against
//! 76-81% without prefetch for int4-g64 on [6144 x 16384]).
//!
//! A kernel walking one row at a time asks twice (`ONE_STREAM`): the line 1024 bytes ahead
//! into L1 (`prefetcht0`) and the line 8192 bytes ahead into L2 only (`prefetcht2`). Why:
//! one thread streamed int4-row at 8.7 GB/s against its own read's 13.9 GB/s while it
//! computes 22 GB/s in cache (`RAYON_NUM_THREADS=1`), as if the two did not overlap; the L1
//! prefetches alone wait in the core's few L1 miss buffers for DRAM, while a line already in
//! L2 frees its buffer within a few cycles. Measured on the same VM (2026-12-06 07:52-07:56
//! UTC, `read-pair`, two threads, `TESSERA_PREFETCH_ONE=4096,0` and this form alternated in
//! three rounds): the int8-activation kernels' mean share of the read over the five issue
//! formats and three shapes 83.2-84.7% -> 87.1-87.7%; on [4096 x 4096] int8-row 88-89 ->
//! 96-98%, int4-row 84-89 -> 78-87%, int4-g64 78-86 -> 86-87%, fp8 80-81 -> 82-86%,
//! mq4-g256-v2 77-79 -> 79-84%; [6144 x 16384] (eight-row tiles) unchanged; the exact kernels
//! unchanged. Distances of 512-2048 near and 6144-12288 far read alike; the multi-row tiles
//! did not gain from a far prefetch shared over their rows and keep the single total.
//!
//! The default is prefetch on Intel CPUs and none elsewhere: on an AMD EPYC VM a
//! `prefetcht0` ahead of the q4_k stream measured slower (2026-11-30, kzmm.rs), and this
//! module's form lost 3-5 points there for int8-row, fp8 and mq4-g256-v2 (session 28). The
//! int4 quad body of the int8-activation path prefetches on every CPU (`total_int4`): on
//! that VM it gained. `TESSERA_PREFETCH=<bytes>` sets the total of the
//! multi-row tiles (0 turns every prefetch off) and `TESSERA_PREFETCH_ONE=<near>,<far>` the
//! one-row distances (`4096,0` is session 16's form), so the choice can be measured on any
//! machine.

use std::sync::OnceLock;

/// Bytes ahead shared over the rows of a multi-row tile, on the CPUs where prefetch is on
/// by default.
const INTEL_TOTAL: usize = 4096;
/// A one-row stream's distances where prefetch is on.
const ONE_STREAM: Ahead = Ahead {
    near: 1024,
    far: 8192,
};
/// One cache line.
const LINE: usize = 64;

/// The total prefetch distance in bytes for this process: `TESSERA_PREFETCH` if set and a
/// number, else 4096 on Intel CPUs and 0 elsewhere. Cached.
pub fn total() -> usize {
    // Cached whole: `is_intel` is a `cpuid`, which traps to the hypervisor in a VM (uncached,
    // the affine body's per-tile call made mq4-g256-v2 40x slower on the AMD VM).
    static TOTAL: OnceLock<usize> = OnceLock::new();
    *TOTAL.get_or_init(|| env_total().unwrap_or_else(|| if is_intel() { INTEL_TOTAL } else { 0 }))
}

/// [`total`] for the int4 quad body of the int8-activation path (int4-row, int4-g{gs},
/// [`super::int8act`]): `TESSERA_PREFETCH` if set, else 4096 on every CPU. Why not
/// [`total`]'s Intel-only default: on the 2-core AMD EPYC VM (2026-12-07 15:31-15:57 UTC,
/// `read-pair`, 30 rounds rotating four settings, docs/PERF.md "Session 28") the int4 bodies
/// read 88-93% of the read without prefetch and 92-100% with it on [4096 x 4096] and
/// [14336 x 4096] in calls where the read ran below 38 GB/s, and 69-85% against 80-95% where
/// it ran at 45 GB/s or more; int8-row, fp8 and mq4-g256-v2 lost 3-5 points with it below
/// 38 GB/s and were even at 45 or more, so their default stays off there.
pub(crate) fn total_int4() -> usize {
    env_total().unwrap_or(INTEL_TOTAL)
}

/// `TESSERA_PREFETCH` as a number of bytes, if set and one. Cached.
fn env_total() -> Option<usize> {
    static TOTAL: OnceLock<Option<usize>> = OnceLock::new();
    *TOTAL.get_or_init(|| {
        std::env::var("TESSERA_PREFETCH")
            .ok()
            .and_then(|v| v.trim().parse().ok())
    })
}

/// Whether the CPU says "GenuineIntel".
pub(crate) fn is_intel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let r = std::arch::x86_64::__cpuid(0);
        let mut v = [0u8; 12];
        v[..4].copy_from_slice(&r.ebx.to_le_bytes());
        v[4..8].copy_from_slice(&r.edx.to_le_bytes());
        v[8..].copy_from_slice(&r.ecx.to_le_bytes());
        &v == b"GenuineIntel"
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// How far ahead of a stream's loads its lines are asked for: `near` bytes into L1
/// (`prefetcht0`) and, where `far` is not 0, `far` bytes into L2 (`prefetcht2`). Both 0:
/// no prefetch.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ahead {
    pub(crate) near: usize,
    pub(crate) far: usize,
}

impl Ahead {
    /// No prefetch.
    pub(crate) const OFF: Ahead = Ahead { near: 0, far: 0 };

    /// Both distances over `k`, for a side stream with 1/k of the main stream's bytes (a
    /// row's group scales).
    pub(crate) fn over(self, k: usize) -> Ahead {
        Ahead {
            near: self.near / k.max(1),
            far: self.far / k.max(1),
        }
    }
}

/// The one-row distances for this process: `TESSERA_PREFETCH_ONE=<near>,<far>` if set and
/// two numbers, else [`ONE_STREAM`]. Cached.
fn one_stream() -> Ahead {
    static ONE: OnceLock<Ahead> = OnceLock::new();
    *ONE.get_or_init(|| {
        std::env::var("TESSERA_PREFETCH_ONE")
            .ok()
            .and_then(|v| {
                let (n, f) = v.split_once(',')?;
                Some(Ahead {
                    near: n.trim().parse().ok()?,
                    far: f.trim().parse().ok()?,
                })
            })
            .unwrap_or(ONE_STREAM)
    })
}

/// The distances for each of `streams` rows walked side by side.
#[inline]
pub(crate) fn per_stream(streams: usize) -> Ahead {
    plan(total(), one_stream(), streams)
}

/// [`per_stream`] with [`total_int4`]: the int4 quad body's distances.
#[inline]
pub(crate) fn per_stream_int4(streams: usize) -> Ahead {
    plan(total_int4(), one_stream(), streams)
}

/// The distances of a row walked in column panels ([`super::int8act`]'s long rows at
/// S = 1): nothing into L1, and into L2 the same panel position two rows on, where the
/// stream will be two rows later. A panel is a few KB of each row, and on its own a panel's
/// first lines wait for DRAM at every row: measured on a 2-core AMD EPYC (Zen 4) VM
/// (2026-12-06 11:20 UTC, `read-pair` [6144 x 16384], share of the read, two rounds) with
/// no prefetch int4-row 47%, int4-g64 44-50%, mq4-g256-v2 43-45%; one row ahead 82/82-83/
/// 81-84%; two 87/84-88/88-89%; three and four alike or lower; an L1 request 512-1024 bytes
/// ahead as well lowered each by 5-10 points. Off only where `TESSERA_PREFETCH=0`.
#[inline]
pub(crate) fn panel_stream(row_bytes: usize) -> Ahead {
    static OFF: OnceLock<bool> = OnceLock::new();
    if *OFF.get_or_init(|| std::env::var_os("TESSERA_PREFETCH").is_some() && total() == 0) {
        return Ahead::OFF;
    }
    Ahead {
        near: 0,
        far: 2 * row_bytes,
    }
}

/// [`per_stream`] from its inputs: nothing when `total` is 0; one stream `one`; several the
/// total shared out in whole lines, nothing far.
fn plan(total: usize, one: Ahead, streams: usize) -> Ahead {
    if total == 0 {
        Ahead::OFF
    } else if streams <= 1 {
        one
    } else {
        Ahead {
            near: share(total, streams),
            far: 0,
        }
    }
}

/// `total` bytes shared over `streams` streams, rounded down to whole lines.
fn share(total: usize, streams: usize) -> usize {
    total / streams.max(1) / LINE * LINE
}

/// [`lines`] for each of R rows at the same offset (the rows a tile walks side by side).
#[inline(always)]
pub(crate) fn rows<const R: usize>(rows: &[*const u8; R], off: usize, bytes: usize, ahead: Ahead) {
    for &row in rows {
        lines(row, off, bytes, ahead);
    }
}

/// [`rows`] without the line loop: `N` lines of each row, at `off`, `off + 64`, ..., each
/// `ahead` further on. For a step of at most `64 N` bytes from `off` (int4's 128-byte quads
/// with N = 2, the 136-byte affine blocks with N = 3) it asks for every line the step
/// touches; a line asked for twice (an unaligned step's first, the previous step's last)
/// costs one hint. The two hints are written out here as in [`lines`]: one helper for both
/// (tried in session 23) made int4-g64 10% slower in cache (`incache int4-g64 1024 16384`,
/// fastest call 313 -> 343 us, three alternated runs), through `lines`' scale stream.
#[inline(always)]
pub(crate) fn lines_n<const N: usize, const R: usize>(
    rows: &[*const u8; R],
    off: usize,
    ahead: Ahead,
) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _MM_HINT_T2, _mm_prefetch};
        for &row in rows {
            for m in 0..N {
                if ahead.near != 0 {
                    // SAFETY: prefetch is a hint (see `lines`).
                    unsafe {
                        _mm_prefetch::<_MM_HINT_T0>(
                            row.wrapping_add(off + m * LINE + ahead.near).cast(),
                        )
                    };
                }
                if ahead.far != 0 {
                    // SAFETY: as above.
                    unsafe {
                        _mm_prefetch::<_MM_HINT_T2>(
                            row.wrapping_add(off + m * LINE + ahead.far).cast(),
                        )
                    };
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (rows, off, ahead);
}

/// Asks for the lines that start in `row[off..off + bytes]`, each `ahead.near` bytes further
/// on into L1 and each `ahead.far` bytes further on into L2, a distance of 0 not at all (one
/// request a line and distance, so a loop that takes less than a line an iteration asks once
/// a line). The address need not be readable: a prefetch never faults.
#[inline(always)]
pub(crate) fn lines(row: *const u8, off: usize, bytes: usize, ahead: Ahead) {
    if ahead == Ahead::OFF {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _MM_HINT_T2, _mm_prefetch};
        let mut k = off.next_multiple_of(LINE);
        while k < off + bytes {
            if ahead.near != 0 {
                // SAFETY: prefetch is a hint: it reads nothing the program sees and never
                // faults, whatever the address; `wrapping_add` forms it without claiming it is
                // in bounds.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(k + ahead.near).cast()) };
            }
            if ahead.far != 0 {
                // SAFETY: as above.
                unsafe { _mm_prefetch::<_MM_HINT_T2>(row.wrapping_add(k + ahead.far).cast()) };
            }
            k += LINE;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (row, off, bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_int4_body_prefetches_on_every_cpu_unless_told_otherwise() {
        match env_total() {
            // TESSERA_PREFETCH decides for every body alike.
            Some(t) => assert_eq!((total_int4(), total()), (t, t)),
            None => {
                assert_eq!(total_int4(), INTEL_TOTAL);
                assert_ne!(per_stream_int4(1), Ahead::OFF);
                assert_ne!(per_stream_int4(8), Ahead::OFF);
                assert_eq!(total(), if is_intel() { INTEL_TOTAL } else { 0 });
            }
        }
    }

    #[test]
    fn the_total_is_shared_out_in_whole_lines() {
        assert_eq!(share(4096, 1), 4096);
        assert_eq!(share(4096, 8), 512);
        assert_eq!(share(4096, 3), 1344);
        assert_eq!(share(4096, 0), 4096);
        assert_eq!(share(100, 1), 64);
        assert_eq!(share(4096, 128), 0);
        assert_eq!(share(0, 4), 0);
    }

    #[test]
    fn one_stream_asks_near_and_far_several_share_the_near_total() {
        let one = Ahead {
            near: 1024,
            far: 8192,
        };
        assert_eq!(plan(4096, one, 1), one);
        assert_eq!(plan(4096, one, 0), one);
        assert_eq!(plan(4096, one, 2), Ahead { near: 2048, far: 0 });
        assert_eq!(plan(4096, one, 8), Ahead { near: 512, far: 0 });
        assert_eq!(plan(4096, one, 3), Ahead { near: 1344, far: 0 });
        assert_eq!(plan(0, one, 1), Ahead::OFF);
        assert_eq!(plan(0, one, 8), Ahead::OFF);
        assert_eq!(
            one.over(8),
            Ahead {
                near: 128,
                far: 1024
            }
        );
    }

    #[test]
    fn lines_past_any_buffer_do_not_fault() {
        let b = [0u8; 8];
        let far = Ahead {
            near: 1 << 40,
            far: 1 << 41,
        };
        lines(b.as_ptr(), 0, 4096, far);
        lines(
            std::ptr::null(),
            32,
            128,
            Ahead {
                near: 64,
                far: 8192,
            },
        );
        lines(std::ptr::null(), 32, 128, Ahead::OFF);
    }
}

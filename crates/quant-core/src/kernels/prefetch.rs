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
//! The default is that total on Intel CPUs and no prefetch elsewhere: on an AMD EPYC VM a
//! `prefetcht0` ahead of the q4_k stream measured slower (2026-11-30, kzmm.rs), and this
//! module's form has not been timed there. `TESSERA_PREFETCH=<bytes>` sets the total
//! (0 turns it off), so the choice can be measured on any machine.

use std::sync::OnceLock;

/// Bytes ahead of a single stream on the CPUs where prefetch is on by default.
const INTEL_TOTAL: usize = 4096;
/// One cache line.
const LINE: usize = 64;

/// The total prefetch distance in bytes for this process: `TESSERA_PREFETCH` if set and a
/// number, else 4096 on Intel CPUs and 0 elsewhere. Cached.
pub fn total() -> usize {
    static TOTAL: OnceLock<usize> = OnceLock::new();
    *TOTAL.get_or_init(|| {
        std::env::var("TESSERA_PREFETCH")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| if is_intel() { INTEL_TOTAL } else { 0 })
    })
}

/// Whether the CPU says "GenuineIntel".
fn is_intel() -> bool {
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

/// The distance for each of `streams` rows walked side by side: the total shared out, whole
/// lines; 0 means no prefetch.
#[inline]
pub(crate) fn per_stream(streams: usize) -> usize {
    share(total(), streams)
}

/// `total` bytes shared over `streams` streams, rounded down to whole lines.
fn share(total: usize, streams: usize) -> usize {
    total / streams.max(1) / LINE * LINE
}

/// [`lines`] for each of R rows at the same offset (the rows a tile walks side by side).
#[inline(always)]
pub(crate) fn rows<const R: usize>(rows: &[*const u8; R], off: usize, bytes: usize, ahead: usize) {
    for &row in rows {
        lines(row, off, bytes, ahead);
    }
}

/// Asks for the lines that start in `row[off..off + bytes]`, each `ahead` bytes further on
/// (one request a line, so a loop that takes less than a line an iteration asks once a
/// line); nothing when `ahead` is 0. The address need not be readable: a prefetch never
/// faults.
#[inline(always)]
pub(crate) fn lines(row: *const u8, off: usize, bytes: usize, ahead: usize) {
    if ahead == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let mut k = off.next_multiple_of(LINE);
        while k < off + bytes {
            // SAFETY: prefetch is a hint: it reads nothing the program sees and never faults,
            // whatever the address; `wrapping_add` forms it without claiming it is in bounds.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(k + ahead).cast()) };
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
    fn lines_past_any_buffer_do_not_fault() {
        let b = [0u8; 8];
        lines(b.as_ptr(), 0, 4096, 1 << 40);
        lines(std::ptr::null(), 32, 128, 64);
    }
}

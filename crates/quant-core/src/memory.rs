//! Weight buffers backed by transparent huge pages where Linux offers them.
//!
//! Why: a GEMV streams every weight byte once, and with 4 KiB pages that stream crosses a
//! page every 4 KiB: one TLB miss each, and the L2 stream prefetcher stops at every page
//! boundary. Measured on the 2-core EPYC (2026-11-30 06:28 UTC, `xtask/candle-pair`, the same
//! kernel timed call by call on both kinds of copy, int8-activation path), 4 KiB -> 2 MiB
//! pages: q8_0 [14336 x 4096] 1847 -> 1772 us a call, q4_k 1012 -> 973 us, q6_k 1458 ->
//! 1385 us; [4096 x 4096] q4_k 310 -> 302, q6_k 416 -> 394 (q8_0 544 -> 542). In the three
//! `cargo xtask bench --backend cpu` runs after it (06:32, 06:42, 07:35 UTC; nine GGUF cells
//! each) the 4 KiB time over the huge-page time was 0.94-1.05 (median 1.02), 0.99-1.13
//! (1.01) and 1.01-1.13 (1.04): a few percent, and not on every cell of every run. This
//! VM's memory bandwidth itself moved between 30 and 58 GB/s in ten runs of read_bw.c
//! within two minutes, which is why the comparison has to be interleaved.
//!
//! How: on Linux, a buffer of at least [`MIN_HUGE`] bytes is allocated as a plain `Vec` with
//! its capacity reserved, the 2 MiB-aligned span inside it is advised `MADV_HUGEPAGE`
//! (effective when `/sys/kernel/mm/transparent_hugepage/enabled` is `always` or
//! `madvise`), and only then is it written, so the first touch of each aligned 2 MiB takes
//! a huge page. The bytes at either end that do not fill an aligned 2 MiB stay in small
//! pages. Nothing else changes: it is an ordinary `Vec<u8>`, freed as one. The advice is
//! skipped (small pages, the allocator's default) when `TESSERA_HUGE_PAGES=0` is set, on
//! other systems, and when the kernel refuses it; the bytes are the same either way.
//! Memory-mapped containers keep the page cache's pages: this applies to buffers tessera
//! allocates (encoders' output and copies of tensors). The cost: where the kernel's THP
//! `defrag` setting is `madvise` (as on the development VM), a first touch inside the
//! advised span may compact memory synchronously to find a huge page, so allocating a large
//! tensor can stall on a fragmented machine; `TESSERA_HUGE_PAGES=0` avoids that.
//!
//! Every buffer also starts on a cache line ([`WEIGHT_ALIGN`]): a [`WeightBytes`]. glibc
//! hands a large `Vec<u8>` out 16 bytes past a page, so a row that starts there puts every
//! 64-byte load across two lines. A mapped container's tensors start on lines
//! (docs/CONTAINER.md), so tessera's own buffers now do too. Measured on the 2-core EPYC
//! (2026-12-07, `read-pair`, the int8-activation GEMVs against a read of the same bytes,
//! aligned and +16 alternated four times; docs/PERF.md "Session 26"): up to 11 points of the
//! read nearer it in slow rounds (int4-row [4096 x 4096] 95-98% -> 106-107%), up to 14 in its
//! fast moments on [4096 x 4096] and [14336 x 4096]; the fast moments of [6144 x 16384] and
//! of int4-g64 did not move.

/// Buffers smaller than this stay in small pages (two huge pages: below that the aligned
/// span is at most one, and the advice buys little).
pub const MIN_HUGE: usize = 4 << 20;
/// Transparent huge page size on x86-64 and most aarch64 kernels.
const HUGE: usize = 2 << 20;

/// Whether buffers are advised into huge pages (`TESSERA_HUGE_PAGES=0` turns it off; read
/// once per process).
pub fn huge_pages_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| enabled_by(std::env::var("TESSERA_HUGE_PAGES").ok().as_deref()))
}

/// The policy of [`huge_pages_enabled`] for a value of `TESSERA_HUGE_PAGES` (unset: on).
fn enabled_by(var: Option<&str>) -> bool {
    var != Some("0")
}

/// Where a [`WeightBytes`] buffer's first byte sits: on a cache line.
pub const WEIGHT_ALIGN: usize = 64;

/// Weight bytes whose first byte is on a cache line ([`WEIGHT_ALIGN`]), in huge pages where
/// offered (module docs). It dereferences to the bytes; clones keep both properties.
pub struct WeightBytes {
    /// The allocation: `start` bytes of padding, then the `len` bytes.
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl WeightBytes {
    /// An empty buffer with room for `len` bytes after the padding that puts the first
    /// on a line; `advise`d before anything is written.
    fn reserve(len: usize) -> WeightBytes {
        let mut buf = Vec::with_capacity(len.saturating_add(WEIGHT_ALIGN - 1));
        advise(&mut buf);
        let start = (buf.as_ptr() as usize).wrapping_neg() % WEIGHT_ALIGN;
        buf.resize(start, 0);
        WeightBytes { buf, start, len }
    }
}

impl std::ops::Deref for WeightBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for WeightBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

impl Clone for WeightBytes {
    fn clone(&self) -> Self {
        weight_copy(self)
    }
}

impl PartialEq for WeightBytes {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for WeightBytes {}

impl PartialEq<Vec<u8>> for WeightBytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        **self == **other
    }
}

impl PartialEq<WeightBytes> for Vec<u8> {
    fn eq(&self, other: &WeightBytes) -> bool {
        **self == **other
    }
}

impl<const N: usize> PartialEq<[u8; N]> for WeightBytes {
    fn eq(&self, other: &[u8; N]) -> bool {
        **self == other[..]
    }
}

impl std::fmt::Debug for WeightBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// Adopts `v` where it already starts on a line; copies it otherwise.
impl From<Vec<u8>> for WeightBytes {
    fn from(v: Vec<u8>) -> Self {
        if (v.as_ptr() as usize).is_multiple_of(WEIGHT_ALIGN) {
            let len = v.len();
            return WeightBytes {
                buf: v,
                start: 0,
                len,
            };
        }
        weight_copy(&v)
    }
}

/// A zero-filled buffer of `len` bytes on a cache line, in huge pages where possible
/// (module docs).
pub fn weight_buffer(len: usize) -> WeightBytes {
    let mut w = WeightBytes::reserve(len);
    w.buf.resize(w.start + len, 0);
    w
}

/// A copy of `src` in a buffer from [`weight_buffer`]'s allocation policy.
pub fn weight_copy(src: &[u8]) -> WeightBytes {
    let mut w = WeightBytes::reserve(src.len());
    w.buf.extend_from_slice(src);
    w
}

/// Advises the aligned 2 MiB span of `v`'s reserved, not yet written capacity.
fn advise(v: &mut Vec<u8>) {
    if !huge_pages_enabled() {
        return;
    }
    let Some((first, len)) = huge_span(v.as_mut_ptr() as usize, v.capacity()) else {
        return;
    };
    #[cfg(target_os = "linux")]
    // SAFETY: [first, first + len) lies inside the allocation `v` owns (its reserved
    // capacity: `huge_span`); madvise with MADV_HUGEPAGE changes only how future faults are
    // backed, never the contents or the validity of the memory, and its failure is harmless
    // (small pages).
    unsafe {
        libc::madvise(first as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (first, len);
}

/// The whole 2 MiB pages inside `[start, start + cap)`, as (first address, length), for a
/// buffer of at least [`MIN_HUGE`] bytes that holds at least one; `None` otherwise.
fn huge_span(start: usize, cap: usize) -> Option<(usize, usize)> {
    if cap < MIN_HUGE {
        return None;
    }
    let first = start.checked_next_multiple_of(HUGE)?;
    let last = start.checked_add(cap)? / HUGE * HUGE;
    (last > first).then(|| (first, last - first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tessera_huge_pages_0_turns_the_advice_off() {
        assert!(enabled_by(None));
        assert!(enabled_by(Some("1")));
        assert!(!enabled_by(Some("0")));
        assert_eq!(
            huge_pages_enabled(),
            enabled_by(std::env::var("TESSERA_HUGE_PAGES").ok().as_deref())
        );
    }

    #[test]
    fn the_advised_span_is_the_whole_huge_pages_inside_the_buffer() {
        const M: usize = 1 << 20;
        assert_eq!(huge_span(0, 4 * M), Some((0, 4 * M)));
        assert_eq!(huge_span(4096, 8 * M), Some((2 * M, 6 * M)));
        assert_eq!(huge_span(1, 4 * M), Some((2 * M, 2 * M)));
        assert_eq!(huge_span(2 * M - 1, 4 * M + 1), Some((2 * M, 4 * M)));
        assert_eq!(huge_span(3 * M, 5 * M), Some((4 * M, 4 * M)));
        assert_eq!(huge_span(0, MIN_HUGE - 1), None);
        assert_eq!(huge_span(M, MIN_HUGE), Some((2 * M, 2 * M)));
        assert_eq!(huge_span(usize::MAX - M, MIN_HUGE), None);
    }

    #[test]
    fn buffers_hold_what_they_are_given() {
        for len in [0, 1, 4095, MIN_HUGE - 1, MIN_HUGE, MIN_HUGE + 12_345] {
            let z = weight_buffer(len);
            assert_eq!(z.len(), len);
            assert!(z.iter().all(|&b| b == 0));
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let c = weight_copy(&src);
            assert_eq!(*c, *src);
            assert_eq!(c.clone(), c);
            assert_eq!(*WeightBytes::from(src.clone()), *src);
        }
    }

    #[test]
    fn buffers_start_on_a_cache_line() {
        for len in [0, 1, 63, 64, 4095, MIN_HUGE + 12_345] {
            let z = weight_buffer(len);
            assert_eq!(
                z.as_ptr() as usize % WEIGHT_ALIGN,
                0,
                "weight_buffer({len})"
            );
            let src = vec![7u8; len];
            assert_eq!(
                weight_copy(&src).as_ptr() as usize % WEIGHT_ALIGN,
                0,
                "weight_copy({len})"
            );
            assert_eq!(
                z.clone().as_ptr() as usize % WEIGHT_ALIGN,
                0,
                "clone of {len}"
            );
            // A Vec from the allocator (16 bytes past a line for large ones) is moved onto one.
            assert_eq!(
                WeightBytes::from(src).as_ptr() as usize % WEIGHT_ALIGN,
                0,
                "from({len})"
            );
        }
    }

    /// On Linux with THP in `always` or `madvise` mode, a large buffer really is backed by
    /// huge pages (read from /proc/self/smaps); elsewhere the test says why it is skipped.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_buffers_get_huge_pages_where_the_kernel_offers_them() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if !(mode.contains("[always]") || mode.contains("[madvise]")) {
            eprintln!("skipped: transparent huge pages off here ({})", mode.trim());
            return;
        }
        if std::env::var("TESSERA_HUGE_PAGES").as_deref() == Ok("0") {
            eprintln!("skipped: TESSERA_HUGE_PAGES=0 turns the advice off");
            return;
        }
        let v = weight_buffer(32 << 20);
        // madvise splits the mapping: the advised part starts at the first aligned 2 MiB.
        let at = (v.as_ptr() as usize).next_multiple_of(HUGE);
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        // The mapping that holds the buffer, and its AnonHugePages line.
        let mut inside = false;
        let mut huge_kb = 0u64;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((a, b)) = range.split_once('-')
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                inside = (a..b).contains(&at);
                continue;
            }
            if inside && let Some(kb) = line.strip_prefix("AnonHugePages:") {
                huge_kb = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            }
        }
        assert!(
            huge_kb >= 16 << 10,
            "32 MiB buffer has only {huge_kb} kB in huge pages"
        );
        drop(v);
    }
}

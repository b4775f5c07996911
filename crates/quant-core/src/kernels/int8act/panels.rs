//! Column panels: a long row at S = 1 walked as several shorter ones. The rows of a task
//! are streamed one at a time over the first `≤ ONE_ROW_MAX_COLS` columns, then over the
//! next, and the panels' sums added; each panel's activations stay in L1 while every row
//! of the task streams past them, where a whole long row's would not.
//!
//! Why: on a 2-core AMD EPYC (Zen 4) VM (2026-12-06 11:17 UTC, `read-pair`, the int8
//! activation kernels, share of the read's speed) rows of 8192 columns one at a time read
//! 94-96% (int4-g64 [12288 x 8192] 93.7%, mq4-g256-v2 95.8%, int4-row 94.9%) while the
//! eight-row tiles of 16384-column rows read 74-79% (int4-g64 and mq4-g256-v2 on
//! [6144 x 16384]). Walked as 8192-column panels, with each row's panel asked for two rows
//! ahead ([`prefetch::panel_stream`]), [6144 x 16384] read (four alternated rounds against
//! the tiles of commit a3a33cf, 11:57 UTC, medians) int4-g64 78 against 75%, mq4-g256-v2 85
//! against 70%, int8-row 88.5 against 87%, int4-row 83 against 87% (within the spread);
//! same binary, `TESSERA_PANELS` 0 against 1 alternated in three rounds (12:30 UTC,
//! medians): int4-g64 76 -> 87%, mq4-g256-v2 79 -> 86%, q4_k 64 -> 84%, q6_k 67 -> 89.5%,
//! q8_0 83.5 -> 89%, int8-row 87 -> 89%, int4-row 84 -> 84.5% (docs/PERF.md).
//!
//! Where: fp8's bf16 kernel on every CPU (its long rows have no other form), the int8,
//! int4, affine and GGUF bodies where [`enabled`] says: not on Intel CPUs by default, where
//! their multi-row tiles read 86-91% of [6144 x 16384] (session 17, docs/PERF.md) and
//! panels have not been timed. `TESSERA_PANELS=0|1` decides on any machine.

use super::super::prefetch;
use super::ONE_ROW_MAX_COLS;
use std::sync::OnceLock;

/// Whether the int8, int4, affine and GGUF bodies walk long rows in panels (fp8's always
/// does): `TESSERA_PANELS` if set to 0 or 1, else everywhere but on Intel CPUs. Cached.
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| match std::env::var("TESSERA_PANELS").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => !prefetch::is_intel(),
    })
}

/// Weights in one panel unit: the 256-weight quads and blocks the panelled bodies walk.
pub(crate) const UNIT: usize = 256;

/// How far ahead each row asks for its lines, for a body that walks `walked` of a row's
/// `all` steps: a column panel's distances ([`prefetch::panel_stream`]) where it walks
/// fewer than all, `whole` (the body's whole-row distances: [`prefetch::per_stream`], or
/// [`prefetch::per_stream_int4`] for the int4 quad body) otherwise.
#[inline]
pub(crate) fn ahead(
    walked: usize,
    all: usize,
    row_bytes: usize,
    whole: prefetch::Ahead,
) -> prefetch::Ahead {
    if walked < all {
        prefetch::panel_stream(row_bytes)
    } else {
        whole
    }
}

/// Calls `f(u0, u1, out)` for each panel `u0..u1` of the `units` 256-weight units of a row,
/// adding the panels' outputs into `out` (the first panel writes it). A single panel (the
/// whole row) where `on` is false, `s > 1` or the row is no longer than
/// [`ONE_ROW_MAX_COLS`]. Panels are as even as whole units allow.
pub(crate) fn in_panels(
    on: bool,
    units: usize,
    s: usize,
    out: &mut [f32],
    f: impl FnMut(usize, usize, &mut [f32]),
) {
    in_panels_upto(on, units, ONE_ROW_MAX_COLS, s, out, f);
}

/// [`in_panels`] for a body whose rows go one at a time up to `max_cols` columns
/// ([`super::QBody::one_row_max_cols`]).
pub(crate) fn in_panels_upto(
    on: bool,
    units: usize,
    max_cols: usize,
    s: usize,
    out: &mut [f32],
    mut f: impl FnMut(usize, usize, &mut [f32]),
) {
    let max = (max_cols / UNIT).max(1);
    if !on || s != 1 || units <= max {
        f(0, units, out);
        return;
    }
    let width = units.div_ceil(units.div_ceil(max));
    f(0, width, out);
    let mut part = vec![0f32; out.len()];
    let mut u0 = width;
    while u0 < units {
        let u1 = (u0 + width).min(units);
        f(u0, u1, &mut part);
        for (o, p) in out.iter_mut().zip(&part) {
            *o += p;
        }
        u0 = u1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The panels `in_panels` hands out for `units` at S = `s`.
    fn panels(units: usize, s: usize) -> Vec<(usize, usize)> {
        let mut seen = Vec::new();
        in_panels(true, units, s, &mut [0f32; 1], |a, b, _| seen.push((a, b)));
        seen
    }

    #[test]
    fn long_rows_at_s1_split_evenly_short_rows_and_batches_do_not() {
        let max = ONE_ROW_MAX_COLS / UNIT;
        assert_eq!(panels(max, 1), vec![(0, max)]);
        assert_eq!(panels(2 * max, 4), vec![(0, 2 * max)]);
        let mut off = Vec::new();
        in_panels(false, 2 * max, 1, &mut [0f32; 1], |a, b, _| {
            off.push((a, b))
        });
        assert_eq!(off, vec![(0, 2 * max)]);
        assert_eq!(panels(2 * max, 1), vec![(0, max), (max, 2 * max)]);
        // 14336 columns: 56 units, two panels of 28.
        assert_eq!(panels(56, 1), vec![(0, 28), (28, 56)]);
        // One unit past the limit: two panels, the second one shorter.
        assert_eq!(
            panels(max + 1, 1),
            vec![(0, max / 2 + 1), (max / 2 + 1, max + 1)]
        );
        for units in [1, 7, max, max + 1, 3 * max + 5, 200] {
            let p = panels(units, 1);
            assert_eq!(p[0].0, 0);
            assert_eq!(p.last().unwrap().1, units);
            assert!(p.windows(2).all(|w| w[0].1 == w[1].0 && w[0].0 < w[0].1));
            assert!(p.iter().all(|(a, b)| b - a <= max));
        }
    }

    #[test]
    fn a_body_s_own_limit_sets_its_panels() {
        let upto = |units: usize, max_cols: usize| {
            let mut seen = Vec::new();
            in_panels_upto(true, units, max_cols, 1, &mut [0f32; 1], |a, b, _| {
                seen.push((a, b))
            });
            seen
        };
        // 16384 columns: one panel under a 16384-column limit, two under the default.
        assert_eq!(upto(64, 16384), vec![(0, 64)]);
        assert_eq!(panels(64, 1), vec![(0, 32), (32, 64)]);
        assert_eq!(upto(65, 16384), vec![(0, 33), (33, 65)]);
        // A limit below one unit still walks whole units.
        assert_eq!(upto(2, 100), vec![(0, 1), (1, 2)]);
    }

    #[test]
    fn a_panel_asks_two_rows_ahead_a_whole_row_as_before() {
        let rows = prefetch::per_stream(8);
        let (panel, whole) = (ahead(1, 2, 1000, rows), ahead(2, 2, 1000, rows));
        assert_eq!(panel, prefetch::panel_stream(1000));
        assert_eq!(whole, rows);
        if panel != prefetch::Ahead::OFF {
            assert_eq!(panel.far, 2000);
            assert_ne!(panel, whole);
        }
    }

    #[test]
    fn the_panels_outputs_are_added() {
        let mut out = [0f32; 3];
        in_panels(true, 3 * ONE_ROW_MAX_COLS / UNIT, 1, &mut out, |a, b, o| {
            for (i, v) in o.iter_mut().enumerate() {
                *v = (a + b + i) as f32;
            }
        });
        let max = ONE_ROW_MAX_COLS / UNIT;
        let sum = |i: usize| (0..3).map(|p| (2 * p * max + max + i) as f32).sum::<f32>();
        assert_eq!(out, [sum(0), sum(1), sum(2)]);
    }
}

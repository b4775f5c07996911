//! What the pair crate's two binaries (`candle-pair`, `read-pair`) share: their arguments,
//! the working set they rotate over, and the median they report.

use quant_core::Format;

/// Bytes the copies of one side must reach, as in the anchor and the criterion bench.
pub const WORKING_SET: f64 = 256e6;

/// The bench's shapes [O, I] (issue 2's and issue 8's).
pub const SHAPES: &str = "4096x4096,14336x4096,6144x16384";

/// Copies of a `bytes`-byte tensor that reach [`WORKING_SET`] (1 to 64).
pub fn copies(bytes: usize) -> usize {
    (WORKING_SET / bytes as f64).ceil().clamp(1.0, 64.0) as usize
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Formats (argument 1, comma-separated, else `default`) and shapes [O, I] (argument 2, else
/// [`SHAPES`]) from the command line; a malformed one stops the program with its name.
pub fn formats_and_shapes(default: &str) -> (Vec<Format>, Vec<(usize, usize)>) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let pick = |k: usize, d: &str| args.get(k).map_or(d, |s| s.as_str()).to_string();
    let formats = pick(0, default)
        .split(',')
        .map(|s| {
            s.parse::<Format>()
                .unwrap_or_else(|e| panic!("format {s:?}: {e}"))
        })
        .collect();
    let shapes = pick(1, SHAPES)
        .split(',')
        .map(|s| {
            let dims = s
                .split_once('x')
                .and_then(|(o, i)| Some((o.parse().ok()?, i.parse().ok()?)));
            dims.unwrap_or_else(|| panic!("shape {s:?}: want OxI"))
        })
        .collect();
    (formats, shapes)
}

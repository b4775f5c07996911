//! The conformance suite: one generic test of any [`Backend`] against the f64 oracle, run
//! over every format × op × shape class × batch. Each (backend, op, format) comes back as a
//! [`Cell`]: pass (worst error), fail (worst error and every failing case with its seed and
//! shape), unavailable (why) or not implemented.
//!
//! Backends get it two ways: [`conformance_tests!`](crate::conformance_tests) writes one
//! `#[test]` per format for a backend (the cubecl testgen pattern: implement the trait,
//! write one line), and `cargo xtask test-matrix` calls [`run_suite`] for every backend it
//! was built with and turns the cells into docs/BACKENDS.md.
//!
//! What a cell checks, for every shape class the format can hold and every batch S of the
//! op (plus the edges of the backend's own rows):
//! - where a row of the backend's table admits (format, S): the call succeeds, every output
//!   was written (outputs are poisoned with [`POISON`] first), and the worst per-output
//!   error against [`reference_gemm`] is within [`Backend::tolerance`];
//! - where no row admits it: the call returns [`BackendError::NotImplemented`]. A backend
//!   that answers outside its own table fails, because the engine trusts the table.
//!
//! Data is fresh each run: weights with outlier rows and activations with a large channel
//! from [`crate::testdata`], drawn from a seed that the caller prints; `TESSERA_SEED`
//! replays it. Each (format, shape class, op) draws from its own stream of that seed, so a
//! replay narrowed to one format (`TESSERA_FORMATS`, `--format`) sees the same data.

use crate::api::{EncodeOptions, encode};
use crate::capability::{Backend, BackendError, Capability, Op};
use crate::oracle::{POISON, Reference, reference_gemm, worst_error};
use crate::registry::{Format, ScaleLayout};
use crate::tensor::QTensor;
use crate::testdata::{Rng, activations, fresh_seed, weights};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Every op, in column order.
pub const OPS: [Op; 2] = [Op::Gemv, Op::Gemm];

/// Position of `op` in [`OPS`]. Exhaustive, so a new op must be placed (and given
/// [`batches`]) before anything compiles.
pub const fn op_index(op: Op) -> usize {
    match op {
        Op::Gemv => 0,
        Op::Gemm => 1,
    }
}

/// The batches the suite runs an op at: S = 1, 2-4, 8, 16 and 64 for GEMV; large batches
/// for GEMM. The edges of the backend's own rows (s_min, s_max, s_max + 1) are added per
/// format, up to [`MAX_SUITE_BATCH`].
pub const fn batches(op: Op) -> &'static [usize] {
    match op {
        Op::Gemv => &[1, 2, 3, 4, 8, 16, 64],
        Op::Gemm => &[128, 256],
    }
}

/// The largest batch the suite runs; table edges beyond it are not probed.
pub const MAX_SUITE_BATCH: usize = 512;

/// A kind of [O, I] shape that exercises one edge of a format.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ShapeClass {
    /// I a multiple of the format's unit (block, group or tile) and O a multiple of 128:
    /// large enough that the CPU splits it across tasks.
    Aligned,
    /// Aligned I, O odd (row-blocked kernels' remainders; a partial fp8 row band).
    OddO,
    /// I odd (a partial byte of nibbles or codes, a partial group).
    OddI,
    /// I ends in a partial group / block / tile, and O in a partial tile band (fp8).
    Partial,
    /// I below one group / block / tile.
    BelowUnit,
    /// O = 1.
    SingleRow,
}

/// Every shape class, in report order.
pub const SHAPE_CLASSES: [ShapeClass; 6] = [
    ShapeClass::Aligned,
    ShapeClass::OddO,
    ShapeClass::OddI,
    ShapeClass::Partial,
    ShapeClass::BelowUnit,
    ShapeClass::SingleRow,
];

/// The weights along I that a format's layout comes in: the largest of its storage block
/// and its group or tile width.
pub fn unit_along_i(format: Format) -> usize {
    let spec = format.spec();
    let scales = match spec.scales {
        ScaleLayout::PerGroup { group, .. } => group,
        ScaleLayout::PerTile { cols, .. } => cols,
        ScaleLayout::None
        | ScaleLayout::Inline
        | ScaleLayout::PerRow(_)
        | ScaleLayout::PerTensor(_) => 1,
    };
    scales.max(spec.block_weights) as usize
}

fn round_up(n: usize, unit: usize) -> usize {
    n.div_ceil(unit) * unit
}

impl ShapeClass {
    pub const fn name(self) -> &'static str {
        match self {
            ShapeClass::Aligned => "aligned",
            ShapeClass::OddO => "odd-O",
            ShapeClass::OddI => "odd-I",
            ShapeClass::Partial => "partial-group/block/tile",
            ShapeClass::BelowUnit => "I<group",
            ShapeClass::SingleRow => "O=1",
        }
    }

    /// [O, I] of this class for `format`; `None` where the format cannot hold such a shape
    /// (the 256-weight families have no partial blocks; plain per-row formats have no
    /// groups to cut).
    pub fn shape(self, format: Format) -> Option<(usize, usize)> {
        let spec = format.spec();
        let unit = unit_along_i(format);
        // 1536 and 768 are multiples of every unit in the registry (16..256, 48, 96, 192);
        // the rounding only matters for a future format with another unit.
        let aligned_i = round_up(1536, unit);
        let half_i = round_up(768, unit);
        let cuttable = unit > 1 && !spec.whole_blocks_only;
        match self {
            ShapeClass::Aligned => Some((round_up(512, spec.row_block()), aligned_i)),
            ShapeClass::OddO => Some((67, half_i)),
            ShapeClass::OddI => (!spec.whole_blocks_only).then_some((37, 333)),
            ShapeClass::Partial => {
                let rows = if spec.row_block() > 1 {
                    spec.row_block() + 3
                } else {
                    19
                };
                cuttable.then_some((rows, 2 * unit + unit / 2))
            }
            ShapeClass::BelowUnit => cuttable.then_some((9, unit - 1)),
            ShapeClass::SingleRow => Some((1, half_i)),
        }
    }
}

impl fmt::Display for ShapeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which part of the suite to run, and from which seed.
#[derive(Clone, Debug)]
pub struct Filter {
    pub formats: Vec<Format>,
    pub ops: Vec<Op>,
    pub seed: u64,
}

impl Filter {
    /// Every format and op.
    pub fn everything(seed: u64) -> Filter {
        Filter {
            formats: Format::all().collect(),
            ops: OPS.to_vec(),
            seed,
        }
    }

    /// Every op; formats from `TESSERA_FORMATS` (comma-separated names) or all; the seed
    /// from [`seed_from_env`].
    pub fn from_env() -> Result<Filter, String> {
        let mut f = Filter::everything(seed_from_env()?);
        if let Ok(list) = std::env::var("TESSERA_FORMATS") {
            f.formats = parse_formats(&list)?;
        }
        Ok(f)
    }
}

/// Comma-separated registry names.
pub fn parse_formats(list: &str) -> Result<Vec<Format>, String> {
    list.split(',')
        .filter(|n| !n.trim().is_empty())
        .map(|n| n.trim().parse::<Format>().map_err(|e| e.to_string()))
        .collect()
}

/// `TESSERA_SEED` if set (to replay a run), otherwise a fresh seed.
pub fn seed_from_env() -> Result<u64, String> {
    match std::env::var("TESSERA_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|e| format!("TESSERA_SEED={s:?}: {e}")),
        Err(_) => Ok(fresh_seed()),
    }
}

/// The verdict of one (backend, op, format).
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every case within tolerance; `worst` is the largest error seen.
    Pass { worst: f64 },
    /// At least one case failed; `worst` is the largest error of the compared cases (0
    /// when the failures are refusals or answers outside the table), `failures` names each
    /// failing case with its shape and batch.
    Fail { worst: f64, failures: Vec<String> },
    /// The backend cannot run here.
    Unavailable { why: String },
    /// The op has no row for this format in the backend's table, and the backend refused
    /// every call for it, as it must.
    NotImplemented,
}

impl Outcome {
    pub fn is_failure(&self) -> bool {
        matches!(self, Outcome::Fail { .. })
    }

    /// One line with the measured worst error, e.g. "pass (3.1e-7)".
    pub fn summary(&self) -> String {
        match self {
            Outcome::Pass { worst } => format!("pass ({worst:.1e})"),
            Outcome::Fail { worst, .. } if *worst > 0.0 => format!("FAIL ({worst:.1e})"),
            Outcome::Fail { .. } => "FAIL".to_string(),
            Outcome::Unavailable { why } => format!("unavailable: {why}"),
            Outcome::NotImplemented => "not implemented".to_string(),
        }
    }
}

/// Failing cases a [`Cell`] displays; the rest are counted.
pub const SHOWN_FAILURES: usize = 12;

/// One (backend, op, format) of the matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    pub backend: &'static str,
    pub op: Op,
    pub format: Format,
    pub seed: u64,
    /// The backend's [`Backend::tolerance`].
    pub tolerance: f64,
    /// Calls compared against the oracle.
    pub compared: usize,
    /// Calls correctly refused as outside the table.
    pub refused: usize,
    pub outcome: Outcome,
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}: {} [{} compared, {} refused, tolerance {:.0e}]",
            self.backend,
            self.op.name(),
            self.format,
            self.outcome.summary(),
            self.compared,
            self.refused,
            self.tolerance
        )?;
        if let Outcome::Fail { failures, .. } = &self.outcome {
            for line in failures.iter().take(SHOWN_FAILURES) {
                write!(f, "\n    {line}")?;
            }
            if failures.len() > SHOWN_FAILURES {
                write!(f, "\n    ... and {} more", failures.len() - SHOWN_FAILURES)?;
            }
        }
        Ok(())
    }
}

/// A generator for one (format, class, op) of `seed`, independent of which other parts run.
fn stream(seed: u64, parts: &[u64]) -> Rng {
    let mut h = seed;
    for &p in parts {
        h = Rng::new(h ^ p.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15)).next_u64();
    }
    Rng::new(h)
}

/// What one (op, format) has gathered so far.
#[derive(Default)]
struct Tally {
    worst: f64,
    compared: usize,
    refused: usize,
    failures: Vec<String>,
}

/// Whether some row of `table` admits (format, S): the trait has one entry point for the
/// product, so any op's row makes a call legal.
fn admitted(table: &[Capability], format: Format, s: usize) -> bool {
    table
        .iter()
        .any(|c| c.format == format && c.constraint.admits(s))
}

/// The batches `op` runs at for `format`: the suite's own, plus the edges of the backend's
/// rows for (op, format) so that every row is exercised and its upper bound is probed.
fn batches_for(table: &[Capability], op: Op, format: Format) -> Vec<usize> {
    let mut out = batches(op).to_vec();
    for c in table.iter().filter(|c| c.op == op && c.format == format) {
        let (lo, hi) = (c.constraint.s_min, c.constraint.s_max);
        for s in [lo, hi, hi.saturating_add(1)] {
            if (1..=MAX_SUITE_BATCH).contains(&s) {
                out.push(s);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".to_string())
}

/// Runs `op` of `backend` over one encoded tensor at every batch of the op.
fn check_op(
    backend: &dyn Backend,
    t: &QTensor<'_>,
    op: Op,
    class: ShapeClass,
    seed: u64,
    tally: &mut Tally,
) {
    let table = backend.capabilities();
    let (format, rows, cols) = (t.format(), t.rows(), t.cols());
    let ss = batches_for(table, op, format);
    let Some(&s_all) = ss.last() else { return };
    let mut rng = stream(
        seed,
        &[format as u64, class as u64, 100 + op_index(op) as u64],
    );
    let x = activations(&mut rng, s_all, cols);
    // One reference at the largest admitted batch; smaller batches use its leading rows
    // (y is [S, O] row-major, so batch prefixes are output prefixes).
    let s_ref = ss
        .iter()
        .copied()
        .filter(|&s| admitted(table, format, s))
        .max();
    let reference = s_ref.map(|s| reference_gemm(t, &x[..s * cols], s));
    for &s in &ss {
        let case = format!("{class} O={rows} I={cols} S={s} (seed {seed})");
        let mut y = vec![POISON; s * rows];
        let called = catch_unwind(AssertUnwindSafe(|| {
            backend.gemv(t, &x[..s * cols], s, &mut y)
        }));
        let result = match called {
            Ok(r) => r,
            Err(p) => {
                tally
                    .failures
                    .push(format!("{case}: panicked: {}", panic_text(&*p)));
                continue;
            }
        };
        match (admitted(table, format, s), result, &reference) {
            (true, Ok(()), Some(r)) => {
                let n = s * rows;
                let sub = Reference {
                    y: r.y[..n].to_vec(),
                    magnitude: r.magnitude[..n].to_vec(),
                };
                let w = worst_error(&y, &sub);
                tally.compared += 1;
                tally.worst = tally.worst.max(w.error);
                if w.error.is_nan() || w.error > backend.tolerance() {
                    let (k, o) = (w.index / rows, w.index % rows);
                    tally.failures.push(format!(
                        "{case}: error {:.3e} at s={k}, o={o} (got {}, want {})",
                        w.error, y[w.index], sub.y[w.index]
                    ));
                }
            }
            (true, Ok(()), None) => {
                tally.failures.push(format!(
                    "{case}: no reference (suite bug: admitted S above the reference batch)"
                ));
            }
            (true, Err(e), _) => {
                tally.failures.push(format!(
                    "{case}: refused a combination its table lists: {e}"
                ));
            }
            (false, Err(BackendError::NotImplemented { .. }), _) => tally.refused += 1,
            (false, Err(e), _) => {
                tally.failures.push(format!(
                    "{case}: outside the table, expected NotImplemented, got: {e}"
                ));
            }
            (false, Ok(()), _) => {
                tally.failures.push(format!(
                    "{case}: returned a result for a combination outside its capability table"
                ));
            }
        }
    }
}

/// Table rows that cannot mean what they say.
fn check_rows(table: &[Capability], op: Op, format: Format, tally: &mut Tally) {
    for c in table.iter().filter(|c| c.op == op && c.format == format) {
        let (lo, hi) = (c.constraint.s_min, c.constraint.s_max);
        if lo == 0 || lo > hi {
            tally.failures.push(format!(
                "capability row {op:?} {format} has an empty or zero batch range {lo}..={hi}"
            ));
        } else if lo > MAX_SUITE_BATCH {
            tally.failures.push(format!(
                "capability row {op:?} {format} starts at S={lo}, above the suite's largest batch {MAX_SUITE_BATCH}"
            ));
        }
    }
}

/// Runs the suite for `backend` over `filter`'s formats and ops: one [`Cell`] per
/// (op, format), formats outermost. Never panics on a backend's behalf: a backend that
/// panics fails the case.
pub fn run_suite(backend: &dyn Backend, filter: &Filter) -> Vec<Cell> {
    let name = backend.name();
    let tolerance = backend.tolerance();
    let cell = |op: Op, format: Format, compared, refused, outcome| Cell {
        backend: name,
        op,
        format,
        seed: filter.seed,
        tolerance,
        compared,
        refused,
        outcome,
    };
    let probed = catch_unwind(AssertUnwindSafe(|| backend.probe())).unwrap_or_else(|p| {
        Err(BackendError::Unavailable {
            why: format!("probe panicked: {}", panic_text(&*p)),
        })
    });
    if let Err(e) = probed {
        let why = match e {
            BackendError::Unavailable { why } => why,
            other => other.to_string(),
        };
        return filter
            .formats
            .iter()
            .flat_map(|&f| filter.ops.iter().map(move |&op| (op, f)))
            .map(|(op, f)| cell(op, f, 0, 0, Outcome::Unavailable { why: why.clone() }))
            .collect();
    }
    let table = backend.capabilities();
    let mut cells = Vec::new();
    for &format in &filter.formats {
        let mut tallies: Vec<Tally> = filter.ops.iter().map(|_| Tally::default()).collect();
        for (&op, tally) in filter.ops.iter().zip(&mut tallies) {
            check_rows(table, op, format, tally);
        }
        for class in SHAPE_CLASSES {
            let Some((rows, cols)) = class.shape(format) else {
                continue;
            };
            let mut rng = stream(filter.seed, &[format as u64, class as u64]);
            let w = weights(&mut rng, rows, cols);
            let opts = EncodeOptions {
                rotation_seed: rng.next_u64(),
                ..Default::default()
            };
            let t = match encode(format, rows, cols, &w, &opts) {
                Ok(t) => t,
                Err(e) => {
                    for tally in &mut tallies {
                        tally
                            .failures
                            .push(format!("{class} O={rows} I={cols}: encode failed: {e}"));
                    }
                    continue;
                }
            };
            for (&op, tally) in filter.ops.iter().zip(&mut tallies) {
                check_op(backend, &t.view(), op, class, filter.seed, tally);
            }
        }
        for (&op, tally) in filter.ops.iter().zip(tallies) {
            let listed = table.iter().any(|c| c.op == op && c.format == format);
            let outcome = if !tally.failures.is_empty() {
                Outcome::Fail {
                    worst: tally.worst,
                    failures: tally.failures,
                }
            } else if !listed {
                Outcome::NotImplemented
            } else if tally.compared == 0 {
                Outcome::Fail {
                    worst: 0.0,
                    failures: vec![format!(
                        "the table lists {op:?} {format} but no suite batch falls in its rows"
                    )],
                }
            } else {
                Outcome::Pass { worst: tally.worst }
            };
            cells.push(cell(op, format, tally.compared, tally.refused, outcome));
        }
    }
    cells
}

/// The body of each test [`conformance_tests!`](crate::conformance_tests) writes: runs
/// every op of `format` on `backend` and panics, listing every failing case and the seed,
/// if any cell fails. An unavailable backend skips (saying why) unless its name is in
/// `TESSERA_REQUIRE_BACKENDS` (comma-separated), where a machine is meant to have it.
pub fn assert_format_conforms(backend: &dyn Backend, format: Format) {
    let seed = match seed_from_env() {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let filter = Filter {
        formats: vec![format],
        ops: OPS.to_vec(),
        seed,
    };
    let cells = run_suite(backend, &filter);
    eprintln!(
        "conformance {} {format}, seed {seed} (TESSERA_SEED={seed} replays):",
        backend.name()
    );
    for c in &cells {
        eprintln!("  {c}");
    }
    let required = required_here(backend);
    for c in &cells {
        if let Outcome::Unavailable { why } = &c.outcome {
            assert!(
                !required,
                "{}: unavailable but required by TESSERA_REQUIRE_BACKENDS: {why}",
                backend.name()
            );
            eprintln!("  skipped: {} is unavailable here: {why}", backend.name());
            return;
        }
    }
    let failed: Vec<String> = cells
        .iter()
        .filter(|c| c.outcome.is_failure())
        .map(|c| c.to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{} {format} fails conformance (replay: TESSERA_SEED={seed}):\n{}",
        backend.name(),
        failed.join("\n")
    );
}

/// Writes the whole conformance suite for a backend as `#[test]`s, one per registry format,
/// in a module (`conformance` unless named):
///
/// ```ignore
/// quant_core::conformance_tests!(quant_core::cpu_backend::CpuBackend);
/// quant_core::conformance_tests!(cuda_suite, my_crate::CudaConformance::new());
/// ```
///
/// The expression is evaluated once per test and must yield a value whose type implements
/// [`Backend`]. Tests are named after the formats (`conformance::int4_g64`), so
/// `cargo test int4_g64` runs one. The generated module holds an exhaustive `match` over
/// the listed formats: a format added to the registry but not here fails to compile.
#[macro_export]
macro_rules! conformance_tests {
    ($backend:expr) => {
        $crate::conformance_tests!(conformance, $backend);
    };
    ($module:ident, $backend:expr) => {
        $crate::__conformance_tests_for_formats! {
            $module, $backend;
            F32 f32,
            F16 f16,
            Bf16 bf16,
            Int8Row int8_row,
            Int4Row int4_row,
            Int2Row int2_row,
            Int4G16 int4_g16,
            Int4G32 int4_g32,
            Int4G48 int4_g48,
            Int4G64 int4_g64,
            Int4G96 int4_g96,
            Int4G128 int4_g128,
            Int4G192 int4_g192,
            Int4G256 int4_g256,
            Int3G64 int3_g64,
            E8Lattice e8_lattice,
            Fp8E4m3B128 fp8_e4m3_b128,
            Fp8E4m3B128Ue8m0 fp8_e4m3_b128_ue8m0,
            Hfq4G256 hfq4_g256,
            Mq4G256 mq4_g256,
            Mq4G256V2 mq4_g256_v2,
            Mq4cG256 mq4c_g256,
            Mq4K mq4_k,
            Mxfp4 mxfp4,
            Q8_0 q8_0,
            Q4_0 q4_0,
            Q4_1 q4_1,
            Q5_0 q5_0,
            Q5_1 q5_1,
            Q2K q2_k,
            Q3K q3_k,
            Q4K q4_k,
            Q5K q5_k,
            Q6K q6_k,
            Iq4Nl iq4_nl,
            Iq4Xs iq4_xs,
            GgufMxfp4 gguf_mxfp4,
        }
    };
}

/// Whether `TESSERA_REQUIRE_BACKENDS` (comma-separated) names `backend`: this machine is
/// meant to have it, so its being unavailable fails the test instead of skipping it.
fn required_here(backend: &dyn Backend) -> bool {
    std::env::var("TESSERA_REQUIRE_BACKENDS")
        .is_ok_and(|l| l.split(',').any(|n| n.trim() == backend.name()))
}

/// The rows of [`assert_nan_rows_poisoned`]'s tensors that hold a NaN code, and where:
/// (row, column, byte). Rows 1 and 4 share a 32-row word of a per-row bitmap, 33 and 69
/// lie in the next two; 0xFF is the negative NaN; column 299 is in the partial last tile.
const NAN_CODES: [(usize, usize, u8); 4] = [
    (1, 37, 0x7F),
    (4, 299, 0xFF),
    (33, 0, 0x7F),
    (69, 150, 0xFF),
];

/// A NaN weight (E4M3 0x7F / 0xFF) makes exactly its row's outputs NaN, at S = 1, 2, 3 and
/// 16, for both fp8 formats, and every other output is finite: [70 x 300] tensors (three
/// column tiles, the last partial) with NaN codes in rows 1, 4, 33 and 69. Batches outside
/// the backend's table are skipped; an unavailable backend skips (saying why) unless
/// `TESSERA_REQUIRE_BACKENDS` names it.
pub fn assert_nan_rows_poisoned(backend: &dyn Backend) {
    let (rows, cols) = (70, 300);
    let seed = match seed_from_env() {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    if let Err(e) = backend.probe() {
        assert!(
            !required_here(backend),
            "{}: unavailable but required by TESSERA_REQUIRE_BACKENDS: {e}",
            backend.name()
        );
        eprintln!("skipped: {} is unavailable here: {e}", backend.name());
        return;
    }
    let mut rng = Rng::new(seed ^ 0x4E_41_4E);
    for format in [Format::Fp8E4m3B128, Format::Fp8E4m3B128Ue8m0] {
        let w = weights(&mut rng, rows, cols);
        let t = encode(format, rows, cols, &w, &EncodeOptions::default())
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        let mut bytes = t.weights.clone();
        for (r, c, b) in NAN_CODES {
            bytes[r * cols + c] = b;
        }
        let bad = QTensor::new(format, rows, cols, &bytes, &t.scales, t.rotation_seed)
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        for s in [1usize, 2, 3, 16] {
            let x = activations(&mut rng, s, cols);
            let mut y = vec![POISON; s * rows];
            match backend.gemv(&bad, &x, s, &mut y) {
                Ok(()) => {}
                Err(BackendError::NotImplemented { .. }) => continue,
                Err(e) => panic!("{} {format} S = {s}: {e}", backend.name()),
            }
            for k in 0..s {
                for r in 0..rows {
                    let v = y[k * rows + r];
                    let nan_row = NAN_CODES.iter().any(|c| c.0 == r);
                    assert!(
                        if nan_row {
                            // POISON is a NaN too: an unwritten output must not pass.
                            v.is_nan() && v.to_bits() != POISON.to_bits()
                        } else {
                            v.is_finite()
                        },
                        "{} {format} S = {s}, batch row {k}, row {r} (NaN code: {nan_row}): {v} \
                         (replay: TESSERA_SEED={seed})",
                        backend.name()
                    );
                }
            }
        }
    }
}

/// The expansion of [`conformance_tests!`]; not for direct use.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests_for_formats {
    ($module:ident, $backend:expr; $($variant:ident $test:ident),* $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            /// Compile-time completeness: one arm per listed format and no catch-all.
            #[allow(dead_code)]
            const fn every_format_has_a_test(f: $crate::Format) {
                match f {
                    $($crate::Format::$variant => {})*
                }
            }

            $(
                #[test]
                fn $test() {
                    let backend = $backend;
                    $crate::conformance::assert_format_conforms(&backend, $crate::Format::$variant);
                }
            )*

            #[test]
            fn nan_codes_poison_exactly_their_rows() {
                let backend = $backend;
                $crate::conformance::assert_nan_rows_poisoned(&backend);
            }
        }
    };
}

#[cfg(test)]
mod tests {
    //! The suite against deliberately wrong backends: each must fail, for the right reason.

    use super::*;
    use crate::capability::{Constraint, lookup};
    use crate::cpu_backend::CpuBackend;

    /// The CPU kernels with a twist. A `gated` mutant refuses what its table does not list,
    /// so the twist is the only thing wrong with it.
    struct Mutant {
        table: &'static [Capability],
        gated: bool,
        wrong: fn(&mut [f32]),
    }

    impl Backend for Mutant {
        fn name(&self) -> &'static str {
            "mutant"
        }
        fn probe(&self) -> Result<(), BackendError> {
            Ok(())
        }
        fn capabilities(&self) -> &'static [Capability] {
            self.table
        }
        fn gemv(
            &self,
            t: &QTensor<'_>,
            x: &[f32],
            s: usize,
            y: &mut [f32],
        ) -> Result<(), BackendError> {
            let format = t.format();
            if self.gated && lookup(self.table, Op::Gemv, format, s).is_none() {
                return Err(BackendError::NotImplemented {
                    backend: "mutant",
                    op: "gemv",
                    format,
                    s,
                });
            }
            crate::kernels::gemm(t, x, s, y)?;
            (self.wrong)(y);
            Ok(())
        }
    }

    static INT8_GEMV: &[Capability] = &[Capability {
        op: Op::Gemv,
        format: Format::Int8Row,
        constraint: Constraint::batch(1, 16),
    }];

    fn one(format: Format) -> Filter {
        Filter {
            formats: vec![format],
            ops: OPS.to_vec(),
            seed: 7,
        }
    }

    fn gemv_cell(cells: &[Cell]) -> &Cell {
        &cells[op_index(Op::Gemv)]
    }

    fn failures(cell: &Cell) -> (f64, &[String]) {
        match &cell.outcome {
            Outcome::Fail { worst, failures } => (*worst, failures),
            Outcome::Pass { .. } | Outcome::Unavailable { .. } | Outcome::NotImplemented => {
                panic!("expected a failure: {cell}")
            }
        }
    }

    #[test]
    fn every_class_has_a_shape_the_format_accepts() {
        for f in Format::all() {
            let mut n = 0;
            for c in SHAPE_CLASSES {
                if let Some((rows, cols)) = c.shape(f) {
                    f.spec().check_shape(rows, cols).unwrap();
                    n += 1;
                }
            }
            assert!(n >= 3, "{f}: only {n} shape classes apply");
        }
        assert_eq!(
            OPS.iter().map(|&op| op_index(op)).collect::<Vec<_>>(),
            [0, 1]
        );
    }

    #[test]
    fn cpu_int8_passes() {
        let cells = run_suite(&CpuBackend, &one(Format::Int8Row));
        assert!(
            matches!(gemv_cell(&cells).outcome, Outcome::Pass { .. }),
            "{}",
            gemv_cell(&cells)
        );
        assert_eq!(cells[op_index(Op::Gemm)].outcome, Outcome::NotImplemented);
    }

    #[test]
    fn a_gated_mutant_without_a_twist_passes() {
        let m = Mutant {
            table: INT8_GEMV,
            gated: true,
            wrong: |_| {},
        };
        let cells = run_suite(&m, &one(Format::Int8Row));
        assert!(
            matches!(gemv_cell(&cells).outcome, Outcome::Pass { .. }),
            "{}",
            gemv_cell(&cells)
        );
        // S = 17 (just past the row) and 64 were refused in every shape class.
        assert!(gemv_cell(&cells).refused >= 2 * 4, "{}", gemv_cell(&cells));
    }

    #[test]
    fn a_one_percent_scale_error_fails() {
        let m = Mutant {
            table: INT8_GEMV,
            gated: true,
            wrong: |y| y.iter_mut().for_each(|v| *v *= 1.01),
        };
        let cells = run_suite(&m, &one(Format::Int8Row));
        let (worst, failures) = failures(gemv_cell(&cells));
        assert!(worst > 1e-3, "{worst}");
        assert!(
            failures.iter().all(|f| f.contains(": error ")),
            "{failures:?}"
        );
    }

    #[test]
    fn an_unwritten_output_fails() {
        /// Computes into its own buffer and leaves the caller's last output as it found it.
        struct Lazy;
        impl Backend for Lazy {
            fn name(&self) -> &'static str {
                "lazy"
            }
            fn probe(&self) -> Result<(), BackendError> {
                Ok(())
            }
            fn capabilities(&self) -> &'static [Capability] {
                INT8_GEMV
            }
            fn gemv(
                &self,
                t: &QTensor<'_>,
                x: &[f32],
                s: usize,
                y: &mut [f32],
            ) -> Result<(), BackendError> {
                let format = t.format();
                if lookup(INT8_GEMV, Op::Gemv, format, s).is_none() {
                    return Err(BackendError::NotImplemented {
                        backend: "lazy",
                        op: "gemv",
                        format,
                        s,
                    });
                }
                let mut mine = vec![0f32; y.len()];
                crate::kernels::gemm(t, x, s, &mut mine)?;
                let n = y.len() - 1;
                y[..n].copy_from_slice(&mine[..n]);
                Ok(())
            }
        }
        let cells = run_suite(&Lazy, &one(Format::Int8Row));
        let (worst, failures) = failures(gemv_cell(&cells));
        assert!(worst.is_infinite());
        assert!(
            failures.iter().all(|f| f.contains(": error inf")),
            "{failures:?}"
        );
    }

    #[test]
    fn answering_outside_the_table_fails() {
        // The table stops at S = 16 but the mutant computes S = 17 and 64 anyway; for
        // int4-g64 it has no row at all.
        let m = Mutant {
            table: INT8_GEMV,
            gated: false,
            wrong: |_| {},
        };
        let cells = run_suite(&m, &one(Format::Int8Row));
        let (_, failures) = failures(gemv_cell(&cells));
        assert!(
            failures
                .iter()
                .all(|f| f.contains("outside its capability table")),
            "{failures:?}"
        );
        assert!(failures.iter().any(|f| f.contains("S=17 ")), "{failures:?}");
        let cells = run_suite(&m, &one(Format::Int4G64));
        assert!(
            gemv_cell(&cells).outcome.is_failure(),
            "{}",
            gemv_cell(&cells)
        );
    }

    #[test]
    fn refusing_a_listed_combination_fails() {
        struct Refuser;
        impl Backend for Refuser {
            fn name(&self) -> &'static str {
                "refuser"
            }
            fn probe(&self) -> Result<(), BackendError> {
                Ok(())
            }
            fn capabilities(&self) -> &'static [Capability] {
                INT8_GEMV
            }
            fn gemv(
                &self,
                t: &QTensor<'_>,
                _: &[f32],
                s: usize,
                _: &mut [f32],
            ) -> Result<(), BackendError> {
                Err(BackendError::NotImplemented {
                    backend: "refuser",
                    op: "gemv",
                    format: t.format(),
                    s,
                })
            }
        }
        let cells = run_suite(&Refuser, &one(Format::Int8Row));
        let (_, failures) = failures(gemv_cell(&cells));
        assert!(
            failures
                .iter()
                .all(|f| f.contains("refused a combination its table lists")),
            "{failures:?}"
        );
        // A format it does not list is correctly not implemented.
        let cells = run_suite(&Refuser, &one(Format::Mxfp4));
        assert_eq!(gemv_cell(&cells).outcome, Outcome::NotImplemented);
    }

    #[test]
    fn an_absent_backend_is_unavailable_everywhere() {
        struct Absent;
        impl Backend for Absent {
            fn name(&self) -> &'static str {
                "absent"
            }
            fn probe(&self) -> Result<(), BackendError> {
                Err(BackendError::Unavailable {
                    why: "no device".into(),
                })
            }
            fn capabilities(&self) -> &'static [Capability] {
                &[]
            }
            fn gemv(
                &self,
                _: &QTensor<'_>,
                _: &[f32],
                _: usize,
                _: &mut [f32],
            ) -> Result<(), BackendError> {
                unreachable!("the suite must not call an unavailable backend")
            }
        }
        let cells = run_suite(&Absent, &Filter::everything(1));
        assert_eq!(cells.len(), Format::all().count() * OPS.len());
        assert!(cells.iter().all(|c| c.outcome
            == Outcome::Unavailable {
                why: "no device".into()
            }));
    }

    #[test]
    fn a_panicking_backend_fails_instead_of_aborting() {
        let m = Mutant {
            table: INT8_GEMV,
            gated: true,
            wrong: |_| panic!("boom"),
        };
        let cells = run_suite(&m, &one(Format::Int8Row));
        let (_, failures) = failures(gemv_cell(&cells));
        assert!(
            failures.iter().all(|f| f.contains("panicked: boom")),
            "{failures:?}"
        );
    }
}

//! Test data for conformance suites: random weights with outlier rows, random activations.
//!
//! Seeded so a failure can be replayed; callers draw a fresh seed each run and print it.

/// A small, fast, seedable generator (SplitMix64), so quant-core needs no rand dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f32 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// A fresh seed for a test run (time-based), to print alongside any failure.
pub fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5EED)
}

/// Row-major [rows, cols] weights ~ N(0, 0.02²), with every 7th row an outlier row: scaled
/// by 50 and carrying a few spikes 20x larger, as real checkpoints have.
pub fn weights(rng: &mut Rng, rows: usize, cols: usize) -> Vec<f32> {
    let mut w = vec![0f32; rows * cols];
    for (o, row) in w.chunks_exact_mut(cols).enumerate() {
        let outlier = o % 7 == 3;
        let scale = if outlier { 1.0 } else { 0.02 };
        for v in row.iter_mut() {
            *v = rng.normal() * scale;
        }
        if outlier {
            for _ in 0..cols.div_ceil(64) {
                let i = rng.below(cols);
                row[i] *= 20.0;
            }
        }
    }
    w
}

/// Row-major [s, cols] activations ~ N(0, 1) with an occasional large channel.
pub fn activations(rng: &mut Rng, s: usize, cols: usize) -> Vec<f32> {
    let mut x: Vec<f32> = (0..s * cols).map(|_| rng.normal()).collect();
    if cols > 4 {
        for k in 0..s {
            x[k * cols + rng.below(cols)] = 50.0;
        }
    }
    x
}

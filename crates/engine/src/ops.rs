//! Host-side f32 operations of the graphs: RMSNorm, SwiGLU, softmax and RoPE, written to
//! follow transformers' definitions step for step (f32 throughout, as the reference runs
//! them in f32).

use crate::config::{RopeConfig, RopeScaling};

/// y = w * x / sqrt(mean(x^2) + eps), in place on each `w.len()`-long row of `x`.
pub fn rms_norm_rows(x: &mut [f32], w: &[f32], eps: f32) {
    for row in x.chunks_exact_mut(w.len()) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32;
        let r = 1.0 / (ms + eps).sqrt();
        for (v, g) in row.iter_mut().zip(w) {
            *v = g * (*v * r);
        }
    }
}

/// A copy of `x` normalised by [`rms_norm_rows`].
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mut y = x.to_vec();
    rms_norm_rows(&mut y, w, eps);
    y
}

pub fn silu(v: f32) -> f32 {
    v / (1.0 + (-v).exp())
}

pub fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

/// `gate` becomes silu(gate) * up, elementwise (the SwiGLU MLP's middle).
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// Softmax in place (max-subtracted).
pub fn softmax(x: &mut [f32]) {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - m).exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Rotary embedding over `dim` dimensions, with transformers' frequency scaling
/// (`default`, `llama3`, `yarn`) and yarn's attention factor on cos and sin.
#[derive(Clone, Debug)]
pub struct Rope {
    inv_freq: Vec<f32>,
    attention_factor: f32,
}

impl Rope {
    /// Plain RoPE (`rope_type: default`).
    pub fn new(theta: f64, dim: usize) -> Rope {
        Rope::from_config(&RopeConfig {
            theta,
            dim,
            scaling: RopeScaling::None,
        })
    }

    /// The frequencies of `_compute_default_rope_parameters`, `_compute_llama3_parameters`
    /// or `_compute_yarn_parameters`.
    pub fn from_config(c: &RopeConfig) -> Rope {
        let (base, dim) = (c.theta, c.dim);
        // 1 / base ** (arange(0, dim, 2) / dim)
        let plain: Vec<f64> = (0..dim / 2)
            .map(|i| 1.0 / base.powf((2 * i) as f64 / dim as f64))
            .collect();
        let (inv, af) = match &c.scaling {
            RopeScaling::None => (plain, 1.0),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                let low_wavelen = old / low_freq_factor;
                let high_wavelen = old / high_freq_factor;
                let inv = plain
                    .iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        let scaled = if wavelen > low_wavelen { f / factor } else { f };
                        let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
                        if medium {
                            let smooth = (old / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * scaled / factor + smooth * scaled
                        } else {
                            scaled
                        }
                    })
                    .collect();
                (inv, 1.0)
            }
            RopeScaling::Yarn {
                factor,
                attention_factor,
                beta_fast,
                beta_slow,
                original_max_position_embeddings: orig,
                truncate,
                ..
            } => {
                let d = dim as f64;
                let corr = |rot: f64| {
                    d * (orig / (rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
                };
                let (mut low, mut high) = (corr(*beta_fast), corr(*beta_slow));
                if *truncate {
                    low = low.floor();
                    high = high.ceil();
                }
                let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
                if low == high {
                    // transformers: "Prevent singularity".
                    high += 0.001;
                }
                let inv = plain
                    .iter()
                    .enumerate()
                    .map(|(i, &extrap)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let extrap_factor = 1.0 - ramp;
                        let interp = extrap / factor;
                        interp * (1.0 - extrap_factor) + extrap * extrap_factor
                    })
                    .collect();
                (inv, *attention_factor)
            }
        };
        Rope {
            inv_freq: inv.into_iter().map(|f| f as f32).collect(),
            attention_factor: af as f32,
        }
    }

    pub fn dim(&self) -> usize {
        self.inv_freq.len() * 2
    }

    /// The per-pair frequencies (uploaded once by the device-resident path).
    pub fn inv_freq(&self) -> &[f32] {
        &self.inv_freq
    }

    /// The factor on cos and sin (yarn's attention factor; 1 otherwise).
    pub fn attention_factor(&self) -> f32 {
        self.attention_factor
    }

    fn cos_sin(&self, pos: usize, i: usize) -> (f32, f32) {
        let f = pos as f32 * self.inv_freq[i];
        (
            f.cos() * self.attention_factor,
            f.sin() * self.attention_factor,
        )
    }

    /// `rotate_half` convention (Llama, Qwen3, DeepSeek with `rope_interleave: false`):
    /// dimension i pairs with i + dim/2.
    pub fn apply_half(&self, x: &mut [f32], pos: usize) {
        let h = self.inv_freq.len();
        for i in 0..h {
            let (c, s) = self.cos_sin(pos, i);
            let (a, b) = (x[i], x[i + h]);
            x[i] = a * c - b * s;
            x[i + h] = b * c + a * s;
        }
    }

    /// DeepSeek's interleaved convention: pairs (2i, 2i+1) rotate by frequency i, and the
    /// result is laid out de-interleaved, [rotated evens, rotated odds], as transformers'
    /// `apply_rotary_pos_emb_interleave` returns it (q and k alike, so dot products agree).
    pub fn apply_interleaved(&self, x: &mut [f32], pos: usize) {
        let h = self.inv_freq.len();
        let src: Vec<f32> = x[..2 * h].to_vec();
        for i in 0..h {
            let (c, s) = self.cos_sin(pos, i);
            let (a, b) = (src[2 * i], src[2 * i + 1]);
            x[i] = a * c - b * s;
            x[i + h] = b * c + a * s;
        }
    }
}

/// The index of the largest value (the first one on ties, as torch.argmax on CPU).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_rope_equals_half_rope_on_deinterleaved_input() {
        let rope = Rope::new(10000.0, 8);
        let x: Vec<f32> = (0..8).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut a = x.clone();
        rope.apply_interleaved(&mut a, 5);
        // De-interleave first, then rotate halves: transformers documents these as equal.
        let mut b: Vec<f32> = (0..4)
            .map(|i| x[2 * i])
            .chain((0..4).map(|i| x[2 * i + 1]))
            .collect();
        rope.apply_half(&mut b, 5);
        for (u, v) in a.iter().zip(&b) {
            assert!((u - v).abs() < 1e-6, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn softmax_and_argmax() {
        let mut v = [1.0f32, 3.0, 3.0, -2.0];
        assert_eq!(argmax(&v), 1);
        softmax(&mut v);
        assert!((v.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}

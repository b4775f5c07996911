//! Candle's GGUF matvec against tessera's, timed in alternation in one process.
//!
//! The candle anchor (`../shared/anchors/candle_cpu`) and quant-core's criterion bench run
//! one after the other, minutes apart; on this VM the read bandwidth itself moved by a
//! third within one run, so a ratio of the two carries that drift. Here each call of one is
//! followed by a call of the other on the same shape, so both see the same machine state,
//! and the medians are compared.
//!
//! For each (format, shape): one random N(0, 1) [O, I] matrix (candle's `randn`, as the
//! anchor), quantized by candle (`QTensor::quantize`) and by tessera (`quant_core::encode`
//! of the same f32 values), each copied until the copies hold at least 256 MB so every call
//! streams its weights from memory; x is one N(0, 1) row. Candle runs `QMatMul::forward`
//! (it quantizes x to its vec-dot type inside, as the anchor's call does); tessera runs
//! `gemm_with(KernelPath::Int8Activations, ..)` (x rounded to int8 per 32-block inside).
//! Tessera is timed twice per round: on copies made by `EncodedTensor::clone` (tessera's
//! weight buffers, in transparent huge pages where the kernel offers them:
//! `quant_core::memory`) and on plain `Vec` copies (4 KiB pages, as candle's buffers are),
//! so the table can show what the pages alone are worth.
//! Each side is warmed over every copy first. Output, one line each:
//! `pair <format> <O>x<I> candle_us <m> tessera_us <m> tessera_4k_us <m> bytes <candle> <tessera> copies <n> calls <n>`.
//!
//! Usage: `candle-pair [FORMATS] [SHAPES]`, e.g. `candle-pair q4_k,q6_k 4096x4096` (defaults:
//! q8_0,q4_k,q6_k on 4096x4096, 14336x4096, 6144x16384).

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use candle_pair::{copies, formats_and_shapes, median};
use quant_core::kernels::{KernelPath, gemm_with};
use quant_core::{EncodeOptions, EncodedTensor, Format, encode};
use std::time::Instant;

/// The GGUF block types both libraries have, as (tessera's format, candle's type): a table
/// rather than a match, so no catch-all arm stands over the other formats.
const TWINS: [(Format, GgmlDType); 3] = [
    (Format::Q8_0, GgmlDType::Q8_0),
    (Format::Q4K, GgmlDType::Q4K),
    (Format::Q6K, GgmlDType::Q6K),
];

fn candle_type(format: Format) -> Option<GgmlDType> {
    TWINS.iter().find(|(f, _)| *f == format).map(|(_, t)| *t)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (formats, shapes) = formats_and_shapes("q8_0,q4_k,q6_k");
    let dev = Device::Cpu;
    for &(o, i) in &shapes {
        let w = Tensor::randn(0f32, 1.0, (o, i), &dev)?;
        let x = Tensor::randn(0f32, 1.0, (1, i), &dev)?;
        let wv: Vec<f32> = w.flatten_all()?.to_vec1()?;
        let xv: Vec<f32> = x.flatten_all()?.to_vec1()?;
        for &format in &formats {
            let dt = candle_type(format).ok_or_else(|| format!("{format}: no candle twin"))?;
            let first = QTensor::quantize(&w, dt)?;
            let candle_bytes = first.storage_size_in_bytes();
            let copies = copies(candle_bytes);
            let mut theirs = vec![QMatMul::from_qtensor(first)?];
            for k in 1..copies {
                // Distinct values per copy, as the anchor does.
                let wk = (&w + (k as f64) * 1e-3)?;
                theirs.push(QMatMul::from_qtensor(QTensor::quantize(&wk, dt)?)?);
            }
            let enc = encode(format, o, i, &wv, &EncodeOptions::default())?;
            let ours_bytes = enc.weights.len() + enc.scales.len();
            let ours: Vec<_> = (0..copies).map(|_| enc.clone()).collect();
            let small: Vec<_> = (0..copies)
                .map(|_| {
                    EncodedTensor::from_parts(
                        format,
                        o,
                        i,
                        enc.weights.to_vec(),
                        enc.scales.clone(),
                        Some(enc.rotation_seed),
                    )
                })
                .collect::<Result<_, _>>()?;
            let mut y = vec![0f32; o];
            let run = |t: &EncodedTensor, y: &mut [f32]| -> Result<(), quant_core::QuantError> {
                gemm_with(KernelPath::Int8Activations, &t.view(), &xv, 1, y)?;
                Ok(())
            };
            for k in 0..copies {
                std::hint::black_box(theirs[k].forward(&x)?);
                run(&ours[k], &mut y)?;
                run(&small[k], &mut y)?;
            }
            let calls = (3 * copies).max(200);
            let (mut tc, mut tt, mut ts) = (vec![], vec![], vec![]);
            for r in 0..calls {
                // Alternate which side goes first so neither always follows the other.
                let (a, b) = (r % copies, (r + copies / 2) % copies);
                let time_candle = || -> candle_core::Result<f64> {
                    let t = Instant::now();
                    std::hint::black_box(theirs[a].forward(&x)?);
                    Ok(t.elapsed().as_secs_f64())
                };
                if r % 2 == 0 {
                    tc.push(time_candle()?);
                }
                let t = Instant::now();
                run(&ours[b], &mut y)?;
                std::hint::black_box(&y);
                tt.push(t.elapsed().as_secs_f64());
                let t = Instant::now();
                run(&small[b], &mut y)?;
                std::hint::black_box(&y);
                ts.push(t.elapsed().as_secs_f64());
                if r % 2 == 1 {
                    tc.push(time_candle()?);
                }
            }
            println!(
                "pair {format} {o}x{i} candle_us {:.1} tessera_us {:.1} tessera_4k_us {:.1} bytes {candle_bytes} {ours_bytes} copies {copies} calls {calls}",
                median(tc) * 1e6,
                median(tt) * 1e6,
                median(ts) * 1e6
            );
        }
    }
    Ok(())
}

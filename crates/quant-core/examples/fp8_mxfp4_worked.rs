//! Prints the worked examples of docs/FORMATS.md: a 2x3 tensor encoded as
//! fp8-e4m3-b128, fp8-e4m3-b128-ue8m0 and mxfp4, with its stored bytes and decoded values.
//!
//! `cargo run -p quant-core --release --example fp8_mxfp4_worked`

use quant_core::{EncodeOptions, Format, decode, encode};

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02X}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    let (rows, cols) = (2, 3);
    let w = [0.3f32, -1.2, 0.05, 2.5, -0.001, 0.7];
    println!("input [2, 3] = {w:?}");
    for f in [Format::Fp8E4m3B128, Format::Fp8E4m3B128Ue8m0, Format::Mxfp4] {
        let t = encode(f, rows, cols, &w, &EncodeOptions::default()).unwrap();
        let d = decode(&t.view()).unwrap();
        println!("\n{f}");
        println!("  weights ({} B): {}", t.weights.len(), hex(&t.weights));
        println!("  scales  ({} B): {}", t.scales.len(), hex(&t.scales));
        match f {
            Format::Fp8E4m3B128 => {
                let s = f32::from_le_bytes(t.scales[..4].try_into().unwrap());
                println!("  scale = {s:e} (= 2.5 / 448 = {:e})", 2.5f64 / 448.0);
                let q: Vec<f32> = w.iter().map(|v| v / s).collect();
                println!("  w / scale = {q:?}");
            }
            Format::Fp8E4m3B128Ue8m0 => {
                let e = t.scales[0];
                println!("  scale = 2^({e} - 127) = 2^{}", i32::from(e) - 127);
                let s = 2f32.powi(i32::from(e) - 127);
                let q: Vec<f32> = w.iter().map(|v| v / s).collect();
                println!("  w / scale = {q:?}");
            }
            _ => {
                for (o, &e) in t.scales.iter().enumerate() {
                    let s = 2f32.powi(i32::from(e) - 127);
                    let q: Vec<f32> = w[o * cols..(o + 1) * cols].iter().map(|v| v / s).collect();
                    println!(
                        "  row {o}: scale 2^{} ; w / scale = {q:?}",
                        i32::from(e) - 127
                    );
                }
            }
        }
        println!("  decoded = {d:?}");
    }
}

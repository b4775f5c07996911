//! Device tests of the wgpu tier beyond the shared conformance suite:
//! - long rows at S = 1, with every naga check and none: the conformance shapes have at
//!   most 128 chunks a row, so an invocation's chunk loop never reaches a second chunk
//!   there;
//! - the host refuses x / y bindings too small for the tensor and S before anything is
//!   dispatched (the kernels index them from the immediates alone, and since session 6 run
//!   without naga's bounds checks where `ShaderChecks` says so).
//!
//! Without an adapter each test says "skipped: ..." (unless TESSERA_REQUIRE_BACKENDS=wgpu).
use kernels_metal::kernels::kernel_for;
use kernels_metal::{Options, ShaderChecks, WgpuBackend};
use quant_core::oracle::{reference_gemm, worst_error};
use quant_core::testdata::{Rng, activations, weights};
use quant_core::{EncodeOptions, Format, encode};

fn backend(opts: &Options) -> Option<WgpuBackend> {
    match WgpuBackend::with_options(opts) {
        Ok(b) => Some(b),
        Err(e) => {
            let required = std::env::var("TESSERA_REQUIRE_BACKENDS").unwrap_or_default();
            assert!(
                !required.split(',').any(|b| b.trim() == "wgpu"),
                "wgpu unavailable but required by TESSERA_REQUIRE_BACKENDS: {e}"
            );
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// Issue #5's five formats (plus int4-g128: another group size on the same path).
const LONG_ROW_FORMATS: [Format; 6] = [
    Format::Int4Row,
    Format::Int4G64,
    Format::Int4G128,
    Format::Int8Row,
    Format::Fp8E4m3B128,
    Format::Mq4G256V2,
];

#[test]
fn long_rows_match_the_oracle() {
    // 16384 weights a row: 512 chunks of a 4-bit row (4 a lane), 1024 of an 8-bit one; 6
    // rows leave the second workgroup half empty.
    let (rows, cols) = (6, 16384);
    let mut rng = Rng::new(0x51_7E57);
    let w = weights(&mut rng, rows, cols);
    let x = activations(&mut rng, 1, cols);
    for checks in [ShaderChecks::All, ShaderChecks::None] {
        let opts = Options {
            checks,
            ..Options::from_env()
        };
        let Some(b) = backend(&opts) else { return };
        for format in LONG_ROW_FORMATS {
            let t = encode(format, rows, cols, &w, &EncodeOptions::default()).unwrap();
            let g = b.upload(&t.view()).unwrap();
            let y = b.gemv(&g, &x, 1).unwrap();
            let err = worst_error(&y, &reference_gemm(&t.view(), &x, 1)).error;
            eprintln!("{format} {}: {err:.1e}", checks.name());
            assert!(err <= 1e-4, "{format} {}: error {err:.3e}", checks.name());
        }
    }
}

#[test]
fn undersized_bindings_are_refused_before_dispatch() {
    let Some(b) = backend(&Options::from_env()) else {
        return;
    };
    let (rows, cols) = (8, 512);
    let mut rng = Rng::new(7);
    let w = weights(&mut rng, rows, cols);
    for format in [Format::Int4Row, Format::Int8Row] {
        let t = encode(format, rows, cols, &w, &EncodeOptions::default()).unwrap();
        let g = b.upload(&t.view()).unwrap();
        let s = 2;
        let (x_need, y_need) = b.binding_bytes(&g, s).unwrap();
        let buf = |size: u64| {
            b.device().create_buffer(&wgpu::BufferDescriptor {
                label: Some("test"),
                size,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        };
        let rows_wg = kernel_for(format).unwrap().rows(s);
        let mut enc = b.device().create_command_encoder(&Default::default());
        for (xs, ys, ok) in [
            (x_need, y_need, true),
            (x_need - 16, y_need, false),
            (x_need, y_need - 4, false),
        ] {
            let (xb, yb) = (buf(xs), buf(ys));
            let mut pass = enc.begin_compute_pass(&Default::default());
            let r = b.encode_gemv(&mut pass, &g, &xb, &yb, s, rows_wg);
            assert_eq!(
                r.is_ok(),
                ok,
                "{format}: x {xs} / {x_need}, y {ys} / {y_need}: {r:?}"
            );
        }
        drop(enc);
        // The host API refuses a wrong activation length too.
        assert!(b.gemv(&g, &vec![0.0; s * cols - 1], s).is_err());
        // And an S the kernels do not have.
        assert!(b.gemv(&g, &vec![0.0; 17 * cols], 17).is_err());
    }
}

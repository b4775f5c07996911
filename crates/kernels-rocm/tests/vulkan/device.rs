//! The Vulkan plumbing on whatever adapter is here (lavapipe locally): objects made once
//! and reused, the wave size recorded, refusals typed, no panic without a driver, and one
//! Vulkan instance per process however many backends come and go.

use kernels_rocm::{
    Options, VulkanBackend, VulkanConformance, VulkanError, WaveSource, instances_created,
};
use quant_core::capability::{Backend, BackendError};
use quant_core::testdata::{Rng, activations, weights};
use quant_core::{EncodeOptions, EncodedTensor, Format, encode};
use std::sync::atomic::Ordering;

/// The backend, or `None` (printing "skipped: ...") where this machine has no Vulkan.
fn backend() -> Option<VulkanBackend> {
    match VulkanBackend::new() {
        Ok(b) => {
            eprintln!("adapter: {}", b.info().summary());
            Some(b)
        }
        Err(e) if e.is_unavailable() => {
            let required = std::env::var("TESSERA_REQUIRE_BACKENDS")
                .is_ok_and(|l| l.split(',').any(|n| n.trim() == "vulkan"));
            assert!(!required, "vulkan required but unavailable: {e}");
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// A [rows, cols] tensor of `format` encoded from `testdata::weights` drawn from `rng`.
fn random_tensor(rng: &mut Rng, format: Format, rows: usize, cols: usize) -> EncodedTensor {
    encode(
        format,
        rows,
        cols,
        &weights(rng, rows, cols),
        &EncodeOptions::default(),
    )
    .unwrap()
}

#[test]
fn pipelines_descriptor_sets_and_commands_are_made_once_per_tensor_and_s() {
    let Some(b) = backend() else { return };
    let mut rng = Rng::new(11);
    let (rows, cols) = (70, 300);
    let t = random_tensor(&mut rng, Format::Int8Row, rows, cols);
    let w = b.upload(&t.view()).unwrap();
    let stats = b.context().stats();
    let count = |c: &std::sync::atomic::AtomicUsize| c.load(Ordering::Relaxed);
    let (p0, d0, r0) = (
        count(&stats.pipelines_created),
        count(&stats.descriptor_sets_allocated),
        count(&stats.command_buffers_recorded),
    );
    let x = activations(&mut rng, 2, cols);
    let y1 = b.gemv(&w, &x[..cols], 1).unwrap();
    let y1b = b.gemv(&w, &x[..cols], 1).unwrap();
    assert_eq!(
        y1, y1b,
        "a resubmitted command buffer gives the same answer"
    );
    assert_eq!(count(&stats.pipelines_created), p0 + 1);
    assert_eq!(count(&stats.descriptor_sets_allocated), d0 + 1);
    assert_eq!(count(&stats.command_buffers_recorded), r0 + 1);
    // S = 2: its own pipeline (S is baked into the module), set and commands.
    let y2 = b.gemv(&w, &x, 2).unwrap();
    assert_eq!(count(&stats.pipelines_created), p0 + 2);
    assert_eq!(count(&stats.descriptor_sets_allocated), d0 + 2);
    assert_eq!(&y2[..rows], &y1[..], "row 0 of S=2 equals the S=1 result");
    // A second tensor of the same format and S reuses the pipeline, not the set.
    let w2 = b.upload(&t.view()).unwrap();
    let y1c = b.gemv(&w2, &x[..cols], 1).unwrap();
    assert_eq!(y1c, y1);
    assert_eq!(count(&stats.pipelines_created), p0 + 2);
    assert_eq!(count(&stats.descriptor_sets_allocated), d0 + 3);
}

#[test]
fn the_wave_size_is_recorded() {
    let Some(b) = backend() else { return };
    let i = b.info();
    assert!(
        i.wave.size >= 1 && i.wave.size.is_power_of_two(),
        "{:?}",
        i.wave
    );
    assert!((i.subgroup_min..=i.subgroup_max).contains(&i.wave.size));
    match i.wave.source {
        WaveSource::Fixed => assert_eq!(i.subgroup_min, i.subgroup_max),
        WaveSource::Required => assert!(i.size_control),
        WaveSource::DriverDefault => {}
    }
    if i.is_lavapipe() {
        // lavapipe offers size control but one size only: nothing to choose.
        assert_eq!(i.wave.source, WaveSource::Fixed, "{}", i.summary());
    }
}

#[test]
fn refusals_are_typed() {
    let Some(b) = backend() else { return };
    let mut rng = Rng::new(5);
    let t = random_tensor(&mut rng, Format::Int4G64, 3, 128);
    let w = b.upload(&t.view()).unwrap();
    let x = activations(&mut rng, 17, 128);
    assert!(matches!(
        b.gemv(&w, &x, 17),
        Err(VulkanError::NotImplemented { s: 17, .. })
    ));
    assert!(matches!(
        b.gemv(&w, &x[..0], 0),
        Err(VulkanError::NotImplemented { s: 0, .. })
    ));
    assert!(matches!(
        b.gemv(&w, &x[..127], 1),
        Err(VulkanError::Shape { .. })
    ));
}

#[test]
fn an_unknown_adapter_is_unavailable_and_says_what_exists() {
    let o = Options {
        adapter: Some("no-such-adapter-xyz".into()),
        ..Options::default()
    };
    let c = VulkanConformance::with_options(o);
    match c.probe() {
        Err(BackendError::Unavailable { why }) => {
            assert!(
                why.contains("no-such-adapter-xyz") || why.contains("loader"),
                "{why}"
            )
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// Without an ICD (the loader pointed at a driver file that does not exist) the backend
/// reports Unavailable; nothing panics. Runs itself in a child process, since the loader
/// reads the variable once.
#[test]
fn no_icd_is_unavailable_not_a_panic() {
    if std::env::var_os("TESSERA_VK_CHILD").is_some() {
        let c = VulkanConformance::new();
        let r = c.probe();
        eprintln!("child probe: {r:?}");
        assert!(matches!(r, Err(BackendError::Unavailable { .. })), "{r:?}");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "device::no_icd_is_unavailable_not_a_panic",
            "--nocapture",
        ])
        .env("TESSERA_VK_CHILD", "1")
        .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .env_remove("TESSERA_VK_ADAPTER")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("child probe: Err(Unavailable"), "{text}");
}

/// The first NVIDIA run loaded libvulkan, created an instance and destroyed both for every
/// backend; after about 30 of those cycles NVIDIA's ICD refused `vkCreateInstance` for the
/// rest of the process, and every later test failed as "unavailable" (docs/VULKAN.md).
/// Now the process keeps one instance: many backends opened and dropped one after another
/// each compute, and the instance count stays 1. Conformance adapters with equal options
/// share one device.
#[test]
fn many_backends_one_after_another_share_one_instance() {
    let Some(first) = backend() else { return };
    let mut rng = Rng::new(21);
    let (rows, cols) = (9, 64);
    let t = random_tensor(&mut rng, Format::Int8Row, rows, cols);
    let x = activations(&mut rng, 1, cols);
    let w = first.upload(&t.view()).unwrap();
    let want = first.gemv(&w, &x, 1).unwrap();
    drop(w);
    drop(first);
    // More cycles than the ~30 NVIDIA survived.
    for k in 0..48 {
        let b = VulkanBackend::new().unwrap_or_else(|e| panic!("backend {k}: {e}"));
        let w = b.upload(&t.view()).unwrap();
        assert_eq!(b.gemv(&w, &x, 1).unwrap(), want, "backend {k}");
    }
    assert_eq!(instances_created(), 1, "one VkInstance per process");
    let (a, b) = (VulkanConformance::new(), VulkanConformance::new());
    let (da, db) = (a.backend().unwrap(), b.backend().unwrap());
    assert!(
        da.context().same_device(db.context()),
        "conformance adapters with equal options share one device"
    );
}

/// Every E4M3 code but NaN decodes exactly on the S = 1 path (binary16 decode: the 14
/// subnormal codes become binary16 subnormals, which a driver that flushed them in
/// unpack2x16float would zero) and the S > 1 batch path (S = 2 and 16, the same decode):
/// row 0 holds all 254 codes, row 1 only the subnormal ones, so a flush or a wrong bit
/// shows on its own.
#[test]
fn every_fp8_code_decodes_exactly() {
    use quant_core::oracle::{reference_gemm, worst_error};
    let Some(b) = backend() else { return };
    let mut rng = Rng::new(11);
    let (rows, cols) = (3, 256);
    let t = random_tensor(&mut rng, Format::Fp8E4m3B128, rows, cols);
    let mut w = t.weights.clone();
    for i in 0..cols {
        let code = i as u8;
        // Every code but the two NaNs (those become zeros of either sign).
        w[i] = if code & 0x7F == 0x7F {
            code & 0x80
        } else {
            code
        };
        // Subnormals only: 0x01..0x07 and 0x81..0x87.
        w[cols + i] = (1 + (i % 7) as u8) | if i % 2 == 1 { 0x80 } else { 0 };
    }
    let t = quant_core::EncodedTensor::from_parts(
        t.format,
        rows,
        cols,
        w,
        t.scales.clone(),
        Some(t.rotation_seed),
    )
    .unwrap();
    let d = b.upload(&t.view()).unwrap();
    for s in [1usize, 2, 16] {
        let x = activations(&mut rng, s, cols);
        let r = reference_gemm(&t.view(), &x, s);
        let y = b.gemv(&d, &x, s).unwrap();
        let e = worst_error(&y, &r).error;
        eprintln!("fp8 every code, S={s}: error {e:.2e}");
        assert!(e <= 1e-6, "S={s}: {e:e} (outputs {y:?})");
    }
}

/// int4-row, int4-g64 and the affine256 formats at S = 1 on packed int8 activations
/// (`dot4I8Packed`), against the oracle and the f32 path: a block with one outlier and a block of tiny values (both take the f32
/// path inside the packed kernel), a large value that stays packed, rows not 16-byte aligned.
#[test]
fn int4_s1_packed_int8_activations_match_the_oracle() {
    use quant_core::oracle::{reference_gemm, worst_error};
    let Some(mut b) = backend() else { return };
    let i = b.info().clone();
    if i.is_lavapipe() {
        assert!(
            i.integer_dot_product,
            "lavapipe (Vulkan 1.3) must run the packed path"
        );
    }
    assert_eq!(
        b.uses_int8_activations(Format::Int4Row, 1),
        i.integer_dot_product
    );
    assert!(!b.uses_int8_activations(Format::Int4Row, 2));
    assert!(!b.uses_int8_activations(Format::Int8Row, 1));
    assert!(b.uses_int8_activations(Format::Int4G64, 1) == i.integer_dot_product);
    if !i.integer_dot_product {
        // The formats below would run their f32 path: nothing packed to check.
        eprintln!(
            "skipped: {} has no integer dot products (no packed path)",
            i.name
        );
        return;
    }
    for format in [
        Format::Int4Row,
        Format::Int4G64,
        Format::Hfq4G256,
        Format::Mq4G256V2,
        Format::Mq4cG256,
    ] {
        assert!(b.uses_int8_activations(format, 1) == i.integer_dot_product);
        let mut rng = Rng::new(21);
        // The affine256 formats take whole 256-weight blocks; 3 of them (408 bytes) leave
        // every other row 8 but not 16 bytes aligned.
        let cols = if matches!(format, Format::Int4Row | Format::Int4G64) {
            320
        } else {
            768
        };
        let rows = 70;
        let t = random_tensor(&mut rng, format, rows, cols);
        let w = b.upload(&t.view()).unwrap();
        let mut x = activations(&mut rng, 1, cols);
        x[5] = 1.0e5; // block 0: one outlier, the f32 path (kernels::INT8_X_OUTLIER)
        x[40] = 60.0; // block 1: large but packed
        for v in &mut x[64..96] {
            *v *= 1e-36;
        }
        let r = reference_gemm(&t.view(), &x, 1);
        let packed = b.gemv(&w, &x, 1).unwrap();
        b.set_int8_activations(false);
        assert!(!b.uses_int8_activations(format, 1));
        let float = b.gemv(&w, &x, 1).unwrap();
        b.set_int8_activations(true);
        let (ep, ef) = (
            worst_error(&packed, &r).error,
            worst_error(&float, &r).error,
        );
        eprintln!("{format} S=1: packed int8 x error {ep:.2e}, f32 x error {ef:.2e}");
        assert!(
            ep <= 1e-4 && ef <= 1e-4,
            "{format}: packed {ep:e}, f32 {ef:e}"
        );
    }
}

/// With `Options::pipeline_statistics`, every pipeline the device creates comes with what
/// its driver reports (lavapipe and NVIDIA both offer VK_KHR_pipeline_executable_properties);
/// without it, none are kept. The GEMV's answer does not change either way.
#[test]
fn pipeline_statistics_are_kept_only_when_asked_for() {
    let Some(plain) = backend() else { return };
    assert!(
        plain.context().pipeline_statistics().is_none()
            || Options::from_env().unwrap().pipeline_statistics,
        "statistics kept without being asked for"
    );
    let opts = Options {
        pipeline_statistics: true,
        ..Options::from_env().unwrap()
    };
    let b = VulkanBackend::with_options(&opts).unwrap();
    let Some(before) = b.context().pipeline_statistics() else {
        eprintln!(
            "skipped: {} does not offer VK_KHR_pipeline_executable_properties",
            b.info().summary()
        );
        return;
    };
    let mut rng = Rng::new(5);
    let (rows, cols) = (9, 260);
    let t = random_tensor(&mut rng, Format::Int4G64, rows, cols);
    let x = activations(&mut rng, 3, cols);
    let y = b.gemv(&b.upload(&t.view()).unwrap(), &x, 3).unwrap();
    assert_eq!(
        y,
        plain
            .gemv(&plain.upload(&t.view()).unwrap(), &x, 3)
            .unwrap()
    );
    let after = b.context().pipeline_statistics().unwrap();
    let new: Vec<_> = after.iter().skip(before.len()).collect();
    assert!(!new.is_empty(), "the GEMV's pipeline was created here");
    for (key, stats) in &new {
        eprintln!("{key}: {stats:?}");
        assert!(!stats.is_empty(), "{key}: the driver reported nothing");
        assert!(
            stats.iter().all(|s| s.name != "query failed"),
            "{key}: {stats:?}"
        );
    }
}

/// The bench's two timings of the same dispatches: one interval a dispatch (`time_gemv`) and
/// their mean with timestamps only at both ends (`time_gemv_span`), both finite and
/// positive; none asked for is an empty result, not a wait on a timestamp never written.
#[test]
fn dispatch_timings_come_back_for_each_and_for_the_span() {
    let Some(b) = backend() else { return };
    let mut rng = Rng::new(12);
    let t = random_tensor(&mut rng, Format::Int8Row, 64, 512);
    let (d1, d2) = (b.upload(&t.view()).unwrap(), b.upload(&t.view()).unwrap());
    let x = activations(&mut rng, 1, 512);
    let each = b.time_gemv(&[&d1, &d2], &x, 1, 5).unwrap();
    assert_eq!(each.len(), 5, "one interval a dispatch");
    assert!(each.iter().all(|&s| s.is_finite() && s > 0.0), "{each:?}");
    let span = b.time_gemv_span(&[&d1, &d2], &x, 1, 5).unwrap();
    assert!(span.is_finite() && span > 0.0, "span {span}");
    assert!(b.time_gemv(&[&d1], &x, 1, 0).unwrap().is_empty());
    assert_eq!(b.time_gemv_span(&[&d1], &x, 1, 0).unwrap(), 0.0);
}

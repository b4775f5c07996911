//! The Vulkan plumbing on whatever adapter is here (lavapipe locally): objects made once
//! and reused, the wave size recorded, refusals typed, and no panic without a driver.

use kernels_rocm::{Options, VulkanBackend, VulkanConformance, VulkanError, WaveSource};
use quant_core::capability::{Backend, BackendError};
use quant_core::testdata::{Rng, activations, weights};
use quant_core::{EncodeOptions, Format, encode};
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

#[test]
fn pipelines_descriptor_sets_and_commands_are_made_once_per_tensor_and_s() {
    let Some(b) = backend() else { return };
    let mut rng = Rng::new(11);
    let (rows, cols) = (70, 300);
    let t = encode(
        Format::Int8Row,
        rows,
        cols,
        &weights(&mut rng, rows, cols),
        &EncodeOptions::default(),
    )
    .unwrap();
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
    let t = encode(
        Format::Int4G64,
        3,
        128,
        &weights(&mut rng, 3, 128),
        &EncodeOptions::default(),
    )
    .unwrap();
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

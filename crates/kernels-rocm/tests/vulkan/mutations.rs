//! The conformance suite must catch a broken kernel: int4-g64 with the shaders' `MUTATE`
//! defects (swapped nibbles, group off by one, scales 1% high; build.rs compiles these
//! modules under the `mutation-test` feature) and with a wrong `row_bytes` push constant;
//! int4-row's S = 1 cells (packed int8 activations) with swapped nibbles and 1% scales.
//! Each must FAIL; without Vulkan the test says "skipped: ...".

use kernels_rocm::{Mutation, Options, VulkanConformance};
use quant_core::Format;
use quant_core::capability::{Backend, Op};
use quant_core::conformance::{Filter, Outcome, run_suite, seed_from_env};

fn caught(m: Mutation) {
    caught_in(Format::Int4G64, m);
}

/// The failures of `format` under mutation `m` (asserting there are some, for wrong
/// answers); empty when skipped.
fn caught_in(format: Format, m: Mutation) -> Vec<String> {
    let b = VulkanConformance::with_mutation(Options::from_env().unwrap_or_default(), m);
    if let Err(e) = b.probe() {
        eprintln!("skipped: {e}");
        return vec![];
    }
    let filter = Filter {
        formats: vec![format],
        ops: vec![Op::Gemv],
        seed: seed_from_env().unwrap(),
    };
    let cells = run_suite(&b, &filter);
    assert_eq!(cells.len(), 1);
    eprintln!("{m:?}: {}", cells[0]);
    match &cells[0].outcome {
        Outcome::Fail { failures, .. } => {
            // Failing because the answers are wrong, not because something was refused.
            assert!(
                failures.iter().any(|f| f.contains("error ")),
                "{m:?} failed for another reason: {failures:?}"
            );
            failures.clone()
        }
        other => panic!("{m:?} was not caught: {other:?}"),
    }
}

/// int4-row at S = 1 takes packed int8 activations (`dot4I8Packed`) where the device has
/// integer dot products: a defect must show in its S = 1 cells too, not only at S > 1.
fn caught_at_s1(m: Mutation) {
    let failures = caught_in(Format::Int4Row, m);
    if failures.is_empty() {
        return;
    }
    // The aligned class: whole 32-blocks of N(0, 1) values and one 50, so every block is
    // packed (none reaches kernels::INT8_X_OUTLIER); a defect caught only in blocks that
    // fall back to floats would not count.
    assert!(
        failures
            .iter()
            .any(|f| f.starts_with("aligned ") && f.contains(" S=1 (") && f.contains("error ")),
        "{m:?}: int4-row's S = 1 packed path was not caught: {failures:?}"
    );
}

#[test]
fn int4_row_s1_swapped_nibbles_are_caught() {
    caught_at_s1(Mutation::Decode(1));
}

#[test]
fn int4_row_s1_scales_one_percent_high_are_caught() {
    caught_at_s1(Mutation::Decode(3));
}

#[test]
fn swapped_nibbles_are_caught() {
    caught(Mutation::Decode(1));
}

#[test]
fn group_off_by_one_is_caught() {
    caught(Mutation::Decode(2));
}

#[test]
fn scales_one_percent_high_are_caught() {
    caught(Mutation::Decode(3));
}

#[test]
fn a_wrong_row_bytes_push_constant_is_caught() {
    caught(Mutation::RowBytes);
}

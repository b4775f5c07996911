//! The conformance suite must catch a broken kernel: int4-g64 with the shaders' `MUTATE`
//! defects (swapped nibbles, group off by one, scales 1% high; build.rs compiles these
//! modules under the `mutation-test` feature) and with a wrong `row_bytes` push constant.
//! Each must FAIL; without Vulkan the test says "skipped: ...".

use kernels_rocm::{Mutation, Options, VulkanConformance};
use quant_core::Format;
use quant_core::capability::{Backend, Op};
use quant_core::conformance::{Filter, Outcome, run_suite, seed_from_env};

fn caught(m: Mutation) {
    let b = VulkanConformance::with_mutation(Options::from_env().unwrap_or_default(), m);
    if let Err(e) = b.probe() {
        eprintln!("skipped: {e}");
        return;
    }
    let filter = Filter {
        formats: vec![Format::Int4G64],
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
        }
        other => panic!("{m:?} was not caught: {other:?}"),
    }
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

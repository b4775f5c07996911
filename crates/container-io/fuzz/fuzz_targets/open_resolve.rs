//! cargo-fuzz target: open arbitrary bytes as a container and resolve every tensor, legacy
//! inference included (with and without a shape hint). Must never panic or over-allocate.
#![no_main]

use container_io::container::{Container, Item, ShapeHints};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(c) = Container::from_bytes("fuzz", data.to_vec()) else { return };
    let mut hints = ShapeHints::new();
    for n in c.names() {
        hints.insert(n.clone(), (data.len() % 97 + 1, data.len() % 300 + 1));
    }
    for h in [ShapeHints::new(), hints] {
        for (_, r) in c.resolve_all(&h) {
            if let Ok(Item::Tensor(t)) = r {
                let _ = c.qtensor(&t);
            }
        }
    }
});

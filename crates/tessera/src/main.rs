//! The `tessera` command-line program (placeholder main; subcommands are being written).
fn main() {
    for f in tessera::quant_core::FORMATS {
        println!("{}", f.name);
    }
}

//! The fused-path gate: ONE predicate, [`miss_mask`], over a layer's weight tensors and a
//! backend's capability table. The layer-path choice ([`layer_path`]) and the load-time
//! notice ([`crate::notice`]) both call it and nothing else, so the condition exists in
//! exactly one place (seed 003: a notice that re-derives the gate drifts from it).
//!
//! The mask has one bit per tensor kind; a bit is set when some tensor of that kind in the
//! layer has a format the table has no GEMV row for (at S = 1, the decode batch). It is
//! format-only: a clear mask says no format keeps the layer off the fused path, not that the
//! fused path exists for the model ([`layer_path_with`] takes the fused path's own table,
//! which CUDA has for Llama / Qwen3 graphs; the loader adds the graph condition).

use quant_core::Format;
use quant_core::capability::{Capability, Op, lookup};

/// A kind of weight tensor a layer's submission binds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// GQA projections.
    Q,
    K,
    V,
    /// MLA projections.
    QA,
    QB,
    KvA,
    KvB,
    /// The attention output projection (both graphs).
    O,
    /// Dense MLP (Llama/Qwen layers, DeepSeek's first layers).
    MlpGate,
    MlpUp,
    MlpDown,
    /// The MoE router (kept f32).
    Router,
    /// Shared expert.
    ShGate,
    ShUp,
    ShDown,
    /// Routed experts (one bit covers every expert of the layer).
    ExpGate,
    ExpUp,
    ExpDown,
}

impl Kind {
    pub const ALL: [Kind; 18] = [
        Kind::Q,
        Kind::K,
        Kind::V,
        Kind::QA,
        Kind::QB,
        Kind::KvA,
        Kind::KvB,
        Kind::O,
        Kind::MlpGate,
        Kind::MlpUp,
        Kind::MlpDown,
        Kind::Router,
        Kind::ShGate,
        Kind::ShUp,
        Kind::ShDown,
        Kind::ExpGate,
        Kind::ExpUp,
        Kind::ExpDown,
    ];

    /// The kind's bit in a [`KindMask`].
    pub const fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// Short name used by the notice and the run summary.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Q => "q_proj",
            Kind::K => "k_proj",
            Kind::V => "v_proj",
            Kind::QA => "q_a_proj",
            Kind::QB => "q_b_proj",
            Kind::KvA => "kv_a_proj",
            Kind::KvB => "kv_b_proj",
            Kind::O => "o_proj",
            Kind::MlpGate => "mlp.gate_proj",
            Kind::MlpUp => "mlp.up_proj",
            Kind::MlpDown => "mlp.down_proj",
            Kind::Router => "router",
            Kind::ShGate => "shared.gate_proj",
            Kind::ShUp => "shared.up_proj",
            Kind::ShDown => "shared.down_proj",
            Kind::ExpGate => "experts.gate_proj",
            Kind::ExpUp => "experts.up_proj",
            Kind::ExpDown => "experts.down_proj",
        }
    }

    /// The `tessera quantize --role ROLE=FORMAT` role that mints this kind.
    pub const fn role(self) -> container_io::roles::Role {
        use container_io::roles::Role;
        match self {
            Kind::Q => Role::AttnQ,
            Kind::K => Role::AttnK,
            Kind::V => Role::AttnV,
            Kind::QA => Role::AttnQA,
            Kind::QB => Role::AttnQB,
            Kind::KvA => Role::AttnKvA,
            Kind::KvB => Role::AttnKvB,
            Kind::O => Role::AttnO,
            Kind::MlpGate | Kind::MlpUp | Kind::MlpDown => Role::DenseMlp,
            Kind::Router => Role::Router,
            Kind::ShGate | Kind::ShUp | Kind::ShDown => Role::SharedExpert,
            Kind::ExpGate | Kind::ExpUp | Kind::ExpDown => Role::RoutedExpert,
        }
    }
}

/// A set of [`Kind`]s as bits.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct KindMask(pub u32);

impl KindMask {
    pub fn contains(self, k: Kind) -> bool {
        self.0 & k.bit() != 0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The kinds in the mask, in [`Kind::ALL`] order.
    pub fn kinds(self) -> impl Iterator<Item = Kind> {
        Kind::ALL.into_iter().filter(move |k| self.contains(*k))
    }
}

/// The weight tensors one layer binds: (kind, format), one entry per tensor (a layer with
/// 256 routed experts lists 768 expert tensors).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LayerFormats {
    pub tensors: Vec<(Kind, Format)>,
}

impl LayerFormats {
    /// The kinds present in this layer (dense layers have no experts, MoE layers no dense
    /// MLP), so per-kind counts use the right denominator.
    pub fn present(&self) -> KindMask {
        KindMask(self.tensors.iter().fold(0, |m, (k, _)| m | k.bit()))
    }
}

/// Whether `table` runs a decode GEMV (S = 1) on `format`.
pub fn covers(table: &[Capability], format: Format) -> bool {
    lookup(table, Op::Gemv, format, 1).is_some()
}

/// THE gate predicate: the kinds of `layer` with a tensor whose format `table` does not
/// cover. Empty means no format keeps the layer off the fused path.
pub fn miss_mask(layer: &LayerFormats, table: &[Capability]) -> KindMask {
    KindMask(
        layer
            .tensors
            .iter()
            .filter(|(_, f)| !covers(table, *f))
            .fold(0, |m, (k, _)| m | k.bit()),
    )
}

/// How a layer runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LayerPath {
    /// One submission for attention, shared expert and routed experts.
    Fused,
    /// Each GEMV dispatched on its own; tensors the table misses run on the CPU.
    OpByOp,
    /// Everything on the CPU (the CPU backend, or a GPU table that covers nothing here).
    Cpu,
}

impl LayerPath {
    pub const fn name(self) -> &'static str {
        match self {
            LayerPath::Fused => "fused",
            LayerPath::OpByOp => "op-by-op",
            LayerPath::Cpu => "cpu",
        }
    }
}

/// The path a layer takes: fused only where the backend has a fused layer kernel and the
/// gate's mask is empty; otherwise op by op where the backend runs at least one of the
/// layer's tensors; otherwise the CPU.
pub fn layer_path(
    layer: &LayerFormats,
    table: &[Capability],
    is_cpu: bool,
    fused_layers: bool,
) -> LayerPath {
    layer_path_with(layer, table, is_cpu, fused_layers.then_some(table))
}

/// [`layer_path`] where the fused path has its own table (`fused`; `None`: no fused path):
/// fused when [`miss_mask`] of the layer against `fused` is empty, then op by op or the CPU
/// by `table` as before. The same predicate decides both.
pub fn layer_path_with(
    layer: &LayerFormats,
    table: &[Capability],
    is_cpu: bool,
    fused: Option<&[Capability]>,
) -> LayerPath {
    if is_cpu {
        return LayerPath::Cpu;
    }
    if fused.is_some_and(|f| miss_mask(layer, f).is_empty()) {
        return LayerPath::Fused;
    }
    let miss = miss_mask(layer, table);
    if layer.present().0 & !miss.0 != 0 {
        return LayerPath::OpByOp;
    }
    LayerPath::Cpu
}

#[cfg(test)]
mod tests {
    use super::*;
    use quant_core::capability::Constraint;

    static TABLE: [Capability; 2] = [
        Capability {
            op: Op::Gemv,
            format: Format::Int4G64,
            constraint: Constraint::batch(1, 16),
        },
        Capability {
            op: Op::Gemv,
            format: Format::F32,
            constraint: Constraint::batch(1, 16),
        },
    ];

    #[test]
    fn every_kind_has_its_own_bit() {
        let mut seen = 0u32;
        for k in Kind::ALL {
            assert_eq!(k.bit().count_ones(), 1, "{k:?}");
            assert_eq!(seen & k.bit(), 0, "{k:?} shares a bit");
            seen |= k.bit();
        }
    }

    /// Per-bit membership (seed 003): each kind, alone at a missed format, sets exactly its
    /// own bit, so a dropped or swapped bit fails by name.
    #[test]
    fn each_kind_missing_alone_sets_exactly_its_bit() {
        for k in Kind::ALL {
            let mut layer = LayerFormats::default();
            for other in Kind::ALL {
                let f = if other == k {
                    Format::Q4K
                } else {
                    Format::Int4G64
                };
                layer.tensors.push((other, f));
            }
            let m = miss_mask(&layer, &TABLE);
            assert_eq!(m, KindMask(k.bit()), "{k:?}");
            assert_eq!(m.kinds().collect::<Vec<_>>(), vec![k]);
        }
    }

    #[test]
    fn truth_table_of_the_path() {
        let clean = LayerFormats {
            tensors: vec![(Kind::Q, Format::Int4G64), (Kind::O, Format::F32)],
        };
        let mixed = LayerFormats {
            tensors: vec![(Kind::Q, Format::Int4G64), (Kind::O, Format::Q4K)],
        };
        let none = LayerFormats {
            tensors: vec![(Kind::Q, Format::Q4K), (Kind::O, Format::Q6K)],
        };
        assert!(miss_mask(&clean, &TABLE).is_empty());
        assert_eq!(layer_path(&clean, &TABLE, false, true), LayerPath::Fused);
        assert_eq!(layer_path(&clean, &TABLE, false, false), LayerPath::OpByOp);
        assert_eq!(layer_path(&mixed, &TABLE, false, true), LayerPath::OpByOp);
        assert_eq!(layer_path(&none, &TABLE, false, true), LayerPath::Cpu);
        assert_eq!(layer_path(&clean, &TABLE, true, true), LayerPath::Cpu);
        // A fused table narrower than the op-by-op one (CUDA's resident path drops the
        // rotated formats): a layer it misses runs op by op, one it covers runs fused.
        let narrow = &TABLE[..1];
        assert_eq!(
            layer_path_with(&clean, &TABLE, false, Some(narrow)),
            LayerPath::OpByOp
        );
        let int4_only = LayerFormats {
            tensors: vec![(Kind::Q, Format::Int4G64), (Kind::O, Format::Int4G64)],
        };
        assert_eq!(
            layer_path_with(&int4_only, &TABLE, false, Some(narrow)),
            LayerPath::Fused
        );
        assert_eq!(
            layer_path_with(&int4_only, &TABLE, false, None),
            LayerPath::OpByOp
        );
    }

    #[test]
    fn cpu_table_covers_every_format() {
        let table = quant_core::cpu_backend::CAPABILITIES;
        for f in Format::all() {
            assert!(covers(table, f), "{f}");
        }
    }
}

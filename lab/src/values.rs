//! Values several parts of the lab name: the ways of copying memory (the transfer and to_device
//! experiments, the copy checks, the CUDA copy runs) and GEMM element types (precision, collectives, the
//! GEMM checks). Each experiment's `params` re-exports the ones it takes.

use serde::{Deserialize, Serialize};

/// One way of copying memory.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum CopyKind {
    H2dPageable,
    H2dPinned,
    D2hPageable,
    D2hPinned,
    /// Device to device by the driver's copy (`cuMemcpyDtoDAsync`, the call PyTorch's contiguous `copy_`
    /// makes: its profiler shows "Memcpy DtoD", not a kernel); its bandwidth counts bytes read plus bytes written.
    D2d,
    /// Device to device by a copy kernel on the SMs (16-byte loads and stores over a grid that fills the
    /// GPU), the way PyTorch's elementwise copy kernel moves data; counted like [`CopyKind::D2d`].
    D2dKernel,
}

impl CopyKind {
    pub const ALL: [Self; 6] =
        [Self::H2dPageable, Self::H2dPinned, Self::D2hPageable, Self::D2hPinned, Self::D2d, Self::D2dKernel];

    /// The name in JSON, the series and figure names and the CSV: "d2d_kernel".
    pub fn name(self) -> &'static str {
        match self {
            Self::H2dPageable => "h2d_pageable",
            Self::H2dPinned => "h2d_pinned",
            Self::D2hPageable => "d2h_pageable",
            Self::D2hPinned => "d2h_pinned",
            Self::D2d => "d2d",
            Self::D2dKernel => "d2d_kernel",
        }
    }

    /// What the copy is and how it is made, for a person: "D2D (SM copy kernel)".
    pub fn label(self) -> &'static str {
        match self {
            Self::H2dPageable => "H2D from pageable host memory",
            Self::H2dPinned => "H2D from pinned host memory",
            Self::D2hPageable => "D2H to pageable host memory",
            Self::D2hPinned => "D2H to pinned host memory",
            Self::D2d => "D2D (driver memcpy, cuMemcpyDtoDAsync, what torch copy_ calls)",
            Self::D2dKernel => "D2D (SM copy kernel, one 16-byte vector per thread)",
        }
    }

    /// The copy named `name` as [`CopyKind::name`] spells it.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// True for the copies that stay on the device (read and write HBM, or L2 when they fit).
    pub fn on_device(self) -> bool {
        matches!(self, Self::D2d | Self::D2dKernel)
    }

    /// Every copy's name for a message: "h2d_pageable, …, d2d or d2d_kernel".
    pub fn names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
        match names.split_last() {
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

/// A GEMM element type.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    Fp32,
    /// fp32 storage, tensor cores with TF32 inputs.
    Tf32,
    Fp16,
    Bf16,
}

impl Dtype {
    pub const ALL: [Self; 4] = [Self::Fp32, Self::Tf32, Self::Fp16, Self::Bf16];

    pub fn name(self) -> &'static str {
        match self {
            Self::Fp32 => "fp32",
            Self::Tf32 => "tf32",
            Self::Fp16 => "fp16",
            Self::Bf16 => "bf16",
        }
    }

    /// Largest accepted error against the host reference, as
    /// `max |gpu - host| / sqrt(k)` with inputs uniform in [-1, 1]. tf32 and fp16 keep 10
    /// mantissa bits: over the sampled outputs inputs rounded to them read about 4e-4, truncated
    /// about 9.5e-4, while inputs at bf16's 7 bits read about 3.2e-3; 1.5e-3 tells the two apart
    /// (`lab::checks` tests it), where 4e-3 passed a GEMM that quietly ran in bf16.
    pub fn tolerance(self) -> f64 {
        match self {
            Self::Fp32 => 1e-4,
            Self::Tf32 | Self::Fp16 => 1.5e-3,
            Self::Bf16 => 2e-2,
        }
    }
}

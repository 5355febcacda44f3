//! What an image is, as policies and EC2 name it (leaf values, no I/O): its architecture,
//! accelerator variant and the `alias` selector term. [`crate::ami`] selects and resolves
//! images; [`crate::policy`] names them in `amiSelectorTerms`.

pub mod alias;

use serde::{Deserialize, Serialize};
use std::fmt;

/// CPU architecture of an AMI, as EC2 names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Architecture {
    /// 64-bit x86.
    #[serde(rename = "x86_64")]
    X86_64,
    /// 64-bit ARM (Graviton).
    #[serde(rename = "arm64")]
    Arm64,
}

impl Architecture {
    /// Every architecture, in a stable order.
    pub const ALL: [Architecture; 2] = [Architecture::X86_64, Architecture::Arm64];

    /// The EC2 spelling (`x86_64`, `arm64`).
    pub fn as_str(self) -> &'static str {
        match self {
            Architecture::X86_64 => "x86_64",
            Architecture::Arm64 => "arm64",
        }
    }

    /// Parses the EC2 spelling; `None` for anything else (e.g. `i386`, `x86_64_mac`).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "x86_64" => Some(Architecture::X86_64),
            "arm64" => Some(Architecture::Arm64),
            _ => None,
        }
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Accelerator variant of an EKS-optimized AMI.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// No accelerator drivers.
    #[default]
    Standard,
    /// NVIDIA GPU drivers.
    Nvidia,
    /// AWS Neuron (Inferentia/Trainium) drivers.
    Neuron,
}

impl Variant {
    /// Every variant, in a stable order.
    pub const ALL: [Variant; 3] = [Variant::Standard, Variant::Nvidia, Variant::Neuron];

    /// The lowercase spelling used in policies and SSM paths.
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Standard => "standard",
            Variant::Nvidia => "nvidia",
            Variant::Neuron => "neuron",
        }
    }

    /// Parses the lowercase spelling.
    pub fn parse(text: &str) -> Option<Self> {
        Variant::ALL.into_iter().find(|v| v.as_str() == text)
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

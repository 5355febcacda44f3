//! `family@version` aliases and the public SSM parameter each one reads.
//! Filled in by the AMI-selection work; see `../shared/reference/semantics.md` section 1.

use serde::{Deserialize, Serialize};
use std::fmt;

/// AMI families an alias may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Amazon Linux 2 (not for Kubernetes >= 1.33).
    Al2,
    /// Amazon Linux 2023.
    Al2023,
    /// Bottlerocket.
    Bottlerocket,
    /// Windows Server 2019 Core (latest only).
    Windows2019,
    /// Windows Server 2022 Core (latest only).
    Windows2022,
    /// Windows Server 2025 Core (latest only, Kubernetes >= 1.35).
    Windows2025,
}

impl Family {
    /// Every family, in the order error messages list them.
    pub const ALL: [Family; 6] = [
        Family::Al2,
        Family::Al2023,
        Family::Bottlerocket,
        Family::Windows2019,
        Family::Windows2022,
        Family::Windows2025,
    ];

    /// The alias spelling (`al2023`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Al2 => "al2",
            Family::Al2023 => "al2023",
            Family::Bottlerocket => "bottlerocket",
            Family::Windows2019 => "windows2019",
            Family::Windows2022 => "windows2022",
            Family::Windows2025 => "windows2025",
        }
    }

    /// Parses the alias spelling (exact, lowercase).
    pub fn parse(text: &str) -> Option<Self> {
        Family::ALL.into_iter().find(|f| f.as_str() == text)
    }

    /// True for the Windows families, which accept only `@latest`.
    pub fn is_windows(self) -> bool {
        matches!(self, Family::Windows2019 | Family::Windows2022 | Family::Windows2025)
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The version half of an alias.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AliasVersion {
    /// `@latest`: follows every new release.
    Latest,
    /// A pinned release such as `v20240807` (kept exactly as written).
    Pinned(String),
}

/// A parsed `family@version` alias.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Alias {
    /// The AMI family.
    pub family: Family,
    /// Latest or pinned.
    pub version: AliasVersion,
}

impl fmt::Display for Alias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.version {
            AliasVersion::Latest => write!(f, "{}@latest", self.family),
            AliasVersion::Pinned(v) => write!(f, "{}@{v}", self.family),
        }
    }
}

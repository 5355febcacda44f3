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
        matches!(
            self,
            Family::Windows2019 | Family::Windows2022 | Family::Windows2025
        )
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

impl Alias {
    /// Longest alias a policy may contain, in characters (Karpenter's CRD `maxLength`).
    pub const MAX_LEN: usize = 30;

    /// Parses `family@version` as Karpenter writes it: a lowercase family from [`Family::ALL`],
    /// exactly one `@`, and a version that is `latest` or a release such as `v20240807` or
    /// `1.19.2` (letters, digits, `.`, `-`, `_`, starting with `v` or a digit). Windows families
    /// accept only `latest`.
    ///
    /// Does not check [`Alias::MAX_LEN`] (a document rule, reported separately by policy
    /// validation) nor any Kubernetes-version gate (checked at resolution time).
    pub fn parse(text: &str) -> Result<Alias, AliasError> {
        let mut halves = text.split('@');
        let (Some(family), Some(version), None) = (halves.next(), halves.next(), halves.next())
        else {
            return Err(AliasError::Format(text.to_string()));
        };
        if family.is_empty() || version.is_empty() {
            return Err(AliasError::Format(text.to_string()));
        }
        let Some(family) = Family::parse(family) else {
            return Err(AliasError::UnknownFamily(family.to_string()));
        };
        let version = if version == "latest" {
            AliasVersion::Latest
        } else if family.is_windows() {
            return Err(AliasError::WindowsPinned {
                family,
                version: version.to_string(),
            });
        } else if is_release_version(version) {
            AliasVersion::Pinned(version.to_string())
        } else {
            return Err(AliasError::InvalidVersion(version.to_string()));
        };
        Ok(Alias { family, version })
    }
}

fn is_release_version(version: &str) -> bool {
    let starts_well = version.starts_with(|c: char| c == 'v' || c.is_ascii_digit());
    starts_well
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// Why a text is not a valid alias. `Display` gives the message without a field path, e.g.
/// `unknown family "al2024"; expected one of al2, al2023, bottlerocket, windows2019, windows2022, windows2025`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AliasError {
    /// Not `family@version`: no `@`, more than one `@`, or an empty half (the whole text).
    Format(String),
    /// The family is not one of [`Family::ALL`] (the family as written).
    UnknownFamily(String),
    /// A Windows family with a version other than `latest`.
    WindowsPinned {
        /// The Windows family.
        family: Family,
        /// The version as written.
        version: String,
    },
    /// A version that is neither `latest` nor a release version (the version as written).
    InvalidVersion(String),
}

impl fmt::Display for AliasError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AliasError::Format(text) => write!(
                f,
                "invalid alias {text:?}; expected family@version such as \"al2023@latest\" or \"al2023@v20240807\""
            ),
            AliasError::UnknownFamily(family) => {
                let families: Vec<&str> = Family::ALL.iter().map(|f| f.as_str()).collect();
                write!(
                    f,
                    "unknown family {family:?}; expected one of {}",
                    families.join(", ")
                )?;
                match Family::parse(&family.to_ascii_lowercase()) {
                    Some(lower) => write!(f, " (families are lowercase: {lower})"),
                    None => Ok(()),
                }
            }
            AliasError::WindowsPinned { family, version } => write!(
                f,
                "{family} accepts only version \"latest\", got {version:?}; expected \"{family}@latest\""
            ),
            AliasError::InvalidVersion(version) if version.eq_ignore_ascii_case("latest") => {
                write!(
                    f,
                    "invalid version {version:?}; expected \"latest\" in lowercase"
                )
            }
            AliasError::InvalidVersion(version) => write!(
                f,
                "invalid version {version:?}; expected \"latest\" or a release version such as \"v20240807\" (letters, digits, '.', '-' and '_', starting with 'v' or a digit)"
            ),
        }
    }
}

impl std::error::Error for AliasError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_latest_and_pinned() {
        let cases = [
            ("al2023@latest", Family::Al2023, AliasVersion::Latest),
            (
                "al2023@v20240807",
                Family::Al2023,
                AliasVersion::Pinned("v20240807".into()),
            ),
            (
                "al2@v20240625",
                Family::Al2,
                AliasVersion::Pinned("v20240625".into()),
            ),
            (
                "bottlerocket@1.10.0",
                Family::Bottlerocket,
                AliasVersion::Pinned("1.10.0".into()),
            ),
            (
                "bottlerocket@v1.19.2",
                Family::Bottlerocket,
                AliasVersion::Pinned("v1.19.2".into()),
            ),
            (
                "windows2019@latest",
                Family::Windows2019,
                AliasVersion::Latest,
            ),
            (
                "windows2022@latest",
                Family::Windows2022,
                AliasVersion::Latest,
            ),
            (
                "windows2025@latest",
                Family::Windows2025,
                AliasVersion::Latest,
            ),
        ];
        for (text, family, version) in cases {
            let alias = Alias::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(alias, Alias { family, version }, "{text}");
            assert_eq!(alias.to_string(), text);
        }
    }

    #[test]
    fn rejects_malformed_aliases() {
        let cases = [
            ("al2023", AliasError::Format("al2023".into())),
            ("al2023@", AliasError::Format("al2023@".into())),
            ("@latest", AliasError::Format("@latest".into())),
            ("al2023-latest", AliasError::Format("al2023-latest".into())),
            ("al2023@v1@v2", AliasError::Format("al2023@v1@v2".into())),
            ("ubuntu@latest", AliasError::UnknownFamily("ubuntu".into())),
            ("AL2023@latest", AliasError::UnknownFamily("AL2023".into())),
            (
                "windows2025@v1.0.0",
                AliasError::WindowsPinned {
                    family: Family::Windows2025,
                    version: "v1.0.0".into(),
                },
            ),
            ("al2023@Latest", AliasError::InvalidVersion("Latest".into())),
            (
                "al2023@v2024/08",
                AliasError::InvalidVersion("v2024/08".into()),
            ),
            ("al2023@ v1", AliasError::InvalidVersion(" v1".into())),
        ];
        for (text, error) in cases {
            assert_eq!(Alias::parse(text), Err(error), "{text}");
        }
    }
}

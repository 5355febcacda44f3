//! `family@version` aliases and the public SSM parameter each one reads.
//! Alias families, versions and the SSM parameters behind them, as Karpenter resolves them.

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

    /// Why the family publishes no image of `arch` and `variant`, and what to write instead;
    /// `None` when it publishes one, or for Windows (x86_64 and standard only, which policy
    /// validation rejects otherwise). From the public parameters [`Alias::parameters`] reads
    /// and the AMIs AWS publishes: AL2's accelerated AMIs (`amazon-eks-gpu-node`) are x86_64
    /// only; Neuron serves AWS Inferentia and Trainium, x86_64 instances only; AL2023 and
    /// Bottlerocket publish arm64 NVIDIA AMIs.
    pub fn missing_image(
        self,
        arch: super::Architecture,
        variant: super::Variant,
    ) -> Option<(&'static str, &'static str)> {
        use super::Architecture::Arm64;
        use super::Variant::{Neuron, Nvidia};
        match (self, arch, variant) {
            (_, Arm64, Neuron) if !self.is_windows() => Some((
                "Neuron serves AWS Inferentia and Trainium instances, which are x86_64 only",
                "architecture x86_64 with variant neuron",
            )),
            (Family::Al2, Arm64, Nvidia) => Some((
                "AL2's accelerated AMIs are x86_64 only",
                "architecture x86_64, or alias al2023@latest or bottlerocket@latest for arm64 nvidia",
            )),
            _ => None,
        }
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

/// One public SSM parameter an alias reads, and what an image found there is known to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasParameter {
    /// Full parameter name under `/aws/service/...`.
    pub path: String,
    /// Variants an image under this path serves (the architecture comes from the image itself).
    /// Empty means "no variant constraint" (Windows).
    pub variants: Vec<super::Variant>,
}

/// Why an alias cannot be used with a cluster's Kubernetes version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionGateError {
    /// The Kubernetes version is not `major.minor`.
    #[error("Kubernetes version {0:?} is not of the form major.minor")]
    BadKubernetesVersion(String),
    /// `al2` on Kubernetes 1.33 or later.
    #[error(
        "alias {alias}: AL2 aliases are not supported on Kubernetes {version} (EKS 1.33+ publishes no AL2 AMIs); use al2023 or bottlerocket"
    )]
    Al2Unsupported {
        /// The alias as written.
        alias: String,
        /// The cluster's version.
        version: String,
    },
    /// `windows2025` before Kubernetes 1.35.
    #[error(
        "alias {alias}: Windows Server 2025 needs Kubernetes 1.35 or later, the cluster runs {version}; use windows2022"
    )]
    Windows2025Unsupported {
        /// The alias as written.
        alias: String,
        /// The cluster's version.
        version: String,
    },
}

/// Parses `major.minor` (a trailing `.patch` or `-eks...` is tolerated) into the minor number;
/// `None` unless the major is 1.
pub fn minor_version(k8s: &str) -> Option<u32> {
    let mut parts = k8s.split('.');
    let major = parts.next()?;
    let minor = parts.next()?;
    let minor: String = minor.chars().take_while(char::is_ascii_digit).collect();
    if major != "1" || minor.is_empty() {
        return None;
    }
    minor.parse().ok()
}

impl Alias {
    /// Checks the Kubernetes version gates (al2 < 1.33, windows2025 >= 1.35).
    pub fn check_kubernetes_version(&self, k8s: &str) -> Result<(), VersionGateError> {
        let minor = minor_version(k8s)
            .ok_or_else(|| VersionGateError::BadKubernetesVersion(k8s.to_string()))?;
        match self.family {
            Family::Al2 if minor >= 33 => Err(VersionGateError::Al2Unsupported {
                alias: self.to_string(),
                version: k8s.to_string(),
            }),
            Family::Windows2025 if minor < 35 => Err(VersionGateError::Windows2025Unsupported {
                alias: self.to_string(),
                version: k8s.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Every public parameter this alias reads for Kubernetes `k8s` (`major.minor`), in a stable
    /// order. The version gates are checked first.
    pub fn parameters(&self, k8s: &str) -> Result<Vec<AliasParameter>, VersionGateError> {
        use super::Variant::{Neuron, Nvidia, Standard};
        self.check_kubernetes_version(k8s)?;
        let pinned = match &self.version {
            AliasVersion::Latest => None,
            AliasVersion::Pinned(v) => Some(v.as_str()),
        };
        let param = |path: String, variants: Vec<super::Variant>| AliasParameter { path, variants };
        let out = match self.family {
            Family::Al2023 => {
                let combos = [
                    ("x86_64", Standard),
                    ("x86_64", Nvidia),
                    ("x86_64", Neuron),
                    ("arm64", Standard),
                    ("arm64", Nvidia),
                ];
                combos
                    .into_iter()
                    .map(|(arch, variant)| {
                        let leaf = match pinned {
                            None => "recommended".to_string(),
                            Some(v) => format!("amazon-eks-node-al2023-{arch}-{variant}-{k8s}-{v}"),
                        };
                        param(
                            format!(
                                "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{variant}/{leaf}/image_id"
                            ),
                            vec![variant],
                        )
                    })
                    .collect()
            }
            Family::Al2 => {
                let combos = [
                    ("amazon-linux-2", "amazon-eks-node", vec![Standard]),
                    (
                        "amazon-linux-2-arm64",
                        "amazon-eks-arm64-node",
                        vec![Standard],
                    ),
                    (
                        "amazon-linux-2-gpu",
                        "amazon-eks-gpu-node",
                        vec![Nvidia, Neuron],
                    ),
                ];
                combos
                    .into_iter()
                    .map(|(dir, prefix, variants)| {
                        let leaf = match pinned {
                            None => "recommended".to_string(),
                            Some(v) => format!("{prefix}-{k8s}-{v}"),
                        };
                        param(
                            format!("/aws/service/eks/optimized-ami/{k8s}/{dir}/{leaf}/image_id"),
                            variants,
                        )
                    })
                    .collect()
            }
            Family::Bottlerocket => {
                let version = pinned
                    .map(|v| v.trim_start_matches('v'))
                    .unwrap_or("latest");
                let combos = [
                    ("", "x86_64", vec![Standard, Neuron]),
                    ("", "arm64", vec![Standard]),
                    ("-nvidia", "x86_64", vec![Nvidia]),
                    ("-nvidia", "arm64", vec![Nvidia]),
                ];
                combos
                    .into_iter()
                    .map(|(flavour, arch, variants)| {
                        param(
                            format!(
                                "/aws/service/bottlerocket/aws-k8s-{k8s}{flavour}/{arch}/{version}/image_id"
                            ),
                            variants,
                        )
                    })
                    .collect()
            }
            Family::Windows2019 | Family::Windows2022 | Family::Windows2025 => {
                let year = &self.family.as_str()["windows".len()..];
                vec![param(
                    format!(
                        "/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id"
                    ),
                    Vec::new(),
                )]
            }
        };
        Ok(out)
    }
}

#[cfg(test)]
mod gate_tests {
    use super::*;
    use crate::image::Variant;

    fn paths(alias: &str, k8s: &str) -> Vec<String> {
        Alias::parse(alias)
            .unwrap()
            .parameters(k8s)
            .unwrap()
            .into_iter()
            .map(|p| p.path)
            .collect()
    }

    #[test]
    fn al2023_pinned_matches_the_documented_example() {
        assert!(paths("al2023@v20240807", "1.30").contains(
            &"/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.30-v20240807/image_id".to_string()
        ));
    }

    #[test]
    fn al2023_covers_every_arch_variant_pair() {
        let p = paths("al2023@latest", "1.31");
        assert_eq!(p.len(), 5);
        assert!(p.contains(&"/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/neuron/recommended/image_id".to_string()));
        assert!(p.contains(&"/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/nvidia/recommended/image_id".to_string()));
        assert!(!p.iter().any(|x| x.contains("arm64/neuron")));
    }

    #[test]
    fn al2_paths_and_gates() {
        assert_eq!(
            paths("al2@v20240807", "1.29"),
            vec![
                "/aws/service/eks/optimized-ami/1.29/amazon-linux-2/amazon-eks-node-1.29-v20240807/image_id",
                "/aws/service/eks/optimized-ami/1.29/amazon-linux-2-arm64/amazon-eks-arm64-node-1.29-v20240807/image_id",
                "/aws/service/eks/optimized-ami/1.29/amazon-linux-2-gpu/amazon-eks-gpu-node-1.29-v20240807/image_id",
            ]
        );
        assert!(paths("al2@latest", "1.32")[0].ends_with("amazon-linux-2/recommended/image_id"));
        let err = Alias::parse("al2@latest")
            .unwrap()
            .parameters("1.33")
            .unwrap_err();
        assert!(
            matches!(err, VersionGateError::Al2Unsupported { .. }),
            "{err}"
        );
    }

    #[test]
    fn bottlerocket_strips_leading_v_and_maps_variants() {
        let params = Alias::parse("bottlerocket@v1.20.3")
            .unwrap()
            .parameters("1.30")
            .unwrap();
        assert_eq!(
            params[0].path,
            "/aws/service/bottlerocket/aws-k8s-1.30/x86_64/1.20.3/image_id"
        );
        assert_eq!(params[0].variants, vec![Variant::Standard, Variant::Neuron]);
        assert_eq!(
            params[3].path,
            "/aws/service/bottlerocket/aws-k8s-1.30-nvidia/arm64/1.20.3/image_id"
        );
        assert_eq!(
            paths("bottlerocket@latest", "1.30")[1],
            "/aws/service/bottlerocket/aws-k8s-1.30/arm64/latest/image_id"
        );
    }

    #[test]
    fn windows_paths_and_2025_gate() {
        assert_eq!(
            paths("windows2022@latest", "1.31"),
            vec![
                "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.31/image_id"
            ]
        );
        assert!(
            Alias::parse("windows2025@latest")
                .unwrap()
                .parameters("1.34")
                .is_err()
        );
        assert_eq!(
            paths("windows2025@latest", "1.35"),
            vec![
                "/aws/service/ami-windows-latest/Windows_Server-2025-English-Core-EKS_Optimized-1.35/image_id"
            ]
        );
    }

    #[test]
    fn malformed_kubernetes_version_is_an_error() {
        assert!(
            Alias::parse("al2023@latest")
                .unwrap()
                .parameters("one.thirty")
                .is_err()
        );
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
        } else if matches!(family, Family::Al2 | Family::Al2023)
            && version.starts_with(|c: char| c.is_ascii_digit())
        {
            // EKS-optimized Amazon Linux releases are named `v<date>`: the parameter path of
            // any other version does not exist, which resolution would only say much later.
            return Err(AliasError::AmazonLinuxVersion {
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
    /// An AL2/AL2023 version without the leading `v` of EKS release names (`20240807`, or a
    /// managed node group release version such as `1.30.4-20240807`).
    AmazonLinuxVersion {
        /// `al2` or `al2023`.
        family: Family,
        /// The version as written.
        version: String,
    },
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
            AliasError::AmazonLinuxVersion { family, version } => {
                // `20240807`, or the date of a release version `1.30.4-20240807`.
                let date = version.rsplit('-').next().unwrap_or(version);
                let hint = if date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit()) {
                    format!(" (did you mean \"{family}@v{date}\"?)")
                } else {
                    String::new()
                };
                write!(
                    f,
                    "invalid {family} version {version:?}; expected \"latest\" or an EKS release such as \"v20240807\" (a 'v' and the release date){hint}"
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
            (
                "al2023@20240807",
                AliasError::AmazonLinuxVersion {
                    family: Family::Al2023,
                    version: "20240807".into(),
                },
            ),
            (
                "al2@1.29.3-20240807",
                AliasError::AmazonLinuxVersion {
                    family: Family::Al2,
                    version: "1.29.3-20240807".into(),
                },
            ),
        ];
        for (text, error) in cases {
            assert_eq!(Alias::parse(text), Err(error), "{text}");
        }
    }

    #[test]
    fn an_amazon_linux_version_without_v_is_refused_with_the_alias_to_write() {
        let message = |t: &str| Alias::parse(t).map(|_| ()).unwrap_err().to_string();
        assert!(
            message("al2023@20240807").contains("did you mean \"al2023@v20240807\"?"),
            "{}",
            message("al2023@20240807")
        );
        assert!(message("al2@1.29.3-20240807").contains("did you mean \"al2@v20240807\"?"));
        assert!(!message("al2023@2024").contains("did you mean"));
        // Bottlerocket versions take no `v` (one is dropped).
        assert!(Alias::parse("bottlerocket@1.26.0").is_ok());
    }
}

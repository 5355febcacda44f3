//! Releases: what a pool rolls out, independent of Kubernetes version and architecture. For
//! alias terms it is the alias release version read from the EKS-published image name
//! (`v20241109` for AL2023/AL2, `1.26.0` for Bottlerocket), so pools on other Kubernetes versions
//! or architectures promote the same release; for every other term (and Windows, whose aliases
//! cannot be pinned) it is the image id.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ami::resolve::Ami;

/// A release (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Release(pub String);

impl Release {
    /// True when the release is an image id rather than an alias release version.
    pub fn is_image(&self) -> bool {
        self.0.starts_with("ami-")
    }

    /// The release as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The release of `ami`: the version in the image name for an alias term that can be pinned
/// (AL2023, AL2: `-v<8 digits>`; Bottlerocket: `-v<x.y.z>`), else its image id.
pub fn release_of(ami: &Ami) -> Release {
    let alias = ami.source.field == "alias";
    let family = ami.source.value.split('@').next().unwrap_or_default();
    let pinnable = !matches!(family, "windows2019" | "windows2022" | "windows2025");
    if alias
        && pinnable
        && let Some(v) = alias_version(&ami.name, family == "bottlerocket")
    {
        return Release(v);
    }
    Release(ami.id.clone())
}

/// The release an EKS-published image name carries (`...-v20241109`, Bottlerocket's
/// `...-v1.26.0-...`), if any: what the alias pinned to it would be.
pub fn version_in_name(name: &str) -> Option<Release> {
    alias_version(name, false)
        .or_else(|| alias_version(name, true))
        .map(Release)
}

/// The release version in an EKS-published image name.
fn alias_version(name: &str, bottlerocket: bool) -> Option<String> {
    name.split('-').rev().find_map(|part| {
        let v = part.strip_prefix('v')?;
        if bottlerocket {
            let parts: Vec<&str> = v.split('.').collect();
            (parts.len() == 3
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())))
            .then(|| v.to_string())
        } else {
            (v.len() == 8 && v.chars().all(|c| c.is_ascii_digit())).then(|| part.to_string())
        }
    })
}

/// The pinned alias version that selects `release` for an alias of `family` (`v20241109`
/// stays, Bottlerocket's `1.26.0` stays: the alias parser takes both).
pub fn pinned_version(release: &Release) -> Option<&str> {
    (!release.is_image()).then(|| release.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ami::Architecture;
    use crate::ami::select::Provenance;

    fn ami(id: &str, name: &str, field: &str, value: &str) -> Ami {
        Ami {
            id: id.into(),
            name: name.into(),
            architecture: Architecture::X86_64,
            variant: None,
            creation_date: "2024-11-09T00:00:00.000Z".into(),
            deprecated: false,
            source: Provenance {
                term: 0,
                field: field.into(),
                value: value.into(),
                parameter: None,
            },
        }
    }

    #[test]
    fn releases_by_term_kind() {
        let cases = [
            (
                "amazon-eks-node-al2023-x86_64-standard-1.30-v20241109",
                "alias",
                "al2023@latest",
                "v20241109",
            ),
            (
                "amazon-eks-node-al2023-arm64-nvidia-1.31-v20241109",
                "alias",
                "al2023@v20241109",
                "v20241109",
            ),
            (
                "amazon-eks-node-1.29-v20240807",
                "alias",
                "al2@latest",
                "v20240807",
            ),
            (
                "bottlerocket-aws-k8s-1.30-x86_64-v1.26.0-7ab25f82",
                "alias",
                "bottlerocket@latest",
                "1.26.0",
            ),
            (
                "Windows_Server-2022-English-Core-EKS_Optimized-1.30-2024.11.12",
                "alias",
                "windows2022@latest",
                "ami-win",
            ),
            ("golden-2", "query", "name=golden-*, owner=self", "ami-win"),
            (
                "amazon-eks-node-al2023-x86_64-standard-1.30-v20241109",
                "id",
                "ami-win",
                "ami-win",
            ),
            (
                "amazon-eks-node-al2023-x86_64-standard-1.30",
                "alias",
                "al2023@latest",
                "ami-win",
            ),
        ];
        for (name, field, value, want) in cases {
            assert_eq!(
                release_of(&ami("ami-win", name, field, value)).0,
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn versions_in_eks_published_names() {
        let cases = [
            (
                "amazon-eks-node-al2023-x86_64-standard-1.30-v20241109",
                Some("v20241109"),
            ),
            ("amazon-eks-node-1.29-v20240807", Some("v20240807")),
            (
                "bottlerocket-aws-k8s-1.30-x86_64-v1.26.0-943d9a41",
                Some("1.26.0"),
            ),
            ("golden-eks-al2023-2024.11.10", None),
            ("my-image-v2024", None),
            // Bottlerocket versions: three non-empty numeric parts.
            ("bottlerocket-aws-k8s-1.30-x86_64-v1..0", None),
            ("bottlerocket-aws-k8s-1.30-x86_64-v1.a.0", None),
        ];
        for (name, want) in cases {
            assert_eq!(
                version_in_name(name).map(|r| r.0),
                want.map(str::to_string),
                "{name}"
            );
        }
    }

    #[test]
    fn a_release_is_an_image_id_or_a_version() {
        for (release, image) in [("ami-0abc", true), ("v20241109", false), ("1.26.0", false)] {
            let r = Release(release.to_string());
            assert_eq!(r.is_image(), image, "{release}");
            assert_eq!(r.as_str(), release);
            assert_eq!(r.to_string(), release);
        }
    }

    #[test]
    fn only_a_version_release_pins_an_alias() {
        for (release, pinned) in [
            ("v20241109", Some("v20241109")),
            ("1.26.0", Some("1.26.0")),
            ("ami-0abc", None),
        ] {
            assert_eq!(
                pinned_version(&Release(release.to_string())),
                pinned,
                "{release}"
            );
        }
    }
}

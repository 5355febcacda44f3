//! Whether a pinned release survives the next control-plane upgrade (pure): a pool pinned to an
//! EKS release (`al2023@v20240807`, or an image of it pinned by name, id or `nodecycle pin`) has
//! no AMI once the cluster moves to a Kubernetes minor that release was never built for. The
//! ami-watcher reads, for the next minor, the public parameters of the pinned release's builds
//! the pool needs ([`builds`]) and the minor's `recommended` ones; [`NextMinor`] says what it
//! found.

use serde::{Deserialize, Serialize};

use crate::image::alias::{Alias, AliasVersion, Family};
use crate::image::{Architecture, Variant};

/// Whether the release a pool is pinned to exists for the cluster's next Kubernetes minor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NextMinor {
    /// The pinned release (`al2023@v20240807`, or the release of a pinned EKS image).
    pub pinned: String,
    /// The cluster's version now.
    pub current: String,
    /// The next minor (`1.31`).
    pub next: String,
    /// The builds of the pinned release for `next` the pool needs (one per architecture and
    /// variant it runs), and those missing.
    pub missing: Vec<String>,
    /// The newest release published for `next` (its `recommended`), when any is.
    pub nearest: Option<String>,
}

impl NextMinor {
    /// Whether it is a warning: a build is missing for a minor that has releases (a minor not
    /// published yet is not one: nothing could be pinned there).
    pub fn warns(&self) -> bool {
        !self.missing.is_empty() && self.nearest.is_some()
    }

    /// One sentence for people.
    pub fn message(&self) -> String {
        if self.missing.is_empty() {
            return format!(
                "pinned release {} is published for Kubernetes {}: the control plane can move from {}",
                self.pinned, self.next, self.current
            );
        }
        match &self.nearest {
            Some(n) => format!(
                "pinned release {} has no build for Kubernetes {} ({} missing): before the control plane moves from {} to {}, pin a release published for it; the nearest is {n}",
                self.pinned,
                self.next,
                self.missing.join(", "),
                self.current,
                self.next
            ),
            None => format!(
                "Kubernetes {} has no published EKS AMIs yet: pinned release {} cannot be checked for it",
                self.next, self.pinned
            ),
        }
    }
}

/// The `major.minor` after `version` (`1.30` -> `1.31`; a patch or suffix is ignored); `None`
/// when it is not `1.<minor>`.
pub fn next_minor(version: &str) -> Option<String> {
    crate::image::alias::minor_version(version).map(|minor| format!("1.{}", minor + 1))
}

/// The EKS release an image name carries, as the alias pinned to it (`al2023@v20240807`):
/// AL2023 (`amazon-eks-node-al2023-...-v<date>`), AL2 (`amazon-eks-...node-...-v<date>`) and
/// Bottlerocket (`bottlerocket-aws-k8s-...-v<x.y.z>-...`) names; `None` for any other image.
pub fn pinned_release(image_name: &str) -> Option<Alias> {
    let family = if image_name.starts_with("amazon-eks-node-al2023-") {
        Family::Al2023
    } else if image_name.starts_with("amazon-eks-") {
        Family::Al2
    } else if image_name.starts_with("bottlerocket-aws-k8s-") {
        Family::Bottlerocket
    } else {
        return None;
    };
    let version = crate::promotion::release::version_in_name(image_name)?.0;
    Some(Alias {
        family,
        version: AliasVersion::Pinned(version),
    })
}

/// The public parameters of `alias`'s builds for Kubernetes `k8s` that a pool of `architecture`
/// and `variant` needs; an error when the alias cannot be used there at all (AL2 on 1.33+).
pub fn builds(
    alias: &Alias,
    k8s: &str,
    architecture: Architecture,
    variant: Variant,
) -> Result<Vec<String>, String> {
    let arm = architecture == Architecture::Arm64;
    let params = alias.parameters(k8s).map_err(|e| e.to_string())?;
    Ok(params
        .into_iter()
        .filter(|p| p.variants.is_empty() || p.variants.contains(&variant))
        .filter(|p| match alias.family {
            Family::Al2 => arm == p.path.contains("-arm64/"),
            _ => p.path.contains(&format!("/{}/", architecture.as_str())),
        })
        .map(|p| p.path)
        .collect())
}

#[cfg(test)]
mod tests;

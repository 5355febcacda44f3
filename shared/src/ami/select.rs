//! Choosing one AMI among the images the terms matched (Karpenter's rule, "Choosing among
//! matches"): non-deprecated beats deprecated, then the newest `CreationDate`, then the greater
//! `Name`; the image id breaks any remaining tie so the order is total and deterministic.

use std::cmp::Ordering;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Architecture, Variant};

/// An image as DescribeImages reports it (only what selection needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// `ami-...`.
    pub id: String,
    /// EC2 image name.
    pub name: String,
    /// `None` for architectures nodecycle cannot run (i386, x86_64_mac, ...): such images are ignored.
    pub architecture: Option<Architecture>,
    /// `CreationDate` exactly as EC2 returned it (RFC 3339), empty if absent.
    pub creation_date: String,
    /// `DeprecationTime`, if any.
    pub deprecation_time: Option<DateTime<Utc>>,
}

impl Image {
    /// True when the image is deprecated at `now` (DeprecationTime <= now).
    pub fn is_deprecated(&self, now: DateTime<Utc>) -> bool {
        self.deprecation_time.is_some_and(|t| t <= now)
    }

    fn created(&self) -> Option<DateTime<Utc>> {
        DateTime::parse_from_rfc3339(&self.creation_date)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}

/// Where a candidate came from: which term, and which SSM parameter if one was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Provenance {
    /// Index of the term in `amiSelectorTerms`.
    pub term: usize,
    /// Which field of the term matched: `alias`, `id`, `ssmParameter` or `query` (name/tags/owner).
    pub field: String,
    /// The term value in words, e.g. `al2023@v20240807` or `name=my-ami-*, owner=self`.
    pub value: String,
    /// The SSM parameter the id was read from (aliases and `ssmParameter` terms).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub parameter: Option<String>,
}

/// A matched image plus what it is known to serve and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The image.
    pub image: Image,
    /// Variants it serves; empty = unconstrained (non-alias terms and Windows).
    pub variants: Vec<Variant>,
    /// First term that matched it.
    pub source: Provenance,
}

impl Candidate {
    /// True when this candidate can run a pool of `architecture`/`variant`.
    pub fn fits(&self, architecture: Architecture, variant: Variant) -> bool {
        self.image.architecture == Some(architecture)
            && (self.variants.is_empty() || self.variants.contains(&variant))
    }
}

/// Orders two images best-first at `now`: non-deprecated, newer CreationDate, greater Name, then
/// smaller id. `Ordering::Less` means `a` is better.
pub fn compare(a: &Image, b: &Image, now: DateTime<Utc>) -> Ordering {
    a.is_deprecated(now)
        .cmp(&b.is_deprecated(now))
        .then_with(|| match (a.created(), b.created()) {
            (Some(x), Some(y)) => y.cmp(&x),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
        .then_with(|| b.name.cmp(&a.name))
        .then_with(|| a.id.cmp(&b.id))
}

/// Sorts candidates best-first (see [`compare`]).
pub fn sort_best_first(candidates: &mut [Candidate], now: DateTime<Utc>) {
    candidates.sort_by(|a, b| compare(&a.image, &b.image, now));
}

/// The best candidate for a pool of `architecture`/`variant`, if any fits.
pub fn choose(
    candidates: &[Candidate],
    architecture: Architecture,
    variant: Variant,
    now: DateTime<Utc>,
) -> Option<&Candidate> {
    candidates
        .iter()
        .filter(|c| c.fits(architecture, variant))
        .min_by(|a, b| compare(&a.image, &b.image, now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn image(id: &str, name: &str, created: &str, deprecated: Option<&str>) -> Image {
        Image {
            id: id.into(),
            name: name.into(),
            architecture: Some(Architecture::X86_64),
            creation_date: created.into(),
            deprecation_time: deprecated.map(at),
        }
    }

    fn cand(img: Image, variants: Vec<Variant>) -> Candidate {
        Candidate {
            image: img,
            variants,
            source: Provenance {
                term: 0,
                field: "query".into(),
                value: String::new(),
                parameter: None,
            },
        }
    }

    const NOW: &str = "2026-11-29T00:00:00Z";

    #[test]
    fn non_deprecated_beats_newer_deprecated() {
        let old = image("ami-1", "a", "2024-01-01T00:00:00.000Z", None);
        let newer_dep = image(
            "ami-2",
            "b",
            "2025-01-01T00:00:00.000Z",
            Some("2026-01-01T00:00:00Z"),
        );
        assert_eq!(compare(&old, &newer_dep, at(NOW)), Ordering::Less);
    }

    #[test]
    fn deprecation_in_the_future_is_not_deprecated_yet() {
        let img = image(
            "ami-1",
            "a",
            "2024-01-01T00:00:00.000Z",
            Some("2027-01-01T00:00:00Z"),
        );
        assert!(!img.is_deprecated(at(NOW)));
        assert!(img.is_deprecated(at("2027-01-01T00:00:00Z")));
    }

    #[test]
    fn newest_creation_then_greater_name_then_smaller_id() {
        let a = image("ami-1", "a", "2024-01-01T00:00:00.000Z", None);
        let b = image("ami-2", "b", "2024-02-01T00:00:00.000Z", None);
        assert_eq!(compare(&b, &a, at(NOW)), Ordering::Less);
        let c = image("ami-3", "c", "2024-01-01T00:00:00.000Z", None);
        assert_eq!(compare(&c, &a, at(NOW)), Ordering::Less);
        let d = image("ami-0", "a", "2024-01-01T00:00:00.000Z", None);
        assert_eq!(compare(&d, &a, at(NOW)), Ordering::Less);
    }

    #[test]
    fn deprecated_used_only_when_nothing_else_fits() {
        let dep = cand(
            image(
                "ami-1",
                "a",
                "2025-01-01T00:00:00Z",
                Some("2025-06-01T00:00:00Z"),
            ),
            vec![],
        );
        let mut arm = image("ami-2", "b", "2024-01-01T00:00:00Z", None);
        arm.architecture = Some(Architecture::Arm64);
        let arm = cand(arm, vec![]);
        let all = vec![dep.clone(), arm];
        assert_eq!(
            choose(&all, Architecture::X86_64, Variant::Standard, at(NOW)),
            Some(&dep)
        );
    }

    #[test]
    fn variant_constraint_applies_only_to_known_variants() {
        let gpu = cand(
            image("ami-1", "a", "2025-01-01T00:00:00Z", None),
            vec![Variant::Nvidia],
        );
        let plain = cand(
            image("ami-2", "b", "2024-01-01T00:00:00Z", None),
            vec![Variant::Standard],
        );
        let any = cand(image("ami-3", "c", "2023-01-01T00:00:00Z", None), vec![]);
        let all = vec![gpu.clone(), plain.clone(), any.clone()];
        assert_eq!(
            choose(&all, Architecture::X86_64, Variant::Standard, at(NOW)),
            Some(&plain)
        );
        assert_eq!(
            choose(&all, Architecture::X86_64, Variant::Nvidia, at(NOW)),
            Some(&gpu)
        );
        assert_eq!(
            choose(&all, Architecture::X86_64, Variant::Neuron, at(NOW)),
            Some(&any)
        );
        assert_eq!(
            choose(&all, Architecture::Arm64, Variant::Standard, at(NOW)),
            None
        );
    }

    proptest! {
        #[test]
        fn compare_is_a_total_order(
            xs in proptest::collection::vec((0u8..4, 0u8..4, 0u8..3, proptest::option::of(0u8..3)), 1..8)
        ) {
            let now = at(NOW);
            let imgs: Vec<Image> = xs.iter().map(|(id, name, day, dep)| Image {
                id: format!("ami-{id}"),
                name: format!("n{name}"),
                architecture: Some(Architecture::X86_64),
                creation_date: format!("2026-01-0{}T00:00:00Z", day + 1),
                deprecation_time: dep.map(|d| at(&format!("2026-11-2{}T00:00:00Z", d * 4 + 1))),
            }).collect();
            let mut sorted = imgs.clone();
            sorted.sort_by(|a, b| compare(a, b, now));
            // The first element is never beaten by anything else.
            for img in &imgs {
                prop_assert_ne!(compare(img, &sorted[0], now), Ordering::Less);
            }
            // Antisymmetry.
            for a in &imgs { for b in &imgs {
                prop_assert_eq!(compare(a, b, now), compare(b, a, now).reverse());
            }}
        }
    }
}

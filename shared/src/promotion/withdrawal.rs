//! A release its vendor withdrew (pure): vendors take a bad release back by moving the public
//! SSM parameter to the previous image (bottlerocket-os/bottlerocket #4262). A pool following
//! the parameter follows it anyway; what this adds is that the image it left is quarantined
//! everywhere, so no pool (also none reading other terms, none downstream) takes it again and
//! those on it roll back. A parameter that moves to an older image at a *higher* version is a
//! withdrawal; a lower version is a stale read and changes nothing.

use chrono::{DateTime, Utc};

use super::{Cause, Quarantine, Target, release::version_in_name};
use crate::ami::select::Image;

/// The parameters vendors publish releases through.
const PUBLIC_PREFIX: &str = "/aws/service/";

/// A parameter's value at a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read<'a> {
    /// The version.
    pub version: i64,
    /// The value (an image id for the parameters pools resolve through).
    pub value: &'a str,
}

/// The quarantine a parameter's move calls for, when it is a withdrawal: `now` is a higher
/// version than `seen` and names another image, created before the one `seen` named (both
/// among `images`; an image not described proves nothing). The image left is quarantined as
/// its release when the parameter is a vendor's (`/aws/service/...`) and its name carries one,
/// else as the image.
pub fn withdrawn(
    parameter: &str,
    seen: Read<'_>,
    now: Read<'_>,
    images: &[Image],
    at: DateTime<Utc>,
) -> Option<Quarantine> {
    if now.version <= seen.version || now.value == seen.value {
        return None;
    }
    let created = |id: &str| {
        let image = images.iter().find(|i| i.id == id)?;
        let t = DateTime::parse_from_rfc3339(&image.creation_date).ok()?;
        Some((image, t.with_timezone(&Utc)))
    };
    let (left, left_created) = created(seen.value)?;
    let (back, back_created) = created(now.value)?;
    if back_created >= left_created {
        return None;
    }
    let target = match version_in_name(&left.name) {
        Some(release) if parameter.starts_with(PUBLIC_PREFIX) => Target::Release(release),
        _ => Target::Ami(left.id.clone()),
    };
    Some(Quarantine {
        reason: format!(
            "{parameter} moved from {} ({}) back to the older {} ({}) at version {} (was {}): withdrawn by its publisher",
            left.id, left.name, back.id, back.name, now.version, seen.version
        ),
        target,
        by: "nodecycle".to_string(),
        at,
        cause: Cause::Withdrawn {
            parameter: parameter.to_string(),
            version: now.version,
            image: left.id.clone(),
            back_to: back.id.clone(),
        },
        outbox: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promotion::Release;

    fn image(id: &str, name: &str, created: &str) -> Image {
        Image {
            id: id.into(),
            name: name.into(),
            architecture: None,
            creation_date: created.into(),
            deprecation_time: None,
        }
    }

    const PUBLIC: &str = "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended/image_id";

    fn images() -> Vec<Image> {
        vec![
            image(
                "ami-v1",
                "amazon-eks-node-al2023-x86_64-standard-1.30-v20241101",
                "2024-11-01T00:00:00Z",
            ),
            image(
                "ami-v2",
                "amazon-eks-node-al2023-x86_64-standard-1.30-v20241109",
                "2024-11-09T00:00:00Z",
            ),
            image("ami-x", "team-golden", "2024-12-01T00:00:00Z"),
        ]
    }

    fn read(version: i64, value: &str) -> Read<'_> {
        Read { version, value }
    }

    #[test]
    fn a_parameter_moving_back_at_a_higher_version_withdraws_what_it_left() {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let cases: [(&str, Read<'_>, Read<'_>, Option<Target>); 6] = [
            // v2 -> v1 at a higher version: the vendor withdrew v2.
            (
                PUBLIC,
                read(7, "ami-v2"),
                read(8, "ami-v1"),
                Some(Target::Release(Release("v20241109".into()))),
            ),
            // A lower version: a stale read, nothing.
            (PUBLIC, read(8, "ami-v2"), read(7, "ami-v1"), None),
            // Forward to a newer image: a release, not a withdrawal.
            (PUBLIC, read(7, "ami-v1"), read(8, "ami-v2"), None),
            // The same image at a new version (a re-put): nothing.
            (PUBLIC, read(7, "ami-v2"), read(8, "ami-v2"), None),
            // An image not described proves nothing.
            (PUBLIC, read(7, "ami-gone"), read(8, "ami-v1"), None),
            // The team's own parameter: the image, not a release.
            (
                "/team/golden",
                read(3, "ami-x"),
                read(4, "ami-v1"),
                Some(Target::Ami("ami-x".into())),
            ),
        ];
        for (i, (parameter, seen, now, want)) in cases.iter().enumerate() {
            let q = withdrawn(parameter, *seen, *now, &images(), at);
            assert_eq!(q.as_ref().map(|q| q.target.clone()), *want, "case {i}");
        }
        let q = withdrawn(PUBLIC, read(7, "ami-v2"), read(8, "ami-v1"), &images(), at)
            .unwrap_or_else(|| panic!("withdrawn"));
        assert!(
            matches!(&q.cause, Cause::Withdrawn { version: 8, image, back_to, .. } if image == "ami-v2" && back_to == "ami-v1"),
            "{q:?}"
        );
        assert!(
            q.reason.contains("withdrawn by its publisher"),
            "{}",
            q.reason
        );
    }
}

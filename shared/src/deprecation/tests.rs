use super::*;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

const NOW: &str = "2026-12-05T00:00:00Z";

fn image(id: &str, deprecates: Option<&str>) -> Image {
    Image {
        id: id.into(),
        name: format!("name-of-{id}"),
        architecture: None,
        creation_date: "2024-12-05T00:00:00Z".into(),
        deprecation_time: deprecates.map(at),
    }
}

#[test]
fn only_amis_within_the_horizon_are_listed_each_once_with_all_its_uses() {
    let images = [
        (Use::Running, image("ami-old", Some("2026-12-15T00:00:00Z"))),
        (Use::Pinned, image("ami-pin", Some("2026-12-25T00:00:00Z"))),
        (Use::Desired, image("ami-pin", Some("2026-12-25T00:00:00Z"))),
        (Use::Running, image("ami-pin", Some("2026-12-25T00:00:00Z"))),
        (Use::Desired, image("ami-far", Some("2027-06-01T00:00:00Z"))),
        (Use::Running, image("ami-none", None)),
        (
            Use::Running,
            image("ami-gone", Some("2026-11-01T00:00:00Z")),
        ),
    ];
    let (list, nearest) = deprecating(&images, 30, at(NOW));
    let got: Vec<(&str, Vec<Use>, i64)> = list
        .iter()
        .map(|d| (d.ami.as_str(), d.uses.clone(), d.days_left(at(NOW))))
        .collect();
    assert_eq!(
        got,
        vec![
            ("ami-gone", vec![Use::Running], -34),
            ("ami-old", vec![Use::Running], 10),
            ("ami-pin", vec![Use::Desired, Use::Pinned, Use::Running], 20),
        ]
    );
    assert_eq!(nearest, Some(at("2026-11-01T00:00:00Z")));
    // A longer horizon takes the far one in; none at all: nothing, and no nearest.
    assert_eq!(deprecating(&images, 200, at(NOW)).0.len(), 4);
    let (none, nearest) = deprecating(&[(Use::Desired, image("ami-none", None))], 30, at(NOW));
    assert!(none.is_empty());
    assert_eq!(nearest, None);
}

#[test]
fn the_list_is_bounded() {
    let images: Vec<(Use, Image)> = (0..40)
        .map(|i| {
            (
                Use::Running,
                image(&format!("ami-{i:03}"), Some("2026-12-10T00:00:00Z")),
            )
        })
        .collect();
    assert_eq!(deprecating(&images, 30, at(NOW)).0.len(), LIMIT);
}

#[test]
fn messages_say_what_to_do() {
    let d = Deprecating {
        ami: "ami-pin".into(),
        name: "golden-7".into(),
        uses: vec![Use::Pinned, Use::Running],
        deprecates_at: at("2026-12-25T00:00:00Z"),
    };
    let m = d.message(at(NOW));
    assert!(
        m.contains("in 20 day(s)") && m.contains("pinned and running on nodes"),
        "{m}"
    );
    let m = d.message(at("2027-01-01T00:00:00Z"));
    assert!(m.contains("was deprecated"), "{m}");
}

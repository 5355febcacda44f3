//! One evaluation of a 10-budget policy (schedules in several time zones, some dense).

use std::hint::black_box;

use chrono::{DateTime, Utc};
use criterion::{Criterion, criterion_group, criterion_main};
use nodecycle::budget::{Reason, evaluate, parse_budgets};
use nodecycle::problem::Problems;

const POLICY: &str = r#"
- nodes: 15%
- nodes: "3"
- nodes: "0"
  schedule: "0 9 * * sat-sun"
  duration: 24h
- nodes: "0"
  schedule: "0 17 * * mon-fri"
  duration: 16h
  reasons: [Drifted]
- nodes: "1"
  schedule: "30 2 * * *"
  duration: 2h
  timeZone: America/New_York
- nodes: 50%
  schedule: "0 0 1 * *"
  duration: 48h
  timeZone: Europe/Berlin
- nodes: "2"
  schedule: "*/15 9-17 * * mon-fri"
  duration: 30m
  timeZone: Asia/Shanghai
- nodes: "5"
  schedule: "0 0 13 * fri"
  duration: 24h
  reasons: [Drifted, Expired]
- nodes: 20%
  schedule: "@hourly"
  duration: 90m
- nodes: "4"
  schedule: "0 22-3 * nov-feb *"
  duration: 1h
  timeZone: Australia/Lord_Howe
"#;

fn bench(c: &mut Criterion) {
    let value: serde_json::Value = serde_norway::from_str(POLICY).unwrap_or_default();
    let mut problems = Problems::new();
    let budgets = parse_budgets(Some(&value), "disruption.budgets", &mut problems);
    assert_eq!(budgets.len(), 10, "{problems:?}");
    let now: DateTime<Utc> = DateTime::from_timestamp(1_717_419_600, 0).unwrap_or_default(); // Mon 2024-06-03 13:00Z
    c.bench_function("evaluate 10 budgets", |b| {
        b.iter(|| evaluate(black_box(&budgets), Reason::Drifted, 40, 1, black_box(now)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! `nodecycle simulate` on 50 pools for 7 days (the target: under 5 s on one core): a mix
//! of self-managed and managed node group pools of 6 to 40 nodes, percent and count budgets,
//! cron windows in several time zones, expiry inside the week. One iteration forecasts all 50.

use std::hint::black_box;

use chrono::{DateTime, TimeDelta, Utc};
use criterion::{Criterion, criterion_group, criterion_main};
use nodecycle::policy;
use nodecycle::simulate::{PoolStart, Settings, simulate};

const BUDGETS: [&str; 5] = [
    // The seed article's: 15%, at most 3, weekend freeze in Shanghai, weekday evenings no drift.
    "disruption:\n  budgets:\n    - nodes: 15%\n    - nodes: \"3\"\n    - nodes: \"0\"\n      schedule: \"0 9 * * sat-sun\"\n      duration: 24h\n      timeZone: Asia/Shanghai\n    - nodes: \"0\"\n      schedule: \"0 17 * * mon-fri\"\n      duration: 16h\n      reasons: [Drifted]\nexpireAfter: 720h\nterminationGracePeriod: 2h\n",
    "disruption:\n  budgets:\n    - nodes: \"2\"\nexpireAfter: 720h\n",
    "disruption:\n  budgets:\n    - nodes: 20%\n    - nodes: \"0\"\n      schedule: \"0 9 * * mon-fri\"\n      duration: 8h\n      timeZone: Europe/Berlin\n      reasons: [Drifted]\n    - nodes: \"1\"\n      schedule: \"0 22 * * *\"\n      duration: 4h\n      timeZone: America/New_York\nexpireAfter: 720h\nterminationGracePeriod: 24h\n",
    "disruption:\n  budgets:\n    - nodes: 10%\n    - nodes: \"0\"\n      schedule: \"*/30 * * * *\"\n      duration: 10m\n      timeZone: Asia/Kolkata\nexpireAfter: 700h\n",
    "disruption:\n  budgets:\n    - nodes: \"1\"\n    - nodes: \"0\"\n      schedule: \"0 18 * * *\"\n      duration: 14h\n      reasons: [Drifted]\n",
];

fn pools(from: DateTime<Utc>) -> Vec<PoolStart> {
    (0..50usize)
        .filter_map(|i| {
            let group = if i % 4 == 3 {
                format!("{{ managedNodeGroup: ng-{i:02} }}")
            } else {
                format!("{{ autoScalingGroup: asg-{i:02} }}")
            };
            let doc = format!(
                "cluster: bench\nname: pool-{i:02}\nnodeGroup: {group}\namiSelectorTerms:\n  - alias: al2023@latest\n{}",
                BUDGETS[i % BUDGETS.len()]
            );
            let policy = policy::parse(&doc).policy?;
            let nodes = 6 + u32::try_from(i * 7 % 35).unwrap_or(0);
            let age = TimeDelta::hours(i64::try_from(i * 37 % 720).unwrap_or(0));
            let change = from + TimeDelta::hours(i64::try_from(i % 5).unwrap_or(0) * 6);
            Some(PoolStart::synthetic(policy, nodes, from, age, change))
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let from = DateTime::parse_from_rfc3339("2026-11-30T00:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default();
    let settings = Settings {
        from,
        days: 7,
        rotation: TimeDelta::minutes(10),
        failures: Vec::new(),
    };
    let start = pools(from);
    let forecast = simulate(start.clone(), &settings);
    let nodes: u32 = forecast.pools.iter().map(|p| p.nodes).sum();
    let rotations: usize = forecast.pools.iter().map(|p| p.rotations.len()).sum();
    let done = forecast.pools.iter().filter(|p| p.done.is_some()).count();
    eprintln!(
        "simulate: {} pools, {nodes} nodes, 7 days: {rotations} rotations, {done} pools done",
        forecast.pools.len()
    );
    let mut group = c.benchmark_group("simulate");
    group.sample_size(10);
    group.bench_function("50 pools x 7 days", |b| {
        b.iter(|| simulate(black_box(start.clone()), &settings))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

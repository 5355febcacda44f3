//! The planner on 10,000 nodes in 100 pools (100 nodes each): a realistic mix of current,
//! drifted, expired, force-expired, NotReady, cordoned and launching nodes, a few rotations in
//! flight, and a 4-budget policy with schedules in several time zones. One iteration plans all
//! 100 pools.

use std::hint::black_box;

use chrono::{DateTime, TimeDelta, Utc};
use criterion::{Criterion, criterion_group, criterion_main};
use nodecycle::fleet::{Gates, Group, Lifecycle, Member, NodeStatus};
use nodecycle::plan::Snapshot;
use nodecycle::plan::plan;
use nodecycle::policy;
use nodecycle::rotation::{Rotation, RotationReason, Step};

const POLICY: &str = r#"
nodeGroup: { autoScalingGroup: bench }
amiSelectorTerms:
  - alias: al2023@latest
disruption:
  budgets:
    - nodes: 10%
    - nodes: "3"
      reasons: [Expired]
    - nodes: "0"
      schedule: "0 9 * * mon-fri"
      duration: 8h
      timeZone: Europe/Berlin
      reasons: [Drifted]
    - nodes: 20%
      schedule: "0 22 * * *"
      duration: 4h
      timeZone: America/New_York
expireAfter: 720h
terminationGracePeriod: 24h
"#;

const NEW: &str = "ami-0new";
const OLD: &str = "ami-0old";

/// Deterministic xorshift so the fleet is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn pool(index: usize, now: DateTime<Utc>, rng: &mut Rng) -> Option<Snapshot> {
    let doc = format!("cluster: bench\nname: pool-{index:03}\n{POLICY}");
    let policy = policy::parse(&doc).policy?;
    let pool_id = policy.pool_id();
    let mut members = Vec::with_capacity(102);
    let mut rotations = Vec::new();
    for n in 0..100 {
        let id = format!("i-{index:03}{n:014x}");
        let roll = rng.below(100);
        // ~25% drifted, ~8% expired (budgeted), ~2% past the forced line, rest current.
        let (image, age_h) = match roll {
            0..25 => (OLD, 24 + rng.below(600)),
            25..33 => (NEW, 721 + rng.below(20)),
            33..35 => (OLD, 750 + rng.below(100)),
            _ => (NEW, rng.below(700)),
        };
        let age_h = i64::try_from(age_h).unwrap_or(0);
        let special = rng.below(100);
        let node = NodeStatus {
            name: format!("ip-10-0-{index}-{n}.ec2.internal"),
            ready: special >= 3,
            unschedulable: special == 3,
            disrupted: (special == 4).then(|| "interruption".to_string()),
            evictable_pods: u32::try_from(rng.below(12)).unwrap_or(0),
            pods_counted: false,
            marks: Default::default(),
            joined: None,
            conditions: Vec::new(),
            opt_out: None,
        };
        members.push(Member {
            instance_id: id.clone(),
            availability_zone: ["eu-west-1a", "eu-west-1b", "eu-west-1c"][n % 3].to_string(),
            image_id: Some(image.to_string()),
            launch_time: now - TimeDelta::hours(age_h),
            lifecycle: Lifecycle::InService,
            node: Some(node),
        });
        // Two rotations in flight per pool, plus a finished one.
        if n < 2 || n == 50 {
            let mut r = Rotation::new(
                &pool_id,
                &id,
                RotationReason::Drifted,
                false,
                now - TimeDelta::minutes(10),
            );
            r.step = [Step::Draining, Step::Surging, Step::Done][n.min(2)];
            rotations.push(r);
        }
    }
    // One replacement launching.
    members.push(Member {
        instance_id: format!("i-{index:03}ffffffffffffff"),
        availability_zone: "eu-west-1a".to_string(),
        image_id: Some(NEW.to_string()),
        launch_time: now,
        lifecycle: Lifecycle::Pending,
        node: None,
    });
    Some(Snapshot {
        policy,
        gates: Gates {
            desired_ami: Some(NEW.to_string()),
            paused: None,
            halted: None,
            stopped: None,
        },
        group: Group {
            name: format!("bench-{index:03}"),
            min_size: 90,
            max_size: 120,
            desired_capacity: 101,
            launch_template_image: Some(
                if index.is_multiple_of(10) { OLD } else { NEW }.to_string(),
            ),
            suspended_processes: Vec::new(),
            do_not_repair: false,
            retained: Vec::new(),
        },
        members,
        rotations,
        adopted_at: None,
        repair: Default::default(),
    })
}

fn fleet(now: DateTime<Utc>) -> Vec<Snapshot> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    (0..100).filter_map(|i| pool(i, now, &mut rng)).collect()
}

fn bench(c: &mut Criterion) {
    // Sunday 12:00Z: the Drifted freeze (weekdays in Berlin) is off; budgets limit starts.
    let open: DateTime<Utc> = DateTime::from_timestamp(1_764_504_000, 0).unwrap_or_default();
    // Tuesday 10:00Z: inside the Berlin business-hours freeze; drift waits, with "until".
    let frozen: DateTime<Utc> = DateTime::from_timestamp(1_764_669_600, 0).unwrap_or_default();
    for (label, now) in [("window open", open), ("drift frozen", frozen)] {
        let pools = fleet(now);
        assert_eq!(pools.len(), 100);
        assert_eq!(pools.iter().map(|p| p.members.len()).sum::<usize>(), 10_100);
        let sample = plan(&pools[0], now);
        eprintln!(
            "{label}: pool 0 allowed {:?}, {} candidates, {} actions, blocked {:?}",
            sample.allowed,
            sample.candidates.len(),
            sample.actions.len(),
            sample.blocked
        );
        c.bench_function(&format!("plan 100 pools x 100 nodes ({label})"), |b| {
            b.iter(|| {
                for s in black_box(&pools) {
                    black_box(plan(s, now));
                }
            })
        });
        // The same pools as managed node groups (no update recorded).
        c.bench_function(
            &format!("plan_managed 100 pools x 100 nodes ({label})"),
            |b| {
                b.iter(|| {
                    for s in black_box(&pools) {
                        black_box(nodecycle::plan::managed_update::plan_managed(
                            s,
                            &nodecycle::plan::managed_update::NodeGroupState {
                                update: None,
                                status: "ACTIVE",
                                wave: std::time::Duration::from_secs(600),
                            },
                            now,
                        ));
                    }
                })
            },
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

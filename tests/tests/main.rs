//! The integration tests, built as one test binary (`cargo test -p nodecycle-tests --test
//! integration [filter]`, e.g. `rotation::` for one file's tests). One binary links once
//! instead of once per file, and libtest runs every file's tests from one pool of threads, so
//! the cores stay busy until the last test ends instead of each file waiting for its own
//! longest test. Each file is a module; `support` holds the fixtures they share. Nothing here
//! is process-wide: every test starts its own fake cloud and Kubernetes stand-in.

mod support;

mod adoption;
mod ahead;
mod ami_resolution;
mod ami_watcher;
mod autoscaler;
mod backoff;
mod cli;
mod controlplane;
mod docs;
mod doctor;
mod drain;
mod events_out;
mod fakecloud_fidelity;
mod fakecloud_smoke;
mod fan_out;
mod faults;
mod hostile;
mod interruption;
mod kube_standin;
mod launch_template;
mod managed;
mod ops;
mod opt_out;
mod organisation;
mod policy_data;
mod promotion;
mod quarantine_ops;
mod release;
mod release_health;
mod repair;
mod retain;
mod rollback;
mod rollout_status;
mod rotation;
mod runtime;
mod scale;
mod simulate;
mod stop;
mod surge;
mod template;
mod terminate_first;

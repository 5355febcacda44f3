//! The fake cloud process: moto + control endpoint (+ Kubernetes stand-ins).

use std::io::{BufRead, BufReader, Read};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{OnceLock, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::http;
use crate::kube::KubeStandIn;

/// The account moto serves (its default account).
pub const ACCOUNT_ID: &str = "123456789012";
/// The region tests use unless they say otherwise.
pub const DEFAULT_REGION: &str = "us-east-2";
/// Static test credentials (moto accepts any; the Kubernetes stand-in checks
/// token signatures with this secret).
pub const ACCESS_KEY_ID: &str = "testing";
/// See [`ACCESS_KEY_ID`].
pub const SECRET_ACCESS_KEY: &str = "testing";
/// The first retry's backoff of the tests' SDK clients (the SDK's default is 1 s, doubling,
/// with full jitter). The retry behaviour is the SDK's standard mode, unchanged: which errors
/// are retried, how many attempts, the retry quota. Only the waits are shorter. Tests that
/// inject faults (a fifth of all calls failing) otherwise spend most of their time asleep
/// in backoff.
pub const RETRY_BACKOFF: Duration = Duration::from_millis(25);

const DEFAULT_VENV_PYTHON: &str = "/root/.cache/nodecycle/venv/bin/python";

/// Set to `0` to start every fake cloud as a launcher process of its own instead of forking
/// it from the zygote (see [`FakeCloud::start`]).
pub const FORK_ENV: &str = "NODECYCLE_FAKECLOUD_FORK";

/// How long a launcher may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// One fake cloud: a launcher process private to the test that started it.
///
/// The process stops when this value is dropped, and also when the test process dies (its
/// stdin, or its connection to the zygote, closes).
pub struct FakeCloud {
    launcher: Launcher,
    aws_url: String,
    control: Control,
    startup: Duration,
}

/// The process a fake cloud runs in.
enum Launcher {
    /// `server.py`, started for this cloud.
    Process(Child),
    /// Forked by the zygote; it serves until `conn` closes.
    Forked { conn: UnixStream, pid: u32 },
}

/// `server.py --zygote`, started once per test process: it has imported and warmed up moto,
/// and forks a fake cloud for each connection to `socket`. It stops when `_stdin` closes,
/// that is when the test process ends.
struct Zygote {
    socket: PathBuf,
    _stdin: ChildStdin,
}

impl Zygote {
    /// The test process's zygote; `None` when [`FORK_ENV`] is `0` or it could not start (said
    /// once on stderr).
    fn get() -> Option<&'static Zygote> {
        static ZYGOTE: OnceLock<Option<Zygote>> = OnceLock::new();
        ZYGOTE
            .get_or_init(|| {
                if std::env::var(FORK_ENV).is_ok_and(|v| v == "0") {
                    return None;
                }
                Zygote::start()
                    .map_err(|e| {
                        eprintln!("fake cloud: no zygote ({e}); each cloud starts its own launcher")
                    })
                    .ok()
            })
            .as_ref()
    }

    fn start() -> Result<Zygote, String> {
        let mut child = launch(&["--zygote"])?;
        let line = ready_line(&mut child)?;
        let ready: Value = serde_json::from_str(line.trim())
            .map_err(|e| format!("bad ready line {line:?}: {e}"))?;
        let socket = ready["zygote"]
            .as_str()
            .ok_or_else(|| format!("ready line lacks the socket: {line}"))?;
        Ok(Zygote {
            socket: PathBuf::from(socket),
            _stdin: child
                .stdin
                .take()
                .ok_or("the zygote's stdin is not piped")?,
        })
    }

    /// A new fake cloud: its connection and its ready line.
    fn fork(&self) -> std::io::Result<(UnixStream, String)> {
        let conn = UnixStream::connect(&self.socket)?;
        conn.set_read_timeout(Some(READY_TIMEOUT))?;
        let mut line = String::new();
        BufReader::new(&conn).read_line(&mut line)?;
        if line.trim().is_empty() {
            return Err(std::io::Error::other(
                "the forked cloud closed before its ready line",
            ));
        }
        conn.set_read_timeout(None)?;
        Ok((conn, line))
    }
}

/// Starts `server.py` with `args`, its stdin and stdout piped to us.
fn launch(args: &[&str]) -> Result<Child, String> {
    let python = python();
    let script = launcher_path();
    Command::new(&python)
        .arg(&script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start the fake cloud with `{python} {}`: {e} \
                 (set NODECYCLE_PYTHON to a Python with `pip install -r tests/requirements.txt`)",
                script.display()
            )
        })
}

/// The first line `child` writes on stdout (within [`READY_TIMEOUT`]); the rest is drained so
/// that it never blocks on a full pipe. The child is killed when no line comes.
fn ready_line(child: &mut Child) -> Result<String, String> {
    let stdout = child
        .stdout
        .take()
        .ok_or("the launcher's stdout is not piped")?;
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        let _ = tx.send(line);
        let mut sink = Vec::new();
        let _ = reader.read_to_end(&mut sink);
    });
    match rx.recv_timeout(READY_TIMEOUT) {
        Ok(line) if !line.trim().is_empty() => Ok(line),
        other => {
            let _ = child.kill();
            let status = child.wait().ok();
            Err(format!(
                "the fake cloud did not become ready ({other:?}, exit {status:?}); is moto \
                 installed for {}? (pip install -r tests/requirements.txt)",
                python()
            ))
        }
    }
}

/// A handle on the control endpoint (cheap to clone).
#[derive(Debug, Clone)]
pub struct Control {
    url: String,
}

impl Control {
    /// The control endpoint base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs a control operation; panics with the server's message on failure.
    pub fn call(&self, op: &str, args: Value) -> Value {
        match self.try_call(op, args) {
            Ok(v) => v,
            Err(e) => panic!("fake cloud control op {op} failed: {e}"),
        }
    }

    /// Runs a control operation; the server's message on failure.
    pub fn try_call(&self, op: &str, args: Value) -> Result<Value, String> {
        let body =
            serde_json::to_vec(&json!({ "op": op, "args": args })).expect("control args serialise");
        let url = format!("{}/control", self.url);
        let resp = http::request("POST", &url, "application/json", &body)
            .map_err(|e| format!("control endpoint unreachable: {e}"))?;
        let value: Value = serde_json::from_slice(&resp.body).map_err(|e| {
            format!(
                "HTTP {} with a non-JSON body ({e}): {}",
                resp.status,
                String::from_utf8_lossy(&resp.body)
            )
        })?;
        if resp.status == 200 {
            Ok(value)
        } else {
            let msg = value["error"].as_str().unwrap_or("(no message)");
            let trace = value["trace"].as_str().unwrap_or("");
            Err(format!("HTTP {}: {msg}\n{trace}", resp.status))
        }
    }
}

impl std::fmt::Debug for FakeCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCloud")
            .field("aws_url", &self.aws_url)
            .field("control_url", &self.control.url)
            .field("pid", &self.pid())
            .finish()
    }
}

/// A launcher's ready line as JSON.
fn parse_ready(line: &str) -> Value {
    serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("bad ready line from the fake cloud: {line:?}: {e}"))
}

/// The launcher script, `tests/fakecloud/server.py`.
pub fn launcher_path() -> PathBuf {
    crate::repo_path("tests/fakecloud/server.py")
}

/// The Python that runs the launcher: `$NODECYCLE_PYTHON`, else the project
/// venv if present, else `python3`.
pub fn python() -> String {
    if let Ok(p) = std::env::var("NODECYCLE_PYTHON")
        && !p.is_empty()
    {
        return p;
    }
    if Path::new(DEFAULT_VENV_PYTHON).exists() {
        return DEFAULT_VENV_PYTHON.to_string();
    }
    "python3".to_string()
}

impl FakeCloud {
    /// Starts a fresh fake cloud and waits until it is ready.
    ///
    /// The cloud is forked from the test process's zygote (`server.py --zygote`, started on
    /// first use), which has moto imported and warmed up: a fork is ready in milliseconds,
    /// where a launcher of its own spends about 2 s of CPU getting there. Each cloud is still
    /// a process of its own with its own state. With [`FORK_ENV`]`=0`, or when the zygote
    /// cannot start or fork, the cloud starts its own launcher.
    pub fn start() -> FakeCloud {
        let started = Instant::now();
        if let Some(zygote) = Zygote::get() {
            match zygote.fork() {
                Ok((conn, line)) => {
                    let ready = parse_ready(&line);
                    let pid = ready["pid"]
                        .as_u64()
                        .and_then(|p| u32::try_from(p).ok())
                        .unwrap_or_else(|| panic!("ready line lacks pid: {line}"));
                    return FakeCloud::ready(Launcher::Forked { conn, pid }, &ready, started);
                }
                Err(e) => eprintln!(
                    "fake cloud: the zygote did not fork ({e}); this cloud starts its own launcher"
                ),
            }
        }
        let mut child = launch(&[]).unwrap_or_else(|e| panic!("{e}"));
        let line = ready_line(&mut child).unwrap_or_else(|e| panic!("{e}"));
        FakeCloud::ready(Launcher::Process(child), &parse_ready(&line), started)
    }

    fn ready(launcher: Launcher, ready: &Value, started: Instant) -> FakeCloud {
        let field = |k: &str| {
            ready[k]
                .as_str()
                .unwrap_or_else(|| panic!("ready line lacks {k}: {ready}"))
                .to_string()
        };
        FakeCloud {
            aws_url: field("aws"),
            control: Control {
                url: field("control"),
            },
            launcher,
            startup: started.elapsed(),
        }
    }

    /// How long [`FakeCloud::start`] took (to the ready line).
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The AWS endpoint (moto), e.g. `http://127.0.0.1:41234`.
    pub fn aws_url(&self) -> &str {
        &self.aws_url
    }

    /// The control endpoint base URL.
    pub fn control_url(&self) -> &str {
        &self.control.url
    }

    /// A handle on the control endpoint.
    pub fn control_handle(&self) -> Control {
        self.control.clone()
    }

    /// The region tests use by default.
    pub fn region(&self) -> &str {
        DEFAULT_REGION
    }

    /// Runs a control operation and returns its JSON answer.
    ///
    /// Panics with the server's message when the operation fails: control
    /// calls are test setup, so a failure is a bug in the test.
    pub fn control(&self, op: &str, args: Value) -> Value {
        self.control.call(op, args)
    }

    /// Like [`FakeCloud::control`] but returns the server's error message.
    pub fn try_control(&self, op: &str, args: Value) -> Result<Value, String> {
        self.control.try_call(op, args)
    }

    /// An SDK config pointed at moto: region us-east-2, static credentials
    /// `testing`/`testing`, retries backing off from [`RETRY_BACKOFF`]. Nothing is read from
    /// the environment or profiles that would change those.
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        let creds = aws_credential_types::Credentials::new(
            ACCESS_KEY_ID,
            SECRET_ACCESS_KEY,
            None,
            None,
            "fakecloud",
        );
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(DEFAULT_REGION))
            .endpoint_url(&self.aws_url)
            .credentials_provider(creds)
            .retry_config(
                aws_config::retry::RetryConfig::standard().with_initial_backoff(RETRY_BACKOFF),
            )
            .load()
            .await
    }

    /// Environment for a spawned process (e.g. the CLI) to use this cloud.
    pub fn env_vars(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.aws_url.as_str()),
            ("AWS_REGION", DEFAULT_REGION),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID),
            ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY),
            // No instance metadata service here: don't wait for it.
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// Creates or overwrites an SSM String parameter (any name, including
    /// `/aws/service/...`). Returns the new version.
    pub fn put_parameter(&self, name: &str, value: &str) -> i64 {
        self.control("put_parameter", json!({ "name": name, "value": value }))["version"]
            .as_i64()
            .expect("put_parameter returns a version")
    }

    /// Backdates the launch time of every instance of Auto Scaling group `group` to `hours`
    /// ago (old nodes of a group nodecycle adopts); returns their ids.
    pub fn age_instances(&self, group: &str, hours: u32) -> Vec<String> {
        let v = self.control("age_instances", json!({ "group": group, "hours": hours }));
        serde_json::from_value(v["instances"].clone()).expect("age_instances returns ids")
    }

    /// Deletes an SSM parameter (no error if absent).
    pub fn delete_parameter(&self, name: &str) {
        self.control("delete_parameter", json!({ "name": name }));
    }

    /// Registers an AMI with all of its fields; returns its id.
    pub fn register_image(&self, image: ImageFixture) -> String {
        self.control("register_image", image.to_json())["image_id"]
            .as_str()
            .expect("register_image returns image_id")
            .to_string()
    }

    /// Creates an ACTIVE EKS cluster with the given Kubernetes version.
    pub fn create_cluster(&self, name: &str, version: &str) -> Value {
        self.control(
            "create_cluster",
            json!({ "name": name, "version": version }),
        )
    }

    /// Changes a cluster's Kubernetes version (a control-plane upgrade).
    pub fn set_cluster_version(&self, name: &str, version: &str) {
        self.control("set_cluster", json!({ "name": name, "version": version }));
    }

    /// Empties every moto backend and stops all Kubernetes stand-ins.
    pub fn reset(&self) {
        self.control("reset", json!({}));
    }

    /// Starts the Kubernetes API server stand-in for `cluster` (creating the
    /// EKS cluster in moto if needed) and points the cluster's endpoint and
    /// certificate authority at it, so `eks:DescribeCluster` leads to it.
    /// Idempotent: a second call returns the same stand-in.
    pub fn create_kube(&self, cluster: &str) -> KubeStandIn {
        KubeStandIn::create(self.control.clone(), cluster, DEFAULT_REGION)
    }

    /// [`Self::create_kube`] for cluster `cluster` of account `account` in `region` (its EKS
    /// cluster is created there; only that account's principals may call it).
    pub fn create_kube_in(&self, cluster: &str, account: &str, region: &str) -> KubeStandIn {
        KubeStandIn::create_in(self.control.clone(), cluster, region, Some(account))
    }

    /// Creates many self-managed node groups at once (control op `seed_groups`): for each, the
    /// launch template and Auto Scaling group the SDK requests would create, made by moto from
    /// those same requests in process, so its instances are launched by the group as usual.
    /// With `nodes`, every cluster's Kubernetes stand-in (if any) registers a Node per
    /// running instance of that cluster, as `sync_nodes` would, without following EC2 after.
    pub fn seed_groups(&self, groups: &[GroupSeed], nodes: bool) -> SeededGroups {
        let specs: Vec<Value> = groups.iter().map(GroupSeed::to_json).collect();
        let out = self.control("seed_groups", json!({ "groups": specs, "nodes": nodes }));
        let count = |k: &str| {
            out[k]
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or_else(|| panic!("seed_groups answers {k}: {out}"))
        };
        SeededGroups {
            groups: count("groups"),
            instances: count("instances"),
            launch_templates: out["launchTemplates"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default(),
            nodes: out["nodes"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), usize::try_from(v.as_u64()?).ok()?)))
                        .collect()
                })
                .unwrap_or_default(),
            seconds: out["seconds"].as_f64().unwrap_or_default(),
        }
    }

    /// The launcher's process id.
    pub fn pid(&self) -> u32 {
        match &self.launcher {
            Launcher::Process(child) => child.id(),
            Launcher::Forked { pid, .. } => *pid,
        }
    }
}

impl Drop for FakeCloud {
    fn drop(&mut self) {
        // Closing stdin (or the connection) asks the launcher to stop and clean up its
        // temporary files (stand-in certificates).
        match &mut self.launcher {
            Launcher::Process(child) => {
                // Killed if it has not stopped within 2 s.
                drop(child.stdin.take());
                let deadline = Instant::now() + Duration::from_secs(2);
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = child.try_wait() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
            Launcher::Forked { conn, .. } => {
                // The connection reads end of file once the fork has exited (it stops itself
                // within 5 s whatever hangs); wait for that up to 2 s.
                let _ = conn.shutdown(Shutdown::Write);
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 256];
                while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
            }
        }
    }
}

/// A self-managed node group for [`FakeCloud::seed_groups`]: launch template `name` launching
/// `image` as `instance_type`, Auto Scaling group `name` with `desired` instances (`min`..`max`),
/// in `subnet` (else the default subnet of us-east-2a), tagged `eks:cluster-name=<cluster>` and
/// `tags`, all propagated to the instances.
#[derive(Debug, Clone)]
pub struct GroupSeed {
    /// Launch template and group name.
    pub name: String,
    /// AMI id the template launches.
    pub image: String,
    /// Instance type (default `m5.large`).
    pub instance_type: String,
    /// Desired capacity.
    pub desired: u32,
    /// Minimum size (default 0).
    pub min: u32,
    /// Maximum size (default `desired`).
    pub max: u32,
    /// Subnet id (VPCZoneIdentifier).
    pub subnet: Option<String>,
    /// Value of the `eks:cluster-name` tag.
    pub cluster: Option<String>,
    /// More tags, in order.
    pub tags: Vec<(String, String)>,
    /// Tags of the launch template itself (not propagated), in order.
    pub template_tags: Vec<(String, String)>,
}

impl GroupSeed {
    /// `desired` instances of `image`, as m5.large, at most `desired`.
    pub fn new(name: &str, image: &str, desired: u32) -> GroupSeed {
        GroupSeed {
            name: name.to_string(),
            image: image.to_string(),
            instance_type: "m5.large".to_string(),
            desired,
            min: 0,
            max: desired,
            subnet: None,
            cluster: None,
            tags: Vec::new(),
            template_tags: Vec::new(),
        }
    }

    /// Maximum size.
    pub fn max(mut self, max: u32) -> Self {
        self.max = max;
        self
    }

    /// Instance type.
    pub fn instance_type(mut self, instance_type: &str) -> Self {
        self.instance_type = instance_type.to_string();
        self
    }

    /// Launch into `subnet`.
    pub fn subnet(mut self, subnet: &str) -> Self {
        self.subnet = Some(subnet.to_string());
        self
    }

    /// Tag `eks:cluster-name=<cluster>`.
    pub fn cluster(mut self, cluster: &str) -> Self {
        self.cluster = Some(cluster.to_string());
        self
    }

    /// Adds a propagated tag.
    pub fn tag(mut self, key: &str, value: &str) -> Self {
        self.tags.push((key.to_string(), value.to_string()));
        self
    }

    /// Adds a tag of the launch template.
    pub fn template_tag(mut self, key: &str, value: &str) -> Self {
        self.template_tags
            .push((key.to_string(), value.to_string()));
        self
    }

    /// The control-op arguments of this group.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "name": self.name,
            "image": self.image,
            "instanceType": self.instance_type,
            "desired": self.desired,
            "min": self.min,
            "max": self.max,
            "tags": self
                .tags
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect::<serde_json::Map<String, Value>>(),
            "templateTags": self
                .template_tags
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect::<serde_json::Map<String, Value>>(),
        });
        if let Some(subnet) = &self.subnet {
            v["subnet"] = json!(subnet);
        }
        if let Some(cluster) = &self.cluster {
            v["cluster"] = json!(cluster);
        }
        v
    }
}

/// What [`FakeCloud::seed_groups`] made.
#[derive(Debug, Clone, PartialEq)]
pub struct SeededGroups {
    /// Groups created.
    pub groups: usize,
    /// Instances launched (their desired capacities).
    pub instances: usize,
    /// Launch template id per group name.
    pub launch_templates: std::collections::BTreeMap<String, String>,
    /// Nodes each seeded cluster's stand-in holds afterwards (clusters with a stand-in).
    pub nodes: std::collections::BTreeMap<String, usize>,
    /// How long the fake cloud took.
    pub seconds: f64,
}

/// An AMI to seed with [`FakeCloud::register_image`].
///
/// ```ignore
/// let id = cloud.register_image(
///     ImageFixture::new("amazon-eks-node-1.30-v20240601")
///         .architecture("arm64")
///         .owner("amazon")
///         .created("2024-06-01T00:00:00Z")
///         .deprecated("2026-06-01T00:00:00Z")
///         .tag("team", "platform"),
/// );
/// ```
#[derive(Debug, Clone)]
pub struct ImageFixture {
    /// Image id; generated when `None`.
    pub id: Option<String>,
    /// Image name.
    pub name: String,
    /// `x86_64` (default) or `arm64`.
    pub architecture: String,
    /// `self`/`123456789012` (default), `amazon` (alias; id 137112412989) or
    /// any account id.
    pub owner_id: String,
    /// RFC 3339; moto's "now" when `None`.
    pub creation_date: Option<String>,
    /// RFC 3339 DeprecationTime.
    pub deprecation_time: Option<String>,
    /// Tags, in order.
    pub tags: Vec<(String, String)>,
    /// `available` (default), `pending`, `failed`, ...
    pub state: Option<String>,
    /// Region; us-east-2 when `None`.
    pub region: Option<String>,
}

impl ImageFixture {
    /// An available x86_64 image owned by the test account.
    pub fn new(name: &str) -> ImageFixture {
        ImageFixture {
            id: None,
            name: name.to_string(),
            architecture: "x86_64".to_string(),
            owner_id: ACCOUNT_ID.to_string(),
            creation_date: None,
            deprecation_time: None,
            tags: Vec::new(),
            state: None,
            region: None,
        }
    }

    /// Fixed image id (`ami-...`).
    pub fn id(mut self, id: &str) -> Self {
        self.id = Some(id.to_string());
        self
    }

    /// `x86_64` or `arm64`.
    pub fn architecture(mut self, arch: &str) -> Self {
        self.architecture = arch.to_string();
        self
    }

    /// Owner: `self`, `amazon` or an account id.
    pub fn owner(mut self, owner: &str) -> Self {
        self.owner_id = owner.to_string();
        self
    }

    /// CreationDate, RFC 3339.
    pub fn created(mut self, rfc3339: &str) -> Self {
        self.creation_date = Some(rfc3339.to_string());
        self
    }

    /// DeprecationTime, RFC 3339.
    pub fn deprecated(mut self, rfc3339: &str) -> Self {
        self.deprecation_time = Some(rfc3339.to_string());
        self
    }

    /// Adds a tag.
    pub fn tag(mut self, key: &str, value: &str) -> Self {
        self.tags.push((key.to_string(), value.to_string()));
        self
    }

    /// Image state.
    pub fn state(mut self, state: &str) -> Self {
        self.state = Some(state.to_string());
        self
    }

    /// Region other than us-east-2.
    pub fn region(mut self, region: &str) -> Self {
        self.region = Some(region.to_string());
        self
    }

    /// The control-op arguments.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "name": self.name,
            "architecture": self.architecture,
            "owner_id": self.owner_id,
            "tags": self
                .tags
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect::<serde_json::Map<String, Value>>(),
        });
        let mut set = |k: &str, val: &Option<String>| {
            if let Some(x) = val {
                v[k] = json!(x);
            }
        };
        set("id", &self.id);
        set("creation_date", &self.creation_date);
        set("deprecation_time", &self.deprecation_time);
        set("state", &self.state);
        set("region", &self.region);
        v
    }
}

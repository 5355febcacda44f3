// Configuration of the CDK app: CDK context (cdk.json or `-c Name=value`) under the names of the
// SAM template's parameters, read and checked at synth time. Values that SAM resolves at deploy
// time (conditions, Fn::ForEach) are decided here, so the synthesized template has no
// parameters of its own.

export interface Config {
  /** Clusters named in the permissions (per-cluster policies; at most 8 fit IAM's limits). */
  clusters: string[];
  /** CellClusters: clusters trusted by the tag nodecycle.dev/cell=<stack name>; the permissions name none (instead of clusters). */
  cellClusters: string[];
  policyPrefix: string;
  amiParameterPaths: string[];
  parameterKmsKeyArn?: string;
  nodeRoleArns: string[];
  /** AutoScalingGroupUpdates=Enabled: the rotator may point pinned groups at new versions. */
  autoScalingGroupUpdates: boolean;
  createAccessEntries: boolean;
  watchSchedule: string;
  replacementTimeout: string;
  nodeGroupWave: string;
  lifecycleHookName: string;
  interruptionLifecycleGroup?: string;
  interruptionHeartbeatTimeout: number;
  opsInvokerArn?: string;
  logLevel: string;
  systemLogLevel: string;
  logRetentionDays: number;
  reservedConcurrency?: number;
  alarmTopicArn?: string;
  /** Dashboard=Enabled (default): the cell's CloudWatch dashboard. */
  dashboard: boolean;
  permissionsBoundaryArn?: string;
  /** Member accounts whose forwarded events the default bus admits and the functions act on. */
  servedAccounts: string[];
  /** The organisation whose accounts may put events on the default bus (aws:PrincipalOrgID). */
  organizationId?: string;
  /** The members' spoke RoleNamePrefix and ExternalId (the roles each function assumes). */
  memberRoleNamePrefix: string;
  memberExternalId: string;
  /** FanOut=Enabled: the schedule dispatches work items to an SQS queue the rotator serves. */
  fanOut: boolean;
  workerConcurrency: number;
  workItemReceives: number;
  /** VpcSubnetIds / VpcSecurityGroupIds: the functions that reach Kubernetes run in this VPC (both or neither). */
  vpcSubnetIds: string[];
  vpcSecurityGroupIds: string[];
  /** VpcEndpoints=Create: interface endpoints for vpcEndpointServices (and DynamoDB's gateway with route tables). */
  vpcEndpoints: boolean;
  vpcEndpointServices: string[];
  vpcId?: string;
  vpcRouteTableIds: string[];
  /** Directory holding `<binary>/bootstrap` per function (cargo lambda build output). */
  lambdaDir?: string;
}

export class ConfigError extends Error {}

const RETENTION_DAYS = [
  1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
];

/** Reads the configuration through `get` (the app's context); every problem is reported. */
export function readConfig(get: (name: string) => unknown): Config {
  const problems: string[] = [];
  const str = (name: string, fallback: string, pattern?: RegExp, allowed?: string[]): string => {
    const raw = get(name);
    const value = raw === undefined || raw === null ? fallback : String(raw).trim();
    if (pattern && !pattern.test(value)) problems.push(`${name}: ${JSON.stringify(value)} does not match ${pattern}`);
    if (allowed && !allowed.includes(value)) problems.push(`${name}: ${JSON.stringify(value)} is not one of ${allowed.join(", ")}`);
    return value;
  };
  const list = (name: string, pattern: RegExp): string[] => {
    const value = str(name, "");
    if (value === "") return [];
    const items = value.split(",").map((s) => s.trim());
    for (const item of items) {
      if (!pattern.test(item)) problems.push(`${name}: ${JSON.stringify(item)} does not match ${pattern}`);
    }
    return items;
  };
  const int = (name: string, fallback: number, min: number, max: number): number => {
    const value = str(name, String(fallback));
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max) problems.push(`${name}: ${JSON.stringify(value)} is not an integer in [${min}, ${max}]`);
    return n;
  };
  const optional = (v: string): string | undefined => (v === "" ? undefined : v);

  const clusters = list("Clusters", /^[0-9A-Za-z][A-Za-z0-9_-]*$/);
  const cellClusters = list("CellClusters", /^[0-9A-Za-z][A-Za-z0-9_-]*$/);
  // The template's rules ClustersGiven and CellClustersAlone.
  if (clusters.length === 0 && cellClusters.length === 0)
    problems.push("Clusters (or CellClusters) is required: the EKS cluster names, comma-separated (-c Clusters=prod,staging)");
  if (clusters.length > 0 && cellClusters.length > 0)
    problems.push("Give Clusters or CellClusters, not both (move every cluster to CellClusters, tagged nodecycle.dev/cell=<stack name>)");
  const retention = int("LogRetentionDays", 30, 1, 3653);
  if (!RETENTION_DAYS.includes(retention)) problems.push(`LogRetentionDays: ${retention} is not one of ${RETENTION_DAYS.join(", ")}`);
  const reserved = int("ReservedConcurrency", 0, 0, 1000000);
  const config: Config = {
    clusters,
    cellClusters,
    policyPrefix: str("PolicyPrefix", "/nodecycle/pools/", /^\/[A-Za-z0-9_.\-/]*\/$/),
    amiParameterPaths: list("AmiParameterPaths", /^\/[A-Za-z0-9_.\-/]+$/),
    parameterKmsKeyArn: optional(str("ParameterKmsKeyArn", "", /^(|arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key\/[A-Za-z0-9-]+)$/)),
    nodeRoleArns: list("NodeRoleArns", /^arn:aws[a-z-]*:iam::[0-9]{12}:role\/[A-Za-z0-9+=,.@_/-]+$/),
    autoScalingGroupUpdates: str("AutoScalingGroupUpdates", "Disabled", undefined, ["Disabled", "Enabled"]) === "Enabled",
    createAccessEntries: str("CreateAccessEntries", "true", undefined, ["true", "false"]) === "true",
    watchSchedule: str("WatchSchedule", "rate(15 minutes)"),
    replacementTimeout: str("ReplacementTimeout", "15m"),
    nodeGroupWave: str("NodeGroupWave", "10m"),
    lifecycleHookName: str("LifecycleHookName", "nodecycle-drain", /^[A-Za-z0-9_./-]{1,255}$/),
    interruptionLifecycleGroup: optional(str("InterruptionLifecycleGroup", "")),
    interruptionHeartbeatTimeout: int("InterruptionHeartbeatTimeout", 300, 30, 7200),
    opsInvokerArn: optional(str("OpsInvokerArn", "", /^(|arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)\/.+|[0-9]{12})$/)),
    logLevel: str("LogLevel", "INFO", undefined, ["DEBUG", "INFO", "WARN", "ERROR", "FATAL"]),
    systemLogLevel: str("SystemLogLevel", "WARN", undefined, ["DEBUG", "INFO", "WARN"]),
    logRetentionDays: retention,
    reservedConcurrency: reserved === 0 ? undefined : reserved,
    alarmTopicArn: optional(str("AlarmTopicArn", "", /^(|arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]+)$/)),
    dashboard: str("Dashboard", "Enabled", undefined, ["Enabled", "Disabled"]) === "Enabled",
    permissionsBoundaryArn: optional(str("PermissionsBoundaryArn", "", /^(|arn:aws[a-z-]*:iam::[0-9]{12}:policy\/.+)$/)),
    servedAccounts: list("ServedAccounts", /^[0-9]{12}$/),
    organizationId: optional(str("OrganizationId", "", /^(|o-[a-z0-9]{10,32})$/)),
    memberRoleNamePrefix: str("MemberRoleNamePrefix", "nodecycle", /^[A-Za-z0-9+=,.@_-]{1,20}$/),
    memberExternalId: str("MemberExternalId", "", /^(|[A-Za-z0-9+=,.@:/_-]{2,1224})$/),
    fanOut: str("FanOut", "Disabled", undefined, ["Disabled", "Enabled"]) === "Enabled",
    workerConcurrency: int("WorkerConcurrency", 5, 2, 1000),
    workItemReceives: int("WorkItemReceives", 3, 1, 10),
    vpcSubnetIds: list("VpcSubnetIds", /^subnet-[0-9a-f]{8,17}$/),
    vpcSecurityGroupIds: list("VpcSecurityGroupIds", /^sg-[0-9a-f]{8,17}$/),
    vpcEndpoints: str("VpcEndpoints", "None", undefined, ["None", "Create"]) === "Create",
    vpcEndpointServices: list("VpcEndpointServices", /^(sts|eks|ec2|autoscaling|ssm|events|monitoring|sqs|logs)$/),
    vpcId: optional(str("VpcId", "", /^(|vpc-[0-9a-f]{8,17})$/)),
    vpcRouteTableIds: list("VpcRouteTableIds", /^rtb-[0-9a-f]{8,17}$/),
    lambdaDir: optional(str("LambdaDir", "")),
  };
  // The template's rules (VpcSubnetsNeedSecurityGroups, VpcSecurityGroupsNeedSubnets, VpcEndpointsNeedTheVpc).
  if ((config.vpcSubnetIds.length > 0) !== (config.vpcSecurityGroupIds.length > 0))
    problems.push("VpcSubnetIds and VpcSecurityGroupIds go together: give both or neither");
  if (config.vpcEndpoints && (config.vpcSubnetIds.length === 0 || !config.vpcId))
    problems.push("VpcEndpoints=Create needs VpcSubnetIds, VpcSecurityGroupIds and VpcId");
  // The template's default list of endpoint services.
  if (get("VpcEndpointServices") === undefined) config.vpcEndpointServices = ["sts", "eks", "ec2", "autoscaling", "ssm", "events", "monitoring", "sqs"];
  if (problems.length > 0) throw new ConfigError(problems.join("\n"));
  return config;
}

#!/usr/bin/env node
// The spoke as a CDK app, for one member account and region:
//   npx tsc && npx cdk synth --app "node build/bin/spoke.js" -c CellAccountId=... -c Cluster1=prod ...
// Context names are deploy/spoke.yaml's parameters (Cluster1..Cluster5, or Clusters as a list).
// For a service-managed StackSet over an OU, deploy deploy/spoke.yaml itself (docs/organisation.md).

import * as cdk from "aws-cdk-lib";
import { NodecycleSpoke } from "../lib/spoke";

const app = new cdk.App();
const get = (name: string): string => String(app.node.tryGetContext(name) ?? "").trim();
const list = (name: string): string[] => get(name).split(",").map((s) => s.trim()).filter((s) => s !== "");
const problems: string[] = [];
const check = (name: string, value: string, pattern: RegExp) => {
  if (!pattern.test(value)) problems.push(`${name}: ${JSON.stringify(value)} does not match ${pattern}`);
  return value;
};
const roleArn = /^arn:aws[a-z-]*:iam::[0-9]{12}:role\/[A-Za-z0-9+=,.@_/-]+$/;
// CellTag: the cell's roles are trusted by their tags; the role ARNs are not needed.
const cellTag = check("CellTag", get("CellTag"), /^(|[A-Za-z][A-Za-z0-9-]{0,127})$/) || undefined;
const roles = (name: string) => {
  const arns = list(name);
  if (arns.length === 0 && !cellTag) problems.push(`${name} is required (or CellTag): the cells' role ARNs, comma-separated`);
  arns.forEach((a) => check(name, a, roleArn));
  return arns;
};
const clusters = [...list("Clusters"), ...[1, 2, 3, 4, 5].map((i) => get(`Cluster${i}`)).filter((c) => c !== "")];
clusters.forEach((c) => check("Clusters", c, /^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$/));
const props = {
  cellAccountId: check("CellAccountId", get("CellAccountId"), /^[0-9]{12}$/),
  cellBusName: get("CellBusName") || undefined,
  cellRoles: {
    amiWatcher: roles("AmiWatcherRoleArns"),
    rotator: roles("RotatorRoleArns"),
    interruptionHandler: roles("InterruptionHandlerRoleArns"),
    ops: roles("OpsRoleArns"),
  },
  cellTag,
  externalId: get("ExternalId") || undefined,
  organizationId: check("OrganizationId", get("OrganizationId"), /^(|o-[a-z0-9]{10,32})$/) || undefined,
  roleNamePrefix: get("RoleNamePrefix") || undefined,
  clusters,
  amiParameterPath: check("AmiParameterPath", get("AmiParameterPath"), /^(|\/[A-Za-z0-9_.\-/]+)$/) || undefined,
  amiParameterKmsKeyArn: check("AmiParameterKmsKeyArn", get("AmiParameterKmsKeyArn"), /^(|arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key\/[A-Za-z0-9-]+)$/) || undefined,
  lifecycleHookName: get("LifecycleHookName") || undefined,
  autoScalingGroupUpdates: get("AutoScalingGroupUpdates") === "Enabled",
  nodeRoleArns: list("NodeRoleArns"),
  createAccessEntries: get("CreateAccessEntries") !== "false",
  permissionsBoundaryArn: get("PermissionsBoundaryArn") || undefined,
};
if (!props.externalId && !props.organizationId) problems.push("Give ExternalId or OrganizationId (or both): the roles are assumed only with one of them");
if (problems.length > 0) {
  process.stderr.write(`nodecycle spoke: invalid configuration (CDK context):\n${problems.join("\n")}\n`);
  process.exit(2);
}
const stack = new cdk.Stack(app, "nodecycle-spoke", {
  stackName: get("StackName") || "nodecycle-spoke",
  description: "nodecycle spoke: lets the nodecycle cell of this region act on this member account's EKS clusters.",
});
new NodecycleSpoke(stack, "Spoke", props);
app.synth();

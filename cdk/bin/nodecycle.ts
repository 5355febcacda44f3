#!/usr/bin/env node
// CDK app entry: `npx tsc && npx cdk synth -c Clusters=prod,staging` (see the README, Deploy).
// Configuration is CDK context named like the SAM template's parameters (cdk.json or -c).

import * as cdk from "aws-cdk-lib";
import { ConfigError, readConfig } from "../lib/config";
import { NodecycleStack } from "../lib/nodecycle-stack";

const app = new cdk.App();
let config;
try {
  config = readConfig((name) => app.node.tryGetContext(name));
} catch (e) {
  if (e instanceof ConfigError) {
    process.stderr.write(`nodecycle: invalid configuration (CDK context):\n${e.message}\n`);
    process.exit(2);
  }
  throw e;
}
const stackName = String(app.node.tryGetContext("StackName") ?? "nodecycle");
new NodecycleStack(app, "nodecycle", config, {
  stackName,
  description:
    "nodecycle: keeps EKS node groups on the right AMI. Rust Lambda functions driven by EventBridge, state in DynamoDB, nothing running in the cluster. One stack per region.",
});
app.synth();

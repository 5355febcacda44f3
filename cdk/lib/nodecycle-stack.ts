// The nodecycle stack: the resources of ../template.yaml (checked by scripts/cfn/parity.py:
// same role statements, rules, schedules, table, functions, alarms and outputs). Logical ids are
// those of the SAM-translated template.

import * as fs from "fs";
import * as path from "path";
import * as cdk from "aws-cdk-lib";
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as dynamodb from "aws-cdk-lib/aws-dynamodb";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as events from "aws-cdk-lib/aws-events";
import * as targets from "aws-cdk-lib/aws-events-targets";
import * as iam from "aws-cdk-lib/aws-iam";
import * as lambda from "aws-cdk-lib/aws-lambda";
import * as logs from "aws-cdk-lib/aws-logs";
import * as sqs from "aws-cdk-lib/aws-sqs";
import { CfnAccessEntry } from "aws-cdk-lib/aws-eks";
import { CfnLifecycleHook } from "aws-cdk-lib/aws-autoscaling";
import { Construct, IConstruct } from "constructs";
import { Config } from "./config";

/** The functions: logical id prefix, workspace binary, and what differs between them. */
const FUNCTIONS = {
  AmiWatcher: { binary: "ami-watcher", timeout: 300, memory: 256, description: "Resolves every pool's amiSelectorTerms and records the desired AMI." },
  Rotator: { binary: "rotator", timeout: 120, memory: 256, description: "Replaces drifted and expired nodes within disruption budgets, one step per pass." },
  InterruptionHandler: { binary: "interruption-handler", timeout: 300, memory: 512, description: "Drains interrupted nodes at once, records maintenance rotations, answers terminate lifecycle hooks." },
  Ops: { binary: "ops", timeout: 60, memory: 256, description: "nodecycle operator requests (status, rotate, pin, pause, resume, cancel, quarantine, unquarantine, promotion); audited." },
} as const;
type FunctionKey = keyof typeof FUNCTIONS;

/** The Kubernetes group of each function that talks to Kubernetes (deploy/rbac.yaml binds them). */
const KUBERNETES_GROUPS: Record<Exclude<FunctionKey, "AmiWatcher">, string> = {
  Rotator: "nodecycle-rotator",
  InterruptionHandler: "nodecycle-interruption",
  Ops: "nodecycle-ops",
};

/** The function part of each function's spoke role name (deploy/spoke.yaml). */
const MEMBER_ROLE: Record<FunctionKey, string> = { AmiWatcher: "ami-watcher", Rotator: "rotator", InterruptionHandler: "interruption", Ops: "ops" };

/** The tag a launch template's owner sets to let nodecycle write its versions. */
const MANAGED_TAG = "nodecycle.dev/managed";
/** CellClusters: the tag (value: the stack's name) on everything the cell may describe or change. */
const CELL_TAG = "nodecycle.dev/cell";

/** Sets the CloudFormation logical id of a construct's resource (or of the resource itself). */
function logicalId(c: IConstruct, id: string): void {
  const res = c instanceof cdk.CfnResource ? c : (c.node.defaultChild as cdk.CfnResource);
  res.overrideLogicalId(id);
}

const sub = (s: string): string => cdk.Fn.sub(s);
const ACCOUNT_ARN = "arn:${AWS::Partition}:SERVICE:${AWS::Region}:${AWS::AccountId}:";
const arnOf = (service: string, rest: string): string => sub(ACCOUNT_ARN.replace("SERVICE", service) + rest);

function allow(sid: string, actions: string[], resources: string[], conditions?: Record<string, unknown>): iam.PolicyStatement {
  return new iam.PolicyStatement({ sid, effect: iam.Effect.ALLOW, actions, resources, conditions });
}

export class NodecycleStack extends cdk.Stack {
  constructor(scope: Construct, id: string, config: Config, props?: cdk.StackProps) {
    super(scope, id, props);
    const c = config;
    // CellClusters: the cell's tag (the stack's name) instead of the cluster names, on a group
    // or template of some cluster (template.yaml, CellTagScope).
    const cellScope = c.cellClusters.length > 0;
    const cellTag = { [`aws:ResourceTag/${CELL_TAG}`]: cdk.Aws.STACK_NAME };
    const clusterTag = cellScope
      ? { StringEquals: cellTag, Null: { "aws:ResourceTag/eks:cluster-name": "false" } }
      : { StringEquals: { "aws:ResourceTag/eks:cluster-name": c.clusters } };
    // Launch templates: the cluster tag, the owner's opt-in, and never one EKS created for a
    // managed node group (EKS tags those eks:nodegroup-name).
    const optedInTemplate = cellScope
      ? {
          StringEquals: { ...cellTag, [`aws:ResourceTag/${MANAGED_TAG}`]: "true" },
          Null: { "aws:ResourceTag/eks:cluster-name": "false", "aws:ResourceTag/eks:nodegroup-name": "true" },
        }
      : {
          StringEquals: { "aws:ResourceTag/eks:cluster-name": c.clusters, [`aws:ResourceTag/${MANAGED_TAG}`]: "true" },
          Null: { "aws:ResourceTag/eks:nodegroup-name": "true" },
        };
    // The partition keys a role may read and write (docs/iam-and-rbac.md, Table keys).
    const leadingKeys = (...prefixes: string[]) => ({
      "ForAllValues:StringLike": { "dynamodb:LeadingKeys": prefixes },
      Null: { "dynamodb:LeadingKeys": "false" },
    });
    // Events out: the default bus only, with source nodecycle only.
    const eventsOut = (): iam.PolicyStatement => allow("EventsOutToDefaultBus", ["events:PutEvents"], [arnOf("events", "event-bus/default")], { StringEquals: { "events:source": "nodecycle" } });
    const describe = (...actions: string[]) => allow("Describe", actions, ["*"]);

    // --- state --------------------------------------------------------------------------------
    const table = new dynamodb.Table(this, "StateTable", {
      partitionKey: { name: "pk", type: dynamodb.AttributeType.STRING },
      sortKey: { name: "sk", type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      timeToLiveAttribute: "ttl",
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      encryption: dynamodb.TableEncryption.AWS_MANAGED,
      deletionProtection: true,
      removalPolicy: cdk.RemovalPolicy.RETAIN,
    });
    logicalId(table, "StateTable");

    const dlq = new sqs.Queue(this, "DeadLetterQueue", {
      retentionPeriod: cdk.Duration.days(14),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      removalPolicy: cdk.RemovalPolicy.RETAIN,
    });
    logicalId(dlq, "DeadLetterQueue");

    // --- roles --------------------------------------------------------------------------------
    const policyReads = allow("ReadPolicies", ["ssm:GetParametersByPath", "ssm:GetParameter", "ssm:GetParameters"], [
      arnOf("ssm", "parameter" + c.policyPrefix + "*"),
    ]);
    const publicParameters = sub("arn:${AWS::Partition}:ssm:${AWS::Region}::parameter/aws/service/*");
    const state = (sid: string, ...prefixes: string[]) =>
      allow(sid, ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"], [table.tableArn], leadingKeys(...prefixes));
    // BatchGetItem: a cluster's pool records at once; ConditionCheckItem: a rotation created in
    // one transaction with its pool record.
    const stateWith = (sid: string, extra: string[], ...prefixes: string[]) =>
      allow(sid, ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", ...extra], [table.tableArn], leadingKeys(...prefixes));
    const asgArn = arnOf("autoscaling", "autoScalingGroup:*:autoScalingGroupName/*");

    const statements: Record<FunctionKey, iam.PolicyStatement[]> = {
      AmiWatcher: [
        policyReads,
        allow("ReadPublicAmiParameters", ["ssm:GetParameter", "ssm:GetParameters"], [publicParameters]),
        allow("DescribeImagesAndGroups", ["ec2:DescribeImages", "ec2:DescribeLaunchTemplateVersions", "ec2:DescribeInstanceTypes", "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeLaunchConfigurations"], ["*"]),
        state("PoolState", "POOL#*", "QUARANTINE"),
        eventsOut(),
        allow("ReadPromotionAlarms", ["cloudwatch:DescribeAlarms"], [arnOf("cloudwatch", "alarm:*")]),
      ],
      Rotator: [
        policyReads,
        describe("autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities", "ec2:DescribeInstances", "ec2:DescribeLaunchTemplates", "ec2:DescribeLaunchTemplateVersions", "ec2:DescribeInstanceTypes", "ec2:DescribeInstanceStatus"),
        allow("ReadEksReleaseVersions", ["ssm:GetParameters"], [publicParameters]),
        allow("PublishRolloutStatus", ["ssm:PutParameter"], [arnOf("ssm", "parameter/nodecycle/status/*")]),
        allow("RotateTaggedGroupsOnly", ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup", "autoscaling:SuspendProcesses", "autoscaling:ResumeProcesses"], [asgArn], clusterTag),
        allow("NewVersionsOfOptedInTemplatesOnly", ["ec2:CreateLaunchTemplateVersion", "ec2:ModifyLaunchTemplate"], [arnOf("ec2", "launch-template/*")], optedInTemplate),
        stateWith("RotationState", ["dynamodb:BatchGetItem", "dynamodb:ConditionCheckItem"], "POOL#*", "LEASE#*", "QUARANTINE", "DEPLOYMENT"),
        eventsOut(),
      ],
      InterruptionHandler: [
        policyReads,
        allow("DescribeInstances", ["ec2:DescribeInstances", "ec2:DescribeSpotInstanceRequests"], ["*"]),
        stateWith("State", ["dynamodb:ConditionCheckItem"], "POOL#*", "EVENT#*"),
        eventsOut(),
        allow("AnswerLifecycleActionsOfClusterGroups", ["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"], [asgArn], clusterTag),
      ],
      Ops: [
        policyReads,
        describe("autoscaling:DescribeAutoScalingGroups", "ec2:DescribeInstances", "ec2:DescribeImages", "ec2:DescribeLaunchTemplateVersions"),
        allow("UndoSurgeOfTaggedGroupsOnly", ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"], [asgArn], clusterTag),
        stateWith("StateAndAudit", ["dynamodb:BatchGetItem", "dynamodb:ConditionCheckItem"], "POOL#*", "QUARANTINE", "AUDIT", "DEPLOYMENT"),
        eventsOut(),
        allow("ReadPromotionAlarms", ["cloudwatch:DescribeAlarms"], [arnOf("cloudwatch", "alarm:*")]),
      ],
    };

    // In a VPC: the network interfaces Lambda creates for the functions that reach Kubernetes
    // (what AWSLambdaVPCAccessExecutionRole grants, within this account and region); inline in
    // the role, so no function is created before its role may do this.
    const inVpc = c.vpcSubnetIds.length > 0;
    // Clusters named in the permissions: about 8 of 20-character names fit IAM's 10,240
    // characters of inline policies a role (7 in a VPC; tests/tests/template.rs measures it).
    const fit = inVpc ? 7 : 8;
    if (c.clusters.length > fit)
      cdk.Annotations.of(this).addWarningV2(
        "nodecycle:clusters-per-stack",
        `Clusters names ${c.clusters.length} clusters; IAM's 10,240 characters of inline policies a role take about ${fit} of 20-character names: ` +
          "the deploy may fail on the rotator role. Give them as CellClusters, tagged nodecycle.dev/cell=<stack name> (docs/iam-and-rbac.md).",
      );
    const networkInterfaces = new iam.PolicyDocument({
      statements: [
        allow("DescribeNetworkInterfaces", ["ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets"], ["*"]),
        allow("FunctionNetworkInterfaces", ["ec2:CreateNetworkInterface"], ["network-interface/*", "subnet/*", "security-group/*"].map((r) => arnOf("ec2", r))),
        allow("ManageFunctionNetworkInterfaces", ["ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"], [arnOf("ec2", "network-interface/*")]),
      ],
    });
    const policyNames: Record<FunctionKey, string> = { AmiWatcher: "ami-watcher", Rotator: "rotator", InterruptionHandler: "interruption-handler", Ops: "ops" };
    const roles = {} as Record<FunctionKey, iam.Role>;
    const groups = {} as Record<FunctionKey, logs.LogGroup>;
    for (const key of Object.keys(FUNCTIONS) as FunctionKey[]) {
      const group = new logs.LogGroup(this, `${key}LogGroup`, {
        logGroupName: `/aws/lambda/${this.stackName}/${FUNCTIONS[key].binary}`,
        retention: c.logRetentionDays as logs.RetentionDays,
        removalPolicy: cdk.RemovalPolicy.DESTROY,
      });
      logicalId(group, `${key}LogGroup`);
      groups[key] = group;
      const role = new iam.Role(this, `${key}FunctionRole`, {
        description: `nodecycle ${FUNCTIONS[key].binary}`,
        assumedBy: new iam.ServicePrincipal("lambda.amazonaws.com").withConditions({ StringEquals: { "aws:SourceAccount": this.account } }),
        permissionsBoundary: c.permissionsBoundaryArn ? iam.ManagedPolicy.fromManagedPolicyArn(this, `${key}Boundary`, c.permissionsBoundaryArn) : undefined,
        inlinePolicies: {
          [policyNames[key]]: new iam.PolicyDocument({
            statements: [
              ...statements[key],
              allow("OwnLogGroup", ["logs:CreateLogStream", "logs:PutLogEvents"], [group.logGroupArn]),
              allow("FailedInvocationsToDeadLetterQueue", ["sqs:SendMessage"], [dlq.queueArn]),
            ],
          }),
          ...(inVpc && key !== "AmiWatcher" ? { "vpc-network-interfaces": networkInterfaces } : {}),
        },
      });
      logicalId(role, `${key}FunctionRole`);
      // The spokes of a cell given CellClusters trust its roles by these (deploy/spoke.yaml, CellTag).
      cdk.Tags.of(role).add(CELL_TAG, cdk.Aws.STACK_NAME);
      cdk.Tags.of(role).add("nodecycle.dev/function", MEMBER_ROLE[key]);
      roles[key] = role;
    }

    // Per-cluster and per-parameter-path permissions, and the optional ones.
    const rolePolicy = (id: string, role: iam.Role, name: string, ...statements: iam.PolicyStatement[]) => {
      const p = new iam.CfnRolePolicy(this, id, {
        roleName: role.roleName,
        policyName: name,
        policyDocument: new iam.PolicyDocument({ statements }),
      });
      logicalId(p, id);
    };
    const alnum = (s: string) => s.replace(/[^A-Za-z0-9]/g, "");
    // eks:Describe* on the clusters and their node groups only, exactly the actions each uses:
    // by name (Clusters, a policy per cluster) or by the cell's tag (CellClusters, one each).
    const describesOf = (clusterArn: string, nodeGroupsArn: string, cell?: Record<string, unknown>): Record<FunctionKey, iam.PolicyStatement[]> => {
      const [c1, n1] = cell ? ["DescribeCellClusters", "DescribeNodeGroupsOfCellClusters"] : ["DescribeCluster", "DescribeNodeGroupsOfCluster"];
      return {
        AmiWatcher: [allow(c1, ["eks:DescribeCluster"], [clusterArn], cell), allow(n1, ["eks:DescribeNodegroup"], [nodeGroupsArn], cell)],
        Rotator: [allow(c1, ["eks:DescribeCluster", "eks:DescribeUpdate"], [clusterArn], cell), allow(n1, ["eks:DescribeNodegroup"], [nodeGroupsArn], cell)],
        InterruptionHandler: [allow(c1, ["eks:DescribeCluster"], [clusterArn], cell)],
        Ops: [allow(c1, ["eks:DescribeCluster", "eks:DescribeUpdate"], [clusterArn], cell), allow(n1, ["eks:DescribeNodegroup"], [nodeGroupsArn], cell)],
      };
    };
    const accessEntries = (cluster: string, infix: string) => {
      if (!c.createAccessEntries) return;
      for (const key of ["Rotator", "InterruptionHandler", "Ops"] as const) {
        const id = `${key}${infix}AccessEntry${alnum(cluster)}`;
        const entry = new CfnAccessEntry(this, id, {
          clusterName: cluster,
          principalArn: roles[key].roleArn,
          type: "STANDARD",
          kubernetesGroups: [KUBERNETES_GROUPS[key]],
        });
        logicalId(entry, id);
      }
    };
    for (const cluster of c.clusters) {
      rolePolicy(
        `RotatorNodeGroups${alnum(cluster)}`,
        roles.Rotator,
        `nodegroups-${alnum(cluster)}`,
        allow("UpdateNodeGroupsOfNamedCluster", ["eks:UpdateNodegroupVersion", "eks:UpdateNodegroupConfig"], [arnOf("eks", `nodegroup/${cluster}/*/*`)]),
      );
      const describes = describesOf(arnOf("eks", `cluster/${cluster}`), arnOf("eks", `nodegroup/${cluster}/*/*`));
      for (const key of Object.keys(FUNCTIONS) as FunctionKey[]) {
        rolePolicy(`${key}DescribesCluster${alnum(cluster)}`, roles[key], `describe-cluster-${alnum(cluster)}`, ...describes[key]);
      }
      accessEntries(cluster, "");
    }
    if (cellScope) {
      const cell = { StringEquals: cellTag };
      const describes = describesOf(arnOf("eks", "cluster/*"), arnOf("eks", "nodegroup/*/*/*"), cell);
      for (const key of Object.keys(FUNCTIONS) as FunctionKey[]) {
        rolePolicy(`${key}DescribesCellClusters`, roles[key], "describe-cell-clusters", ...describes[key]);
        if (key === "Rotator")
          rolePolicy(
            "RotatorCellNodeGroups",
            roles.Rotator,
            "cell-nodegroups",
            allow("UpdateNodeGroupsOfCellClusters", ["eks:UpdateNodegroupVersion", "eks:UpdateNodegroupConfig"], [arnOf("eks", "nodegroup/*/*/*")], cell),
          );
      }
      for (const cluster of c.cellClusters) accessEntries(cluster, "Cell");
    }
    for (const p of c.amiParameterPaths) {
      rolePolicy(
        `AmiWatcherReadsAmiParameters${alnum(p)}`,
        roles.AmiWatcher,
        `ami-parameters-${alnum(p)}`,
        allow("ReadNamedAmiParameters", ["ssm:GetParameter", "ssm:GetParameters"], [arnOf("ssm", `parameter${p}*`)]),
      );
    }
    if (c.autoScalingGroupUpdates) {
      // Pointing a group on a pinned launch template version at a new version: Auto Scaling
      // checks the caller's ec2:RunInstances on every resource of the launch on that call.
      rolePolicy(
        "RotatorAutoScalingGroupUpdates",
        roles.Rotator,
        "autoscaling-group-updates",
        allow("PointTaggedGroupsAtNewVersions", ["autoscaling:UpdateAutoScalingGroup"], [asgArn], clusterTag),
        allow("LaunchCheckOnOptedInTemplatesOnly", ["ec2:RunInstances"], [arnOf("ec2", "launch-template/*")], optedInTemplate),
        allow(
          "LaunchCheckThroughLaunchTemplatesOnly",
          ["ec2:RunInstances"],
          [
            ...["instance", "volume", "network-interface", "subnet", "security-group", "key-pair"].map((k) => arnOf("ec2", `${k}/*`)),
            sub("arn:${AWS::Partition}:ec2:${AWS::Region}::image/*"),
          ],
          { ArnLike: { "ec2:LaunchTemplate": arnOf("ec2", "launch-template/*") } },
        ),
        allow("TagOnLaunchOnly", ["ec2:CreateTags"], ["instance", "volume", "network-interface"].map((k) => arnOf("ec2", `${k}/*`)), {
          StringEquals: { "ec2:CreateAction": "RunInstances" },
        }),
      );
    }
    if (c.nodeRoleArns.length > 0 && c.autoScalingGroupUpdates) {
      rolePolicy(
        "RotatorPassNodeRoles",
        roles.Rotator,
        "pass-node-roles",
        allow("PassNodeRolesToEc2", ["iam:PassRole"], c.nodeRoleArns, { StringEquals: { "iam:PassedToService": "ec2.amazonaws.com" } }),
      );
    }
    if (c.parameterKmsKeyArn) {
      const decrypt = new iam.CfnPolicy(this, "DecryptParameters", {
        policyName: "decrypt-parameters",
        roles: Object.values(roles).map((r) => r.roleName),
        policyDocument: new iam.PolicyDocument({
          statements: [allow("DecryptSecureStringParameters", ["kms:Decrypt"], [c.parameterKmsKeyArn], { StringEquals: { "kms:ViaService": sub("ssm.${AWS::Region}.amazonaws.com") } })],
        }),
      });
      logicalId(decrypt, "DecryptParameters");
    }

    // --- fan-out (FanOut=Enabled): the schedule dispatches, the queue's event source serves ------
    let workQueue: sqs.CfnQueue | undefined;
    let workDlq: sqs.CfnQueue | undefined;
    if (c.fanOut) {
      workDlq = new sqs.CfnQueue(this, "WorkDeadLetterQueue", { messageRetentionPeriod: 1209600, sqsManagedSseEnabled: true });
      logicalId(workDlq, "WorkDeadLetterQueue");
      workQueue = new sqs.CfnQueue(this, "WorkQueue", {
        // Six times the rotator's timeout (what Lambda asks of an SQS event source).
        visibilityTimeout: 720,
        messageRetentionPeriod: 3600,
        sqsManagedSseEnabled: true,
        redrivePolicy: { deadLetterTargetArn: workDlq.attrArn, maxReceiveCount: c.workItemReceives },
      });
      logicalId(workQueue, "WorkQueue");
      const qp = new sqs.CfnQueuePolicy(this, "WorkQueuesPolicy", {
        queues: [workQueue.ref, workDlq.ref],
        policyDocument: {
          Version: "2012-10-17",
          Statement: [
            {
              Sid: "TlsOnly",
              Effect: "Deny",
              Principal: "*",
              Action: "sqs:*",
              Resource: [workQueue.attrArn, workDlq.attrArn],
              Condition: { Bool: { "aws:SecureTransport": "false" } },
            },
          ],
        },
      });
      logicalId(qp, "WorkQueuesPolicy");
      rolePolicy(
        "RotatorWorkQueue",
        roles.Rotator,
        "work-queue",
        allow("DispatchWorkItems", ["sqs:SendMessage"], [workQueue.attrArn]),
        allow("ServeWorkItems", ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"], [workQueue.attrArn]),
      );
    }

    // The default bus admits the spokes' forwarded events: served accounts, or the organisation.
    const busArn = arnOf("events", "event-bus/default");
    const forwardedSources = ["aws.ec2", "aws.autoscaling", "aws.health", "aws.ssm"];
    if (c.servedAccounts.length > 0) {
      const p = new events.CfnEventBusPolicy(this, "CellBusPolicyServedAccounts", {
        statementId: "nodecycle-served-accounts",
        statement: {
          Effect: "Allow",
          Principal: { AWS: c.servedAccounts },
          Action: "events:PutEvents",
          Resource: busArn,
          Condition: { StringEquals: { "events:source": forwardedSources } },
        },
      });
      logicalId(p, "CellBusPolicyServedAccounts");
    }
    if (c.organizationId) {
      const p = new events.CfnEventBusPolicy(this, "CellBusPolicyOrganization", {
        statementId: "nodecycle-organization",
        statement: {
          Effect: "Allow",
          Principal: "*",
          Action: "events:PutEvents",
          Resource: busArn,
          Condition: { StringEquals: { "aws:PrincipalOrgID": c.organizationId, "events:source": forwardedSources } },
        },
      });
      logicalId(p, "CellBusPolicyOrganization");
    }

    // --- functions ------------------------------------------------------------------------------
    const code = codeAssets(this, c.lambdaDir);
    const invokeConfig: Record<FunctionKey, [number, number]> = {
      AmiWatcher: [2, 900],
      Rotator: [0, 60],
      InterruptionHandler: [2, 120],
      Ops: [0, 300],
    };
    const fns = {} as Record<FunctionKey, lambda.Function>;
    for (const key of Object.keys(FUNCTIONS) as FunctionKey[]) {
      const f = FUNCTIONS[key];
      const environment: Record<string, string> = {
        NODECYCLE_TABLE: table.tableName,
        NODECYCLE_POLICY_PREFIX: c.policyPrefix,
        // Events and work items of these accounts are acted on besides this account's own.
        NODECYCLE_SERVED_ACCOUNTS: c.servedAccounts.join(","),
        NODECYCLE_MEMBER_EXTERNAL_ID: c.memberExternalId,
        // The spoke role of a member (deploy/spoke.yaml), {account} replaced per member.
        NODECYCLE_MEMBER_ROLE: sub(`arn:\${AWS::Partition}:iam::{account}:role/${c.memberRoleNamePrefix}-${MEMBER_ROLE[key]}-\${AWS::Region}`),
      };
      if (key === "Rotator" || key === "Ops") {
        environment.NODECYCLE_REPLACEMENT_TIMEOUT = c.replacementTimeout;
        environment.NODECYCLE_NODEGROUP_WAVE = c.nodeGroupWave;
      }
      if (key === "Rotator") {
        environment.NODECYCLE_AUTOSCALING_GROUP_UPDATES = c.autoScalingGroupUpdates ? "Enabled" : "Disabled";
        if (workQueue) environment.NODECYCLE_WORK_QUEUE_URL = workQueue.ref;
      }
      if (key === "InterruptionHandler") {
        // Only this hook's lifecycle actions are answered (checked in code, not only by the rule).
        environment.NODECYCLE_LIFECYCLE_HOOK = c.lifecycleHookName;
        // A hand-over still draining is abandoned before the hook's global timeout (100 x this).
        environment.NODECYCLE_HOOK_HEARTBEAT_TIMEOUT = `${c.interruptionHeartbeatTimeout}s`;
      }
      const fn = new lambda.Function(this, `${key}Function`, {
        description: f.description,
        runtime: lambda.Runtime.PROVIDED_AL2023,
        architecture: lambda.Architecture.ARM_64,
        handler: "bootstrap",
        code: code(f.binary),
        memorySize: f.memory,
        timeout: cdk.Duration.seconds(f.timeout),
        role: roles[key],
        environment,
        loggingFormat: lambda.LoggingFormat.JSON,
        applicationLogLevelV2: c.logLevel as lambda.ApplicationLogLevel,
        systemLogLevelV2: c.systemLogLevel as lambda.SystemLogLevel,
        logGroup: groups[key],
        reservedConcurrentExecutions: key === "InterruptionHandler" ? undefined : c.reservedConcurrency,
      });
      logicalId(fn, `${key}Function`);
      if (inVpc && key !== "AmiWatcher") {
        // Only the functions that reach the Kubernetes API (the ami-watcher calls AWS only).
        (fn.node.defaultChild as lambda.CfnFunction).vpcConfig = { subnetIds: c.vpcSubnetIds, securityGroupIds: c.vpcSecurityGroupIds };
      }
      fns[key] = fn;
      const [retries, age] = invokeConfig[key];
      const eic = new lambda.CfnEventInvokeConfig(this, `${key}FunctionEventInvokeConfig`, {
        functionName: fn.functionName,
        qualifier: "$LATEST",
        maximumRetryAttempts: retries,
        maximumEventAgeInSeconds: age,
        destinationConfig: { onFailure: { destination: dlq.queueArn } },
      });
      logicalId(eic, `${key}FunctionEventInvokeConfig`);
    }

    if (workQueue) {
      const esm = new lambda.CfnEventSourceMapping(this, "RotatorWorkItems", {
        eventSourceArn: workQueue.attrArn,
        functionName: fns.Rotator.functionName,
        enabled: true,
        batchSize: 1,
        functionResponseTypes: ["ReportBatchItemFailures"],
        scalingConfig: { maximumConcurrency: c.workerConcurrency },
      });
      logicalId(esm, "RotatorWorkItems");
      // Lambda checks the role may read the queue when the mapping is created.
      esm.addDependency(this.node.findChild("RotatorWorkQueue") as cdk.CfnResource);
    }

    // --- VPC endpoints (VpcEndpoints=Create) ------------------------------------------------------
    if (inVpc && c.vpcEndpoints && c.vpcId) {
      const sg = new ec2.CfnSecurityGroup(this, "VpcEndpointSecurityGroup", {
        groupDescription: "nodecycle VPC endpoints - HTTPS from the function security groups",
        vpcId: c.vpcId,
        // Every function's network interface carries every group of VpcSecurityGroupIds, so
        // admitting the first admits the functions.
        securityGroupIngress: [
          { ipProtocol: "tcp", fromPort: 443, toPort: 443, sourceSecurityGroupId: c.vpcSecurityGroupIds[0], description: "HTTPS from the nodecycle functions" },
        ],
        // The endpoints answer; they open no connection.
        securityGroupEgress: [{ ipProtocol: "-1", cidrIp: "127.0.0.1/32", description: "no egress" }],
      });
      logicalId(sg, "VpcEndpointSecurityGroup");
      for (const service of c.vpcEndpointServices) {
        const e = new ec2.CfnVPCEndpoint(this, `VpcEndpoint${alnum(service)}`, {
          vpcEndpointType: "Interface",
          serviceName: sub(`com.amazonaws.\${AWS::Region}.${service}`),
          vpcId: c.vpcId,
          subnetIds: c.vpcSubnetIds,
          securityGroupIds: [sg.ref],
          privateDnsEnabled: true,
        });
        logicalId(e, `VpcEndpoint${alnum(service)}`);
      }
      if (c.vpcRouteTableIds.length > 0) {
        const e = new ec2.CfnVPCEndpoint(this, "VpcEndpointdynamodb", {
          vpcEndpointType: "Gateway",
          serviceName: sub("com.amazonaws.${AWS::Region}.dynamodb"),
          vpcId: c.vpcId,
          routeTableIds: c.vpcRouteTableIds,
        });
        logicalId(e, "VpcEndpointdynamodb");
      }
    }

    // --- rules ----------------------------------------------------------------------------------
    const rules: events.Rule[] = [];
    const rule = (
      id: string,
      fn: lambda.Function,
      spec: { schedule?: string; pattern?: events.EventPattern; description?: string },
      retries: number,
      age: number,
      deadLetter: boolean,
    ) => {
      const r = new events.Rule(this, id, {
        description: spec.description,
        schedule: spec.schedule ? events.Schedule.expression(spec.schedule) : undefined,
        eventPattern: spec.pattern,
        enabled: true,
      });
      r.addTarget(
        new targets.LambdaFunction(fn, {
          retryAttempts: retries,
          maxEventAge: cdk.Duration.seconds(age),
          deadLetterQueue: deadLetter ? dlq : undefined,
        }),
      );
      logicalId(r, id);
      rules.push(r);
    };
    rule("AmiWatcherFunctionSchedule", fns.AmiWatcher, { schedule: c.watchSchedule, description: "nodecycle ami-watcher pass" }, 2, 900, true);
    rule(
      "AmiWatcherParameterChangeRule",
      fns.AmiWatcher,
      {
        description: "nodecycle ami-watcher, a watched SSM parameter changed",
        pattern: {
          source: ["aws.ssm"],
          detailType: ["Parameter Store Change"],
          detail: { name: [c.policyPrefix, ...c.amiParameterPaths].map((p) => ({ prefix: p })) },
        },
      },
      4,
      3600,
      true,
    );
    rule("RotatorFunctionEveryMinute", fns.Rotator, { schedule: "rate(1 minute)", description: "nodecycle rotator pass" }, 0, 60, false);
    const ih = fns.InterruptionHandler;
    rule(
      "InterruptionHandlerFunctionInterruptionWarnings",
      ih,
      {
        pattern: {
          source: ["aws.ec2"],
          detailType: ["EC2 Spot Instance Interruption Warning", "EC2 Capacity Reservation Instance Interruption Warning", "EC2 Instance Rebalance Recommendation"],
        },
      },
      3,
      120,
      true,
    );
    rule(
      "InterruptionHandlerFunctionInstanceStateChanges",
      ih,
      { pattern: { source: ["aws.ec2"], detailType: ["EC2 Instance State-change Notification"], detail: { state: ["stopping", "stopped", "shutting-down", "terminated"] } } },
      4,
      900,
      true,
    );
    rule(
      "InterruptionHandlerFunctionScheduledMaintenance",
      ih,
      { pattern: { source: ["aws.health"], detailType: ["AWS Health Event"], detail: { service: ["EC2"], eventTypeCategory: ["scheduledChange"] } } },
      8,
      3600,
      true,
    );
    rule(
      "InterruptionHandlerFunctionTerminateLifecycleActions",
      ih,
      { pattern: { source: ["aws.autoscaling"], detailType: ["EC2 Instance-terminate Lifecycle Action"], detail: { LifecycleHookName: [c.lifecycleHookName] } } },
      4,
      900,
      true,
    );
    rule("InterruptionHandlerFunctionLifecycleTick", ih, { schedule: "rate(1 minute)", description: "nodecycle interruption-handler lifecycle continuation" }, 0, 60, false);

    if (c.interruptionLifecycleGroup) {
      const hook = new CfnLifecycleHook(this, "InterruptionLifecycleHook", {
        autoScalingGroupName: c.interruptionLifecycleGroup,
        lifecycleHookName: c.lifecycleHookName,
        lifecycleTransition: "autoscaling:EC2_INSTANCE_TERMINATING",
        heartbeatTimeout: c.interruptionHeartbeatTimeout,
        // A timeout never terminates an undrained node where the group retains (template.yaml).
        defaultResult: "ABANDON",
      });
      logicalId(hook, "InterruptionLifecycleHook");
    }
    if (c.opsInvokerArn) {
      const p = new lambda.CfnPermission(this, "OpsInvokePermission", {
        action: "lambda:InvokeFunction",
        functionName: fns.Ops.functionName,
        principal: c.opsInvokerArn,
      });
      logicalId(p, "OpsInvokePermission");
    }

    // --- alarms ---------------------------------------------------------------------------------
    const actions = c.alarmTopicArn ? [c.alarmTopicArn] : undefined;
    const alarm = (id: string, name: string, description: string, metric: Omit<cloudwatch.CfnAlarmProps, "evaluationPeriods" | "comparisonOperator">, comparison = "GreaterThanOrEqualToThreshold") => {
      const a = new cloudwatch.CfnAlarm(this, id, {
        alarmName: `${this.stackName}-${name}`,
        alarmDescription: description,
        period: 300,
        evaluationPeriods: 1,
        comparisonOperator: comparison,
        treatMissingData: "notBreaching",
        alarmActions: actions,
        okActions: actions,
        ...metric,
      });
      logicalId(a, id);
    };
    const fnAlarmText: Record<FunctionKey, [string, string]> = {
      AmiWatcher: ["The ami-watcher failed (its log says why; a failed pass keeps the last desired AMI).", "The ami-watcher was throttled (ReservedConcurrency or the account's concurrency quota)."],
      Rotator: ["The rotator failed (its log says why; rotations resume on the next good pass).", "The rotator was throttled (ReservedConcurrency or the account's concurrency quota)."],
      InterruptionHandler: ["The interruption-handler failed (failed events go to the dead-letter queue).", "The interruption-handler was throttled (the account's concurrency quota)."],
      Ops: ["An ops request failed (invalid requests included; the audit record says why).", "An ops request was throttled (ReservedConcurrency or the account's concurrency quota)."],
    };
    for (const key of Object.keys(FUNCTIONS) as FunctionKey[]) {
      const dims = [{ name: "FunctionName", value: fns[key].functionName }];
      const [errors, throttles] = fnAlarmText[key];
      alarm(`${key}ErrorsAlarm`, `${FUNCTIONS[key].binary}-errors`, errors, { namespace: "AWS/Lambda", metricName: "Errors", dimensions: dims, statistic: "Sum", threshold: 1 });
      alarm(`${key}ThrottlesAlarm`, `${FUNCTIONS[key].binary}-throttles`, throttles, { namespace: "AWS/Lambda", metricName: "Throttles", dimensions: dims, statistic: "Sum", threshold: 1 });
    }
    alarm(
      "DeadLetterQueueNotEmptyAlarm",
      "dead-letter-queue-not-empty",
      "An event was not delivered or an invocation failed after its retries; read the message in the dead-letter queue.",
      { namespace: "AWS/SQS", metricName: "ApproximateNumberOfMessagesVisible", dimensions: [{ name: "QueueName", value: dlq.queueName }], statistic: "Maximum", threshold: 0 },
      "GreaterThanThreshold",
    );
    if (workQueue && workDlq) {
      alarm(
        "WorkDeadLetterQueueNotEmptyAlarm",
        "work-dead-letter-queue-not-empty",
        "A rotator work item failed on every receive (its cluster's passes keep failing, or the item is not one this cell serves); the rotator's log says why, the message names the cluster.",
        { namespace: "AWS/SQS", metricName: "ApproximateNumberOfMessagesVisible", dimensions: [{ name: "QueueName", value: workDlq.attrQueueName }], statistic: "Maximum", threshold: 0 },
        "GreaterThanThreshold",
      );
      alarm(
        "WorkQueueBacklogAlarm",
        "work-queue-backlog",
        "Work items wait more than 5 minutes (the workers do not keep up with one pass a minute; raise WorkerConcurrency, or split the clusters over more cells).",
        { namespace: "AWS/SQS", metricName: "ApproximateAgeOfOldestMessage", dimensions: [{ name: "QueueName", value: workQueue.attrQueueName }], statistic: "Maximum", threshold: 300 },
        "GreaterThanThreshold",
      );
    }
    alarm("PoolHaltedAlarm", "pool-halted", "A pool is halted (a rotation or node group update failed); `nodecycle status` says which and why, `nodecycle resume` clears it.", {
      namespace: "nodecycle",
      metricName: "PoolsHalted",
      statistic: "Maximum",
      threshold: 1,
    });
    alarm("RetainedInstancesAlarm", "retained-instances", "An instance is Terminating:Retained (its terminate lifecycle hook was abandoned because its drain did not finish) and still has pods; `nodecycle status` and `nodecycle doctor` name it and its pods, the rotator terminates it once they are gone.", {
      namespace: "nodecycle",
      metricName: "RetainedInstances",
      statistic: "Maximum",
      threshold: 1,
    });
    alarm("ResolutionFailuresAlarm", "resolution-failures", "A pool's amiSelectorTerms did not resolve (it keeps its last desired AMI); `nodecycle status` shows the error.", {
      namespace: "nodecycle",
      metricName: "ResolutionFailures",
      statistic: "Sum",
      threshold: 1,
    });

    // --- dashboard (Dashboard=Enabled): template.yaml's CellDashboard, body for body -------------
    if (c.dashboard) {
      const d = new cloudwatch.CfnDashboard(this, "CellDashboard", {
        dashboardName: `${this.stackName}-${this.region}`,
        dashboardBody: cdk.Fn.sub(DASHBOARD_BODY),
      });
      logicalId(d, "CellDashboard");
    }

    // --- outputs (the stack contract shared with template.yaml and `nodecycle doctor`) ---------
    const output = (name: string, value: string, description?: string) => new cdk.CfnOutput(this, name, { value, description });
    output("StateTableName", table.tableName);
    output("PolicyPrefix", c.policyPrefix);
    output("LifecycleHookName", c.lifecycleHookName);
    output("ClusterNames", (cellScope ? c.cellClusters : c.clusters).join(","));
    output("PermissionScope", cellScope ? "CellTag" : "ClusterNames");
    output("CellTag", cdk.Aws.STACK_NAME);
    for (const key of Object.keys(FUNCTIONS) as FunctionKey[]) {
      output(`${key}RoleArn`, roles[key].roleArn);
      output(`${key}FunctionName`, fns[key].functionName);
    }
    output("EventRuleNames", cdk.Fn.join(",", rules.map((r) => r.ruleName)), "Every EventBridge rule of the stack (each must be ENABLED).");
    output("FunctionSubnetIds", c.vpcSubnetIds.join(","), "The subnets of the functions that reach Kubernetes (VpcSubnetIds); empty - outside any VPC (read by doctor).");
    output("DeadLetterQueueUrl", dlq.queueUrl);
    output("DeadLetterQueueArn", dlq.queueArn);
  }
}

/**
 * The code of each function: `<dir>/<binary>/bootstrap` as built by
 * `cargo lambda build --release --arm64` in each function's crate directory, as `sam build`
 * does (dir: the `LambdaDir` context, else
 * `$CARGO_TARGET_DIR/lambda`, else `~/.cache/nodecycle/target/lambda`). When any is missing,
 * every function gets the placeholder in cdk/placeholder (its bootstrap only fails, saying so)
 * and the synth warns: fine for `cdk synth` and review, never to deploy.
 */
function codeAssets(scope: Construct, lambdaDir?: string): (binary: string) => lambda.Code {
  const dir =
    lambdaDir ??
    (process.env.CARGO_TARGET_DIR
      ? path.join(process.env.CARGO_TARGET_DIR, "lambda")
      : path.join(process.env.HOME ?? "/", ".cache/nodecycle/target/lambda"));
  const binaries = Object.values(FUNCTIONS).map((f) => f.binary);
  const missing = binaries.filter((b) => !fs.existsSync(path.join(dir, b, "bootstrap")));
  if (missing.length === 0) {
    return (binary) => lambda.Code.fromAsset(path.join(dir, binary));
  }
  cdk.Annotations.of(scope).addWarningV2(
    "nodecycle:placeholder-code",
    `no built function in ${dir} for ${missing.join(", ")}: the functions use the placeholder code in cdk/placeholder ` +
      "(it fails every invocation). Build each function with `cargo lambda build --release --arm64` in functions/<name> and synthesize again " +
      "(-c LambdaDir=<target>/lambda) before `cdk deploy`.",
  );
  const placeholder = lambda.Code.fromAsset(path.join(__dirname, "..", "..", "placeholder"));
  return () => placeholder;
}

/**
 * The cell's dashboard (template.yaml's CellDashboard, compared parsed by scripts/cfn/parity.py):
 * the cell metrics of shared/src/metrics.rs and the functions' errors and durations; `${...}`
 * are Fn::Sub references (the functions' logical ids, the stack name and region).
 */
const DASHBOARD_BODY = JSON.stringify({
  "widgets": [
    {"type": "text", "x": 0, "y": 0, "width": 24, "height": 2, "properties": {"markdown": "## nodecycle: ${AWS::StackName}\nCounts over every pool of the cell, one rotator pass a minute (pools with metrics.perPool: true also have their own, dimension Pool). nodecycle status names the pools; docs/operations.md says what each line means."}},
    {"type": "metric", "x": 0, "y": 2, "width": 12, "height": 6, "properties": {"title": "Pools up to date", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Sum", "period": 60, "metrics": [["nodecycle", "Pools", {"label": "pools"}], ["nodecycle", "PoolsUpToDate", {"label": "up to date"}]]}},
    {"type": "metric", "x": 12, "y": 2, "width": 12, "height": 6, "properties": {"title": "Rotations", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Sum", "period": 60, "metrics": [["nodecycle", "RotationsInFlight", {"label": "in flight"}], ["nodecycle", "RotationsStarted", {"label": "started", "period": 300}], ["nodecycle", "RotationsFinished", {"label": "finished", "period": 300}], ["nodecycle", "RotationsFailed", {"label": "failed", "period": 300}]]}},
    {"type": "metric", "x": 0, "y": 8, "width": 12, "height": 6, "properties": {"title": "Halts and quarantines", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Sum", "period": 60, "metrics": [["nodecycle", "PoolsHalted", {"label": "pools halted"}], ["nodecycle", "PoolBackingOff", {"label": "pools backing off"}], ["nodecycle", "RepairSuspended", {"label": "pools with repair suspended"}], ["nodecycle", "ReleasesQuarantined", {"label": "releases quarantined", "stat": "Maximum"}]]}},
    {"type": "metric", "x": 12, "y": 8, "width": 12, "height": 6, "properties": {"title": "Waiting on budgets", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Sum", "period": 60, "metrics": [["nodecycle", "PoolsBudgetLimited", {"label": "pools whose drifted nodes wait on budgets"}], ["nodecycle", "DriftedNodes", {"label": "drifted nodes"}]]}},
    {"type": "metric", "x": 0, "y": 14, "width": 12, "height": 6, "properties": {"title": "Interruptions and resolution", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Sum", "period": 60, "metrics": [["nodecycle", "InterruptionsHandled", {"label": "instances acted on (interruptions)", "period": 300}], ["nodecycle", "ResolutionFailures", {"label": "pools that did not resolve", "period": 900}], ["nodecycle", "RetainedInstances", {"label": "retained instances", "stat": "Maximum"}]]}},
    {"type": "metric", "x": 12, "y": 14, "width": 12, "height": 6, "properties": {"title": "Function errors", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Sum", "period": 300, "metrics": [["AWS/Lambda", "Errors", "FunctionName", "${AmiWatcherFunction}", {"label": "ami-watcher"}], ["AWS/Lambda", "Errors", "FunctionName", "${RotatorFunction}", {"label": "rotator"}], ["AWS/Lambda", "Errors", "FunctionName", "${InterruptionHandlerFunction}", {"label": "interruption-handler"}], ["AWS/Lambda", "Errors", "FunctionName", "${OpsFunction}", {"label": "ops"}]]}},
    {"type": "metric", "x": 0, "y": 20, "width": 12, "height": 6, "properties": {"title": "Function duration (p99, ms)", "region": "${AWS::Region}", "view": "timeSeries", "stat": "p99", "period": 300, "metrics": [["AWS/Lambda", "Duration", "FunctionName", "${AmiWatcherFunction}", {"label": "ami-watcher"}], ["AWS/Lambda", "Duration", "FunctionName", "${RotatorFunction}", {"label": "rotator"}], ["AWS/Lambda", "Duration", "FunctionName", "${InterruptionHandlerFunction}", {"label": "interruption-handler"}], ["AWS/Lambda", "Duration", "FunctionName", "${OpsFunction}", {"label": "ops"}]]}},
    {"type": "metric", "x": 12, "y": 20, "width": 12, "height": 6, "properties": {"title": "Function duration (maximum, ms)", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Maximum", "period": 300, "metrics": [["AWS/Lambda", "Duration", "FunctionName", "${AmiWatcherFunction}", {"label": "ami-watcher"}], ["AWS/Lambda", "Duration", "FunctionName", "${RotatorFunction}", {"label": "rotator"}], ["AWS/Lambda", "Duration", "FunctionName", "${InterruptionHandlerFunction}", {"label": "interruption-handler"}], ["AWS/Lambda", "Duration", "FunctionName", "${OpsFunction}", {"label": "ops"}]]}}
  ]
}, null, 2);

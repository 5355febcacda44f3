// The nodecycle spoke: the resources of ../deploy/spoke.yaml for one member account and region
// (checked by scripts/cfn/parity.py --template spoke: same roles, trust, rules, access entries,
// queue, alarm and outputs). Logical ids are those of deploy/spoke.yaml. The template takes its
// clusters as five parameter slots (StackSets refuse transforms, so it cannot loop); this
// construct takes any number and numbers them the same way.

import * as cdk from "aws-cdk-lib";
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as events from "aws-cdk-lib/aws-events";
import * as iam from "aws-cdk-lib/aws-iam";
import * as sqs from "aws-cdk-lib/aws-sqs";
import { CfnAccessEntry } from "aws-cdk-lib/aws-eks";
import { Construct } from "constructs";

export interface SpokeProps {
  /** The tooling account running the cells. */
  cellAccountId: string;
  /** The cell's bus in this region (default `default`). */
  cellBusName?: string;
  /** Each function's roles of every cell (the cell stacks' outputs <Function>RoleArn); required without cellTag, ignored with it. */
  cellRoles?: { amiWatcher: string[]; rotator: string[]; interruptionHandler: string[]; ops: string[] };
  /** CellTag: the cell's stack name; trust its roles by their tags, scope every cluster permission by the cell tag (clusters: access entries only). */
  cellTag?: string;
  externalId?: string;
  organizationId?: string;
  roleNamePrefix?: string;
  /** EKS clusters of this account and region nodecycle may change. */
  clusters: string[];
  /** This account's own AMI parameter name or path prefix. */
  amiParameterPath?: string;
  /** The customer managed key of SecureString AMI parameters (kms:Decrypt through SSM only). */
  amiParameterKmsKeyArn?: string;
  lifecycleHookName?: string;
  autoScalingGroupUpdates?: boolean;
  nodeRoleArns?: string[];
  createAccessEntries?: boolean;
  permissionsBoundaryArn?: string;
}

type Statement = Record<string, unknown>;

const allow = (Sid: string, Action: string[] | string, Resource: string[] | string, Condition?: Record<string, unknown>): Statement =>
  Condition ? { Sid, Effect: "Allow", Action, Resource, Condition } : { Sid, Effect: "Allow", Action, Resource };
const doc = (...Statement: Statement[]) => ({ Version: "2012-10-17", Statement });
const sub = (s: string): string => cdk.Fn.sub(s);
const here = (service: string, rest: string): string => sub(`arn:\${AWS::Partition}:${service}:\${AWS::Region}:\${AWS::AccountId}:${rest}`);

/** The spoke of one member account and region. */
export class NodecycleSpoke extends Construct {
  readonly roles: Record<"AmiWatcher" | "Rotator" | "InterruptionHandler" | "Ops", iam.CfnRole>;

  constructor(scope: Construct, id: string, p: SpokeProps) {
    super(scope, id);
    const stack = cdk.Stack.of(this);
    const prefix = p.roleNamePrefix ?? "nodecycle";
    const hook = p.lifecycleHookName ?? "nodecycle-drain";
    const busArn = sub(`arn:\${AWS::Partition}:events:\${AWS::Region}:${p.cellAccountId}:event-bus/${p.cellBusName ?? "default"}`);
    if (!p.externalId && !p.organizationId) throw new Error("Give ExternalId or OrganizationId (or both): the roles are assumed only with one of them");
    const cell = p.cellTag;
    if (!cell && !p.cellRoles) throw new Error("Give the cell's role ARNs (cellRoles) or its CellTag");
    const trustCondition = (fn: string): Record<string, string> => {
      const t: Record<string, string> = {};
      if (p.externalId) t["sts:ExternalId"] = p.externalId;
      if (p.organizationId) t["aws:PrincipalOrgID"] = p.organizationId;
      if (cell) {
        t["aws:PrincipalTag/nodecycle.dev/cell"] = cell;
        t["aws:PrincipalTag/nodecycle.dev/function"] = fn;
      }
      return t;
    };
    const asg = here("autoscaling", "autoScalingGroup:*:autoScalingGroupName/*");
    // CellTag: the cell's tag instead of the cluster names (deploy/spoke.yaml, CellTagScope).
    const cellTag = cell ? { StringEquals: { "aws:ResourceTag/nodecycle.dev/cell": cell } } : undefined;
    const clusterTag = cell
      ? { StringEquals: { "aws:ResourceTag/nodecycle.dev/cell": cell }, Null: { "aws:ResourceTag/eks:cluster-name": "false" } }
      : { StringEquals: { "aws:ResourceTag/eks:cluster-name": p.clusters } };
    const optedIn = cell
      ? {
          StringEquals: { "aws:ResourceTag/nodecycle.dev/cell": cell, "aws:ResourceTag/nodecycle.dev/managed": "true" },
          Null: { "aws:ResourceTag/eks:cluster-name": "false", "aws:ResourceTag/eks:nodegroup-name": "true" },
        }
      : {
          StringEquals: { "aws:ResourceTag/eks:cluster-name": p.clusters, "aws:ResourceTag/nodecycle.dev/managed": "true" },
          Null: { "aws:ResourceTag/eks:nodegroup-name": "true" },
        };
    const clusterArns = cell ? [here("eks", "cluster/*")] : p.clusters.map((c) => here("eks", `cluster/${c}`));
    const nodeGroupArns = cell ? [here("eks", "nodegroup/*/*/*")] : p.clusters.map((c) => here("eks", `nodegroup/${c}/*/*`));
    const accessEntryArns = cell ? [here("eks", "access-entry/*")] : p.clusters.map((c) => here("eks", `access-entry/${c}/*`));
    const cellRoot = sub(`arn:\${AWS::Partition}:iam::${p.cellAccountId}:root`);
    const publicParameters = sub("arn:${AWS::Partition}:ssm:${AWS::Region}::parameter/aws/service/*");
    const alarms = here("cloudwatch", "alarm:*");

    const role = (logical: string, fn: string, principals: string[] | undefined, description: string, policyName: string, statements: Statement[]) => {
      const r = new iam.CfnRole(stack, logical, {
        roleName: sub(`${prefix}-${fn}-\${AWS::Region}`),
        description,
        permissionsBoundary: p.permissionsBoundaryArn,
        assumeRolePolicyDocument: doc({ Effect: "Allow", Principal: { AWS: cell ? cellRoot : principals }, Action: "sts:AssumeRole", Condition: { StringEquals: trustCondition(fn) } }),
        policies: [{ policyName, policyDocument: doc(...statements) }],
      });
      r.overrideLogicalId(logical);
      return r;
    };
    const rolePolicy = (logical: string, r: iam.CfnRole, policyName: string, statements: Statement[]) => {
      const x = new iam.CfnRolePolicy(stack, logical, { roleName: r.ref, policyName, policyDocument: doc(...statements) });
      x.overrideLogicalId(logical);
    };

    // --- the roles the cell's functions assume ----------------------------------------------------
    const amiWatcher = role("AmiWatcherRole", "ami-watcher", p.cellRoles?.amiWatcher, "nodecycle ami-watcher (assumed by the cell)", "ami-watcher", [
      allow("ReadPublicAmiParameters", ["ssm:GetParameter", "ssm:GetParameters"], publicParameters),
      allow("DescribeImagesAndGroups", ["ec2:DescribeImages", "ec2:DescribeLaunchTemplateVersions", "ec2:DescribeInstanceTypes", "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeLaunchConfigurations"], "*"),
      allow("ReadPromotionAlarms", "cloudwatch:DescribeAlarms", alarms),
    ]);
    if (p.amiParameterPath) {
      rolePolicy("AmiWatcherReadsAmiParameters", amiWatcher, "ami-parameters", [
        allow("ReadNamedAmiParameters", ["ssm:GetParameter", "ssm:GetParameters"], here("ssm", `parameter${p.amiParameterPath}*`)),
      ]);
      if (p.amiParameterKmsKeyArn) {
        rolePolicy("AmiWatcherDecryptsAmiParameters", amiWatcher, "decrypt-ami-parameters", [
          allow("DecryptSecureStringAmiParameters", "kms:Decrypt", p.amiParameterKmsKeyArn, { StringEquals: { "kms:ViaService": sub("ssm.${AWS::Region}.amazonaws.com") } }),
        ]);
      }
    }
    const rotator = role("RotatorRole", "rotator", p.cellRoles?.rotator, "nodecycle rotator (assumed by the cell)", "rotator", [
      allow("Describe", ["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeScalingActivities", "autoscaling:DescribeLaunchConfigurations", "ec2:DescribeInstances", "ec2:DescribeLaunchTemplates", "ec2:DescribeLaunchTemplateVersions", "ec2:DescribeInstanceTypes", "ec2:DescribeInstanceStatus"], "*"),
      allow("ReadEksReleaseVersions", ["ssm:GetParameters"], publicParameters),
    ]);
    const interruption = role("InterruptionHandlerRole", "interruption", p.cellRoles?.interruptionHandler, "nodecycle interruption-handler (assumed by the cell)", "interruption-handler", [
      allow("DescribeInstances", ["ec2:DescribeInstances", "ec2:DescribeSpotInstanceRequests"], "*"),
    ]);
    const ops = role("OpsRole", "ops", p.cellRoles?.ops, "nodecycle ops (assumed by the cell)", "ops", [
      allow("Describe", ["autoscaling:DescribeAutoScalingGroups", "ec2:DescribeInstances", "ec2:DescribeImages", "ec2:DescribeLaunchTemplateVersions"], "*"),
      allow("ReadPromotionAlarms", "cloudwatch:DescribeAlarms", alarms),
      allow("ListRules", "events:ListRules", "*"),
      allow("ReadRuleTargets", "events:ListTargetsByRule", here("events", "rule/*")),
    ]);
    this.roles = { AmiWatcher: amiWatcher, Rotator: rotator, InterruptionHandler: interruption, Ops: ops };

    if (p.clusters.length > 0 || cell) {
      rolePolicy("AmiWatcherClusters", amiWatcher, "clusters", [
        allow("DescribeCluster", ["eks:DescribeCluster"], clusterArns, cellTag),
        allow("DescribeNodeGroupsOfCluster", ["eks:DescribeNodegroup"], nodeGroupArns, cellTag),
      ]);
      rolePolicy("RotatorClusters", rotator, "clusters", [
        allow("RotateTaggedGroupsOnly", ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup", "autoscaling:SuspendProcesses", "autoscaling:ResumeProcesses"], [asg], clusterTag),
        allow("NewVersionsOfOptedInTemplatesOnly", ["ec2:CreateLaunchTemplateVersion", "ec2:ModifyLaunchTemplate"], [here("ec2", "launch-template/*")], optedIn),
        allow("UpdateNodeGroupsOfNamedClusters", ["eks:UpdateNodegroupVersion", "eks:UpdateNodegroupConfig"], nodeGroupArns, cellTag),
        allow("DescribeCluster", ["eks:DescribeCluster", "eks:DescribeUpdate"], clusterArns, cellTag),
        allow("DescribeNodeGroupsOfCluster", ["eks:DescribeNodegroup"], nodeGroupArns, cellTag),
      ]);
      rolePolicy("InterruptionHandlerClusters", interruption, "clusters", [
        allow("AnswerLifecycleActionsOfClusterGroups", ["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"], [asg], clusterTag),
        allow("DescribeCluster", ["eks:DescribeCluster"], clusterArns, cellTag),
      ]);
      rolePolicy("OpsClusters", ops, "clusters", [
        allow("UndoSurgeOfTaggedGroupsOnly", ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"], [asg], clusterTag),
        allow("DescribeCluster", ["eks:DescribeCluster", "eks:DescribeUpdate"], clusterArns, cellTag),
        allow("DescribeNodeGroupsOfCluster", ["eks:DescribeNodegroup"], nodeGroupArns, cellTag),
        allow("ListAccessEntriesOfClusters", ["eks:ListAccessEntries"], clusterArns, cellTag),
        allow("DescribeAccessEntriesOfClusters", ["eks:DescribeAccessEntry"], accessEntryArns, cellTag),
      ]);
      if (p.autoScalingGroupUpdates) {
        const launchResources = ["instance", "volume", "network-interface", "subnet", "security-group", "key-pair"].map((k) => here("ec2", `${k}/*`));
        rolePolicy("RotatorAutoScalingGroupUpdates", rotator, "autoscaling-group-updates", [
          allow("PointTaggedGroupsAtNewVersions", "autoscaling:UpdateAutoScalingGroup", asg, clusterTag),
          allow("LaunchCheckOnOptedInTemplatesOnly", "ec2:RunInstances", here("ec2", "launch-template/*"), optedIn),
          allow("LaunchCheckThroughLaunchTemplatesOnly", "ec2:RunInstances", [...launchResources, sub("arn:${AWS::Partition}:ec2:${AWS::Region}::image/*")], {
            ArnLike: { "ec2:LaunchTemplate": here("ec2", "launch-template/*") },
          }),
          allow("TagOnLaunchOnly", "ec2:CreateTags", ["instance", "volume", "network-interface"].map((k) => here("ec2", `${k}/*`)), {
            StringEquals: { "ec2:CreateAction": "RunInstances" },
          }),
        ]);
      }
    }
    if ((p.nodeRoleArns ?? []).length > 0 && p.autoScalingGroupUpdates) {
      rolePolicy("RotatorPassNodeRoles", rotator, "pass-node-roles", [
        allow("PassNodeRolesToEc2", "iam:PassRole", p.nodeRoleArns ?? [], { StringEquals: { "iam:PassedToService": "ec2.amazonaws.com" } }),
      ]);
    }

    // --- forwarding to the cell's bus ---------------------------------------------------------------
    const forward = new iam.CfnRole(stack, "ForwardRole", {
      roleName: sub(`${prefix}-forward-\${AWS::Region}`),
      description: "nodecycle spoke, forwards events to the cell's bus",
      permissionsBoundary: p.permissionsBoundaryArn,
      assumeRolePolicyDocument: doc({ Effect: "Allow", Principal: { Service: "events.amazonaws.com" }, Action: "sts:AssumeRole", Condition: { StringEquals: { "aws:SourceAccount": stack.account } } }),
      policies: [{ policyName: "forward", policyDocument: doc(allow("PutEventsOnTheCellBus", "events:PutEvents", busArn)) }],
    });
    forward.overrideLogicalId("ForwardRole");
    const dlq = new sqs.CfnQueue(stack, "ForwardDeadLetterQueue", { messageRetentionPeriod: 1209600, sqsManagedSseEnabled: true });
    dlq.overrideLogicalId("ForwardDeadLetterQueue");
    const rules: events.CfnRule[] = [];
    const rule = (logical: string, description: string, eventPattern: Record<string, unknown>, retries: number, age: number) => {
      const r = new events.CfnRule(stack, logical, {
        description,
        state: "ENABLED",
        eventPattern,
        targets: [
          {
            id: "CellBus",
            arn: busArn,
            roleArn: forward.attrArn,
            retryPolicy: { maximumRetryAttempts: retries, maximumEventAgeInSeconds: age },
            deadLetterConfig: { arn: dlq.attrArn },
          },
        ],
      });
      r.overrideLogicalId(logical);
      rules.push(r);
    };
    rule("ForwardInterruptionWarnings", "nodecycle spoke, Spot and Capacity Reservation interruption warnings and rebalance recommendations to the cell", {
      source: ["aws.ec2"],
      "detail-type": ["EC2 Spot Instance Interruption Warning", "EC2 Capacity Reservation Instance Interruption Warning", "EC2 Instance Rebalance Recommendation"],
    }, 3, 120);
    rule("ForwardInstanceStateChanges", "nodecycle spoke, instance state changes to the cell", {
      source: ["aws.ec2"],
      "detail-type": ["EC2 Instance State-change Notification"],
      detail: { state: ["stopping", "stopped", "shutting-down", "terminated"] },
    }, 4, 900);
    rule("ForwardScheduledMaintenance", "nodecycle spoke, EC2 scheduled changes to the cell", {
      source: ["aws.health"],
      "detail-type": ["AWS Health Event"],
      detail: { service: ["EC2"], eventTypeCategory: ["scheduledChange"] },
    }, 8, 3600);
    rule("ForwardTerminateLifecycleActions", "nodecycle spoke, terminate lifecycle actions of the nodecycle hook to the cell", {
      source: ["aws.autoscaling"],
      "detail-type": ["EC2 Instance-terminate Lifecycle Action"],
      detail: { LifecycleHookName: [hook] },
    }, 4, 900);
    if (p.amiParameterPath) {
      rule("ForwardAmiParameterChanges", "nodecycle spoke, changes of this account's AMI parameters to the cell", {
        source: ["aws.ssm"],
        "detail-type": ["Parameter Store Change"],
        detail: { name: [{ prefix: p.amiParameterPath }] },
      }, 4, 3600);
    }
    const qp = new sqs.CfnQueuePolicy(stack, "ForwardDeadLetterQueuePolicy", {
      queues: [dlq.ref],
      policyDocument: doc(
        { Sid: "UndeliverableEventsOfThisStacksRules", Effect: "Allow", Principal: { Service: "events.amazonaws.com" }, Action: "sqs:SendMessage", Resource: dlq.attrArn, Condition: { ArnEquals: { "aws:SourceArn": rules.map((r) => r.attrArn) } } },
        { Sid: "TlsOnly", Effect: "Deny", Principal: "*", Action: "sqs:*", Resource: dlq.attrArn, Condition: { Bool: { "aws:SecureTransport": "false" } } },
      ),
    });
    qp.overrideLogicalId("ForwardDeadLetterQueuePolicy");
    const alarm = new cloudwatch.CfnAlarm(stack, "ForwardDeadLetterQueueNotEmptyAlarm", {
      alarmName: `${stack.stackName}-forward-dead-letter-queue-not-empty`,
      alarmDescription: "An event was not forwarded to the nodecycle cell (its bus policy does not admit this account, or the bus is gone); read the message.",
      namespace: "AWS/SQS",
      metricName: "ApproximateNumberOfMessagesVisible",
      dimensions: [{ name: "QueueName", value: dlq.attrQueueName }],
      statistic: "Maximum",
      period: 300,
      evaluationPeriods: 1,
      threshold: 0,
      comparisonOperator: "GreaterThanThreshold",
      treatMissingData: "notBreaching",
    });
    alarm.overrideLogicalId("ForwardDeadLetterQueueNotEmptyAlarm");

    // --- access entries of the assumed roles, numbered as the template's cluster slots ------------
    if (p.createAccessEntries ?? true) {
      p.clusters.forEach((cluster, i) => {
        for (const [logical, r, group] of [
          ["RotatorAccessEntry", rotator, "nodecycle-rotator"],
          ["InterruptionHandlerAccessEntry", interruption, "nodecycle-interruption"],
          ["OpsAccessEntry", ops, "nodecycle-ops"],
        ] as const) {
          const tags = cell ? [{ key: "nodecycle.dev/cell", value: cell }] : undefined;
          const e = new CfnAccessEntry(stack, `${logical}${i + 1}`, { clusterName: cluster, principalArn: r.attrArn, type: "STANDARD", kubernetesGroups: [group], tags });
          e.overrideLogicalId(`${logical}${i + 1}`);
        }
      });
    }

    // --- outputs ------------------------------------------------------------------------------------
    const output = (name: string, value: string, description?: string) => new cdk.CfnOutput(stack, name, { value, description });
    output("AmiWatcherRoleArn", amiWatcher.attrArn);
    output("RotatorRoleArn", rotator.attrArn, "Mapped to the Kubernetes group `nodecycle-rotator` (access entry or aws-auth).");
    output("InterruptionHandlerRoleArn", interruption.attrArn, "Mapped to the Kubernetes group `nodecycle-interruption` (access entry or aws-auth).");
    output("OpsRoleArn", ops.attrArn, "Mapped to the Kubernetes group `nodecycle-ops`.");
    output("CellTag", cell ?? "", "The cell this spoke trusts and scopes by (empty - the role ARNs and cluster slots).");
    output("CellBusArn", busArn);
    output("ForwardRuleNames", cdk.Fn.join(",", rules.map((r) => r.ref)), "Every forwarding rule of the stack (each must be ENABLED).");
    output("ForwardDeadLetterQueueUrl", dlq.ref);
  }
}

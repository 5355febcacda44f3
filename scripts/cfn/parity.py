#!/usr/bin/env python3
"""The CDK app deploys what template.yaml deploys.

    parity.py CDK_DIR [--template cell|spoke] [--set NAME]...

For each parameter set (scripts/cfn/cfn.py PARAMETER_SETS, or SPOKE_PARAMETER_SETS with
--template spoke; default all), synthesizes the CDK app (compiled JS in CDK_DIR/build, `cdk synth`
with the set as context: build/bin/nodecycle.js for template.yaml, build/bin/spoke.js for
deploy/spoke.yaml), resolves both templates for the same values (scripts/cfn/cfn.py) and
compares, by logical id:
  * per IAM role: every (action, resource, condition) it is allowed, its trust policy and boundary;
  * access entries (cluster, principal, type, Kubernetes groups);
  * event rules: pattern, schedule, state, targets (function or bus, role, retries, event age,
    dead-letter queue), and who may invoke each function; event bus policies; event source
    mappings (queue, batch, response types, maximum concurrency);
  * functions (runtime, architecture, handler, memory, timeout, environment, logging, reserved
    concurrency, role) and their asynchronous invocation settings;
  * table keys, TTL, billing, encryption, protection; queue settings and queue policy; log groups;
  * alarms; dashboards (name, and body parsed); outputs; and that neither has a resource type
    the other lacks.
Not compared: the template's Parameters and its Metadata (the console's parameter groups,
AWS::CloudFormation::Interface): the CDK app takes context values and synthesizes none.
Exit 1 on any difference (each printed), 0 when equal. Before comparing, it checks that the
comparison notices a removed permission and a dropped condition (so a broken normalisation cannot
pass silently).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cfn  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def norm(v: Any) -> Any:
    """Scalars as CloudFormation passes them (strings), lists and maps recursively."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    return v


def canon(v: Any) -> str:
    return json.dumps(norm(v), sort_keys=True)


def target_id(v: str) -> str:
    """`ref:X`, `getatt:X.Arn` -> X."""
    if v.startswith("ref:"):
        return v[4:]
    if v.startswith("getatt:") and v.endswith(".Arn"):
        return v[7:-4]
    return v


def principal(p: Any) -> str:
    if p == "*" or p == {"AWS": "*"}:
        return "*"
    return canon(p)


def statements(doc: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(effect, principal, action, resource, condition) per action and resource; a condition
    whose single operator/key holds a list is split per value (one statement per source rule
    equals one statement with the list)."""
    out = []
    for st in doc["Statement"]:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        resources = st.get("Resource", "-")
        resources = resources if isinstance(resources, list) else [resources]
        conds = [st.get("Condition")]
        c = st.get("Condition")
        if isinstance(c, dict) and len(c) == 1:
            (op, kv), = c.items()
            if isinstance(kv, dict) and len(kv) == 1:
                (k, vals), = kv.items()
                if isinstance(vals, list) and op.startswith("Arn"):
                    conds = [{op: {k: v}} for v in vals]
        for a in actions:
            for r in resources:
                for cond in conds:
                    out.append((st["Effect"], principal(st.get("Principal")), a, r, canon(cond)))
    return sorted(out)


def depends_on(resource: dict[str, Any]) -> list[str]:
    """A resource's DependsOn as a sorted list (CloudFormation takes a name or a list)."""
    deps = resource.get("DependsOn") or []
    return sorted([deps] if isinstance(deps, str) else deps)


def view(t: dict[str, Any]) -> dict[str, Any]:
    res = t["Resources"]
    of = lambda kind: {k: v["Properties"] for k, v in res.items() if v["Type"] == kind}  # noqa: E731
    v: dict[str, Any] = {}

    roles: dict[str, Any] = {}
    for name, p in of("AWS::IAM::Role").items():
        grants = []
        for pol in p.get("Policies", []):
            grants += statements(pol["PolicyDocument"])
        roles[name] = {
            "trust": statements(p["AssumeRolePolicyDocument"]),
            "boundary": p.get("PermissionsBoundary"),
            "managed": p.get("ManagedPolicyArns", []),
            "grants": grants,
        }
    for p in of("AWS::IAM::RolePolicy").values():
        roles[target_id(p["RoleName"])]["grants"] += statements(p["PolicyDocument"])
    for p in of("AWS::IAM::Policy").values():
        for r in p["Roles"]:
            roles[target_id(r)]["grants"] += statements(p["PolicyDocument"])
    for r in roles.values():
        r["grants"] = sorted(r["grants"])
    v["roles"] = roles

    v["access_entries"] = sorted(
        canon([p["ClusterName"], p["PrincipalArn"], p["Type"], p.get("KubernetesGroups"), p.get("AccessPolicies")])
        for p in of("AWS::EKS::AccessEntry").values()
    )

    rules = {}
    for name, p in of("AWS::Events::Rule").items():
        pattern = p.get("EventPattern")
        if isinstance(pattern, str):
            pattern = json.loads(pattern)
        rules[name] = {
            "pattern": norm(pattern),
            "schedule": p.get("ScheduleExpression"),
            "state": p.get("State", "ENABLED"),
            "description": p.get("Description"),
            "targets": sorted(
                canon([target_id(x["Arn"]), x.get("RoleArn"), x.get("RetryPolicy"), x.get("DeadLetterConfig"), x.get("Input")])
                for x in p["Targets"]
            ),
        }
    v["rules"] = rules
    v["bus_policies"] = {k: norm({x: p.get(x) for x in ["EventBusName", "StatementId", "Statement"]})
                         for k, p in of("AWS::Events::EventBusPolicy").items()}
    v["event_source_mappings"] = {
        k: norm({**{x: p.get(x) for x in ["EventSourceArn", "BatchSize", "Enabled", "FunctionResponseTypes",
                                           "ScalingConfig", "MaximumBatchingWindowInSeconds"]},
                 "FunctionName": target_id(p["FunctionName"]), "DependsOn": depends_on(res[k])})
        for k, p in of("AWS::Lambda::EventSourceMapping").items()
    }
    v["invoke_permissions"] = sorted(
        canon([target_id(p["FunctionName"]), p["Action"], p["Principal"], p.get("SourceArn")])
        for p in of("AWS::Lambda::Permission").values()
    )

    keys = ["Runtime", "Architectures", "Handler", "MemorySize", "Timeout", "Environment", "LoggingConfig",
            "ReservedConcurrentExecutions", "Role", "Description", "VpcConfig", "DeadLetterConfig", "Layers"]
    v["functions"] = {k: norm({x: p.get(x) for x in keys}) for k, p in of("AWS::Lambda::Function").items()}
    v["invoke_configs"] = {
        target_id(p["FunctionName"]): norm({x: p.get(x) for x in ["Qualifier", "MaximumRetryAttempts",
                                                                  "MaximumEventAgeInSeconds", "DestinationConfig"]})
        for p in of("AWS::Lambda::EventInvokeConfig").values()
    }

    def policies(name: str) -> dict[str, Any]:
        return {k: res[name].get(k, "Delete") for k in ("DeletionPolicy", "UpdateReplacePolicy")}

    table_keys = ["KeySchema", "AttributeDefinitions", "TimeToLiveSpecification", "BillingMode",
                  "PointInTimeRecoverySpecification", "SSESpecification", "DeletionProtectionEnabled",
                  "GlobalSecondaryIndexes", "StreamSpecification"]
    v["tables"] = {k: norm({**{x: p.get(x) for x in table_keys}, **policies(k)}) for k, p in of("AWS::DynamoDB::Table").items()}
    v["queues"] = {k: norm({**{x: p.get(x) for x in ["MessageRetentionPeriod", "SqsManagedSseEnabled", "KmsMasterKeyId",
                                                       "RedrivePolicy", "VisibilityTimeout"]}, **policies(k)})
                   for k, p in of("AWS::SQS::Queue").items()}
    v["queue_policies"] = sorted(
        canon([q, s[0], s[1], s[2], s[3], s[4]])
        for p in of("AWS::SQS::QueuePolicy").values()
        for q in p["Queues"]
        for s in statements(p["PolicyDocument"])
    )
    v["log_groups"] = {k: norm({**{x: p.get(x) for x in ["LogGroupName", "RetentionInDays", "KmsKeyId"]}, **policies(k)})
                       for k, p in of("AWS::Logs::LogGroup").items()}
    alarm_keys = ["AlarmName", "AlarmDescription", "Namespace", "MetricName", "Dimensions", "Statistic", "Period",
                  "EvaluationPeriods", "DatapointsToAlarm", "Threshold", "ComparisonOperator", "TreatMissingData",
                  "AlarmActions", "OKActions"]
    v["alarms"] = {k: norm({x: p.get(x) for x in alarm_keys}) for k, p in of("AWS::CloudWatch::Alarm").items()}
    v["dashboards"] = {k: {"DashboardName": p.get("DashboardName"), "DashboardBody": json.loads(p["DashboardBody"])}
                       for k, p in of("AWS::CloudWatch::Dashboard").items()}
    v["lifecycle_hooks"] = {k: norm(p) for k, p in of("AWS::AutoScaling::LifecycleHook").items()}
    v["outputs"] = norm(t["Outputs"])
    v["resource_types"] = dict(sorted(Counter(r["Type"] for r in res.values() if r["Type"] != "AWS::CDK::Metadata").items()))
    return v


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(f"{path}.{k}: only in CDK: {json.dumps(b[k])[:300]}")
            elif k not in b:
                out.append(f"{path}.{k}: only in SAM: {json.dumps(a[k])[:300]}")
            else:
                out += diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and a != b:
        only_a = [x for x in a if x not in b]
        only_b = [x for x in b if x not in a]
        if only_a or only_b:
            return [f"{path}: only in SAM: {x}" for x in only_a] + [f"{path}: only in CDK: {x}" for x in only_b]
        return [f"{path}: same items, different order or count"]
    return [] if a == b else [f"{path}: SAM {json.dumps(a)[:300]} != CDK {json.dumps(b)[:300]}"]


# What each --template compares: the source, its parameter sets, the CDK app and its output.
TEMPLATES = {
    "cell": ("template.yaml", cfn.PARAMETER_SETS, "build/bin/nodecycle.js", "nodecycle.template.json", "RotatorFunctionRole"),
    "spoke": ("deploy/spoke.yaml", cfn.SPOKE_PARAMETER_SETS, "build/bin/spoke.js", "nodecycle-spoke.template.json", "RotatorRole"),
}


def synth(cdk_dir: str, params: dict[str, str], out_dir: str, app: str = "build/bin/nodecycle.js",
          output: str = "nodecycle.template.json") -> dict[str, Any]:
    cmd = [os.path.join(cdk_dir, "node_modules", ".bin", "cdk"), "synth", "--quiet", "--output", out_dir,
           "--app", f"node {app}", "-c", f"StackName={cfn.STACK}"]
    for k, val in params.items():
        cmd += ["-c", f"{k}={val}"]
    env = {**os.environ, "CDK_DISABLE_VERSION_CHECK": "1", "CDK_CLI_TELEMETRY": "0", "AWS_REGION": cfn.REGION}
    run = subprocess.run(cmd, cwd=cdk_dir, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        sys.exit(f"cdk synth failed ({' '.join(cmd)}):\n{run.stdout}\n{run.stderr}")
    with open(os.path.join(out_dir, output), encoding="utf-8") as f:
        return json.load(f)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cdk_dir")
    p.add_argument("--template", choices=sorted(TEMPLATES), default="cell")
    p.add_argument("--set", action="append", choices=sorted(set(cfn.PARAMETER_SETS) | set(cfn.SPOKE_PARAMETER_SETS)))
    p.add_argument("--out", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "nodecycle-parity"))
    args = p.parse_args()
    args.cdk_dir = os.path.abspath(args.cdk_dir)
    failed = False
    source, sets, app, output, probe_role = TEMPLATES[args.template]
    sam_template = cfn.load_yaml(os.path.join(ROOT, source))
    for name in args.set or sorted(sets):
        params = sets[name]
        sam = view(cfn.resolve(cfn.translate(sam_template, params), params))
        cdk = view(cfn.resolve(synth(args.cdk_dir, params, os.path.join(args.out, args.template, name), app, output), {}))

        # The comparison must see a permission the CDK app lacks.
        mutated = copy.deepcopy(cdk)
        mutated["roles"][probe_role]["grants"].pop()
        if not diff(sam, mutated):
            print("parity: the comparison does not notice a missing permission", file=sys.stderr)
            return 1

        # ... and a grant or trust whose condition differs (a dropped tag, partition key or
        # external id condition).
        mutated = copy.deepcopy(cdk)
        role = mutated["roles"][probe_role]
        conditioned = [(k, i) for k in ("grants", "trust") for i, g in enumerate(role[k]) if g[4] != canon(None)]
        k, i = conditioned[0]
        role[k][i] = role[k][i][:4] + (canon(None),)
        if not diff(sam, mutated):
            print("parity: the comparison does not notice a missing condition", file=sys.stderr)
            return 1

        differences = diff(sam, cdk)
        grants = sum(len(r["grants"]) for r in sam["roles"].values())
        print(f"parity ({args.template}, {name}): {len(sam['roles'])} roles / {grants} grants, {len(sam['access_entries'])} access entries, "
              f"{len(sam['rules'])} rules, {len(sam['functions'])} functions, {len(sam['alarms'])} alarms, "
              f"{len(sam['outputs'])} outputs, {sum(sam['resource_types'].values())} resources compared: "
              f"{len(differences)} difference(s)")
        for d in differences:
            print(f"  {name}{d}", file=sys.stderr)
        failed |= bool(differences)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

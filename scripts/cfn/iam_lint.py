#!/usr/bin/env python3
"""Lints every IAM policy of template.yaml (or deploy/spoke.yaml) as CloudFormation deploys it with parliament and
compares its findings with parliament-baseline.yaml.

    iam_lint.py [TEMPLATE]

For each parameter set of scripts/cfn/cfn.py (and the widening parameters on), the template is
translated and resolved (scripts/cfn/cfn.py) so every ARN is concrete; `getatt:<Resource>.Arn` references become the ARN
CloudFormation would give that resource. Each role's policies (inline, AWS::IAM::RolePolicy,
AWS::IAM::Policy) are analysed one document at a time, as IAM stores them. A finding is
(role, policy name, issue, parliament's detail: the actions and resource formats it names). Exit 1 when a finding is not in
the baseline (fix the policy, or accept it there with its reason) or a baseline entry no longer
occurs (remove it); 0 otherwise.
"""

from __future__ import annotations

import json
import os
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cfn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ACCOUNT_ARN = f"{cfn.REGION}:{cfn.ACCOUNT}"


def arn_of(resources: dict, ref: str) -> str:
    """The ARN CloudFormation gives `getatt:<Id>.Arn` (a name derived from the logical id)."""
    rid = ref[len("getatt:"):-len(".Arn")]
    kind = resources[rid]["Type"]
    props = resources[rid].get("Properties", {})
    name = f"{cfn.STACK}-{rid}"
    return {
        "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{ACCOUNT_ARN}:table/{name}",
        "AWS::SQS::Queue": f"arn:aws:sqs:{ACCOUNT_ARN}:{name}",
        "AWS::Logs::LogGroup": f"arn:aws:logs:{ACCOUNT_ARN}:log-group:{props.get('LogGroupName', name)}:*",
        "AWS::IAM::Role": f"arn:aws:iam::{cfn.ACCOUNT}:role/{name}",
    }[kind]


def concrete(v, resources):
    if isinstance(v, str) and v.startswith("getatt:") and v.endswith(".Arn"):
        return arn_of(resources, v)
    if isinstance(v, list):
        return [concrete(x, resources) for x in v]
    if isinstance(v, dict):
        return {k: concrete(x, resources) for k, x in v.items()}
    return v


def documents(template: dict):
    """(role, policy name, document) for every policy attached to a role."""
    res = template["Resources"]
    target = lambda r: r[len("ref:"):] if isinstance(r, str) and r.startswith("ref:") else r  # noqa: E731
    for rid, r in res.items():
        p = r.get("Properties", {})
        if r["Type"] == "AWS::IAM::Role":
            for pol in p.get("Policies", []):
                yield rid, pol["PolicyName"], pol["PolicyDocument"]
        elif r["Type"] == "AWS::IAM::RolePolicy":
            yield target(p["RoleName"]), p["PolicyName"], p["PolicyDocument"]
        elif r["Type"] == "AWS::IAM::Policy":
            for role in p["Roles"]:
                yield target(role), p["PolicyName"], p["PolicyDocument"]


def findings(source: dict, params: dict) -> set[tuple[str, str, str, str]]:
    from parliament import analyze_policy_string, enhance_finding

    template = cfn.resolve(cfn.translate(source, params), params)
    out = set()
    for role, name, doc in documents(template):
        doc = concrete(doc, template["Resources"])
        policy = analyze_policy_string(json.dumps(doc), ignore_private_auditors=True)
        for finding in policy.findings:
            finding = enhance_finding(finding)
            out.add((role, name, finding.issue, json.dumps(finding.detail, sort_keys=True)))
    return out


def linter_works() -> bool:
    """parliament reports a misspelt action (a broken install must not pass by seeing nothing)."""
    from parliament import analyze_policy_string

    doc = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:DescribeInstance",
                                                   "Resource": "*"}]}
    return any(f.issue == "UNKNOWN_ACTION" for f in analyze_policy_string(json.dumps(doc)).findings)


def main() -> int:
    if not linter_works():
        print("iam_lint.py: parliament does not report a misspelt action; check its install", file=sys.stderr)
        return 1
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "template.yaml")
    source = cfn.load_yaml(path)
    # deploy/spoke.yaml has parameter sets of its own.
    sets = cfn.SPOKE_PARAMETER_SETS if os.path.basename(path) == "spoke.yaml" else cfn.PARAMETER_SETS
    with open(os.path.join(HERE, "parliament-baseline.yaml"), encoding="utf-8") as f:
        baseline = yaml.safe_load(f) or []
    accepted = {}
    for entry in baseline:
        if not (entry.get("reason") or "").strip():
            print(f"parliament-baseline.yaml: {entry.get('issue')} on {entry.get('role')} has no reason", file=sys.stderr)
            return 1
        key = (entry["role"], entry["policy"], entry["issue"], json.dumps(entry["detail"], sort_keys=True))
        accepted[key] = entry
    seen: set = set()
    for name, params in sorted(sets.items()):
        got = findings(source, params)
        print(f"parliament ({os.path.basename(path)}, {name} parameters): {len(got)} finding(s)")
        seen |= got
    # Entries of the other template's roles are that run's (the two templates' role ids differ).
    roles = {role for role, _, _ in documents(cfn.resolve(cfn.translate(source, next(iter(sets.values()))), next(iter(sets.values()))))}
    accepted = {k: v for k, v in accepted.items() if k[0] in roles}
    new = sorted(seen - set(accepted))
    stale = sorted(set(accepted) - seen)
    for role, policy, issue, where in new:
        print(f"NEW finding {issue} in {role} policy {policy} at {where}: fix it, or accept it in "
              "scripts/cfn/parliament-baseline.yaml with its reason", file=sys.stderr)
        print(yaml.safe_dump([{"role": role, "policy": policy, "issue": issue, "detail": json.loads(where),
                               "reason": "..."}], sort_keys=False), file=sys.stderr)
    for role, policy, issue, where in stale:
        print(f"STALE baseline entry {issue} in {role} policy {policy} at {where}: parliament no longer reports it; "
              "remove it", file=sys.stderr)
    print(f"parliament: {len(seen)} finding(s), all accepted in the baseline" if not (new or stale) else
          f"parliament: {len(new)} new finding(s), {len(stale)} stale baseline entrie(s)")
    return 1 if new or stale else 0


if __name__ == "__main__":
    sys.exit(main())

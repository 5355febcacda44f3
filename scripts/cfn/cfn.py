"""What CloudFormation makes of template.yaml (and of the CDK app's synthesized template).

* `translate`: the template as CloudFormation deploys it for given parameter values: the
  AWS::LanguageExtensions transform (Fn::ForEach expanded as documented: every `${X}`, `&{X}`
  and `Ref: X` of the loop body replaced; other intrinsic functions left for CloudFormation),
  then the AWS::Serverless transform (aws-sam-translator).
* `resolve`: a translated (or CDK-synthesized) template evaluated for the same parameter values:
  conditions decided, resources and properties of false conditions removed, Ref/GetAtt/Sub/Join/
  Split/Select/If computed. References to resources become `ref:<LogicalId>` and
  `getatt:<LogicalId>.<Attribute>` (Sub and Join keep them inside the string), so two templates
  that name their resources alike compare as plain data.

Used by scripts/lint-template.sh (lint/scan input), scripts/cfn/parity.py and
tests/tests/template.rs (through scripts/cfn/translate.py).
"""

from __future__ import annotations

import copy
import json
import os
import re
from typing import Any

# SAM CLI's modules (YAML loader) send no telemetry from here.
os.environ.setdefault("SAM_CLI_TELEMETRY", "0")

REGION = "us-east-1"
ACCOUNT = "123456789012"
STACK = "nodecycle"
PSEUDO = {
    "AWS::Region": REGION,
    "AWS::AccountId": ACCOUNT,
    "AWS::Partition": "aws",
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackName": STACK,
    "AWS::StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{STACK}/00000000-0000-0000-0000-000000000000",
    "AWS::NotificationARNs": [],
}
NO_VALUE = object()

# Parameter values the checks translate the template with: the least a user gives, and every
# optional feature on, the functions in a VPC with the endpoints created included (parity with the
# CDK app is checked for both).
PARAMETER_SETS: dict[str, dict[str, str]] = {
    "minimal": {"Clusters": "prod"},
    "full": {
        "Clusters": "prod,test-1",
        "PolicyPrefix": "/platform/nodecycle/",
        "AmiParameterPaths": "/golden/eks/,/team/ami/x86_64",
        "ParameterKmsKeyArn": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        "NodeRoleArns": f"arn:aws:iam::{ACCOUNT}:role/prod-nodes,arn:aws:iam::{ACCOUNT}:role/test-nodes",
        "CreateAccessEntries": "true",
        "AutoScalingGroupUpdates": "Enabled",
        "WatchSchedule": "rate(5 minutes)",
        "ReplacementTimeout": "20m",
        "NodeGroupWave": "15m",
        "LifecycleHookName": "drain-first",
        "InterruptionLifecycleGroup": "prod-general",
        "InterruptionHeartbeatTimeout": "600",
        "OpsInvokerArn": f"arn:aws:iam::{ACCOUNT}:role/oncall",
        "LogLevel": "DEBUG",
        "SystemLogLevel": "INFO",
        "LogRetentionDays": "90",
        "ReservedConcurrency": "2",
        "AlarmTopicArn": f"arn:aws:sns:{REGION}:{ACCOUNT}:nodecycle-alarms",
        "PermissionsBoundaryArn": f"arn:aws:iam::{ACCOUNT}:policy/platform-boundary",
        "ServedAccounts": "222222222222,333333333333",
        "OrganizationId": "o-abcdefghij",
        "FanOut": "Enabled",
        "WorkerConcurrency": "10",
        "WorkItemReceives": "4",
        "Dashboard": "Disabled",
        "VpcSubnetIds": "subnet-0123456789abcdef0,subnet-0fedcba9876543210",
        "VpcSecurityGroupIds": "sg-0123456789abcdef0,sg-0fedcba9876543210",
        "VpcEndpoints": "Create",
        "VpcId": "vpc-0123456789abcdef0",
        "VpcRouteTableIds": "rtb-0123456789abcdef0,rtb-0fedcba9876543210",
    },
    # The clusters trusted by the cell's tag (CellClusters), the functions in a VPC and every
    # permission that depends on the scope on.
    "cell": {
        "CellClusters": "prod,test-1,edge_2",
        "AutoScalingGroupUpdates": "Enabled",
        "NodeRoleArns": f"arn:aws:iam::{ACCOUNT}:role/prod-nodes",
        "LifecycleHookName": "drain-first",
        "InterruptionLifecycleGroup": "prod-general",
        "FanOut": "Enabled",
        "VpcSubnetIds": "subnet-0123456789abcdef0,subnet-0fedcba9876543210",
        "VpcSecurityGroupIds": "sg-0123456789abcdef0",
        "VpcEndpoints": "Create",
        "VpcId": "vpc-0123456789abcdef0",
        "VpcRouteTableIds": "rtb-0123456789abcdef0",
    },
}

# The same for deploy/spoke.yaml (a member account of the cell in account 111111111111).
CELL_ACCOUNT = "111111111111"
_CELL_ROLES = {
    f"{f}RoleArns": f"arn:aws:iam::{CELL_ACCOUNT}:role/nodecycle-{f}FunctionRole-ABC"
    for f in ("AmiWatcher", "Rotator", "InterruptionHandler", "Ops")
}
SPOKE_PARAMETER_SETS: dict[str, dict[str, str]] = {
    "minimal": {"CellAccountId": CELL_ACCOUNT, "ExternalId": "nodecycle-cell", **_CELL_ROLES},
    "full": {
        "CellAccountId": CELL_ACCOUNT,
        "CellBusName": "default",
        **_CELL_ROLES,
        "ExternalId": "nodecycle-cell",
        "OrganizationId": "o-abcdefghij",
        "RoleNamePrefix": "platform",
        "Cluster1": "prod",
        "Cluster2": "test-1",
        "AmiParameterPath": "/golden/eks/",
        "AmiParameterKmsKeyArn": f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        "LifecycleHookName": "drain-first",
        "AutoScalingGroupUpdates": "Enabled",
        "NodeRoleArns": f"arn:aws:iam::{ACCOUNT}:role/prod-nodes",
        "CreateAccessEntries": "true",
        "PermissionsBoundaryArn": f"arn:aws:iam::{ACCOUNT}:policy/platform-boundary",
    },
    # A spoke of a cell given CellClusters: the cell's roles trusted by their tags, the clusters by
    # the cell tag (the slots only create access entries).
    "cell": {
        "CellAccountId": CELL_ACCOUNT,
        "ExternalId": "nodecycle-cell",
        "CellTag": "nodecycle",
        "Cluster1": "prod",
        "AutoScalingGroupUpdates": "Enabled",
        "NodeRoleArns": f"arn:aws:iam::{ACCOUNT}:role/prod-nodes",
    },
}


class TemplateError(Exception):
    """The template (or a parameter value) is not what CloudFormation would accept."""


def load_yaml(path: str) -> dict[str, Any]:
    """A CloudFormation YAML template, short-form tags (!Ref, !Sub, ...) included."""
    from samcli.yamlhelper import yaml_parse

    with open(path, encoding="utf-8") as f:
        return yaml_parse(f.read())


def parameter_values(template: dict[str, Any], given: dict[str, str]) -> dict[str, Any]:
    """Every parameter's value as CloudFormation passes it: the given string or the default, as a
    string; CommaDelimitedList split into a list. A parameter with neither is an error."""
    params = template.get("Parameters", {})
    unknown = sorted(set(given) - set(params))
    if unknown:
        raise TemplateError(f"unknown parameter(s) {unknown}; the template has {sorted(params)}")
    values: dict[str, Any] = {}
    for name, spec in params.items():
        if name in given:
            raw = given[name]
        elif "Default" in spec:
            raw = spec["Default"]
            if isinstance(raw, list):
                raw = ",".join(str(x) for x in raw)
        else:
            raise TemplateError(f"parameter {name} has no default: give --param {name}=...")
        raw = str(raw)
        if spec.get("Type") == "CommaDelimitedList":
            values[name] = [x.strip() for x in raw.split(",")]
        else:
            values[name] = raw
        allowed = spec.get("AllowedValues")
        if allowed is not None and raw not in [str(a) for a in allowed]:
            raise TemplateError(f"parameter {name}={raw!r} is not one of {allowed}")
        pattern = spec.get("AllowedPattern")
        if pattern is not None:
            items = values[name] if isinstance(values[name], list) else [values[name]]
            for item in items:
                if not re.fullmatch(pattern, item):
                    raise TemplateError(f"parameter {name}: {item!r} does not match {pattern}")
    return values


def _substitute(v: Any, ident: str, item: str) -> Any:
    """One Fn::ForEach item put in place of its identifier: `${X}` and `Ref: X` by the value,
    `&{X}` by its alphanumeric characters (for logical ids), in keys and values alike."""
    if isinstance(v, str):
        return v.replace("${" + ident + "}", item).replace("&{" + ident + "}", re.sub(r"[^A-Za-z0-9]", "", item))
    if isinstance(v, list):
        return [_substitute(x, ident, item) for x in v]
    if isinstance(v, dict):
        if v == {"Ref": ident}:
            return item
        return {_substitute(k, ident, item): _substitute(x, ident, item) for k, x in v.items()}
    return v


def _collapse_plain_subs(v: Any) -> Any:
    """`Fn::Sub` of a string with no variable left (after the loop substitution) is that string,
    as the transform itself resolves it."""
    if isinstance(v, list):
        return [_collapse_plain_subs(x) for x in v]
    if isinstance(v, dict):
        if set(v) == {"Fn::Sub"} and isinstance(v["Fn::Sub"], str) and "${" not in v["Fn::Sub"]:
            return v["Fn::Sub"]
        return {k: _collapse_plain_subs(x) for k, x in v.items()}
    return v


def _expand_foreach(v: Any, values: dict[str, Any], where: str) -> Any:
    if isinstance(v, list):
        return [_expand_foreach(x, values, where) for x in v]
    if not isinstance(v, dict):
        return v
    out: dict[str, Any] = {}
    for key, x in v.items():
        if not key.startswith("Fn::ForEach::"):
            if key in ("Fn::Length", "Fn::ToJsonString"):
                raise TemplateError(f"{where}: {key} is not supported by scripts/cfn (only Fn::ForEach is)")
            out[key] = _expand_foreach(x, values, f"{where}.{key}")
            continue
        if not (isinstance(x, list) and len(x) == 3 and isinstance(x[0], str) and isinstance(x[2], dict)):
            raise TemplateError(f"{where}.{key}: expected [Identifier, Collection, {{OutputKey: OutputValue}}]")
        ident, collection, body = x
        if isinstance(collection, dict) and set(collection) == {"Ref"}:
            name = collection["Ref"]
            if not isinstance(values.get(name), list):
                raise TemplateError(f"{where}.{key}: collection {name} is not a CommaDelimitedList parameter")
            collection = values[name]
        if not (isinstance(collection, list) and all(isinstance(i, str) for i in collection)):
            raise TemplateError(f"{where}.{key}: the collection must be a list of strings or a Ref to a CommaDelimitedList")
        for item in collection:
            expanded = _substitute(body, ident, item)
            expanded = _expand_foreach(_collapse_plain_subs(expanded), values, f"{where}.{key}[{item}]")
            for out_key, out_value in expanded.items():
                if "${" + ident + "}" in out_key or "&{" + ident + "}" in out_key:
                    raise TemplateError(f"{where}.{key}: {out_key} was not substituted")
                if out_key in out or out_key in v:
                    raise TemplateError(f"{where}.{key}: item {item!r} makes {out_key}, which already exists")
                out[out_key] = out_value
    return out


def expand_language_extensions(template: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The AWS::LanguageExtensions transform as far as this project uses it: Fn::ForEach (in
    Conditions, Resources with their properties, and Outputs) expanded for the parameter values;
    every other intrinsic function is left to CloudFormation at deploy time."""
    template = copy.deepcopy(template)
    for section in ("Conditions", "Resources", "Outputs"):
        if section in template:
            template[section] = _expand_foreach(template[section], values, section)
    for name, res in template.get("Resources", {}).items():
        for attr in ("DeletionPolicy", "UpdateReplacePolicy"):
            if not isinstance(res.get(attr, ""), str):
                raise TemplateError(f"Resources.{name}.{attr}: only a literal is supported by scripts/cfn")
    return template


def _rule_value(v: Any, values: dict[str, Any]) -> Any:
    if isinstance(v, list):
        return [_rule_value(x, values) for x in v]
    if not isinstance(v, dict):
        return v
    if len(v) != 1:
        raise TemplateError(f"Rules: unexpected {v!r}")
    (k, arg), = v.items()
    if k == "Ref":
        if arg in PSEUDO:
            return PSEUDO[arg]
        return values[arg]
    args = _rule_value(arg, values)
    if k == "Fn::Not":
        return not args[0]
    if k == "Fn::And":
        return all(args)
    if k == "Fn::Or":
        return any(args)
    if k == "Fn::Equals":
        return args[0] == args[1]
    if k == "Fn::Contains":
        return args[1] in args[0]
    if k == "Fn::EachMemberEquals":
        return all(x == args[1] for x in args[0])
    if k == "Fn::EachMemberIn":
        return all(x in args[1] for x in args[0])
    raise TemplateError(f"Rules: {k} is not evaluated here")


def check_rules(template: dict[str, Any], values: dict[str, Any]) -> None:
    """The template's Rules, as CloudFormation checks them before any transform."""
    for name, rule in template.get("Rules", {}).items():
        cond = rule.get("RuleCondition")
        if cond is not None and not _rule_value(cond, values):
            continue
        for a in rule.get("Assertions", []):
            if not _rule_value(a["Assert"], values):
                raise TemplateError(f"rule {name}: {a.get('AssertDescription', 'assertion failed')}")


def translate(template: dict[str, Any], given: dict[str, str]) -> dict[str, Any]:
    """The template after its transforms, for the given parameter values (strings)."""
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    # The translator fills AWS::Region/AWS::Partition from a boto3 session; never a real one.
    os.environ["AWS_DEFAULT_REGION"] = REGION
    values = parameter_values(template, given)
    check_rules(template, values)
    transforms = template.get("Transform", [])
    if isinstance(transforms, str):
        transforms = [transforms]
    template = copy.deepcopy(template)
    if "AWS::LanguageExtensions" in transforms:
        template = expand_language_extensions(template, values)
        transforms = [t for t in transforms if t != "AWS::LanguageExtensions"]
        template["Transform"] = transforms
    if "AWS::Serverless-2016-10-31" in transforms:
        # The translator needs code in S3 (sam deploy uploads it there); the location is not
        # what is checked.
        for name, res in template.get("Resources", {}).items():
            if res.get("Type") == "AWS::Serverless::Function":
                res.setdefault("Properties", {})["CodeUri"] = f"s3://nodecycle-artifacts/{name}.zip"
        template.get("Globals", {}).get("Function", {}).pop("CodeUri", None)
        translated = Translator(None, Parser()).translate(
            template, parameter_values=dict(values), get_managed_policy_map=lambda: {}
        )
        return json.loads(json.dumps(translated))
    return template


# ------------------------------------------------------------------------------------------------
# Evaluation


class _Resolver:
    def __init__(self, template: dict[str, Any], values: dict[str, Any]):
        self.template = template
        self.values = values
        self.conditions: dict[str, bool] = {}

    def condition(self, name: str) -> bool:
        if name not in self.conditions:
            spec = self.template.get("Conditions", {}).get(name)
            if spec is None:
                raise TemplateError(f"unknown condition {name}")
            self.conditions[name] = bool(self.value(spec, condition=True))
        return self.conditions[name]

    def ref(self, name: str) -> Any:
        if name in PSEUDO:
            return PSEUDO[name]
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.values:
            return self.values[name]
        if name in self.template.get("Resources", {}):
            return f"ref:{name}"
        raise TemplateError(f"Ref to unknown {name}")

    def getatt(self, arg: Any) -> str:
        if isinstance(arg, str):
            logical, attr = arg.split(".", 1)
        else:
            logical, attr = self.value(arg[0]), self.value(arg[1])
        if logical not in self.template.get("Resources", {}):
            raise TemplateError(f"GetAtt of unknown resource {logical}")
        return f"getatt:{logical}.{attr}"

    def sub(self, arg: Any) -> str:
        if isinstance(arg, list):
            text, variables = arg[0], {k: self.value(v) for k, v in arg[1].items()}
        else:
            text, variables = arg, {}

        def one(m: re.Match[str]) -> str:
            name = m.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                v = variables[name]
            elif "." in name and name.split(".", 1)[0] in self.template.get("Resources", {}):
                v = self.getatt(name)
            else:
                v = self.ref(name)
            if not isinstance(v, str):
                raise TemplateError(f"Fn::Sub variable {name} is not a string: {v!r}")
            return v

        return re.sub(r"\$\{([^}]+)\}", one, text)

    def value(self, v: Any, condition: bool = False) -> Any:
        if isinstance(v, list):
            out = [self.value(x, condition) for x in v]
            return [x for x in out if x is not NO_VALUE]
        if not isinstance(v, dict):
            return v
        if len(v) == 1:
            (k, arg), = v.items()
            if k == "Ref":
                return self.ref(arg)
            if k == "Fn::GetAtt":
                return self.getatt(arg)
            if k == "Fn::Sub":
                return self.sub(arg)
            if k == "Fn::Join":
                sep, items = arg
                if not isinstance(sep, str):
                    raise TemplateError(f"Fn::Join delimiter must be a literal string, got {sep!r}")
                items = self.value(items)
                return sep.join(str(self.value(i)) for i in items)
            if k == "Fn::Split":
                sep, s = arg
                if not isinstance(sep, str):
                    raise TemplateError(f"Fn::Split delimiter must be a literal string, got {sep!r}")
                return self.value(s).split(sep)
            if k == "Fn::Select":
                i, items = arg
                return self.value(items)[int(self.value(i))]
            if k == "Fn::If":
                name, yes, no = arg
                return self.value(yes if self.condition(name) else no, condition)
            if k == "Fn::Equals":
                a, b = (self.value(x, True) for x in arg)
                return str(a) == str(b) if not isinstance(a, list) else a == b
            if k == "Fn::Not":
                return not self.value(arg[0], True)
            if k == "Fn::And":
                return all(self.value(x, True) for x in arg)
            if k == "Fn::Or":
                return any(self.value(x, True) for x in arg)
            if k == "Condition" and condition:
                return self.condition(arg)
            if k == "Fn::GetAZs":
                return [f"{REGION}a", f"{REGION}b"]
            if k == "Fn::Base64":
                return self.value(arg)
            if k.startswith("Fn::"):
                raise TemplateError(f"{k} is not evaluated here")
        out = {}
        for key, x in v.items():
            r = self.value(x, condition)
            if r is not NO_VALUE:
                out[key] = r
        return out


def resolve(template: dict[str, Any], given: dict[str, str]) -> dict[str, Any]:
    """The resources and outputs CloudFormation would create for these parameter values, every
    intrinsic function computed (resources of false conditions are absent)."""
    values = parameter_values(template, given)
    r = _Resolver(template, values)
    resources = {}
    for name, res in template.get("Resources", {}).items():
        cond = res.get("Condition")
        if cond is not None and not r.condition(cond):
            continue
        resources[name] = {
            "Type": res["Type"],
            "Properties": r.value(res.get("Properties", {})),
            **{k: res[k] for k in ("DeletionPolicy", "UpdateReplacePolicy", "Metadata") if k in res},
        }
        if res.get("DependsOn") is not None:
            resources[name]["DependsOn"] = res["DependsOn"]
    outputs = {}
    for name, out in template.get("Outputs", {}).items():
        cond = out.get("Condition")
        if cond is not None and not r.condition(cond):
            continue
        outputs[name] = r.value(out.get("Value"))
    return {"Resources": resources, "Outputs": outputs, "Parameters": values}


def parse_params(items: list[str]) -> dict[str, str]:
    """`K=V` command-line parameters."""
    out = {}
    for item in items:
        if "=" not in item:
            raise TemplateError(f"--param {item!r}: expected NAME=VALUE")
        k, v = item.split("=", 1)
        out[k] = v
    return out

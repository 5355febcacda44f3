#!/usr/bin/env python3
"""Prints template.yaml as CloudFormation deploys it (JSON), for the given parameter values.

    translate.py [--set minimal|full|cell] [--param NAME=VALUE]... [--stack NAME] [--resolve] [--out FILE] [TEMPLATE]

Without --resolve: the template after AWS::LanguageExtensions and AWS::Serverless (what
cfn-lint and checkov check). With --resolve: its resources and outputs with every condition and
intrinsic function evaluated (what tests/tests/template.rs asserts on). Exit 2 when the template
or a parameter is refused, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cfn  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("template", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "..", "template.yaml"))
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--set", choices=sorted(cfn.PARAMETER_SETS), help="start from a named parameter set (cfn.PARAMETER_SETS; cfn.SPOKE_PARAMETER_SETS for deploy/spoke.yaml)")
    p.add_argument("--stack", help=f"the stack's name (AWS::StackName; default {cfn.STACK})")
    p.add_argument("--resolve", action="store_true")
    p.add_argument("--out")
    args = p.parse_args()
    if args.stack:
        cfn.PSEUDO["AWS::StackName"] = args.stack
        cfn.PSEUDO["AWS::StackId"] = cfn.PSEUDO["AWS::StackId"].replace(f"stack/{cfn.STACK}/", f"stack/{args.stack}/")
    try:
        sets = cfn.SPOKE_PARAMETER_SETS if os.path.basename(args.template) == "spoke.yaml" else cfn.PARAMETER_SETS
        given = dict(sets[args.set]) if args.set else {}
        given.update(cfn.parse_params(args.param))
        translated = cfn.translate(cfn.load_yaml(args.template), given)
        result = cfn.resolve(translated, given) if args.resolve else translated
    except cfn.TemplateError as e:
        print(f"{args.template}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # the translator's own refusals (InvalidDocumentException, ...)
        causes = getattr(e, "causes", None)
        detail = "; ".join(str(c) for c in causes) if causes else str(e)
        print(f"{args.template}: {type(e).__name__}: {detail}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2, sort_keys=True) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

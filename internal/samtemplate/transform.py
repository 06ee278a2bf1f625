"""Print template.yaml as CloudFormation deploys it: after the AWS::Serverless-2016-10-31
transform, as JSON on stdout. Offline: aws-sam-translator (installed with cfn-lint) runs
here, and the managed policy map it would fetch from IAM is given.

usage: python3 transform.py TEMPLATE
"""

import json
import sys

import boto3
from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse

# The AWS managed policies SAM may attach by name. The template attaches none (its
# functions have explicit roles); the map only has to exist. ARNs from
# https://docs.aws.amazon.com/aws-managed-policy/latest/reference/policy-list.html
MANAGED_POLICIES = {
    "AWSLambdaBasicExecutionRole": "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
    "AWSLambdaSQSQueueExecutionRole": "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole",
}


def main(path):
    with open(path, encoding="utf-8") as f:
        template = yaml_parse(f.read())
    # `sam package` replaces a local CodeUri with the S3 location it uploaded the build
    # to; the transform accepts only that form.
    for res in template.get("Resources", {}).values():
        props = res.get("Properties") or {}
        if res.get("Type") == "AWS::Serverless::Function" and not str(props.get("CodeUri", "s3://")).startswith("s3://"):
            props["CodeUri"] = "s3://sam-package-bucket/code.zip"
    # The session only names the region (for pseudo parameters); nothing is called.
    session = boto3.session.Session(region_name="us-east-1")
    translator = Translator(managed_policy_map=MANAGED_POLICIES, sam_parser=Parser(), boto_session=session)
    try:
        out = translator.translate(template, parameter_values={}, get_managed_policy_map=lambda: MANAGED_POLICIES)
    except InvalidDocumentException as e:
        for cause in e.causes:
            print("transform:", cause.message, file=sys.stderr)
        return 1
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))

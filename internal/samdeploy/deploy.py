"""Transform template.yaml with aws-sam-translator and deploy it to moto's CloudFormation.

Called by samdeploy_test.go. Prints one JSON document: the stack's status and reason,
its resources, the event source mappings of its functions and the targets of its rules.

The template file is never changed. moto's limits are worked around here, on the
transformed template, and each workaround is listed in the output (moto 5.2.1):
  * moto names a queue without QueueName "<stack>-<id>-<suffix>", without the ".fifo"
    a FIFO queue needs (real CloudFormation adds it), so FIFO queues get an explicit
    QueueName ending in .fifo;
  * the functions' code must be in S3 for CloudFormation: a zip with a placeholder
    bootstrap is uploaded to a bucket of moto's S3 (moto does not run it), as
    `sam package` would upload the built one.
  * moto's CloudFormation has no AWS::Lambda::Url (the ingress's function URL): the
    resource, and the outputs that refer to it, are taken out of the template, and the
    URL is created after the stack with Lambda's CreateFunctionUrlConfig, with the
    template's AuthType and InvokeMode, on the function the resource targets; the output
    lists it under "function_urls";
  * moto's CloudFormation has neither AWS::Lambda::Alias nor AWS::CodeDeploy::*
    (AutoPublishAlias and DeploymentPreference): the aliases, the CodeDeploy application
    and deployment groups are taken out, and what invoked an alias (the event source
    mapping, the schedule's target and permission, the function URL) invokes its
    function instead, by ARN;
  * the dashboard's body names the alarms by ARN (${X.Arn}), which moto cannot resolve
    for resources it does not create: they are written as the ARN CloudWatch gives them.
moto also does not create the AWS::CloudWatch::Alarm resources (the stack completes,
the alarms are missing, and their entries come back without id or type): the output
counts the alarms that exist, and the test checks the alarms in the transformed
template only.
"""
import argparse
import io
import json
import os
import sys
import time
import zipfile

import boto3
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class NoManagedPolicies:
    """The template names no managed policy by name: nothing to look up in IAM."""

    def load(self):
        return {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--template", required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--stack", required=True)
    ap.add_argument("--region", default="us-east-1")
    args = ap.parse_args()
    os.environ["AWS_DEFAULT_REGION"] = args.region  # the translator's pseudo parameters

    kw = dict(endpoint_url=args.endpoint, region_name=args.region,
              aws_access_key_id="test", aws_secret_access_key="test")
    s3 = boto3.client("s3", **kw)
    cfn = boto3.client("cloudformation", **kw)
    lam = boto3.client("lambda", **kw)
    events = boto3.client("events", **kw)

    with open(args.template) as f:
        sam = yaml_parse(f.read())
    workarounds = []

    bucket = args.stack.lower() + "-artifacts"
    s3.create_bucket(Bucket=bucket)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("bootstrap", "#!/bin/sh\n# placeholder: moto does not run function code\n")
    s3.put_object(Bucket=bucket, Key="bootstrap.zip", Body=buf.getvalue())
    for res in sam["Resources"].values():
        if res.get("Type") == "AWS::Serverless::Function":
            res["Properties"]["CodeUri"] = "s3://%s/bootstrap.zip" % bucket
    workarounds.append("CodeUri: a placeholder zip in moto's S3 (as sam package uploads the build)")

    cfn_template = transform(sam, {}, NoManagedPolicies())

    for rid, res in cfn_template["Resources"].items():
        props = res.setdefault("Properties", {})
        if res["Type"] == "AWS::SQS::Queue" and props.get("FifoQueue") and "QueueName" not in props:
            props["QueueName"] = {"Fn::Sub": "${AWS::StackName}-%s.fifo" % rid}
            workarounds.append("QueueName %s-%s.fifo" % (args.stack, rid))

    # Aliases and CodeDeploy (see above).
    resources = cfn_template["Resources"]
    alias_of = {rid: res["Properties"]["FunctionName"]["Ref"] for rid, res in resources.items()
                if res["Type"] == "AWS::Lambda::Alias"}
    for rid, res in list(resources.items()):
        if res["Type"] == "AWS::Lambda::Alias" or res["Type"].startswith("AWS::CodeDeploy::"):
            del resources[rid]
            workarounds.append("%s (%s) left out" % (rid, res["Type"]))

    def unalias(v):
        if isinstance(v, dict):
            if set(v) == {"Ref"} and v["Ref"] in alias_of:
                return {"Fn::GetAtt": [alias_of[v["Ref"]], "Arn"]}
            return {k: unalias(x) for k, x in v.items()}
        if isinstance(v, list):
            return [unalias(x) for x in v]
        return v

    for rid, res in resources.items():
        before = json.dumps(res, sort_keys=True)
        resources[rid] = unalias(res)
        if json.dumps(resources[rid], sort_keys=True) != before:
            workarounds.append("%s invokes its function instead of the function's alias" % rid)
    alarms = [rid for rid, res in resources.items() if res["Type"] == "AWS::CloudWatch::Alarm"]
    for rid, res in resources.items():
        body = res.get("Properties", {}).get("DashboardBody", {})
        if res["Type"] == "AWS::CloudWatch::Dashboard" and isinstance(body, dict) and isinstance(body.get("Fn::Sub"), str):
            for a in alarms:
                body["Fn::Sub"] = body["Fn::Sub"].replace(
                    "${%s.Arn}" % a, "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:%s" % a)
            workarounds.append("%s names the alarms by the ARN CloudWatch gives them" % rid)

    # Function URLs, created through Lambda's API once the stack is up (see above).
    urls = {}
    for rid, res in list(cfn_template["Resources"].items()):
        if res["Type"] == "AWS::Lambda::Url":
            urls[rid] = res["Properties"]
            del cfn_template["Resources"][rid]
            workarounds.append("%s (AWS::Lambda::Url) created with CreateFunctionUrlConfig after the stack" % rid)
    for oid, out in list(cfn_template.get("Outputs", {}).items()):
        if any(rid in json.dumps(out) for rid in urls):
            del cfn_template["Outputs"][oid]
            workarounds.append("output %s (refers to a function URL) left out" % oid)

    cfn.create_stack(StackName=args.stack, TemplateBody=json.dumps(cfn_template),
                     Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"])
    deadline = time.time() + 120
    while True:
        st = cfn.describe_stacks(StackName=args.stack)["Stacks"][0]
        if not st["StackStatus"].endswith("IN_PROGRESS") or time.time() > deadline:
            break
        time.sleep(0.5)

    resources = cfn.describe_stack_resources(StackName=args.stack)["StackResources"]
    out = {
        "status": st["StackStatus"],
        "reason": st.get("StackStatusReason", ""),
        "outputs": {o["OutputKey"]: o["OutputValue"] for o in st.get("Outputs", [])},
        # moto lists the alarms it does not create with neither an id nor a type.
        "resources": [{"id": r.get("LogicalResourceId", ""), "type": r.get("ResourceType", ""),
                       "status": r.get("ResourceStatus", ""), "physical": r.get("PhysicalResourceId", "")}
                      for r in resources],
        "alarms_created": len(boto3.client("cloudwatch", **kw).describe_alarms()["MetricAlarms"]),
        "transformed_types": sorted({r["Type"] for r in cfn_template["Resources"].values()}),
        "workarounds": workarounds,
        "event_source_mappings": [],
        "rule_targets": [],
        "function_urls": [],
    }
    physical = {r.get("LogicalResourceId"): r.get("PhysicalResourceId") for r in resources}
    if st["StackStatus"] == "CREATE_COMPLETE":
        for rid, props in urls.items():
            target = props["TargetFunctionArn"]
            fn = target.get("Ref") or target.get("Fn::GetAtt", [""])[0] if isinstance(target, dict) else target
            cfg = lam.create_function_url_config(FunctionName=physical[fn], AuthType=props["AuthType"],
                                                 InvokeMode=props.get("InvokeMode", "BUFFERED"))
            got = lam.get_function_url_config(FunctionName=physical[fn])
            out["function_urls"].append({"id": rid, "function": fn, "auth_type": got["AuthType"],
                                         "invoke_mode": got.get("InvokeMode", ""), "url": cfg["FunctionUrl"]})
    # Every mapping, matched to its function by ARN: moto's filter by FunctionName misses
    # a mapping created with the function's ARN.
    functions = {r["PhysicalResourceId"]: r["LogicalResourceId"] for r in resources
                 if r.get("ResourceType") == "AWS::Lambda::Function"}
    for m in lam.list_event_source_mappings()["EventSourceMappings"]:
        name = m["FunctionArn"].split(":function:", 1)[-1].split(":")[0]
        if name in functions:
            out["event_source_mappings"].append({
                "function": functions[name], "source": m["EventSourceArn"],
                "batch_size": m.get("BatchSize"), "response_types": m.get("FunctionResponseTypes", []),
                "maximum_concurrency": m.get("ScalingConfig", {}).get("MaximumConcurrency")})
    for r in resources:
        if r.get("ResourceType") == "AWS::Events::Rule":
            rule = events.describe_rule(Name=r["PhysicalResourceId"])
            targets = events.list_targets_by_rule(Rule=r["PhysicalResourceId"])["Targets"]
            out["rule_targets"].append({"rule": r["LogicalResourceId"], "schedule": rule.get("ScheduleExpression", ""),
                                        "targets": [t["Arn"] for t in targets]})
    json.dump(out, sys.stdout, indent=1, default=str)


if __name__ == "__main__":
    main()

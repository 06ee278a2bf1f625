// Package samdeploy holds the check that template.yaml deploys: its test transforms the
// template with aws-sam-translator (deploy.py, python3; installed with cfn-lint) and
// creates the result on moto's CloudFormation, which must reach CREATE_COMPLETE with
// every resource, the SQS event source mapping and the reaper's schedule. The
// workarounds for moto's limits live in deploy.py, never in the template.
package samdeploy

// Package stack makes template.yaml the single source of truth for local resources.
//
// Load parses a SAM/CloudFormation template, short-form intrinsics (!Ref, !GetAtt, !Sub,
// !If, ...) included. Up creates every AWS::SQS::Queue, AWS::DynamoDB::Table and
// AWS::SecretsManager::Secret of the template on a local AWS-protocol endpoint
// (moto_server or LocalStack) with the template's properties, in dependency order, and
// returns the environment the template gives its functions, resolved to the local
// resources (with STACK_SECRET, the value of the template's one secret). Up is idempotent: run twice, it
// finds what it created the first time and converges queue attributes that changed.
//
// Resolution follows CloudFormation for what a local run needs: parameters (defaults,
// overridable), pseudo parameters, Ref and Fn::GetAtt of queues and tables, Fn::Sub,
// Fn::Join, Fn::Select, Fn::Split, Fn::FindInMap, Fn::If and conditions built from
// Fn::Equals, Fn::Not, Fn::And and Fn::Or. Anything else is refused with an error
// naming the resource and the property, never guessed.
//
// Physical names are "<stack>-<LogicalId>", with ".fifo" for FIFO queues, unless the
// template sets QueueName or TableName.
package stack

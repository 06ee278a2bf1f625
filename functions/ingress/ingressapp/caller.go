package ingressapp

import (
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// The key scopes (INGRESS_KEY_SCOPE): whose requests share the Idempotency-Keys.
const (
	// ScopeCaller (the default): each IAM principal has keys of its own. Another caller
	// can neither read a caller's requests, nor learn whether a key is in use, nor take a
	// key first.
	ScopeCaller = "caller"
	// ScopeAccount: the principals of one AWS account share their keys (one tenant,
	// several roles).
	ScopeAccount = "account"
	// ScopeShared: every caller of the URL shares one key space, as before keys were
	// scoped: for a front door whose callers are one party, or that authenticates
	// otherwise (REQUIRE_IAM_CALLER=false).
	ScopeShared = "shared"
)

// IAMCaller is the IAM identity a function URL with AuthType AWS_IAM reports in its
// event (requestContext.authorizer.iam).
type IAMCaller = events.LambdaFunctionURLRequestContextAuthorizerIAMDescription

// Namespace is the key namespace of the IAM caller iam (nil: none) under scope: what
// idem.CallerKey combines with the client's key. ok is false when the scope needs a
// caller the event does not name.
func Namespace(scope string, iam *IAMCaller) (ns string, ok bool) {
	switch scope {
	case ScopeShared:
		return "shared", true
	case ScopeAccount:
		if iam == nil || iam.AccountID == "" {
			return "", false
		}
		return "account:" + iam.AccountID, true
	}
	p := Principal(iam)
	if p == "" {
		return "", false
	}
	return "caller:" + p, true
}

// Principal is the IAM principal of a caller, as the caller scope tells callers apart:
// its ARN (userArn), but for a role's session the role's, without the session's name
// ("arn:aws:sts::111122223333:assumed-role/NAME/SESSION" is
// "arn:aws:sts::111122223333:assumed-role/NAME"); its callerId when it has no ARN; "" for
// none. Every session of a role is the role: whoever may assume it chooses the session's
// name (RoleSessionName), so a session name tells nobody apart, and a client whose
// credentials are renewed (a new session, often a new name) must find its keys again.
func Principal(iam *IAMCaller) string {
	if iam == nil {
		return ""
	}
	arn := iam.UserARN
	if arn == "" {
		return iam.CallerID
	}
	// arn:PARTITION:sts::ACCOUNT:assumed-role/ROLE/SESSION
	if parts := strings.SplitN(arn, ":", 6); len(parts) == 6 && parts[2] == "sts" && strings.HasPrefix(parts[5], "assumed-role/") {
		rest := strings.TrimPrefix(parts[5], "assumed-role/")
		if role, _, ok := strings.Cut(rest, "/"); ok {
			return strings.Join(parts[:5], ":") + ":assumed-role/" + role
		}
	}
	return arn
}

// callerKey is the key a request of the caller of req with the client's key is kept and
// sent under (idem.CallerKey), and ok false when the key scope needs a caller the event
// does not name.
func (a *App) callerKey(req LambdaFunctionURLRequest, key string) (string, bool) {
	var iam *IAMCaller
	if az := req.RequestContext.Authorizer; az != nil {
		iam = az.IAM
	}
	ns, ok := Namespace(a.cfg.KeyScope, iam)
	if !ok {
		return "", false
	}
	return idem.CallerKey(ns, key), true
}

// Package funcurl plays a Lambda function URL on loopback: a net/http handler that turns
// each HTTP request into the event a function URL hands its function (payload format
// 2.0: lower-case header names, repeated headers joined with commas, a body base64-
// encoded unless it is text), invokes the function with it, and writes the function's
// answer back as the HTTP response. `idemctl serve`, the demo and the ingress's tests
// put it in front of the ingress, either in this process or as a Lambda execution
// environment of its bootstrap (internal/lambdaenv), so every byte goes through real HTTP
// and the same JSON the deployed function receives.
//
// What it does not do: authenticate. A deployed URL with AuthType AWS_IAM checks the
// request's SigV4 signature and the caller's lambda:InvokeFunctionUrl permission before
// the function runs, and puts the caller in requestContext.authorizer.iam
// (https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html); here the caller is the
// one the Server is given (Caller), or the one CallerFor reads from the request (SigV4Caller:
// the access key that signed it), unchecked. So it serves on loopback only, and answers
// only requests whose Host is the address it listens on (Listen): a web page whose name
// re-resolves to 127.0.0.1 (DNS rebinding) sends its own name as Host, and is refused.
package funcurl

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemgo/sqs-lambda-consumer/internal/loopback"
)

// MaxPayloadBytes is Lambda's limit on a synchronous invocation's request, the event
// JSON with the base64-encoded body in it, and on its response: 6 MB (BUFFERED invoke
// mode), answered 413 beyond it
// (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
const MaxPayloadBytes = 6 * 1024 * 1024

// Invoke is one synchronous invocation: the event's JSON in, the function's answer out
// (lambdaenv.Environment.Invoke, or lambda.NewHandler(h).Invoke in this process).
type Invoke func(ctx context.Context, payload []byte) ([]byte, error)

// Server is the function URL of one function.
type Server struct {
	Invoke Invoke
	// Caller is who the requests come from, as Lambda reports an authenticated
	// caller of an AWS_IAM URL (nil: none, as with AuthType NONE).
	Caller *events.LambdaFunctionURLRequestContextAuthorizerIAMDescription
	// CallerFor, when set, is who a request comes from instead (SigV4Caller).
	CallerFor func(r *http.Request) *events.LambdaFunctionURLRequestContextAuthorizerIAMDescription
	// URLID names the URL in the event (apiId, domainPrefix); default "local".
	URLID  string
	Region string // default us-east-1
	// Timeout bounds one invocation (default: none beyond the function's own).
	Timeout time.Duration
}

// LocalCaller is the caller a local server reports: the account of the local endpoint's
// dummy credentials.
func LocalCaller(accessKey string) *events.LambdaFunctionURLRequestContextAuthorizerIAMDescription {
	return &events.LambdaFunctionURLRequestContextAuthorizerIAMDescription{
		AccessKey: accessKey, AccountID: LocalAccount, CallerID: "AIDALOCALCALLER000000",
		UserARN: "arn:aws:iam::" + LocalAccount + ":user/local", UserID: "AIDALOCALCALLER000000",
	}
}

// LocalAccount is the account of the callers a local server reports.
const LocalAccount = "000000000000"

// SigV4Caller returns the caller a local server reports for r (Server.CallerFor): the IAM
// user of the local account named after the access key in r's SigV4 Authorization header
// (its Credential), unverified, or def when r is not signed. Two clients signing with
// two access keys are two callers, as two principals are at a deployed URL.
func SigV4Caller(r *http.Request, def *events.LambdaFunctionURLRequestContextAuthorizerIAMDescription) *events.LambdaFunctionURLRequestContextAuthorizerIAMDescription {
	auth := r.Header.Get("Authorization")
	_, cred, ok := strings.Cut(auth, "Credential=")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || !ok {
		return def
	}
	key, _, _ := strings.Cut(cred, "/")
	if key == "" || strings.ContainsAny(key, ", ") {
		return def
	}
	return &events.LambdaFunctionURLRequestContextAuthorizerIAMDescription{
		AccessKey: key, AccountID: LocalAccount, CallerID: key, UserARN: "arn:aws:iam::" + LocalAccount + ":user/" + key, UserID: key,
	}
}

// ServeHTTP turns r into a function URL event, invokes the function and writes its
// answer. A function error, a crash or a timeout is a 502, as a function URL answers
// them.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxPayloadBytes+1))
	if err != nil {
		http.Error(w, "read the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	ev := s.Event(r, body)
	payload, err := json.Marshal(ev)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if len(payload) > MaxPayloadBytes {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"Message": fmt.Sprintf(
			"Request must be smaller than %d bytes for the InvokeFunction operation", MaxPayloadBytes)})
		return
	}
	// A function URL's invocation runs to its end when the client goes away: only the
	// function's own timeout (and Server.Timeout) ends it.
	ctx := context.WithoutCancel(r.Context())
	if s.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.Timeout)
		defer cancel()
	}
	out, err := s.Invoke(ctx, payload)
	if r.Context().Err() != nil {
		return // the client went away: nobody to answer
	}
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"Message": "Internal Server Error", "Error": err.Error()})
		return
	}
	if err := WriteResponse(w, out); err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"Message": "Internal Server Error", "Error": err.Error()})
	}
}

// Event is the function URL event of r with body.
func (s *Server) Event(r *http.Request, body []byte) events.LambdaFunctionURLRequest {
	id, region := s.URLID, s.Region
	if id == "" {
		id = "local"
	}
	if region == "" {
		region = "us-east-1"
	}
	headers := map[string]string{}
	var cookies []string
	for name, vals := range r.Header {
		if strings.EqualFold(name, "Cookie") {
			for _, v := range vals {
				for _, c := range strings.Split(v, ";") {
					cookies = append(cookies, strings.TrimSpace(c))
				}
			}
			continue
		}
		headers[strings.ToLower(name)] = strings.Join(vals, ",")
	}
	headers["host"] = r.Host
	query := map[string]string{}
	for k, vals := range r.URL.Query() {
		query[k] = strings.Join(vals, ",")
	}
	now := time.Now()
	ev := events.LambdaFunctionURLRequest{
		Version:        "2.0",
		RawPath:        r.URL.EscapedPath(), // as received: function URLs keep the path percent-encoded
		RawQueryString: r.URL.RawQuery,
		Cookies:        cookies,
		Headers:        headers,
		RequestContext: events.LambdaFunctionURLRequestContext{
			AccountID:    LocalAccount,
			RequestID:    requestID(),
			APIID:        id,
			DomainName:   id + ".lambda-url." + region + ".on.aws",
			DomainPrefix: id,
			Time:         now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:    now.UnixMilli(),
			HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{
				Method: r.Method, Path: r.URL.EscapedPath(), Protocol: r.Proto, SourceIP: sourceIP(r.RemoteAddr), UserAgent: r.UserAgent(),
			},
		},
	}
	if len(query) > 0 {
		ev.QueryStringParameters = query
	}
	caller := s.Caller
	if s.CallerFor != nil {
		caller = s.CallerFor(r)
	}
	if caller != nil {
		c := *caller
		ev.RequestContext.Authorizer = &events.LambdaFunctionURLRequestContextAuthorizerDescription{IAM: &c}
	}
	if len(body) > 0 {
		if text(r.Header.Get("Content-Type")) && utf8.Valid(body) {
			ev.Body = string(body)
		} else {
			ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
		}
	}
	return ev
}

// text reports whether a content type is one a function URL passes as text; other
// bodies (binary, or no type) are base64-encoded.
func text(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return strings.HasPrefix(mt, "text/") || mt == "application/json" || strings.HasSuffix(mt, "+json") ||
		mt == "application/xml" || strings.HasSuffix(mt, "+xml") || mt == "application/x-www-form-urlencoded" ||
		mt == "application/javascript"
}

func sourceIP(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// WriteResponse writes a function's answer to a function URL event as HTTP: a
// LambdaFunctionURLResponse, or, as Lambda does with an answer without statusCode, a
// 200 whose body is the answer itself.
func WriteResponse(w http.ResponseWriter, out []byte) error {
	if len(out) > MaxPayloadBytes {
		return fmt.Errorf("funcurl: the function's answer is %d bytes, over Lambda's %d", len(out), MaxPayloadBytes)
	}
	if !structured(out) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out)
		return nil
	}
	var resp events.LambdaFunctionURLResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return fmt.Errorf("funcurl: the function's answer: %w", err)
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			return fmt.Errorf("funcurl: the function's base64 body: %w", err)
		}
		body = b
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	for _, c := range resp.Cookies {
		w.Header().Add("Set-Cookie", c)
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	code := resp.StatusCode
	if code == 0 {
		code = http.StatusOK
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
	return nil
}

// structured reports whether a function's answer is a function URL response (an object
// with statusCode) rather than a body to send as is.
func structured(out []byte) bool {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(out, &probe); err != nil {
		return false
	}
	return probe["statusCode"] != nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// Listen serves h on addr, which must be a loopback address (the server does not
// authenticate), and returns the base URL and a stop func. It answers 421 Misdirected
// Request to a request whose Host is not the address and port it listens on, or
// "localhost" and that port, and 403 to a cross-site state change (loopback.Guard).
func Listen(addr string, h http.Handler) (string, func(), error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, fmt.Errorf("funcurl: address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", nil, fmt.Errorf("funcurl: %q is not a loopback address: the local function URL does not authenticate, so it serves on loopback only", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("funcurl: listen: %w", err)
	}
	srv := &http.Server{Handler: loopback.Guard(ln, h), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// Pool spreads invocations over instances, each taking one invocation at a time, as
// Lambda runs one event per execution environment: a request waits for a free one.
func Pool(instances ...Invoke) Invoke {
	free := make(chan Invoke, len(instances))
	for _, in := range instances {
		free <- in
	}
	return func(ctx context.Context, payload []byte) ([]byte, error) {
		var in Invoke
		select {
		case in = <-free:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		defer func() { free <- in }()
		return in(ctx, payload)
	}
}

package ingressapp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// The event and the answer of a function URL (payload format 2.0).
type (
	LambdaFunctionURLRequest  = events.LambdaFunctionURLRequest
	LambdaFunctionURLResponse = events.LambdaFunctionURLResponse
)

// Routes.
const (
	// RequestsPath takes POST: a new request, its body the example's message.
	RequestsPath = "/requests"
	// KeyHeader carries the request's key
	// (https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/).
	KeyHeader = "Idempotency-Key"
)

// location is where a key's status is: GET /requests/{key}.
func location(key string) string { return RequestsPath + "/" + url.PathEscape(key) }

// problem is an error body, RFC 9457 problem details, as the Idempotency-Key draft's
// examples answer.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// RequestID, on an answer whose cause is only logged (503), is the request's id
	// (requestContext.requestId): its log line, with the error, carries it.
	RequestID string `json:"request_id,omitempty"`
}

// Handle answers one function URL event. It never returns an error: every failure is
// an HTTP answer (a function error would reach the client as a bare 502).
func (a *App) Handle(ctx context.Context, req LambdaFunctionURLRequest) LambdaFunctionURLResponse {
	start := time.Now()
	key, route, ans := a.route(ctx, req) // key: the key the request is kept and sent under
	a.metrics.Add(ans.outcome, 1)
	a.metrics.Observe(MetricDuration, float64(time.Since(start).Microseconds())/1000)
	attrs := []slog.Attr{
		slog.String("method", req.RequestContext.HTTP.Method), slog.String("route", route), slog.Int("status", ans.code),
		slog.String("outcome", ans.outcome), slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		slog.String("request_id", req.RequestContext.RequestID),
	}
	keyHash := ""
	if key != "" {
		keyHash = a.cfg.Keys.LogHash(key)
	}
	if keyHash != "" {
		attrs = append(attrs, slog.String("key_hash", keyHash)) // never the key itself, and keyed: a guess cannot be checked against it
	}
	if c := caller(req); c != "" {
		attrs = append(attrs, slog.String("caller", c))
	}
	level := slog.LevelInfo
	if ans.err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", ans.err.Error()))
		if ans.problem != nil {
			ans.problem.RequestID = req.RequestContext.RequestID // the client's way to this line
		}
	}
	a.log.LogAttrs(context.WithoutCancel(ctx), level, "ingress request", attrs...)
	traceRequest(ctx, req, keyHash, route, ans)
	return ans.response()
}

// route validates the request and hands it to post or get. It returns the key it is kept
// and sent under (the caller's: callerKey; once valid) and the route, for the log line.
func (a *App) route(ctx context.Context, req LambdaFunctionURLRequest) (key, route string, ans answer) {
	method := req.RequestContext.HTTP.Method
	if a.cfg.RequireIAMCaller && caller(req) == "" {
		return "", "", noCaller()
	}
	path, err := url.PathUnescape(req.RawPath)
	if err != nil {
		return "", "", notFound("no such path")
	}
	switch {
	case path == RequestsPath:
		route = "POST " + RequestsPath
		if method != http.MethodPost {
			return "", route, methodNotAllowed(http.MethodPost)
		}
		key, ans, ok := headerKey(req.Headers)
		if !ok {
			return "", route, ans
		}
		scoped, ok := a.callerKey(req, key)
		if !ok {
			return "", route, noCaller()
		}
		body, ans, ok := a.body(req)
		if !ok {
			return scoped, route, ans
		}
		return scoped, route, a.post(ctx, key, scoped, body)
	case strings.HasPrefix(path, RequestsPath+"/"):
		route = "GET " + RequestsPath + "/{key}"
		if method != http.MethodGet {
			return "", route, methodNotAllowed(http.MethodGet)
		}
		key = strings.TrimPrefix(path, RequestsPath+"/")
		if err := ValidKey(key); err != nil {
			return "", route, invalid(titleBadKey, "the path's key: "+err.Error())
		}
		scoped, ok := a.callerKey(req, key)
		if !ok {
			return "", route, noCaller()
		}
		return scoped, route, a.get(ctx, key, scoped)
	}
	return "", "", notFound("no such path: the routes are POST " + RequestsPath + " and GET " + RequestsPath + "/{key}")
}

// noCaller refuses an event that names no IAM caller.
func noCaller() answer {
	return answer{code: http.StatusForbidden, outcome: MetricRejected, problem: &problem{
		Title:  "Forbidden",
		Detail: "the request carries no IAM caller: this function takes requests signed with SigV4 only (function URL AuthType AWS_IAM)",
	}}
}

func methodNotAllowed(allow string) answer {
	return answer{code: http.StatusMethodNotAllowed, outcome: MetricRejected, allow: allow,
		problem: &problem{Title: "Method Not Allowed", Detail: "this path takes " + allow}}
}

// caller is the IAM principal Lambda authenticated (AuthType AWS_IAM), or "".
func caller(req LambdaFunctionURLRequest) string {
	if az := req.RequestContext.Authorizer; az != nil && az.IAM != nil {
		if az.IAM.UserARN != "" {
			return az.IAM.UserARN
		}
		return az.IAM.CallerID
	}
	return ""
}

// header returns the value of a request header: function URLs give names in lower
// case, joining repeated headers with commas.
func header(h map[string]string, name string) (string, bool) {
	if v, ok := h[strings.ToLower(name)]; ok {
		return v, true
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// headerKey reads the Idempotency-Key: a structured-field string as the draft has it
// ("8e03978e-40d5-43e8-bc93-6894a57f9324", quoted), or the same characters unquoted,
// as Stripe's clients send them.
func headerKey(h map[string]string) (string, answer, bool) {
	v, ok := header(h, KeyHeader)
	if !ok {
		return "", invalid(titleMissingKey, "this route needs an "+KeyHeader+" header: a key the client chooses per request and sends again with every retry of it"), false
	}
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) {
			return "", invalid(titleBadKey, "a quoted "+KeyHeader+" must end with its quote"), false
		}
		v = v[1 : len(v)-1]
	}
	if err := ValidKey(v); err != nil {
		return "", invalid(titleBadKey, err.Error()), false
	}
	return v, answer{}, true
}

// ValidKey reports whether key is an Idempotency-Key the ingress takes: 1 to
// MaxKeyLength characters, each a letter, a digit or one of - . _ ~ : @ + =. That is
// enough for UUIDs (which the draft recommends), ULIDs, base64url and prefixed keys
// such as "order:1234"; every character is one SQS allows in a deduplication id and one
// a URL path carries unescaped, so the key is the same in the header, the path, the
// message attribute and the deduplication id. A comma never appears: Lambda joins two
// headers of one name with one.
func ValidKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("the key is empty")
	case len(key) > MaxKeyLength:
		return fmt.Errorf("the key is %d characters long; the limit is %d", len(key), MaxKeyLength)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~:@+=", c) >= 0 {
			continue
		}
		return fmt.Errorf("the key has a character other than a letter, a digit or one of - . _ ~ : @ + = at position %d", i+1)
	}
	return nil
}

// body returns the request's body, decoded, within the size limit and in valid UTF-8.
func (a *App) body(req LambdaFunctionURLRequest) ([]byte, answer, bool) {
	limit := a.cfg.MaxBodyBytes
	tooLarge := func(n int) answer {
		return invalid(titleBodyTooLarge, fmt.Sprintf("the body is %d bytes; the limit is %d", n, limit))
	}
	var body []byte
	if req.IsBase64Encoded {
		if base64.StdEncoding.DecodedLen(len(req.Body)) > limit+3 {
			return nil, tooLarge(base64.StdEncoding.DecodedLen(len(req.Body))), false
		}
		b, err := base64.StdEncoding.DecodeString(req.Body)
		if err != nil {
			return nil, invalid(titleInvalidBody, "the body is marked base64 but does not decode"), false
		}
		body = b
	} else {
		body = []byte(req.Body)
	}
	if len(body) > limit {
		return nil, tooLarge(len(body)), false
	}
	if len(body) == 0 {
		return nil, invalid(titleInvalidBody, "the body is empty"), false
	}
	if !utf8.Valid(body) {
		return nil, invalid(titleInvalidBody, "the body is not valid UTF-8"), false
	}
	return body, answer{}, true
}

// sqsText refuses a body with a character SQS does not take in a message: it accepts
// #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD and #x10000 to #x10FFFF
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html).
func sqsText(body []byte) error {
	for i, r := range string(body) {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
		case r < 0x20, r == 0xFFFE, r == 0xFFFF:
			return fmt.Errorf("the body has a character SQS does not take in a message (U+%04X) at byte %d", r, i)
		}
	}
	return nil
}

// response writes the answer as the function URL's response.
func (ans answer) response() LambdaFunctionURLResponse {
	h := map[string]string{"Cache-Control": "no-store"}
	var body any
	switch {
	case ans.status != nil:
		h["Content-Type"] = "application/json"
		body = ans.status
	case ans.problem != nil:
		h["Content-Type"] = "application/problem+json"
		p := *ans.problem
		p.Type, p.Status = "about:blank", ans.code
		body = p
	}
	if ans.location != "" {
		h["Location"] = ans.location
	}
	if ans.retryAfter > 0 {
		h["Retry-After"] = strconv.Itoa(ans.retryAfter)
	}
	if ans.allow != "" {
		h["Allow"] = ans.allow
	}
	b, _ := json.Marshal(body)
	return LambdaFunctionURLResponse{StatusCode: ans.code, Headers: h, Body: string(b)}
}

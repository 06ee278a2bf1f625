package awsconf

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"testing"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// lateWriter is a connection whose writer stops after the request's body, until
// release: net/http's writer then makes its last copy of the body after the SDK has
// closed it, as a writer goroutine that runs late does.
type lateWriter struct {
	net.Conn
	body    []byte
	release chan struct{}
	closed  chan struct{}
	once    sync.Once
}

func (c *lateWriter) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if bytes.Equal(p, c.body) {
		<-c.release
	}
	return n, err
}

func (c *lateWriter) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestTheRaceOnPurpose plays the race of the package comment step by step, through
// smithy-go's own client handler and net/http: the server answers the headers once it
// has the body; the client's handler returns (and closes the body); the writer makes
// its last copy; only then does the server send the response's body. Without detach the
// writer fails with io.EOF and closes the connection under the response; with it, the
// response is read whole.
func TestTheRaceOnPurpose(t *testing.T) {
	body := []byte(`{"TableName":"t","Item":{"pk":{"S":"k1"}}}`)
	for _, detached := range []bool{false, true} {
		t.Run(map[bool]string{true: "detached", false: "smithy-go's body"}[detached], func(t *testing.T) {
			sendBody := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				w.Header().Set("Content-Length", "2")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				<-sendBody
				_, _ = w.Write([]byte("{}"))
			}))
			defer srv.Close()
			defer func() {
				select {
				case <-sendBody:
				default:
					close(sendBody)
				}
			}()
			conn := &lateWriter{body: body, release: make(chan struct{}), closed: make(chan struct{})}
			tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				conn.Conn = c
				return conn, err
			}}
			defer tr.CloseIdleConnections()
			wrote := make(chan error, 1)
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				WroteRequest: func(i httptrace.WroteRequestInfo) { wrote <- i.Err },
			})

			req := smithyhttp.NewStackRequest().(*smithyhttp.Request)
			req.Method = http.MethodPost
			var err error
			if req.URL, err = req.URL.Parse(srv.URL); err != nil {
				t.Fatal(err)
			}
			if req, err = req.SetStream(bytes.NewReader(body)); err != nil {
				t.Fatal(err)
			}
			if detached {
				if req, err = detach(req); err != nil {
					t.Fatal(err)
				}
			}
			out, _, err := smithyhttp.NewClientHandlerWithOptions(&http.Client{Transport: tr}).Handle(ctx, req)
			if err != nil {
				t.Fatalf("the headers: %v", err)
			}
			close(conn.release) // the writer's last copy, after the handler closed the body
			writeErr := <-wrote
			if writeErr != nil {
				<-conn.closed // the writer closes the connection after it reports
			}
			close(sendBody)
			got, readErr := io.ReadAll(out.(*smithyhttp.Response).Body)
			switch {
			case detached && (writeErr != nil || readErr != nil || string(got) != "{}"):
				t.Errorf("detached: the write ended with %v, the response read %q, %v; want nil and the whole body", writeErr, got, readErr)
			case !detached && (!errors.Is(writeErr, io.EOF) || !errors.Is(readErr, net.ErrClosed)):
				t.Errorf("smithy-go's body: the write ended with %v, the response read %q, %v; want io.EOF and the closed connection (smithy-go fixed? then DetachBody can go)", writeErr, got, readErr)
			}
		})
	}
}
